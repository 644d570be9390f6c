// File: thread_pool.h
// -----------------------------------------------------------------------------
// A fixed pool of worker threads for data-parallel kernels. ParallelFor splits a range into
// contiguous chunks, runs them on the workers and the calling thread, and returns when all are
// done. Workers spin briefly before sleeping, so back-to-back calls in a decode step (hundreds
// per token) do not pay a futex wake-up each, while an idle pool burns no CPU.
//
// Thread-safety: ParallelFor may be called from one thread at a time (the owner). Nested calls
// from inside a task run serially on the calling worker.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

namespace uc {

class ThreadPool {
 public:
  // `num_threads` counts the calling thread: 1 means no workers, everything runs inline.
  // REQUIRES: num_threads >= 1.
  // Throws std::system_error (naming the thread and --threads) when the system refuses a
  // thread; the threads already started are stopped first.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Calls fn(begin, end) on disjoint chunks covering [0, n). Chunks are at least `min_chunk`
  // long (except the last) and there are at most num_threads() of them.
  void ParallelFor(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn,
                   int64_t min_chunk = 1);

  // The number of hardware threads this process may use (sched affinity), at least 1.
  static int HardwareConcurrency();

 private:
  struct Impl;
  void StopWorkers();  // stops and joins every worker
  int num_threads_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace uc
