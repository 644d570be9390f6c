// File: probing_session.h
// -----------------------------------------------------------------------------
// ProbingSession: the spec, the probes and the router of one engine (DESIGN.md "Capture and
// routing"), plugged into LLMEngine as its StepObserver.
//
// Registration (Create) checks every extraction point against the model — capturable tensor
// type, layers that exist (final_norm at index num_hidden_layers), a registered probe_type of
// the same kind, valid probe_args — all-or-nothing, listing every problem as
// `FILE:LINE: extraction_points[I] 'NAME'.FIELD: MESSAGE`.
//
// Per request, one fresh probe per extraction point (OnStart when the request is added, OnEnd
// exactly once when it ends). Per step:
//   PlanCapture: the (layer, site, rows) the request's selectors match among the step's
//     tokens; positions already delivered (recomputation after preemption) are skipped, so no
//     record is delivered twice.
//   OnStepExecuted: `captured` holds one tensor per item this session's PlanCapture returned
//     (its own, whatever else the engine captured); records in (request, token_pos, layer) order —
//     the same sequence in every topology — routed to the points' probes. Inline points run under
//     their intervention policy: `reject` calls the probe on the engine thread;
//     `block_until_signal` runs it on the session's pool and waits at most timeout_ms, falling back
//     per on_timeout (a timed-out call is never overlapped by the next one on the same probe), with
//     a per-point circuit breaker that opens after N consecutive failures (the point is then
//     skipped, counted) and lets one call through again after the cool-down (half-open). The first
//     ABORT of an inline point at token p stops the request: records after p are not routed, and
//     the engine returns no token after p. Async points observe only (their signals never stop
//     anything).
//   generated[-k] points collect candidates and fire when the request ends, against the final
//     number of generated tokens; the last generated token is run through the model once more
//     when some point wants its activation.
// Async points (async_executor.h): each (request, point) has a bounded queue (the point's
//   queue_depth and overflow_policy, else the session defaults) served by a fixed worker pool;
//   routing only enqueues, so a slow async probe never slows generation (unless its policy is
//   `block`): a full queue that no worker has reached is served on the engine thread when its
//   probe is fast (at most 100 us a call), else the engine thread waits up to 1 ms for a free
//   worker to reach it, so records are not lost for want of a scheduled worker. Every record is
//   processed or counted as dropped, per point and per binding (the result's metadata.queue).
// End of a request: its async queues drain (bounded by drain_timeout_seconds, after which the
//   backlog is discarded and counted) before OnEnd; then one result per point goes to the sinks
//   and to the result callback. Requests without async points are finalized at once, on the
//   engine thread.
// Escalation (extension): an inline point whose probe signals ESCALATE at token p (probe_args
//   action: escalate) holds the request: TakeHolds tells the engine, which withholds the token
//   sampled in that step, schedules the request no more while held (KV kept) and steps the
//   others. The point's classifier (ExtractionPoint::escalation) gets a JSON POST off the
//   engine thread (escalation.h) with the request id, the point, p, the layer, the score (the
//   signal's confidence), the prompt, the generated text through p and the token ids through p.
//   At the start of each step TakeHoldDecisions hands the engine what came back: "continue"
//   releases the request (the withheld token is returned, generation goes on, tokens exactly
//   those of an unprobed run); "abort" stops it at p like an inline ABORT (AbortInfo by
//   "probe", the point, token_pos p, confidence the score; the withheld token is dropped). No
//   answer by timeout_ms, an unreachable classifier or a malformed answer: the point's
//   on_timeout decides, and the abort reason says which. A request is held for one escalation
//   at a time: escalations while held, or from records routed when the request ends
//   (generated[-k]), are not acted on. The session calls the engine's wake-up (SetWakeup) when
//   an answer arrives, so an engine whose every request is held idles until then. Shutdown
//   aborts the requests still held (AbortInfo by "shutdown") at the engine's next step.
// Sinks (sink.h) get async signals, inline FLAG/ABORT and fallback signals, and every result.
// Metrics (metrics.h) cover every point, inline and async.
//
// Thread-safety: the StepObserver methods are called by the engine thread only. The result
// callback runs on the engine thread or on an async worker (never two at once). Shutdown must
// not run concurrently with the StepObserver methods (call it from the engine thread or once
// the engine stopped stepping); stats() is thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/llm_engine.h"
#include "engine/step_observer.h"
#include "models/model_config.h"
#include "probe/probes/probe.h"
#include "probe/probes/registry.h"
#include "probe/runtime/async_executor.h"
#include "probe/runtime/escalation.h"
#include "probe/sinks/metrics.h"
#include "probe/sinks/sink.h"
#include "probe/spec/spec.h"
#include "tokenizer/tokenizer.h"

