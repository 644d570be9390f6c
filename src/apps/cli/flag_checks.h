// File: flag_checks.h
// -----------------------------------------------------------------------------
// Validators and flags the commands share.
#pragma once

#include <CLI/CLI.hpp>
#include <map>
#include <string>

#include "kernels/ops.h"

namespace uc::cli {

// The longest time a flag may give, in seconds (about 11.6 days). Deadlines are clock time
// points in integer nanoseconds: a much larger value would overflow them into the past and
// mean "at once".
inline constexpr double kMaxFlagSeconds = 1e6;

// A duration flag in seconds: within [min_seconds, kMaxFlagSeconds].
inline CLI::Range Seconds(double min_seconds = 0.0) {
  return CLI::Range(min_seconds, kMaxFlagSeconds);
}

// Worker threads per process: 0 (all cores) up to kMaxFlagThreads.
inline constexpr int kMaxFlagThreads = 1024;
inline CLI::Range Threads() { return CLI::Range(0, kMaxFlagThreads); }

// --matmul exact|int8: how quantized weights are multiplied (kernels::MatMulPrecision).
inline CLI::Option* AddMatMulFlag(CLI::App* cmd, kernels::MatMulPrecision* precision) {
  static const std::map<std::string, kernels::MatMulPrecision> kNames = {
      {"exact", kernels::MatMulPrecision::kExact}, {"int8", kernels::MatMulPrecision::kInt8}};
  return cmd
      ->add_option("--matmul", *precision,
                   "Quantized weights: exact (F32 activations, matches transformers) or int8 "
                   "(8-bit activations and integer dot products, as llama.cpp; faster)")
      ->transform(CLI::CheckedTransformer(kNames, CLI::ignore_case))
      ->default_str("exact");
}

}  // namespace uc::cli
