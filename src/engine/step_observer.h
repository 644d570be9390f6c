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
//
// Called only from the engine thread.
#pragma once

#include <cstdint>
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
  // True when the request, about to finish with `num_generated` tokens, still wants the
  // activation of its last generated token (which has not been through the model yet): the
  // engine then runs it through once more, without sampling, before finishing.
  virtual bool WantsFinalToken(uint64_t seq_id, int64_t num_generated) = 0;
  // The request ended (stop, length or abort) after returning `num_generated` tokens (the
  // observer knows from the plans which of them went through the model). Called exactly once
  // per added request.
  virtual void OnRequestFinished(uint64_t seq_id, int64_t num_generated, bool aborted) = 0;
};

}  // namespace uc::engine
