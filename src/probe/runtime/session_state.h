// File: session_state.h
// -----------------------------------------------------------------------------
// ProbingSession's private state, shared by the files that implement it (internal to
// probe/runtime; nothing outside includes it):
//   probing_session.cc       registration, the request lifecycle, results, shutdown
//   session_plan.cc          which (layer, site, rows) a step captures for the session's requests
//   session_routing.cc       a step's records in canonical order to the points' probes
//   session_intervention.cc  inline calls under the intervention policies; their call pool
//   session_holds.cc         escalation holds and the classifiers' decisions
//   session_steering.cc      the spec's `steering:` entries as the requests' base steering
// Every field is touched by the engine thread only unless its comment says otherwise.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "models/forward_hooks.h"
#include "probe/runtime/probing_session.h"

namespace uc::probe {
namespace session_internal {

using Clock = std::chrono::steady_clock;

// Seconds since the Unix epoch (signal timestamps).
double WallSeconds();
// The tap site of a capturable tensor type; nullopt for kv.
std::optional<models::Site> SiteOf(TensorType t);
// The spec's steering entries as a request steering (session_steering.cc): entry i's file
// (relative to the spec), restricted to its layers, as vector group i. InvalidArgument naming
// the entry and field.
StatusOr<engine::RequestSteering> LoadSpecSteering(const Spec& spec,
                                                   const models::ModelConfig& config);
// What an inline point says when its probe could not (timeout, exception): continue or abort
// per the policy's on_timeout, with metadata saying why.
ProbeSignal Fallback(const ExtractionPoint& point, const InterventionPolicy& policy,
                     const std::string& reason, const std::string& error);
// Whether binding `b` wants the activation at `token_pos` (candidates of generated[-k]
// included when `total` is unknown).
bool Wants(const ProbingSession::Binding& b, int64_t token_pos, int64_t prompt_len,
           std::optional<int64_t> total = std::nullopt);

// One call of OnActivation handed to the pool, and its outcome.
struct CallState {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::optional<ProbeSignal> signal;
  std::string error;  // non-empty: the probe threw
};

}  // namespace session_internal

using session_internal::CallState;
using session_internal::Clock;

struct ProbingSession::Counters {
  std::atomic<int64_t> records_routed{0};
  std::atomic<int64_t> inline_calls{0};
  std::atomic<int64_t> timeouts{0};
  std::atomic<int64_t> errors{0};
  std::atomic<int64_t> skipped_open_breaker{0};
  std::atomic<int64_t> aborts{0};
  std::atomic<int64_t> escalations{0};
  std::atomic<int64_t> async_accepted{0};
  std::atomic<int64_t> async_processed{0};
  std::atomic<int64_t> async_dropped{0};
  std::atomic<int64_t> results{0};
};

// A fixed set of threads running block_until_signal calls.
class ProbingSession::CallPool {
 public:
  explicit CallPool(int threads) {
    for (int i = 0; i < std::max(1, threads); ++i) workers_.emplace_back([this] { Run(); });
  }
  ~CallPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : workers_) t.join();
  }
  void Submit(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      tasks_.push_back(std::move(task));
    }
    cv_.notify_one();
  }

 private:
  void Run() {
    while (true) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stop_ || !tasks_.empty(); });
        if (tasks_.empty()) return;
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

struct ProbingSession::PointState {
  const ExtractionPoint* point = nullptr;
  int index = 0;
  std::unique_ptr<ProbeType> type;
  models::Site site = models::Site::kResidPost;
  std::vector<int> layers;  // sorted, unique
  // combine: concat: the (layer, site) of each part of a record, in order.
  bool concat = false;
  std::vector<std::pair<int, models::Site>> inputs;
  InterventionPolicy policy;  // resolved
  bool inline_point = true;
  int queue_depth = 32;  // async
  OverflowPolicy overflow = OverflowPolicy::kDropOldest;
  PointMetrics* metrics = nullptr;
  // generated[-k]+o: candidates start at prompt_len - k + o; the last k - o are kept.
  int64_t ring_size = 0;
  int64_t ring_from_prompt_end = 0;  // candidates from prompt_len + this (<= 0)
  // Circuit breaker (block_until_signal).
  int consecutive_failures = 0;
  bool open = false;
  Clock::time_point opened_at;

  bool HasLayer(int layer) const { return std::binary_search(layers.begin(), layers.end(), layer); }
};

struct ProbingSession::Binding {
  PointState* point = nullptr;
  std::shared_ptr<Probe> probe;
  RequestContext ctx;
  bool done = false;                               // `until: stop_token` reached
  std::shared_ptr<CallState> inflight;             // the last blocking call
  std::deque<std::vector<ActivationRecord>> ring;  // generated[-k] candidates, by position
  std::shared_ptr<AsyncExecutor::Queue> queue;     // async points
};

// One escalation out: its answer (set by an Escalator worker) and what the decision needs.
struct ProbingSession::EscalationCall {
  PointState* point = nullptr;
  int64_t token_pos = 0;
  int layer = 0;
  std::optional<double> score;
  Clock::time_point started;
  Clock::time_point deadline;
  std::mutex mu;  // guards the three fields below
  bool answered = false;
  bool decided = false;  // by the answer, the deadline, or the request's end
  EscalationAnswer answer;
};

struct ProbingSession::RequestState {
  std::string id;
  uint64_t seq_id = 0;
  int64_t prompt_len = 0;
  std::vector<Binding> bindings;  // spec order
  int64_t delivered_upto = 0;     // positions below were delivered (never twice)
  int64_t fed_end = 0;            // positions below have been through the model
  bool stopped = false;
  int64_t stop_pos = -1;
  std::optional<engine::AbortInfo> abort;
  std::vector<int32_t> tokens;                 // prompt + generated so far (escalation only)
  std::shared_ptr<EscalationCall> escalation;  // the call this request is held for
  bool finishing = false;                      // OnRequestFinished is routing the last records
  // Ending (any thread, after the engine let go of the request).
  bool ended_by_shutdown = false;
  std::atomic<int> pending{0};                // queues still draining, +1 while closing them
  std::vector<AsyncExecutor::EndState> ends;  // per binding (async ones)
};

// One record of a step on its way to its binding (session_routing.cc).
struct ProbingSession::Routable {
  RequestState* request = nullptr;
  Binding* binding = nullptr;
  ActivationRecord record;
  int batch = -1;  // the batched call that decided it (CallBatched), -1: routed one by one
  size_t slot = 0;
};

}  // namespace uc::probe
