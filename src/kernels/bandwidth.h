// File: bandwidth.h
// -----------------------------------------------------------------------------
// The memory roofline. Decode streams every weight once per token, so its best possible speed
// is the machine's read bandwidth; benchmarks measure it in the same run (DESIGN.md,
// "Performance stance") and report decode throughput as a fraction of it.
#pragma once

#include <cstdint>

#include "base/thread_pool.h"

namespace uc::kernels {

// Median over `repetitions` of the bytes/s achieved when each pool thread sums its own
// contiguous part of a freshly allocated, touched buffer of `bytes` bytes (plain loads, AVX2
// when in use; the same loads the MatMul decode path issues). Use a buffer far larger than the
// last-level cache (e.g. 1 GiB) to measure DRAM. `pool` may be null (one thread).
// REQUIRES: bytes >= 4096, repetitions >= 1. Uses `pool` exclusively while it runs.
double MeasureReadBandwidth(ThreadPool* pool, int64_t bytes, int repetitions);

}  // namespace uc::kernels
