// File: kv_cache_flags.h
// -----------------------------------------------------------------------------
// The KV cache flags of every command that runs a model (generate, serve, capture, calibrate,
// bench, perplexity), registered with one help text and turned into the numbers
// engine::PlanKvCache (engine/scheduling/kv_cache_plan.h) decides from — the one place the cache
// and the context are sized:
//
//   --kv-cache-memory SIZE|auto   KV cache memory per rank (default auto: from the machine)
//   --max-model-len N             context length (default: the model's, fitted to the cache)
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

namespace uc::cli {

struct KvCacheFlags {
  std::string kv_cache_memory = "auto";  // a size (512MiB, 2GiB) or "auto"
  int max_model_len = 0;                 // 0: the model's, fitted to the cache
  // The bytes --kv-cache-memory gives (EngineOptions::kv_cache_bytes); 0 for "auto".
  // REQUIRES: the flags were parsed (the validator refused anything else).
  int64_t kv_cache_bytes() const;
};

// Adds --kv-cache-memory, and --max-model-len unless `with_max_model_len` is false (bench sets
// the context from its shape). A value that is not a size or "auto" is a usage error at parse
// time, naming the flag.
void AddKvCacheFlags(CLI::App* cmd, KvCacheFlags* flags, bool with_max_model_len = true);

}  // namespace uc::cli
