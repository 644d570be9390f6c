#include "apps/cli/kv_cache_flags.h"

#include "engine/prompts_file.h"
#include "engine/scheduling/kv_cache_plan.h"

namespace uc::cli {

int64_t KvCacheFlags::kv_cache_bytes() const {
  if (kv_cache_memory == "auto") return 0;
  const StatusOr<int64_t> bytes = engine::ParseByteSize(kv_cache_memory);
  return bytes.ok() ? *bytes : 0;
}

void AddKvCacheFlags(CLI::App* cmd, KvCacheFlags* flags, bool with_max_model_len) {
  const std::string cap = std::to_string(engine::kAutoKvCacheCap >> 30) + "GiB";
  cmd->add_option("--kv-cache-memory", flags->kv_cache_memory,
                  "KV cache memory per rank, e.g. 512MiB, 2GiB; auto: 1/" +
                      std::to_string(engine::kAutoKvShareDivisor) +
                      " of the memory available once the model is loaded, shared by the ranks "
                      "on the host, at most " +
                      cap +
                      " (or one --max-model-len sequence when that is more), and no more than "
                      "--max-num-seqs full sequences use")
      ->check([](const std::string& text) -> std::string {
        if (text == "auto") return {};
        const StatusOr<int64_t> bytes = engine::ParseByteSize(text);
        return bytes.ok() ? std::string() : bytes.status().message() + " (or auto)";
      })
      ->capture_default_str();
  if (!with_max_model_len) return;
  cmd->add_option("--max-model-len", flags->max_model_len,
                  "Context length (default: the model's, shortened to what the KV cache holds "
                  "but not below " +
                      std::to_string(engine::kMinFittedContext) +
                      " tokens, with a log line saying so; a length given here that the cache "
                      "cannot hold is an error)")
      ->check(CLI::NonNegativeNumber);
}

}  // namespace uc::cli
