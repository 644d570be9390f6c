// File: bandwidth.h
// -----------------------------------------------------------------------------
// The memory roofline. Decode streams every weight once per token, so its best possible speed
// is the machine's read bandwidth; benchmarks measure it in the same run (DESIGN.md,
// "Performance stance") and report decode throughput as a fraction of it.
//
// A weak read loop would understate the bandwidth and flatter every fraction, so the probe runs
// every read loop this CPU has (portable, AVX2 with eight loads in flight, AVX-512 with sixteen
// and a software prefetch) and reports the best. Benchmarks that run a peer engine also compare
// it with the bandwidth the peer's decode implies and use the larger (bench/vs_llamacpp.py).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/thread_pool.h"

namespace uc::kernels {

struct ReadLoopBandwidth {
  std::string loop;  // "portable", "avx2", "avx512"
  double bytes_per_second = 0.0;
};

// For each read loop the CPU supports, the median over `repetitions` of the bytes/s achieved when
// each pool thread sums its own contiguous part of a freshly allocated, touched buffer of
// `bytes` bytes (a HugePageBuffer, the memory packed weights live in); lowest level first. Use a
// buffer far larger than the last-level cache (e.g. 1 GiB) to measure DRAM. `pool` may be null (one
// thread). REQUIRES: bytes >= 4096, repetitions >= 1. Uses `pool` exclusively while it runs.
std::vector<ReadLoopBandwidth> MeasureReadLoops(ThreadPool* pool, int64_t bytes, int repetitions);

// The best of MeasureReadLoops: the roofline's bandwidth.
double MeasureReadBandwidth(ThreadPool* pool, int64_t bytes, int repetitions);

}  // namespace uc::kernels
