// File: steering_util.h
// -----------------------------------------------------------------------------
// Per-request steering test helpers shared by the one-process and the multi-process tests:
// the transformers reference (tests/testdata/steering/requests.json, from
// tools/reference/make_request_steering_reference.py), its cases as engine steering, and an
// observer that records every row's final-norm activation and can switch deferred steering on.
#pragma once

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "engine/llm_engine.h"
#include "engine/step_observer.h"
#include "worker/steering_config.h"

namespace uc::testing {

const nlohmann::json& RequestSteeringReference();
// A reference case's vectors as a config (empty for the unsteered case).
std::shared_ptr<const worker::SteeringConfig> SteeringConfigOf(const nlohmann::json& c);
// ... and as a request's steering: null config when empty, deferred when the case switches on
// at a later position ("from_position" > 0).
engine::RequestSteering RequestSteeringOf(const nlohmann::json& c);

// Records every row's final-norm activation by (request id, position) and the most distinct
// steering configs seen in one step. For a request registered with a conditional case (Follow),
// the activation of position from_position - 1 "flags" and switches its deferred steering on
// from from_position; that of until_position - 1 switches it off from until_position.
class SteeringRecorder : public engine::StepObserver {
 public:
  explicit SteeringRecorder(engine::LLMEngine* engine);
  void OnRequestAdded(uint64_t seq_id, const std::string& request_id,
                      std::span<const int32_t>) override;
  std::vector<worker::CaptureItem> PlanCapture(const worker::SchedulerOutput& plan) override;
  std::vector<engine::StopRequest> OnStepExecuted(const worker::SchedulerOutput& plan,
                                                  const std::vector<Tensor>& captured) override;
  bool WantsFinalToken(uint64_t, int64_t) override { return false; }
  void OnRequestFinished(uint64_t, int64_t, bool) override {}

  std::map<std::pair<std::string, int>, std::vector<float>> rows;
  int max_configs_per_step = 0;
  // Switches `request_id` as reference case `c` says (no-op for an unconditional case).
  void Follow(const std::string& request_id, const nlohmann::json& c);

 private:
  engine::LLMEngine* engine_;
  std::map<uint64_t, std::string> names_;
  std::map<std::string, std::pair<int, int>> switches_;  // request id -> (start at, stop at)
};

// Largest |a - b| over two activation tables' common keys, relative to each row's largest
// |b|; `missing` counts keys of `want` absent from `got` for `ids`.
double MaxRelativeRowDiff(const std::map<std::pair<std::string, int>, std::vector<float>>& got,
                          const std::string& got_id,
                          const std::map<std::pair<std::string, int>, std::vector<float>>& want,
                          const std::string& want_id, int positions, int* missing);

}  // namespace uc::testing
