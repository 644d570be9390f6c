// File: batching_workload.h
// -----------------------------------------------------------------------------
// The continuous-batching workload shared by the engine's integration and multi-process tests:
// many requests of mixed prompt lengths (several longer than a prefill chunk), mixed output
// lengths, greedy and seeded sampling, stop strings — and its oracle, each request run alone
// through the one-request Generator.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "engine/generator.h"
#include "engine/llm.h"
#include "engine/step_observer.h"
#include "models/forward_hooks.h"

namespace uc::testing {

// `n` requests for the bundled stories260K model.
std::vector<engine::GenerateRequest> BatchingWorkload(int n);

// Each request alone, in order, through `solo` (text prompts tokenized the same way).
std::map<std::string, engine::GenerationResult> RunAlone(
    engine::Generator& solo, const std::vector<engine::GenerateRequest>& requests);

// Expects every batched result to equal the request run alone: the same generated ids, text
// and finish reason.
void ExpectSameAsAlone(const std::vector<engine::GenerateResult>& batched,
                       const std::map<std::string, engine::GenerationResult>& alone);

// Records every row the engine computes at `taps` (concatenated per row) by (request id,
// position). A position computed twice (recompute after preemption) must give the same bits;
// `recompute_mismatches` counts those that did not.
class ActivationRecorder : public engine::StepObserver {
 public:
  using Rows = std::map<std::pair<std::string, int>, std::vector<float>>;
  explicit ActivationRecorder(std::vector<models::TapPoint> taps) : taps_(std::move(taps)) {}
  // Each block's attn_out, mlp_out and residual stream, and the final norm (the LM head's input,
  // so equal bits there mean equal logits from a batch-invariant LM head).
  static std::vector<models::TapPoint> AllTaps(int num_layers);

  void OnRequestAdded(uint64_t seq_id, const std::string& request_id,
                      std::span<const int32_t>) override {
    names_[seq_id] = request_id;
  }
  std::vector<worker::CaptureItem> PlanCapture(const worker::SchedulerOutput& plan) override;
  std::vector<engine::StopRequest> OnStepExecuted(const worker::SchedulerOutput& plan,
                                                  const std::vector<Tensor>& captured) override;
  bool WantsFinalToken(uint64_t, int64_t) override { return false; }
  void OnRequestFinished(uint64_t, int64_t, bool) override {}

  Rows rows;
  int recompute_mismatches = 0;

 private:
  std::vector<models::TapPoint> taps_;
  std::map<uint64_t, std::string> names_;
};

// Rows of `want` compared bit for bit with `got`'s (positions `got` lacks count as missing).
struct BitComparison {
  int compared = 0;
  int differing = 0;
  int missing = 0;
  std::string first_difference;  // "id@position", or empty
};
BitComparison CompareBits(const ActivationRecorder::Rows& got,
                          const ActivationRecorder::Rows& want);

// What RunRecorded saw: the results in request order, every tap's rows (AllTaps), and the
// preemptions during the run.
struct RecordedRun {
  std::vector<engine::GenerateResult> results;
  ActivationRecorder::Rows rows;
  int recompute_mismatches = 0;
  int64_t preemptions = 0;
};

// `requests` through `llm`, recording every tap: all at once (together) or one Generate call
// each (alone).
RecordedRun RunRecorded(engine::LLM& llm, const std::vector<engine::GenerateRequest>& requests,
                        bool together);

// Expects the same ids request by request, and every row of `want` present in `got` with the
// same bits (and no recomputed row that changed).
void ExpectSameBits(const RecordedRun& got, const RecordedRun& want, const std::string& what);

}  // namespace uc::testing
