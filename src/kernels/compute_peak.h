// File: compute_peak.h
// -----------------------------------------------------------------------------
// The compute roofline. Prefill and batched decode are bound by the multiply-add instruction a
// weight format's MatMul runs on (F32 FMA for F16 and exact BF16, vdpbf16ps for BF16 at int8
// precision, int8 dot products for the quantized formats), so their best possible speed is that
// instruction's peak on this machine. Benchmarks measure it in the same run, as they do the read
// bandwidth (kernels/bandwidth.h), and report prefill as a fraction of it: the fraction says
// what is left to gain, and a peer's fraction bounds the ratio any engine can reach over it.
//
// Each probe runs twelve independent dependency chains of one instruction (enough to cover its
// latency on the cores we target) on registers only, so it measures issue throughput, not memory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/thread_pool.h"

namespace uc::kernels {

struct ComputePeak {
  std::string instruction;  // "fma-f32 ymm", "fma-f32 zmm", "maddubs ymm", "vpdpbusd zmm", ...
  // The MatMul arithmetic it bounds: "f32" (F32 FMA), "bf16" (BF16 pairs into F32), "int8".
  std::string kind;
  // Operations per second over all pool threads; a multiply-add counts as two.
  double ops_per_second = 0.0;
};

// For each multiply-add instruction the kernels use and this CPU has (lowest level first), the
// median over `repetitions` of the rate at which every pool thread at once runs its chains for
// about `seconds_per_run`. `pool` may be null (one thread). REQUIRES: repetitions >= 1,
// seconds_per_run > 0. Uses `pool` exclusively while it runs.
std::vector<ComputePeak> MeasureComputePeaks(ThreadPool* pool, int repetitions,
                                             double seconds_per_run = 0.05);

}  // namespace uc::kernels
