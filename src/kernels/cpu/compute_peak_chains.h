// File: compute_peak_chains.h
// -----------------------------------------------------------------------------
// The loop every compute-roofline probe runs (compute_peak_*.cc): kChains independent
// accumulators, each stepped by one instruction per iteration, in registers only, then summed.
// Each accumulator passes through an empty asm once before the loop, so the compiler cannot see
// that the chains are equal and merge them into one (GCC does, without it); the asm emits
// nothing.
//
// Include only from the probe files, after <immintrin.h>. Everything is forced inline and the
// steps are lambdas (local to each file), so no copy compiled with one unit's flags can stand in
// for another's.
#pragma once

#include <cstdint>

namespace uc::kernels {

inline constexpr int kPeakChains = 12;

// Returns Σ_c lane_sum(acc_c) after acc_c = step(acc_c) `iterations` times, acc_c = init.
template <typename V, typename Step, typename LaneSum>
[[gnu::always_inline]] inline double RunPeakChains(int64_t iterations, V init, Step step,
                                                   LaneSum lane_sum) {
  V acc[kPeakChains];
#pragma GCC unroll 12
  for (auto& a : acc) {
    a = init;
    __asm__("" : "+x"(a));
  }
  for (int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 12
    for (auto& a : acc) a = step(a);
  }
  double sum = 0.0;
  for (const auto& a : acc) sum += lane_sum(a);
  return sum;
}

}  // namespace uc::kernels
