// File: worker.h
// -----------------------------------------------------------------------------
// Worker: one per rank (nano-vllm's ModelRunner loop). World rank 0 is the driver: it decides
// every step, broadcasts one StepCommand to all ranks, runs its own part, and collects the
// result (a sampled token or logits) from the last pipeline stage's TP rank 0. Every other rank
// runs Loop(): receive the command, run its stage (receiving the previous stage's
// IntermediateTensors, sending its own to the next), and, on the last stage, sample or return
// logits to the driver. With one process there is no communication at all.
//
// Each step ends with an acknowledgement from every rank to the driver, so the driver knows
// the step completed everywhere; a rank that stays silent past the step timeout is named
// (rank, pipeline stage, TP rank, host) and the job is aborted (MPI_Abort) — a hang becomes an
// error within seconds. Idle ranks wait with polling and backoff, not a spinning MPI wait.
//
// Thread-compatible: one thread drives a Worker.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "distributed/parallel_state.h"
#include "models/llama_model.h"
#include "worker/sampler.h"
#include "worker/sampling_params.h"

namespace uc::worker {

// What rank 0 asks of every rank for one step.
struct StepCommand {
  enum class Kind : uint8_t { kStartSequence = 1, kForward = 2, kShutdown = 3 };
  // kNone: a prefill chunk that is not the last; nothing comes back.
  enum class Output : uint8_t { kSample = 0, kLastLogits = 1, kAllLogits = 2, kNone = 3 };
  Kind kind = Kind::kForward;
  // kStartSequence: KV capacity of the new sequence and how its tokens are sampled.
  int32_t capacity = 0;
  SamplingParams params;
  // kForward: the tokens to run and what to return.
  std::vector<int32_t> ids;        // [m]
  std::vector<int32_t> positions;  // [m]
  Output output = Output::kSample;

  std::string Serialize() const;
  static StatusOr<StepCommand> Parse(const std::string& bytes);
};

struct StepResult {
  int32_t token = -1;  // kSample
  Tensor logits;       // kLastLogits: [1, vocab_size]; kAllLogits: [m, vocab_size]
};

// Where one rank sits, as reported to the driver at start-up.
struct RankInfo {
  int rank = 0;
  int tp_rank = 0;
  int pp_rank = 0;
  int layer_start = 0;
  int layer_end = 0;
  std::string host;
  std::string Describe() const;  // "rank 3 (pp stage 1, tp rank 1, host h, layers [2, 5))"
};

class Worker {
 public:
  // `model` is this rank's part; `state` its groups; both outlive the Worker.
  // `step_timeout_seconds` bounds how long the driver waits for any rank within a step.
  Worker(models::CausalLM* model, distributed::ParallelState* state, ThreadPool* pool,
         std::vector<RankInfo> ranks, double step_timeout_seconds);

  bool is_driver() const;
  const std::vector<RankInfo>& ranks() const { return ranks_; }
  const models::CausalLM& model() const { return *model_; }

  // Driver only: sends `command` to every rank, runs this rank's part and returns the result.
  StepResult Run(const StepCommand& command);
  // Non-driver ranks: executes commands until kShutdown.
  void Loop();
  // Driver only: ends every rank's Loop(). Idempotent.
  void Shutdown();

 private:
  // This rank's part of a step; the last stage's TP rank 0 returns the result.
  std::optional<StepResult> Execute(const StepCommand& command);
  void Forward(const StepCommand& command, StepResult& result, bool& has_result);
  void WatchStep(distributed::GroupCoordinator& group, int waiting_for);
  bool is_result_rank() const;

  models::CausalLM* model_;
  distributed::ParallelState* state_;
  ThreadPool* pool_;
  std::vector<RankInfo> ranks_;
  double step_timeout_seconds_;
  int result_rank_ = 0;  // world rank of the last stage's TP rank 0
  models::KvCache cache_;
  std::unique_ptr<Sampler> sampler_;
  int64_t step_ = 0;
  bool shut_down_ = false;
};

}  // namespace uc::worker
