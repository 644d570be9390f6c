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
#include <unordered_map>
#include <vector>

#include "base/thread_pool.h"
#include "distributed/parallel_state.h"
#include "models/llama_model.h"
#include "worker/logprobs.h"
#include "worker/sampler.h"
#include "worker/sampling_params.h"
#include "worker/scheduler_output.h"
#include "worker/steering_config.h"
#include "worker/structured_output.h"

namespace uc::worker {

// What rank 0 asks of every rank for one step.
struct StepCommand {
  enum class Kind : uint8_t {
    kStartSequence = 1,  // one contiguous sequence (Generator)
    kForward = 2,
    kShutdown = 3,
    kInitCache = 4,  // the paged KV cache for the engine: num_blocks of block_size slots
    kExecute = 5,    // one engine step: `payload` is a serialized SchedulerOutput
  };
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
  // kInitCache.
  int32_t num_blocks = 0;
  int32_t block_size = 0;
  // kExecute.
  std::string payload;

  std::string Serialize() const;
  static StatusOr<StepCommand> Parse(const std::string& bytes);
};

struct StepResult {
  std::vector<int32_t> tokens;  // kExecute: one per sampled sequence, in batch order
  // kExecute, driver: one tensor per SchedulerOutput::capture item, [rows, SiteWidth] F32,
  // gathered from the rank that owns the item's layer.
  std::vector<Tensor> captured;
  // kExecute: SerializeLogprobs of the sequences that wanted logprobs (set on the last stage
  // and, after the transfer, on the driver).
  std::string logprobs;
  bool has_logprobs = false;
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
  // Driver only: allocates the engine's paged KV cache (num_blocks × block_size slots of the
  // owned layers) on every rank. Replaces any earlier one.
  void InitializeCache(int num_blocks, int block_size);
  // Driver only: one engine step. Broadcasts `output` to every rank; each rank builds the same
  // batch (the scheduled sequences' tokens concatenated in order), runs its stage over the
  // paged cache, and drops the state of output.finished_seq_ids. Returns the sampled ids, one per
  // sequence with `sample` set, in batch order (sampled on the last stage with each sequence's
  // own sampler, so a seed gives the same tokens whatever the batch).
  // Activations the output's capture items asked for come back in `captured` (one tensor per
  // item); with compare_tp_replicas every TP replica is checked bit for bit and a difference
  // is a fatal error naming the layer and ranks.
  // With `logprobs`, it receives the logprobs the sequences asked for (ScheduledSequence::
  // num_logprobs / num_prompt_logprobs), one entry per such sequence in batch order.
  std::vector<int32_t> ExecuteModel(const SchedulerOutput& output,
                                    std::vector<Tensor>* captured = nullptr,
                                    std::vector<SequenceLogprobs>* logprobs = nullptr);
  // Structured output (structured_output.h): the backend that compiles the grammars of
  // sequences whose SamplingParams carry one. Set on the rank that samples (the driver when
  // samples_on_driver()); a constrained sequence on a rank without it is a fatal error, so the
  // engine refuses such requests up front.
  void SetGrammarBackend(std::shared_ptr<GrammarBackend> backend) {
    grammar_backend_ = std::move(backend);
  }
  // The driver is the rank that samples (one stage: TP rank 0 of the only stage).
  bool samples_on_driver() const { return result_rank_ == 0; }
  // The engine's paged cache on this rank (empty before InitializeCache).
  const models::KvCache& paged_cache() const { return paged_cache_; }

  // Non-driver ranks: executes commands until kShutdown.
  void Loop();
  // Driver only: ends every rank's Loop(). Idempotent.
  void Shutdown();

 private:
  // This rank's part of a step; the last stage's TP rank 0 returns the result.
  std::optional<StepResult> Execute(const StepCommand& command);
  void Forward(const StepCommand& command, StepResult& result, bool& has_result);
  void ExecuteBatch(const SchedulerOutput& output, StepResult& result, bool& has_result);
  // Result rank: the matcher of a sequence whose parameters carry `spec`.
  void StartConstraint(uint64_t seq_id, const GrammarSpec& spec);
  // The previous stage's tensors (or nothing on the first stage); sends ours to the next.
  void RecvFromPreviousStage(models::IntermediateTensors& input);
  void SendToNextStage(const models::IntermediateTensors& output);
  void WatchStep(distributed::GroupCoordinator& group, int waiting_for);
  bool is_result_rank() const;
  // World ranks that capture `item` (TP rank 0 of the owning stage first; every TP rank of
  // that stage when `all_tp`).
  std::vector<int> CaptureRanks(const CaptureItem& item, bool all_tp) const;
  // Driver: receives the other ranks' captures of `output` into result.captured.
  void GatherCaptures(const SchedulerOutput& output, StepResult& result);
  // Applies output's steering registrations and drops; returns the batch's per-row steering
  // (rows follow the batch order of output.scheduled).
  models::BatchSteering BuildSteering(const SchedulerOutput& output);
  // Non-driver ranks: sends this rank's captured items (plan order) to the driver.
  static void SendCaptures(const StepResult& result, distributed::ProcessGroup& pg);
  // Driver-side copy of the last kExecute output (so Run can gather its captures).
  const SchedulerOutput* executing_ = nullptr;

  models::CausalLM* model_;
  distributed::ParallelState* state_;
  ThreadPool* pool_;
  std::vector<RankInfo> ranks_;
  double step_timeout_seconds_;
  int result_rank_ = 0;  // world rank of the last stage's TP rank 0
  models::KvCache cache_;
  std::unique_ptr<Sampler> sampler_;
  models::KvCache paged_cache_;
  std::unordered_map<uint64_t, std::unique_ptr<Sampler>> samplers_;  // result rank only
  // Structured output, result rank only: a matcher per constrained sequence.
  std::shared_ptr<GrammarBackend> grammar_backend_;
  std::unordered_map<uint64_t, std::unique_ptr<GrammarConstraint>> constraints_;
  // Registered steering configs by id, with 1/‖vector‖ per vector (for norm matching).
  struct RegisteredSteering {
    SteeringConfig config;
    std::vector<float> inv_norms;
  };
  std::unordered_map<uint32_t, RegisteredSteering> steering_;
  int64_t step_ = 0;
  bool shut_down_ = false;
};

}  // namespace uc::worker
