#include "probe/runtime/async_executor.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>

#include <utility>

#include "base/check.h"
#include "base/logging.h"

namespace uc::probe {
nlohmann::json QueueCounts::ToJson() const {
  return {{"capacity", capacity},
          {"overflow_policy", std::string(Name(policy))},
          {"accepted", accepted},
          {"processed", processed},
          {"dropped",
           {{"overflow", dropped_overflow},
            {"drain_timeout", dropped_drain_timeout},
            {"shutdown", dropped_shutdown}}},
          {"refused_after_close", refused_closed}};
}

class AsyncExecutor::Queue {
 public:
  Handler handler;
  BatchHandler batch_handler;  // set instead of `handler` for a batched queue
  PointMetrics* metrics = nullptr;
  std::deque<ActivationRecord> items;
  QueueCounts counts;
  bool running = false;   // a worker is in the handler
  bool in_ready = false;  // listed in ready_
  bool closed = false;
  bool finished = false;  // on_closed has been taken
  // How long the handler's last call took (wall time, any thread); zero before the first.
  Clock::duration last_call{};
  Clock::time_point deadline = Clock::time_point::max();
  OnClosed on_closed;

  void DepthChanged(int delta) {
    counts.depth += delta;
    if (metrics != nullptr) metrics->queue_depth->Increment(delta);
  }
};

AsyncExecutor::AsyncExecutor(int num_workers, PusherLimits limits) : limits_(limits) {
  UC_CHECK(num_workers >= 1, "an executor needs at least one worker, got %d", num_workers);
  for (int i = 0; i < num_workers; ++i) workers_.emplace_back([this] { WorkerLoop(); });
  timer_ = std::thread([this] { TimerLoop(); });
}

AsyncExecutor::~AsyncExecutor() { Stop(); }

std::shared_ptr<AsyncExecutor::Queue> AsyncExecutor::Open(int capacity, OverflowPolicy policy,
                                                          Handler handler, PointMetrics* metrics) {
  UC_CHECK(capacity >= 1, "queue capacity must be at least 1, got %d", capacity);
  auto q = std::make_shared<Queue>();
  q->handler = std::move(handler);
  q->metrics = metrics;
  q->counts.capacity = capacity;
  q->counts.policy = policy;
  if (metrics != nullptr) metrics->queue_capacity->Increment(capacity);
  return q;
}

std::shared_ptr<AsyncExecutor::Queue> AsyncExecutor::OpenBatched(int capacity,
                                                                 OverflowPolicy policy,
                                                                 BatchHandler handler,
                                                                 PointMetrics* metrics) {
  std::shared_ptr<Queue> q = Open(capacity, policy, Handler(), metrics);
  q->batch_handler = std::move(handler);
  return q;
}

PushResult AsyncExecutor::Push(const std::shared_ptr<Queue>& queue, ActivationRecord record) {
  Queue& q = *queue;
  std::unique_lock<std::mutex> lock(mu_);
  if (q.counts.policy == OverflowPolicy::kBlock) {
    space_cv_.wait(lock, [&] {
      return stopping_ || q.closed || static_cast<int>(q.items.size()) < q.counts.capacity;
    });
  }
  if (stopping_ || q.closed) {
    ++q.counts.refused_closed;
    return PushResult::kClosed;
  }
  const auto full = [&] { return static_cast<int>(q.items.size()) >= q.counts.capacity; };
  if (full() && !q.running) {
    // No worker holds the queue, and the workers were woken but may not have run yet (a busy
    // machine, steps microseconds apart): rather than drop at once, serve a fast handler here or
    // give a free worker a moment. The step pays at most about that much for a record that would
    // otherwise be lost for want of a scheduled worker, not for the probe's speed.
    if (q.last_call <= limits_.serves_up_to) {
      ServeOldestLocked(lock, queue, /*by_worker=*/false);
    } else if (busy_workers_ < static_cast<int>(workers_.size())) {
      space_cv_.wait_for(lock, limits_.waits_up_to,
                         [&] { return stopping_ || q.closed || q.running || !full(); });
    }
    if (stopping_ || q.closed) {
      ++q.counts.refused_closed;
      return PushResult::kClosed;
    }
  } else if (full() && q.last_call <= limits_.serves_up_to) {
    // A worker holds the queue but its handler is fast: the queue filled because that worker
    // is off the CPU (a busy machine), not because the probe is slow. Park for up to
    // waits_up_to for it to take the next record; parking hands this thread's core to it.
    space_cv_.wait_for(lock, limits_.waits_up_to, [&] { return stopping_ || q.closed || !full(); });
    if (stopping_ || q.closed) {
      ++q.counts.refused_closed;
      return PushResult::kClosed;
    }
  }
  PushResult result = PushResult::kAccepted;
  if (static_cast<int>(q.items.size()) >= q.counts.capacity) {
    ++q.counts.dropped_overflow;
    if (q.metrics != nullptr) q.metrics->drops_overflow->Increment();
    if (q.counts.policy == OverflowPolicy::kDropNewest) return PushResult::kDroppedNewest;
    q.items.pop_front();  // drop_oldest: the evicted record counts
    q.DepthChanged(-1);
    result = PushResult::kAcceptedEvicted;
  }
  ++q.counts.accepted;
  q.items.push_back(std::move(record));
  q.DepthChanged(+1);
  if (!q.running && !q.in_ready) {
    q.in_ready = true;
    ready_.push_back(queue);
    lock.unlock();
    work_cv_.notify_one();
  }
  return result;
}

void AsyncExecutor::DiscardLocked(Queue& q, DropReason reason) {
  const int64_t n = static_cast<int64_t>(q.items.size());
  if (n == 0) return;
  q.items.clear();
  q.DepthChanged(static_cast<int>(-n));
  switch (reason) {
    case DropReason::kOverflow:
      q.counts.dropped_overflow += n;
      if (q.metrics != nullptr) q.metrics->drops_overflow->Increment(static_cast<double>(n));
      break;
    case DropReason::kDrainTimeout:
      q.counts.dropped_drain_timeout += n;
      if (q.metrics != nullptr) q.metrics->drops_drain_timeout->Increment(static_cast<double>(n));
      break;
    case DropReason::kShutdown:
      q.counts.dropped_shutdown += n;
      if (q.metrics != nullptr) q.metrics->drops_shutdown->Increment(static_cast<double>(n));
      break;
  }
  space_cv_.notify_all();
}

void AsyncExecutor::Discard(const std::shared_ptr<Queue>& queue, DropReason reason) {
  std::function<void()> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    DiscardLocked(*queue, reason);
    if (queue->closed && !queue->finished && !queue->running) done = FinishLocked(*queue, true);
  }
  if (done) done();
}

