// File: async_executor.h
// -----------------------------------------------------------------------------
// AsyncExecutor: the bounded queues of async extraction points and the fixed worker pool that
// serves them (DESIGN.md "Capture and routing"; Undercurrent v0.1 inventory §4, fixed).
//
// One Queue per (request, async point) — a "binding". Push() never waits for a probe (it may
// run one fast call itself, below): a full queue applies its overflow policy —
//   drop_oldest  evict the oldest queued record, accept the new one (the evicted one counts)
//   drop_newest  discard the incoming record (counts)
//   block        wait for space (backpressure on the caller; nothing dropped)
// — except that records are not dropped for want of a scheduled worker. Under drop_oldest and
// drop_newest, a Push that finds its queue full while no worker is in its handler (the workers
// were woken but have not run: a busy machine, step threads on every core, steps microseconds
// apart) first
//   - serves the oldest record itself, on the pushing thread, while the handler's last call
//     took at most 100 us (the pusher is delayed by about that much);
//   - else, when some worker is not in a handler, parks for up to 1 ms for a worker to take a
//     record (its CPU goes to the workers; the pusher waits for a worker, never for a probe);
// and only then applies the policy. A queue a worker is running when it fills parks the pusher
// for up to 1 ms for that worker to take the next record while the handler's last call took at
// most 100 us (the worker is off the CPU, the probe is not slow). A queue whose slow handler a
// worker is running, or finds every worker busy, loses records at once: drops then measure the
// probes' speed.
// The workers serve queues round-robin: a worker takes one record from the queue at the head of
// the ready list, runs the handler, and puts the queue back at the tail if it still has work.
// No thread is held by an idle queue and no queue starves however many are live; at most one
// thread (worker or pusher) runs a queue's handler at a time, so a queue's records are handled
// one by one in push order (a probe needs no locking). A queue opened with a batch handler
// (probes with a fixed cost per call, e.g. in Python) is served the same way, except that one
// call takes every record queued at that moment, in push order.
//
// Close(q, deadline, on_closed) ends a queue: it takes no more records, its backlog is still
// handled, and on_closed runs exactly once — when the backlog is done, or at the deadline. At
// the deadline the rest of the backlog is discarded (counted as drain_timeout), and if the
// handler is still running on_closed is told so (the caller must then not touch what the
// handler uses until it returns; the handler's own captures keep it alive).
//
// Counting: every record pushed is eventually processed or counted in exactly one drop reason
// (overflow, drain_timeout, shutdown); a push into a closed queue is refused and reported as
// kClosed. When `metrics` is given, queue depth/capacity and drops are mirrored there.
//
// Thread-safety: every method is thread-safe. Handlers run on the workers or (see above) on a
// pushing thread, one at a time per queue; on_closed runs on the thread that closed the queue
// (if it was already idle), a worker, a pusher, or the timer thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "probe/probes/probe.h"
#include "probe/sinks/metrics.h"
#include "probe/spec/spec.h"

namespace uc::probe {

// Per-queue counts. accepted = processed + dropped_* + depth (+ the records a call is running).
struct QueueCounts {
  int capacity = 0;
  OverflowPolicy policy = OverflowPolicy::kDropOldest;
  int64_t accepted = 0;
  int64_t processed = 0;
  int64_t dropped_overflow = 0;  // evicted (drop_oldest) or refused (drop_newest)
  int64_t dropped_drain_timeout = 0;
  int64_t dropped_shutdown = 0;
  int64_t refused_closed = 0;  // pushed after Close (not accepted, not a drop)
  int depth = 0;

