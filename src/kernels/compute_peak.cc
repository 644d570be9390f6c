#include "kernels/compute_peak.h"

#include <algorithm>
#include <chrono>

#include "base/check.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/dispatch.h"

namespace uc::kernels {
namespace {

using ChainsFn = double (*)(int64_t);

struct Probe {
  const char* instruction;
  const char* kind;
  ChainsFn run;
  double ops_per_iteration;  // as cpu_kernels.h documents for `run`
};

std::vector<Probe> AvailableProbes() {
  std::vector<Probe> probes;
#if defined(__x86_64__)
  if (internal::UseAvx2()) {
    probes.push_back({"fma-f32 ymm", "f32", &avx2::FmaChains, 192});
    probes.push_back({"maddubs ymm", "int8", &avx2::MaddubsChains, 384});
  }
  if (internal::UseAvx512Vnni()) {
    probes.push_back({"fma-f32 zmm", "f32", &avx512::FmaChains, 384});
    probes.push_back({"vpdpbusd zmm", "int8", &avx512::DpbusdChains, 1536});
  }
  // Measured wherever the CPU has it, used or not: the peak says whether the table behind
  // internal::CpuPrefersBf16Dot() is right for this CPU.
  if (internal::Avx512Bf16Available()) {
    probes.push_back({"vdpbf16ps zmm", "bf16", &avx512::Dpbf16Chains, 768});
  }
#endif
  return probes;
}

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Iterations of `probe` that take about `seconds` on one thread (at least 1024).
int64_t Calibrate(const Probe& probe, double seconds) {
  int64_t iterations = 1024;
  for (;;) {
    const auto start = std::chrono::steady_clock::now();
    UC_CHECK(probe.run(iterations) != 0.0, "MeasureComputePeaks: %s summed to 0",
             probe.instruction);
    const double took = Seconds(start);
    if (took >= seconds / 8 || iterations >= (int64_t{1} << 40)) {
      return std::max<int64_t>(1024, static_cast<int64_t>(iterations * seconds / took));
    }
    iterations *= 8;
  }
}

}  // namespace

std::vector<ComputePeak> MeasureComputePeaks(ThreadPool* pool, int repetitions,
                                             double seconds_per_run) {
  UC_CHECK(repetitions >= 1 && seconds_per_run > 0.0,
           "MeasureComputePeaks: need >= 1 repetition and a positive time, got %d and %g",
           repetitions, seconds_per_run);
  const int64_t threads = pool != nullptr ? pool->num_threads() : 1;
  std::vector<ComputePeak> out;
  std::vector<double> sums(static_cast<size_t>(threads));
  for (const Probe& probe : AvailableProbes()) {
    const int64_t iterations = Calibrate(probe, seconds_per_run);
    std::vector<double> seconds;
    for (int rep = 0; rep < repetitions; ++rep) {
      const auto start = std::chrono::steady_clock::now();
      ParallelFor(
          pool, threads,
          [&](int64_t begin, int64_t end) {
            for (int64_t t = begin; t < end; ++t) sums[t] = probe.run(iterations);
          },
          1);
      seconds.push_back(Seconds(start));
    }
    for (double s : sums) {
      UC_CHECK(s != 0.0, "MeasureComputePeaks: %s summed to 0", probe.instruction);
    }
    std::sort(seconds.begin(), seconds.end());
    const double ops = probe.ops_per_iteration * static_cast<double>(iterations * threads);
    out.push_back({probe.instruction, probe.kind, ops / seconds[seconds.size() / 2]});
  }
  return out;
}

}  // namespace uc::kernels
