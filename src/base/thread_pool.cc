#include "base/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "base/check.h"

namespace uc {
namespace {
thread_local bool t_inside_pool = false;
constexpr int kSpinIterations = 20000;
// A guided grab takes 1 / (kGuidedShares * threads) of the items left.
constexpr int64_t kGuidedShares = 2;
}  // namespace

struct ThreadPool::Impl {
  std::vector<std::thread> workers;
  std::mutex mu;
  std::condition_variable wake;
  std::atomic<uint64_t> generation{0};
  std::atomic<int> pending{0};
  std::atomic<bool> stop{false};
  // The current job; valid while pending > 0. Static: chunk i runs on thread i (the caller is
  // 0). Dynamic: every thread takes the next chunk from `next` until none is left. Guided:
  // every thread takes the next items from `next` (an item index), a share of those left of at
  // least `chunk`.
  const std::function<void(int64_t, int64_t)>* fn = nullptr;
  int64_t n = 0;
  int64_t num_chunks = 0;
  int64_t chunk = 0;
  Split split = Split::kStatic;
  int64_t share_divisor = 1;  // guided: a grab takes 1 / share_divisor of the items left
  std::atomic<int64_t> next{0};

  void RunChunk(int64_t index) {
    const int64_t begin = index * chunk;
    const int64_t end = std::min(n, begin + chunk);
    if (begin < end) (*fn)(begin, end);
  }

  // Thread `index`'s part of the job.
  void RunPart(int index) {
    switch (split) {
      case Split::kStatic:
        if (index < num_chunks) RunChunk(index);
        return;
      case Split::kDynamic:
        for (int64_t i = next.fetch_add(1, std::memory_order_relaxed); i < num_chunks;
             i = next.fetch_add(1, std::memory_order_relaxed)) {
          RunChunk(i);
        }
        return;
      case Split::kGuided:
        RunGuided();
        return;
    }
  }

  // Takes [begin, end) from `next` until no item is left: ceil(left / share_divisor) items, at
  // least `chunk`, so the chunks shrink toward the end and the last ones to finish are short.
  void RunGuided() {
    int64_t begin = next.load(std::memory_order_relaxed);
    while (begin < n) {
      const int64_t left = n - begin;
      const int64_t take = std::max(chunk, (left + share_divisor - 1) / share_divisor);
      const int64_t end = begin + std::min(left, take);
      if (next.compare_exchange_weak(begin, end, std::memory_order_relaxed)) {
        (*fn)(begin, end);
        begin = next.load(std::memory_order_relaxed);
      }
    }
  }

  void WorkerLoop(int worker_index) {
    t_inside_pool = true;
    uint64_t seen = 0;
    while (true) {
      uint64_t gen = generation.load(std::memory_order_acquire);
      for (int spin = 0; gen == seen && spin < kSpinIterations; ++spin) {
        if (stop.load(std::memory_order_relaxed)) return;
        __builtin_ia32_pause();
        gen = generation.load(std::memory_order_acquire);
      }
      if (gen == seen) {
        std::unique_lock<std::mutex> lock(mu);
        wake.wait(lock, [&] {
          return stop.load() || generation.load(std::memory_order_acquire) != seen;
        });
        if (stop.load()) return;
        gen = generation.load(std::memory_order_acquire);
      }
      seen = gen;
      // The caller is thread 0; worker i is thread i + 1.
      RunPart(worker_index + 1);
      pending.fetch_sub(1, std::memory_order_acq_rel);
    }
  }
};

ThreadPool::ThreadPool(int num_threads) : num_threads_(num_threads), impl_(new Impl) {
  UC_CHECK(num_threads >= 1, "ThreadPool needs at least one thread, got %d", num_threads);
  try {
    for (int i = 0; i + 1 < num_threads; ++i) {
      impl_->workers.emplace_back([this, i] { impl_->WorkerLoop(i); });
    }
  } catch (const std::system_error& e) {
    // The system refused a thread (limits, memory): stop the ones started, then report it
    // instead of terminating on their joinable std::threads. The caller is thread 1.
    const size_t refused = impl_->workers.size() + 2;
    StopWorkers();
    throw std::system_error(e.code(), "cannot start thread " + std::to_string(refused) + " of " +
                                          std::to_string(num_threads) + " (--threads)");
  }
}

void ThreadPool::StopWorkers() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop.store(true);
  }
  impl_->wake.notify_all();
  for (auto& t : impl_->workers) t.join();
  impl_->workers.clear();
}

ThreadPool::~ThreadPool() { StopWorkers(); }

void ThreadPool::ParallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                             int64_t min_chunk) {
  if (n <= 0) return;
  min_chunk = std::max<int64_t>(1, min_chunk);
  const int64_t max_chunks = std::max<int64_t>(1, n / min_chunk);
  const int64_t chunks = std::min<int64_t>(num_threads_, max_chunks);
  Run(fn, n, chunks, (n + chunks - 1) / chunks, Split::kStatic);
}

void ThreadPool::ParallelForDynamic(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                                    int64_t grain) {
  UC_CHECK(grain >= 1, "ParallelForDynamic: grain must be >= 1, got %lld",
           static_cast<long long>(grain));
  if (n <= 0) return;
  Run(fn, n, (n + grain - 1) / grain, grain, Split::kDynamic);
}

void ThreadPool::ParallelForGuided(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                                   int64_t min_chunk) {
  UC_CHECK(min_chunk >= 1, "ParallelForGuided: min_chunk must be >= 1, got %lld",
           static_cast<long long>(min_chunk));
  if (n <= 0) return;
  Run(fn, n, (n + min_chunk - 1) / min_chunk, min_chunk, Split::kGuided);
}

void ThreadPool::Run(const std::function<void(int64_t, int64_t)>& fn, int64_t n, int64_t num_chunks,
                     int64_t chunk, Split split) {
  Impl& im = *impl_;
  if (num_chunks <= 1 || t_inside_pool || im.workers.empty()) {
    fn(0, n);
    return;
  }
  im.fn = &fn;
  im.n = n;
  im.num_chunks = num_chunks;
  im.chunk = chunk;
  im.split = split;
  im.share_divisor = kGuidedShares * num_threads_;
  im.next.store(0, std::memory_order_relaxed);
  im.pending.store(static_cast<int>(im.workers.size()), std::memory_order_release);
  {
    std::lock_guard<std::mutex> lock(im.mu);
    im.generation.fetch_add(1, std::memory_order_acq_rel);
  }
  im.wake.notify_all();
  t_inside_pool = true;
  im.RunPart(0);
  t_inside_pool = false;
  while (im.pending.load(std::memory_order_acquire) != 0) __builtin_ia32_pause();
}

int ThreadPool::HardwareConcurrency() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int count = CPU_COUNT(&set);
    if (count > 0) return count;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace uc
