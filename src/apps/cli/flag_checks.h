// File: flag_checks.h
// -----------------------------------------------------------------------------
// Validators and flags the commands share.
#pragma once

#include <CLI/CLI.hpp>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "kernels/ops.h"
#include "models/llama_model.h"

namespace uc::cli {

// The longest time a flag may give, in seconds (about 11.6 days). Deadlines are clock time
// points in integer nanoseconds: a much larger value would overflow them into the past and
// mean "at once".
inline constexpr double kMaxFlagSeconds = 1e6;

// A duration flag in seconds: a finite number within [min_seconds, kMaxFlagSeconds] (NaN and
// infinities are usage errors: a NaN deadline compares false with everything and means "at
// once" or "never" depending on the comparison).
inline CLI::Validator Seconds(double min_seconds = 0.0) {
  const std::string range =
      "[" + std::to_string(min_seconds) + " - " + std::to_string(kMaxFlagSeconds) + "]";
  return CLI::Validator(
      [min_seconds, range](std::string& text) -> std::string {
        char* end = nullptr;
        const double value = std::strtod(text.c_str(), &end);
        if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(value)) {
          return "'" + text + "' is not a finite number of seconds";
        }
        if (value < min_seconds || value > kMaxFlagSeconds) {
          return "Value " + text + " not in range " + range;
        }
        return std::string();
      },
      "SECONDS in " + range);
}

// Worker threads per process: 0 (all cores) up to kMaxFlagThreads. A count far above the
// machine's cores (more than kThreadsWarnFactor times) is accepted with a warning on stderr:
// the threads only take turns on the cores, and every step waits for the slowest.
inline constexpr int kMaxFlagThreads = 1024;
inline constexpr int kThreadsWarnFactor = 4;
inline CLI::Validator Threads() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        int value = -1;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
        if (ec != std::errc() || end != text.data() + text.size() || value < 0 ||
            value > kMaxFlagThreads) {
          return "Value " + text + " not in range [0 - " + std::to_string(kMaxFlagThreads) + "]";
        }
        const int cores = static_cast<int>(std::thread::hardware_concurrency());
        if (cores > 0 && value > kThreadsWarnFactor * cores) {
          std::fprintf(stderr,
                       "warning: --threads %d is far above this machine's %d cores: threads "
                       "beyond the cores only take turns (0 uses every core)\n",
                       value, cores);
        }
        return std::string();
      },
      "INT in [0 - " + std::to_string(kMaxFlagThreads) + "]");
}

// How the commands that load a model build it (models::LoadOptions), the same flags everywhere:
//   --matmul exact|int8          how quantized and BF16 weights are multiplied (MatMulPrecision)
//   --[no-]batch-invariant       rows' bits independent of the batch (LoadOptions::batch_invariant,
//                                on by default)
//   --enable-expert-parallel     whole experts per TP rank (LoadOptions::expert_parallel, vLLM's
//                                flag)
//   --control-vector FILE        add FILE's directions to the residual stream (repeatable)
//   --control-vector-scaled FILE SCALE   the same, times SCALE (repeatable)
//   --control-vector-layer-range START END   steer only blocks START..END (inclusive)
// (llama.cpp's flag names and meanings). `load` must outlive the parse.
inline void AddModelLoadFlags(CLI::App* cmd, models::LoadOptions* load) {
  static const std::map<std::string, kernels::MatMulPrecision> kNames = {
      {"exact", kernels::MatMulPrecision::kExact}, {"int8", kernels::MatMulPrecision::kInt8}};
  cmd->add_option("--matmul", load->matmul_precision,
                  "Quantized and BF16 weights: exact (F32 activations, matches transformers) or "
                  "int8 (as llama.cpp; faster: 8-bit activations and integer dot products, BF16 "
                  "activations and vdpbf16ps for BF16 weights on AMD CPUs with AVX512_BF16)")
      ->transform(CLI::CheckedTransformer(kNames, CLI::ignore_case))
      ->default_str("exact");
  // Two flags rather than CLI11's "--a,!--no-a" (whose help reads "--a,--no-a{false}"); the
  // last one given wins, as before.
  cmd->add_flag_callback(
         "--batch-invariant", [load] { load->batch_invariant = true; },
         "A request's logits and activations bit-identical alone or in any batch, at any prefill "
         "chunking: replayable probe verdicts (the default; free for quantized weights of the "
         "common types)")
      ->trigger_on_parse();
  cmd->add_flag_callback(
         "--no-batch-invariant", [load] { load->batch_invariant = false; },
         "Let a row's bits depend on the batch: faster prefill of F32 weights and of Q2_K / "
         "Q3_K / IQ4_NL")
      ->trigger_on_parse();
  cmd->add_flag("--enable-expert-parallel", load->expert_parallel,
                "Mixture-of-experts models under --tp: each rank holds whole experts (expert e on "
                "rank e mod tp) instead of a slice of every expert; the same one all-reduce a "
                "layer");
  cmd->add_option_function<std::vector<std::string>>(
         "--control-vector",
         [load](const std::vector<std::string>& files) {
           for (const std::string& file : files) load->steering.files.push_back({file, 1.0f});
         },
         "Control vector file (.gguf as llama.cpp and repeng write, .safetensors, .npy) added "
         "to the residual stream after its blocks, every token (repeatable)")
      ->type_name("FILE");
  cmd->add_option_function<std::vector<std::string>>(
         "--control-vector-scaled",
         [load](const std::vector<std::string>& args) {
           for (size_t i = 0; i + 1 < args.size(); i += 2) {
             float scale = 0.0f;
             const std::string& text = args[i + 1];
             const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), scale);
             if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(scale)) {
               throw CLI::ValidationError("--control-vector-scaled",
                                          "SCALE '" + text + "' is not a finite number");
             }
             load->steering.files.push_back({args[i], scale});
           }
         },
         "Control vector file times SCALE (repeatable; vectors add up)")
      ->type_size(2)
      ->type_name("FILE SCALE");
  cmd->add_option_function<std::vector<int>>(
         "--control-vector-layer-range",
         [load](const std::vector<int>& range) {
           load->steering.layer_start = range[0];
           load->steering.layer_end = range[1];
         },
         "Steer only blocks START to END (inclusive)")
      ->expected(2)
      ->type_name("START END")
      ->check(CLI::NonNegativeNumber);
}

}  // namespace uc::cli
