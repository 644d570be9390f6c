#include "kernels/bandwidth.h"

#include <algorithm>
#include <chrono>
#include <functional>

#include "base/check.h"
#include "base/huge_pages.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/dispatch.h"

namespace uc::kernels {
namespace {

using SumFn = double (*)(const float*, int64_t);

struct ReadLoop {
  const char* name;
  SumFn sum;
};

std::vector<ReadLoop> AvailableLoops() {
  std::vector<ReadLoop> loops = {{"portable", &cpu::SumFloats}};
#if defined(__x86_64__)
  if (internal::UseAvx2()) loops.push_back({"avx2", &avx2::SumFloats});
  if (internal::UseAvx512Vnni()) loops.push_back({"avx512", &avx512::SumFloats});
#endif
  return loops;
}

}  // namespace

std::vector<ReadLoopBandwidth> MeasureReadLoops(ThreadPool* pool, int64_t bytes, int repetitions) {
  UC_CHECK(bytes >= 4096 && repetitions >= 1,
           "MeasureReadBandwidth: need >= 4096 bytes and >= 1 repetition, got %lld and %d",
           static_cast<long long>(bytes), repetitions);
  const int64_t threads = pool != nullptr ? pool->num_threads() : 1;
  // Parts are whole 64-byte lines so no two threads share one.
  const int64_t n = bytes / 64 * 16;
  const int64_t part = n / threads / 16 * 16;
  // The memory the engine's packed weights live in (2 MiB pages where the OS grants them), so
  // that the roofline is what decode could reach: 4 KiB pages read 10-20% slower.
  HugePageBuffer buffer(static_cast<size_t>(n) * sizeof(float));
  auto* data = reinterpret_cast<float*>(buffer.data());
  auto for_each_part = [&](const std::function<void(int64_t, int64_t, int64_t)>& fn) {
    ParallelFor(
        pool, threads,
        [&](int64_t begin, int64_t end) {
          for (int64_t t = begin; t < end; ++t) {
            fn(t, t * part, t + 1 == threads ? n : (t + 1) * part);
          }
        },
        1);
  };
  // Each thread touches (first-writes) the part it will read, so its pages are mapped and local.
  for_each_part([&](int64_t, int64_t b, int64_t e) { std::fill(data + b, data + e, 1.0f); });

  std::vector<ReadLoopBandwidth> out;
  std::vector<double> sums(static_cast<size_t>(threads));
  for (const ReadLoop& loop : AvailableLoops()) {
    std::vector<double> seconds;
    for (int rep = 0; rep < repetitions; ++rep) {
      const auto start = std::chrono::steady_clock::now();
      for_each_part([&](int64_t t, int64_t b, int64_t e) { sums[t] = loop.sum(data + b, e - b); });
      const auto stop = std::chrono::steady_clock::now();
      seconds.push_back(std::chrono::duration<double>(stop - start).count());
    }
    double total = 0.0;
    for (double s : sums) total += s;
    // Every element is 1; using the sums keeps the reads from being optimized away.
    UC_CHECK(total > 0.0, "MeasureReadBandwidth: %s read the buffer back as %g", loop.name, total);
    std::sort(seconds.begin(), seconds.end());
    out.push_back(
        {loop.name, static_cast<double>(n) * sizeof(float) / seconds[seconds.size() / 2]});
  }
  return out;
}

double MeasureReadBandwidth(ThreadPool* pool, int64_t bytes, int repetitions) {
  double best = 0.0;
  for (const ReadLoopBandwidth& r : MeasureReadLoops(pool, bytes, repetitions)) {
    best = std::max(best, r.bytes_per_second);
  }
  return best;
}

}  // namespace uc::kernels