  int64_t dropped() const { return dropped_overflow + dropped_drain_timeout + dropped_shutdown; }
  nlohmann::json ToJson() const;
};

enum class PushResult {
  kAccepted,         // queued, nothing lost
  kAcceptedEvicted,  // queued; the oldest queued record was dropped (drop_oldest)
  kDroppedNewest,    // the pushed record was dropped (drop_newest)
  kClosed,           // the queue is closed or the executor stopped; not queued, not a drop
};

enum class DropReason { kOverflow, kDrainTimeout, kShutdown };

// How far a Push that finds its queue full and unattended may go before applying the policy
// (see the file comment). The defaults are the product's; tests widen them to take scheduling
// out of what they assert.
struct PusherLimits {
  // The pusher serves the oldest record itself while the handler's last call took at most this.
  std::chrono::steady_clock::duration serves_up_to = std::chrono::microseconds(100);
  // Otherwise it parks for up to this for a free worker to take a record.
  std::chrono::steady_clock::duration waits_up_to = std::chrono::milliseconds(1);
};

class AsyncExecutor {
 public:
  using Clock = std::chrono::steady_clock;
  // Handles one record. Exceptions are caught and logged (the probing session catches its
  // probes' exceptions itself).
  using Handler = std::function<void(ActivationRecord&)>;
  // Handles every record a queue held when it was served (at least one), in push order.
  using BatchHandler = std::function<void(std::span<ActivationRecord>)>;
  struct EndState {
    bool drained = true;         // the whole backlog was handled
    bool still_running = false;  // the handler was still running at the deadline
    QueueCounts counts;
  };
  using OnClosed = std::function<void(const EndState&)>;
  class Queue;

  // REQUIRES: num_workers >= 1.
  explicit AsyncExecutor(int num_workers, PusherLimits limits = PusherLimits());
  ~AsyncExecutor();  // Stop()
  AsyncExecutor(const AsyncExecutor&) = delete;
  AsyncExecutor& operator=(const AsyncExecutor&) = delete;

  int num_workers() const { return static_cast<int>(workers_.size()); }

  // A new queue of `capacity` (>= 1) records. `metrics` may be null.
  std::shared_ptr<Queue> Open(int capacity, OverflowPolicy policy, Handler handler,
                              PointMetrics* metrics);
  // The same, served in batches (see the file comment).
  std::shared_ptr<Queue> OpenBatched(int capacity, OverflowPolicy policy, BatchHandler handler,
                                     PointMetrics* metrics);
  // Queues `record` under the queue's policy. With kBlock, waits for space (or Close/Stop).
  // When the queue is full and no worker holds it, may first run its handler once on this
  // thread or wait up to 1 ms for a worker (see the file comment): the caller must hold nothing
  // the handler takes.
  PushResult Push(const std::shared_ptr<Queue>& queue, ActivationRecord record);
  // Ends `queue` (see the file comment). A second Close only moves the deadline earlier.
  void Close(const std::shared_ptr<Queue>& queue, Clock::time_point deadline, OnClosed on_closed);
  // Discards the queue's backlog now, counted under `reason`.
  void Discard(const std::shared_ptr<Queue>& queue, DropReason reason);
  // A snapshot of the queue's counts.
  QueueCounts Counts(const Queue& queue) const;

  // Stops the workers once each finished its current record; queued records stay queued (close
  // or discard the queues first). Pushes afterwards return kClosed. Idempotent.
  void Stop();

 private:
  void WorkerLoop();
  // Under `lock` (on mu_), with `queue` non-empty and not running: takes its oldest record (a
  // batched queue: every record),
  // runs the handler unlocked (counted in busy_workers_ when `by_worker`), then relists the
  // queue if it has more work or finishes it if it is closed and empty. Returns with `lock` held.
  void ServeOldestLocked(std::unique_lock<std::mutex>& lock, const std::shared_ptr<Queue>& queue,
                         bool by_worker);
  void TimerLoop();
  // Under mu_: marks `q` finished and returns its callback with the end state.
  std::function<void()> FinishLocked(Queue& q, bool drained);
  void DiscardLocked(Queue& q, DropReason reason);

  mutable std::mutex mu_;
  std::condition_variable work_cv_;   // workers: ready_ non-empty or stopping
  std::condition_variable space_cv_;  // blocked pushers
  std::condition_variable timer_cv_;
  std::deque<std::shared_ptr<Queue>> ready_;
  std::multimap<Clock::time_point, std::weak_ptr<Queue>> deadlines_;
  const PusherLimits limits_;
  bool stopping_ = false;
  int busy_workers_ = 0;  // workers in a handler
  std::vector<std::thread> workers_;
  std::thread timer_;
};

}  // namespace uc::probe
