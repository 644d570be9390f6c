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
//   OnStepExecuted: records in (request, token_pos, layer) order — the same sequence in every
//     topology — routed to the points' probes. Inline points run under their intervention
//     policy: `reject` calls the probe on the engine thread; `block_until_signal` runs it on the
//     session's pool and waits at most timeout_ms, falling back per on_timeout (a timed-out call
//     is never overlapped by the next one on the same probe), with a per-point circuit breaker
//     that opens after N consecutive failures (the point is then skipped, counted) and lets one
//     call through again after the cool-down (half-open). The first ABORT of an inline point at
//     token p stops the request: records after p are not routed, and the engine returns no token
//     after p. Async points observe only (their signals never stop anything).
//   generated[-k] points collect candidates and fire when the request ends, against the final
//     number of generated tokens; the last generated token is run through the model once more
//     when some point wants its activation.
//
// Thread-safety: the StepObserver methods are called by the engine thread only; results go to
// the callback on that thread.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/step_observer.h"
#include "models/model_config.h"
#include "probe/probe.h"
#include "probe/registry.h"
#include "probe/spec.h"

namespace uc::probe {

struct ProbingOptions {
  // Used by inline points without their own `intervention` (null: reject).
  std::optional<InterventionPolicy> default_intervention;
  int circuit_breaker_threshold = 5;               // consecutive failures that open it
  double circuit_breaker_cooldown_seconds = 30.0;  // then one call is let through (half-open)
  int blocking_threads = 4;                        // pool for block_until_signal calls
  std::string model_name;                          // RequestContext prompt_metadata["model"]
  std::vector<int32_t> stop_token_ids;             // EOS and stop ids, for `until: stop_token`
  bool compare_tp_replicas = false;                // debug: every TP rank captures; must agree
};

// Everything a request's probes said, delivered when it ends.
struct RequestProbeResults {
  std::string request_id;
  std::vector<ProbeResult> results;        // one per extraction point, spec order
  std::optional<engine::AbortInfo> abort;  // set when an inline point stopped the request
};

// Counters for tests and metrics.
struct ProbingStats {
  int64_t records_routed = 0;
  int64_t inline_calls = 0;
  int64_t timeouts = 0;
  int64_t errors = 0;
  int64_t skipped_open_breaker = 0;
  int64_t aborts = 0;
};

class ProbingSession : public engine::StepObserver {
 public:
  static StatusOr<std::unique_ptr<ProbingSession>> Create(const Spec& spec,
                                                          const ProbeRegistry& registry,
                                                          const models::ModelConfig& config,
                                                          ProbingOptions options = {});
  ~ProbingSession() override;

  // Receives each request's results as it ends (engine thread).
  void SetResultCallback(std::function<void(RequestProbeResults)> callback) {
    on_result_ = std::move(callback);
  }
  const Spec& spec() const { return spec_; }
  ProbingStats stats() const { return stats_; }

  // engine::StepObserver
  void OnRequestAdded(uint64_t seq_id, const std::string& request_id,
                      std::span<const int32_t> prompt_ids) override;
  std::vector<worker::CaptureItem> PlanCapture(const worker::SchedulerOutput& plan) override;
  std::vector<engine::StopRequest> OnStepExecuted(const worker::SchedulerOutput& plan,
                                                  const std::vector<Tensor>& captured) override;
  bool WantsFinalToken(uint64_t seq_id, int64_t num_generated) override;
  void OnRequestFinished(uint64_t seq_id, int64_t num_generated, bool aborted) override;

  struct PointState;
  struct Binding;
  struct RequestState;
  class CallPool;

 private:
  ProbingSession() = default;
  // Routes one record to one binding under its point's policy; the signal (if any).
  std::optional<ProbeSignal> Dispatch(Binding& binding, const ActivationRecord& record);
  std::optional<ProbeSignal> DispatchBlocking(Binding& binding, const ActivationRecord& record);
  // Routes a record; true when it stopped the request (first inline ABORT).
  bool Route(RequestState& request, Binding& binding, ActivationRecord record);

  Spec spec_;
  models::ModelConfig config_;
  ProbingOptions options_;
  std::vector<std::unique_ptr<PointState>> points_;
  std::unordered_map<uint64_t, std::unique_ptr<RequestState>> requests_;
  std::unique_ptr<CallPool> pool_;
  std::function<void(RequestProbeResults)> on_result_;
  ProbingStats stats_;
  // Per step: which (request, position) each captured row is.
  struct RowRef {
    uint64_t seq_id;
    int64_t token_pos;
  };
  std::vector<std::vector<RowRef>> plan_rows_;  // [item][j]
};

}  // namespace uc::probe
