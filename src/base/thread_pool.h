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

  // Calls fn(begin, end) on the chunks [i * grain, min(n, (i + 1) * grain)) covering [0, n); the
  // workers and the calling thread take chunks in order from a shared counter until none is
  // left, so a thread that the system holds back (other threads of the process, other
  // processes) leaves its share to the others instead of stalling the call. Which thread runs
  // which chunk is not fixed, and an inline run (one thread, a nested call) passes [0, n) at
  // once: fn's results must depend on neither.
  // REQUIRES: grain >= 1.
  void ParallelForDynamic(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn,
                          int64_t grain);

  // Calls fn(begin, end) on contiguous chunks covering [0, n), taken in order from a shared
  // position as ParallelForDynamic's are, but of shrinking size (guided self-scheduling): each
  // takes half of the items left divided by the thread count, at least `min_chunk` (the last
  // may be shorter). The first chunks are long (few stream starts) and the last ones short, so
  // the threads finish close together, where equal chunks leave a thread idle for up to one
  // chunk at the end of every call. Like ParallelForDynamic, which thread runs which chunk and
  // where chunks begin are not fixed: fn's results must depend on neither.
  // REQUIRES: min_chunk >= 1.
  void ParallelForGuided(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn,
                         int64_t min_chunk);

  // The number of hardware threads this process may use (sched affinity), at least 1.
  static int HardwareConcurrency();

 private:
  struct Impl;
  void StopWorkers();  // stops and joins every worker
  // Runs fn over [0, n) in `num_chunks` chunks of `chunk` items on the workers and this thread
  // (inline when there is one chunk, no worker, or the caller is a pool thread); returns when
  // all are done. Static: chunk i runs on thread i. Dynamic: threads take chunks in turn.
  enum class Split { kStatic, kDynamic, kGuided };
  void Run(const std::function<void(int64_t, int64_t)>& fn, int64_t n, int64_t num_chunks,
           int64_t chunk, Split split);
  int num_threads_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace uc
