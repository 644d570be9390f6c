#include "apps/cli/commands/quantize_command.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "apps/cli/exit_codes.h"
#include "apps/cli/flag_checks.h"
#include "convert/quantize.h"

namespace uc::cli {
namespace {

struct QuantizeCommandOptions {
  std::string in;
  std::string out;
  std::string type;
  bool force = false;
  int threads = 0;
};

std::string Mib(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f MiB", static_cast<double>(bytes) / (1 << 20));
  return text;
}

int RunQuantize(const QuantizeCommandOptions& o) {
  const StatusOr<convert::QuantizeType> type = convert::ParseQuantizeType(o.type);
  if (!type.ok()) {
    std::fprintf(stderr, "error: %s\n", type.status().message().c_str());
    return kExitUsage;
  }
  std::error_code ec;
  if (std::filesystem::exists(o.out, ec) && !o.force) {
    std::fprintf(stderr, "error: %s exists; pass --force to replace it\n", o.out.c_str());
    return kExitUsage;
  }
  const auto start = std::chrono::steady_clock::now();
  const StatusOr<convert::QuantizeReport> report =
      convert::QuantizeModel(o.in, o.out, {*type, o.threads});
  if (!report.ok()) {
    std::fprintf(stderr, "error: %s\n", report.status().message().c_str());
    return kExitFailure;
  }
  if (report->fallbacks > 0) {
    std::fprintf(stderr,
                 "warning: %d of %zu tensors have rows that are not whole blocks of their type "
                 "and took a fallback type (as llama.cpp does)\n",
                 report->fallbacks, report->tensors.size());
  }
  std::map<std::string, std::pair<int, int64_t>> by_type;
  for (const convert::QuantizedTensor& t : report->tensors) {
    auto& [count, bytes] = by_type[std::string(DTypeName(t.dtype))];
    ++count;
    bytes += t.bytes;
  }
  for (const auto& [name, entry] : by_type) {
    std::printf("%-6s %4d tensors  %12lld bytes  %s\n", name.c_str(), entry.first,
                static_cast<long long>(entry.second), Mib(entry.second).c_str());
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("wrote %s: %s, %zu tensors, %s (%lld bytes) in %.1f s\n", o.out.c_str(),
              std::string(convert::QuantizeTypeName(*type)).c_str(), report->tensors.size(),
              Mib(report->total_bytes).c_str(), static_cast<long long>(report->total_bytes),
              seconds);
  return kExitOk;
}

}  // namespace

void AddQuantizeCommand(CLI::App& app) {
  auto o = std::make_shared<QuantizeCommandOptions>();
  CLI::App* cmd = app.add_subcommand(
      "quantize",
      "Convert a GGUF file or a Hugging Face directory into a GGUF of another type, with "
      "llama.cpp's per-tensor type mix and ggml's quantizers (byte-identical to llama-quantize "
      "without an imatrix)");
  cmd->add_option("IN", o->in,
                  "Input: a GGUF file (any type the loader reads) or a Hugging Face directory "
                  "(LlamaForCausalLM with a SentencePiece tokenizer.model)")
      ->required()
      ->check(CLI::ExistingPath);
  cmd->add_option("OUT", o->out, "Output GGUF file")->required();
  cmd->add_option("--type", o->type,
                  "q4_k_m, q5_k_m, q6_k, q8_0, q4_0, q4_1, q5_0, q5_1, f16, bf16 or f32")
      ->required();
  cmd->add_flag("--force,-f", o->force, "Replace OUT if it exists (otherwise refused)");
  cmd->add_option("--threads", o->threads, "Threads (0: all cores)")->check(Threads());
  cmd->footer(
      "1-D tensors (norms, biases) stay F32. For the quantized types the output tensor (or "
      "token_embd when embeddings are tied) is Q6_K (Q8_0 for q8_0); q4_k_m and q5_k_m give "
      "attn_v and ffn_down Q6_K on the first and last eighth of the layers and every third "
      "between. Rows that are not whole 256-blocks fall back as llama.cpp does (Q4_K -> Q5_0, "
      "Q5_K -> Q5_1, Q6_K -> Q8_0; F16 when even that does not fit). OUT is written as "
      "OUT.tmp and renamed.");
  cmd->callback([o] { throw CLI::RuntimeError(RunQuantize(*o)); });
}

}  // namespace uc::cli
