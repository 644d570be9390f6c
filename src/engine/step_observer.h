// File: step_observer.h
// -----------------------------------------------------------------------------
// StepObserver: how probing plugs into the engine without the engine knowing about probes
// (probe/ implements it; the engine only sees rows and aborts). Per step, on the engine thread:
//   1. PlanCapture(plan): which batch rows at which (layer, site) anyone wants — the ranks copy
//      exactly those and nothing else;
//   2. the step executes on every rank; the captured rows come back to the driver;
//   3. OnStepExecuted(plan, captured): the observer builds records, runs inline probes, and
//      returns the requests to stop. The engine drops their tokens sampled in this step, so an
//      abort triggered by the activation of token p never lets a token after p out.
// Requests are announced before their first step and ended exactly once (any reason).
// Holding (a probe's `escalate`): after OnStepExecuted, TakeHolds names the requests to hold.
// The engine withholds the token each of them sampled in this step (it is not returned), does
// not schedule them while held (their KV blocks stay, unless preemption takes them like any
// other sequence's, to be recomputed token-exactly), and keeps stepping the others. At the
// start of every step it applies TakeHoldDecisions: release (the withheld token is returned
// and generation goes on) or stop (the request aborts; the withheld token is dropped). While
// every live request is held, Step waits (without spinning) until the wake-up function given
// to SetWakeup is called, a request is added or aborted, or a short poll interval passes.
//
// Called only from the engine thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tensor/tensor.h"
#include "worker/scheduler_output.h"

namespace uc::engine {

// Who ended a request early, and why (finish_reason kAbort).
struct AbortInfo {
  AbortInfo() = default;
  AbortInfo(std::string by_, std::string reason_)
      : by(std::move(by_)), reason(std::move(reason_)) {}
  std::string by;      // e.g. "client", "probe", "shutdown"
  std::string reason;  // free text, complete on its own
  // Set when a probe aborted: the point, the token whose activation triggered it, and the
  // signal's confidence.
  std::string point;
  int64_t token_pos = -1;
  std::optional<double> confidence;
};

struct StopRequest {
  uint64_t seq_id = 0;
  AbortInfo info;
};

// What becomes of a held request (StepObserver::TakeHoldDecisions): released when `abort` is
// unset, else stopped with it.
struct HoldDecision {
  uint64_t seq_id = 0;
  std::optional<AbortInfo> abort;
};

// Switches a request's steering group on (start) or off from `position` on (conditional
// steering; LLMEngine::StartSteering / StopSteering).
struct SteeringSwitch {
  uint64_t seq_id = 0;
  int group = 0;
  int32_t position = 0;
  bool start = true;
};

class StepObserver {
 public:
  virtual ~StepObserver() = default;
  // A request is about to be scheduled for the first time.
  virtual void OnRequestAdded(uint64_t seq_id, const std::string& request_id,
                              std::span<const int32_t> prompt_ids) = 0;
  // The capture items for `plan` (batch rows index plan's concatenated tokens).
  virtual std::vector<worker::CaptureItem> PlanCapture(const worker::SchedulerOutput& plan) = 0;
  // After execution: `captured` holds one [rows, hidden] tensor per item of plan.capture.
  // Returns the requests to abort now.
  virtual std::vector<StopRequest> OnStepExecuted(const worker::SchedulerOutput& plan,
                                                  const std::vector<Tensor>& captured) = 0;
  // After OnStepExecuted: the steering switches this step's activations triggered. A switch
  // from position p + 1 after the activation of token p is token-exact (that row has not run).
  virtual std::vector<SteeringSwitch> TakeSteeringSwitches() { return {}; }
  // After OnStepExecuted (and TakeSteeringSwitches): the requests to hold from now on (see the
  // top of this file). A request is held until a decision about it comes back; one already
  // held, stopped in this step or finishing is not held again.
  virtual std::vector<uint64_t> TakeHolds() { return {}; }
  // Start of every step: the decisions about held requests that arrived since the last call.
  virtual std::vector<HoldDecision> TakeHoldDecisions() { return {}; }
  // The engine's wake-up (thread-safe, callable from any thread): call it when a hold decision
  // is ready so an engine idling on held requests steps at once. Given by SetObserver; an
  // observer that forwards to others must pass it on.
  virtual void SetWakeup(std::function<void()> wake) { (void)wake; }
  // True when the request, about to finish with `num_generated` tokens, still wants the
  // activation of its last generated token (which has not been through the model yet): the
  // engine then runs it through once more, without sampling, before finishing.
  virtual bool WantsFinalToken(uint64_t seq_id, int64_t num_generated) = 0;
  // After OnRequestAdded: whether the request may want activations of prompt positions
  // (a selector that can match one). Prefix caching serves such a request no cached prompt
  // block, so each of its prompt positions runs and is observed as without the cache. The
  // default, true, is always safe.
  virtual bool WantsPromptActivations(uint64_t seq_id) {
    (void)seq_id;
    return true;
  }
  // The request ended (stop, length or abort) after returning `num_generated` tokens (the
  // observer knows from the plans which of them went through the model). Called exactly once
  // per added request.
  virtual void OnRequestFinished(uint64_t seq_id, int64_t num_generated, bool aborted) = 0;
};

}  // namespace uc::engine