std::function<void()> AsyncExecutor::FinishLocked(Queue& q, bool drained) {
  q.finished = true;
  EndState state;
  state.drained = drained;
  state.still_running = q.running;
  state.counts = q.counts;
  if (q.metrics != nullptr) q.metrics->queue_capacity->Decrement(q.counts.capacity);
  OnClosed cb = std::move(q.on_closed);
  q.on_closed = nullptr;
  if (!cb) return nullptr;
  return [cb = std::move(cb), state] { cb(state); };
}

void AsyncExecutor::Close(const std::shared_ptr<Queue>& queue, Clock::time_point deadline,
                          OnClosed on_closed) {
  std::function<void()> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Queue& q = *queue;
    if (q.finished) return;
    if (!q.closed) {
      q.closed = true;
      q.on_closed = std::move(on_closed);
      space_cv_.notify_all();  // blocked pushers give up
    }
    if (q.items.empty() && !q.running) {
      done = FinishLocked(q, true);
    } else if (deadline < q.deadline) {
      q.deadline = deadline;
      deadlines_.emplace(deadline, queue);
      timer_cv_.notify_one();
    }
  }
  if (done) done();
}

QueueCounts AsyncExecutor::Counts(const Queue& queue) const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue.counts;
}

void AsyncExecutor::ServeOldestLocked(std::unique_lock<std::mutex>& lock,
                                      const std::shared_ptr<Queue>& queue, bool by_worker) {
  Queue& q = *queue;
  std::vector<ActivationRecord> records;
  if (q.batch_handler) {
    records.assign(std::make_move_iterator(q.items.begin()),
                   std::make_move_iterator(q.items.end()));
    q.items.clear();
  } else {
    records.push_back(std::move(q.items.front()));
    q.items.pop_front();
  }
  const auto taken = static_cast<int>(records.size());
  q.DepthChanged(-taken);
  q.running = true;
  if (by_worker) ++busy_workers_;
  space_cv_.notify_all();
  lock.unlock();
  const Clock::time_point start = Clock::now();
  try {
    if (q.batch_handler) {
      q.batch_handler(std::span<ActivationRecord>(records));
    } else {
      q.handler(records.front());
    }
  } catch (const std::exception& e) {
    UC_LOG(WARNING) << "async handler threw: " << e.what();
  } catch (...) {
    UC_LOG(WARNING) << "async handler threw a non-exception";
  }
  const Clock::duration took = Clock::now() - start;
  lock.lock();
  q.running = false;
  if (by_worker) --busy_workers_;
  q.last_call = took;
  q.counts.processed += taken;
  if (q.finished) return;  // gave up at its deadline while this record ran
  std::function<void()> done;
  if (!q.items.empty()) {
    if (!q.in_ready) {
      q.in_ready = true;
      ready_.push_back(queue);                // to the tail: round-robin among queues with work
      if (!by_worker) work_cv_.notify_one();  // a worker goes on to ready_ by itself
    }
  } else if (q.closed) {
    done = FinishLocked(q, true);
  }
  if (done) {
    lock.unlock();
    done();
    lock.lock();
  }
}

void AsyncExecutor::WorkerLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    work_cv_.wait(lock, [this] { return stopping_ || !ready_.empty(); });
    if (stopping_) return;
    std::shared_ptr<Queue> q = std::move(ready_.front());
    ready_.pop_front();
    q->in_ready = false;
    // Discarded while listed, or a pusher is serving it (it lists the queue again when done).
    if (q->items.empty() || q->running) continue;
    ServeOldestLocked(lock, q, /*by_worker=*/true);
  }
}

void AsyncExecutor::TimerLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    if (deadlines_.empty()) {
      timer_cv_.wait(lock);
      continue;
    }
    const Clock::time_point next = deadlines_.begin()->first;
    if (Clock::now() < next) {
      timer_cv_.wait_until(lock, next);
      continue;
    }
    std::shared_ptr<Queue> q = deadlines_.begin()->second.lock();
    deadlines_.erase(deadlines_.begin());
    if (q == nullptr || q->finished || q->deadline > next) continue;  // done, or moved earlier
    const bool drained = q->items.empty();
    if (!drained) {
      UC_LOG(WARNING) << "async queue not drained by its deadline: discarding " << q->items.size()
                      << " queued activation(s)" << (q->running ? " (probe still running)" : "");
    }
    DiscardLocked(*q, DropReason::kDrainTimeout);
    std::function<void()> done = FinishLocked(*q, drained && !q->running);
    lock.unlock();
    if (done) done();
    lock.lock();
  }
}

void AsyncExecutor::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ && workers_.empty()) return;
    stopping_ = true;
  }
  work_cv_.notify_all();
  space_cv_.notify_all();
  timer_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
  if (timer_.joinable()) timer_.join();
}

}  // namespace uc::probe