namespace uc::probe {

// The async executor's settings (Undercurrent v0.1 Router defaults).
struct AsyncOptions {
  int workers = 4;               // fixed pool serving every async queue, fairly
  int default_queue_depth = 32;  // points without queue_depth
  OverflowPolicy default_overflow = OverflowPolicy::kDropOldest;  // without overflow_policy
  double drain_timeout_seconds = 30.0;                            // per request, at its end
};

struct ProbingOptions {
  // Used by inline points without their own `intervention` (null: reject).
  std::optional<InterventionPolicy> default_intervention;
  int circuit_breaker_threshold = 5;               // consecutive failures that open it
  double circuit_breaker_cooldown_seconds = 30.0;  // then one call is let through (half-open)
  int blocking_threads = 4;                        // pool for block_until_signal calls
  std::string model_name;                          // RequestContext prompt_metadata["model"]
  std::vector<int32_t> stop_token_ids;             // EOS and stop ids, for `until: stop_token`
  bool compare_tp_replicas = false;                // debug: every TP rank captures; must agree
  AsyncOptions async;
  // The model's fingerprint (engine::ModelFingerprint) and what to do with probe weights made
  // for another model, layer or site (probes/trained/artifact.h); null fingerprint: not checked.
  nlohmann::json model_fingerprint;
  ArtifactPolicy artifact_policy = ArtifactPolicy::kWarn;
  std::vector<std::shared_ptr<Sink>> sinks;  // thread-safe sinks; closed by their owner
  int escalation_threads = 8;  // concurrent classifier calls at most (points with escalation)
  // Decodes the text sent to escalation classifiers; null: AttachTo's engine's, else only ids.
  const tokenizer::Tokenizer* tokenizer = nullptr;
  Metrics* metrics = nullptr;  // not owned, outlives the session; null: a private registry
};

// Everything a request's probes said, delivered when it ends.
struct RequestProbeResults {
  std::string request_id;
  std::vector<ProbeResult> results;        // one per extraction point, spec order
  std::optional<engine::AbortInfo> abort;  // set when an inline point stopped the request
  // Set by ProbeSets (probe_sets.h): the set and the version whose probes these are, and its
  // spec (it may have been replaced since). Empty / 0 / null from a lone ProbingSession.
  std::string probe_set;
  int64_t probe_set_version = 0;
  std::shared_ptr<const Spec> spec;
};

// Counters for tests (the same numbers, per point, are in the metrics).
struct ProbingStats {
  int64_t records_routed = 0;
  int64_t inline_calls = 0;
  int64_t timeouts = 0;
  int64_t errors = 0;
  int64_t skipped_open_breaker = 0;
  int64_t aborts = 0;
  int64_t escalations = 0;      // requests held for a classifier
  int64_t async_accepted = 0;   // records queued for async probes
  int64_t async_processed = 0;  // async OnActivation calls made
  int64_t async_dropped = 0;    // overflow + drain timeout + shutdown
  int64_t results = 0;          // results delivered
};

// Values in each record of `point` on a model of `config`: models::SiteWidth of its tensor
// type (hidden_size; num_experts for router_logits / expert_weights), summed over the inputs
// with combine: concat. 0 for kv (not capturable).
int64_t PointWidth(const ExtractionPoint& point, const models::ModelConfig& config);

class ProbingSession : public engine::StepObserver {
 public:
  static StatusOr<std::unique_ptr<ProbingSession>> Create(const Spec& spec,
                                                          const ProbeRegistry& registry,
                                                          const models::ModelConfig& config,
                                                          ProbingOptions options = {});
  ~ProbingSession() override;

  // Receives each request's results once its queues drained (see Thread-safety above). Set it
  // before the first request.
  void SetResultCallback(std::function<void(RequestProbeResults)> callback) {
    on_result_ = std::move(callback);
  }
  const Spec& spec() const { return spec_; }
  // The spec's `steering:` entries as every request's base steering (entry i is vector group
  // i; `when: {action: start}` entries start deferred).
  const engine::RequestSteering& steering() const { return steering_; }
  // Installs this session as `engine`'s observer and the spec's steering as its base steering.
  Status AttachTo(engine::LLMEngine& engine);
  ProbingStats stats() const;
  Metrics& metrics() { return *metrics_; }
  // Whether some point is async (its results arrive after the request's queues drain).
  bool has_async_points() const { return executor_ != nullptr; }

  // Terminal. Ends every request still registered (results say metadata.ended_by =
  // "shutdown"), then: wait = true drains every queue, each bounded by `timeout_seconds`
  // (negative: the drain timeout); wait = false discards the queued backlog (counted) and lets
  // only the calls already running finish (bounded the same way). Either way every registered
  // request gets its result before Shutdown returns; the workers are stopped. Later requests
  // are not probed. Idempotent.
  void Shutdown(bool wait, double timeout_seconds = -1);

  // engine::StepObserver
  void OnRequestAdded(uint64_t seq_id, const std::string& request_id,
                      std::span<const int32_t> prompt_ids) override;
  std::vector<worker::CaptureItem> PlanCapture(const worker::SchedulerOutput& plan) override;
  std::vector<engine::StopRequest> OnStepExecuted(const worker::SchedulerOutput& plan,
                                                  const std::vector<Tensor>& captured) override;
  bool WantsFinalToken(uint64_t seq_id, int64_t num_generated) override;
  // True unless every extraction point selects only generated positions (generated[...] with
  // no negative offset): prefix caching then may serve the request's prompt from the cache.
  bool WantsPromptActivations(uint64_t seq_id) override;
  std::vector<engine::SteeringSwitch> TakeSteeringSwitches() override;
  std::vector<uint64_t> TakeHolds() override;
  std::vector<engine::HoldDecision> TakeHoldDecisions() override;
  void SetWakeup(std::function<void()> wake) override;
  void OnRequestFinished(uint64_t seq_id, int64_t num_generated, bool aborted) override;

  struct PointState;
  struct Binding;
  struct RequestState;
  class CallPool;
  struct Counters;
  struct EscalationCall;
  struct Routable;

 private:
  ProbingSession() = default;
  // Routes one record to one binding under its point's policy; the signal (if any).
  std::optional<ProbeSignal> Dispatch(Binding& binding, const ActivationRecord& record);
  std::optional<ProbeSignal> DispatchBlocking(Binding& binding, const ActivationRecord& record);
  // Routes a record; true when it stopped the request (first inline ABORT). `decided`: the
  // signal a batched call already gave for it (not null: the probe is not called again).
  bool Route(RequestState& request, Binding& binding, ActivationRecord record,
             const std::optional<ProbeSignal>* decided = nullptr);
  // Calls each batched inline point (ProbeType::batched) once with its records of the step,
  // setting their batch and slot; the outcomes by batch then slot, errors already turned into
  // the point policy's fallback signals.
  std::vector<std::vector<BatchedSignal>> CallBatched(std::vector<Routable>& routable);
  // An async point's probe on one record (worker thread).
  void RunAsync(PointState& point, Probe& probe, const std::string& request_id,
                ActivationRecord& record);
  // A batched type's probe on every record its queue held (worker thread): one call.
  void RunAsyncBatch(PointState& point, Probe& probe, const std::string& request_id,
                     std::span<ActivationRecord> records);
  // What an async call's outcome becomes: counted, and written to the sinks. `error` non-empty:
  // the call failed (v0.1's router_error signal; never stops anything).
  void DeliverAsync(PointState& point, const std::string& request_id, int64_t token_pos,
                    std::optional<ProbeSignal> signal, const std::string& error);
  // Closes the request's queues; Finalize runs when they all drained.
  void EndRequest(std::shared_ptr<RequestState> request,
                  std::chrono::steady_clock::time_point deadline);
  void Finalize(const std::shared_ptr<RequestState>& request);
  void CountSignal(PointState& point, const ProbeSignal& signal);
  // An ESCALATE signal at `pos`: holds the request and asks the point's classifier.
  void Escalate(RequestState& request, Binding& binding, int64_t pos, int layer,
                const ProbeSignal& signal);
  void Wake();

  Spec spec_;
  engine::RequestSteering steering_;
  // Per extraction point name: the steering entries its flag switches (index = group).
  std::unordered_map<std::string, std::vector<int>> steering_triggers_;
  std::vector<engine::SteeringSwitch> switches_;  // this step's, engine thread
  models::ModelConfig config_;
  ProbingOptions options_;
  std::vector<std::unique_ptr<PointState>> points_;
  std::unordered_map<uint64_t, std::shared_ptr<RequestState>> requests_;
  std::unique_ptr<CallPool> pool_;
  std::unique_ptr<AsyncExecutor> executor_;  // null without async points
  std::unique_ptr<Metrics> owned_metrics_;
  Metrics* metrics_ = nullptr;
  std::function<void(RequestProbeResults)> on_result_;
  std::unique_ptr<Counters> counters_;
  // Escalation: holds to announce (engine thread), requests with a call out, the engine's
  // wake-up (any thread, under wake_mu_), the HTTP workers (null without escalating points).
  std::vector<uint64_t> holds_;
  std::vector<uint64_t> escalating_;
  std::vector<uint64_t> shutdown_holds_;  // held when Shutdown ran: aborted
  std::mutex wake_mu_;
  std::function<void()> wake_;
  std::unique_ptr<Escalator> escalator_;
  bool shut_down_ = false;
  // Requests whose queues are draining, and the results' delivery.
  std::mutex ending_mu_;
  std::condition_variable ending_cv_;
  std::unordered_map<RequestState*, std::shared_ptr<RequestState>> ending_;
  std::mutex deliver_mu_;
  // Per step: which (request, position) each captured row is.
  struct RowRef {
    uint64_t seq_id;
    int64_t token_pos;
  };
  std::vector<std::vector<RowRef>> plan_rows_;  // [item][j]
  // Per step: the (layer, site) of each item this session planned. OnStepExecuted reads these,
  // not plan.capture, so that a composite observer may pass this session's items alone.
  struct PlanItem {
    int layer;
    uint8_t site;
  };
  std::vector<PlanItem> plan_items_;
};

}  // namespace uc::probe
