// File: llm_engine.h
// -----------------------------------------------------------------------------
// LLMEngine: the serving core (DESIGN.md "One scheduler"). One engine runs on world rank 0 of a
// deployment and drives every rank. Each Step() is schedule -> execute -> update:
//   1. the Scheduler picks this step's sequences and tokens (continuous batching, chunked
//      prefill, preemption by recompute when KV blocks run out);
//   2. the driver broadcasts that SchedulerOutput once to every rank; every rank builds the same
//      batch over its paged KV cache and the last pipeline stage samples;
//   3. the engine appends the sampled ids, detokenizes incrementally, applies EOS / stop ids /
//      stop strings / max_tokens / the context limit, and reports what changed.
//
//   UC_ASSIGN_OR_RETURN(auto engine, LLMEngine::Open({.model_path = "models/stories260K"}));
//   UC_RETURN_IF_ERROR(engine->AddRequest("a", Prompt::Text("Once upon a time"), params));
//   while (engine->HasUnfinished()) for (auto& out : engine->Step()) ...;
//
// The KV cache and the context are sized by PlanKvCache (kv_cache_plan.h: a budget per rank,
// `kv_cache_bytes` or a share of the memory available; the model's context lowered to what it
// holds unless `max_model_len` is given); the block count and the concurrency it allows are
// logged at start-up.
//
// Thread-safety: AddRequest and Abort may be called from any thread (they queue work for the
// next step); Step and the accessors are for the one engine thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "base/status.h"
#include "engine/deployment.h"
#include "engine/generator.h"
#include "engine/scheduling/block_manager.h"
#include "engine/scheduling/kv_cache_plan.h"
#include "engine/scheduling/scheduler.h"
#include "engine/step_observer.h"
#include "kernels/ops.h"
#include "tokenizer/tokenizer.h"
#include "worker/logprobs.h"
#include "worker/sampling_params.h"
#include "worker/steering_config.h"
#include "worker/structured_output.h"

namespace uc::engine {

struct EngineOptions {
  std::filesystem::path model_path;
  std::optional<std::filesystem::path> tokenizer_path;  // default: found beside the model
  int num_threads = 0;  // per rank; 0: the cores available / ranks on this host
  // Context length; 0: the model's max_position_embeddings, lowered to what the KV cache holds
  // (kv_cache_plan.h). A given length the cache cannot hold is an error.
  int max_model_len = 0;
  int max_num_seqs = 64;
  int max_num_batched_tokens = 512;
  int max_prefill_chunk = 256;
  int block_size = kDefaultKvBlockSize;  // KV slots per block
  // KV cache memory per rank; 0: automatic (kv_cache_plan.h). The cache never grows past
  // max_num_seqs full-length sequences.
  int64_t kv_cache_bytes = 0;
  // When > 0: exactly this many KV blocks on every rank, whatever the budget (tests, tuning).
  int num_kv_blocks = 0;
  // How the model is built: matmul precision, control vectors (models::LoadOptions).
  models::LoadOptions load = {};
  // Distinct per-request steering configs running at once at most (SchedulerConfig); requests
  // with another config wait. 0: no limit.
  int max_steering_configs = 16;
  // Automatic prefix caching (scheduler.h, block_manager.h); refused, with a logged reason,
  // when every layer has a sliding window (blocks leave the cache as a sequence grows).
  // Requests keep their records and logprobs: one whose probes may want prompt positions
  // (StepObserver::WantsPromptActivations), or that asks for prompt_logprobs, reads no cached
  // block (it still shares its own); steering enters the blocks' hashes, and a steered request
  // whose steering may switch (a window, a deferred group, or any steering beside an observer,
  // whose probes may switch it) neither reads nor shares.
  bool enable_prefix_caching = true;
  // Multi-rank deployments whose last stage samples (pipeline parallelism): the caller ran
  // PrepareFollower on every other rank before its Loop (serve does), so constrained requests
  // are accepted; without it they are refused (CompileGrammar).
  bool followers_enforce_grammars = false;
};

// How one request is steered: vectors added to its residual stream (worker/steering_config.h).
// Requests with equal configs share one registration on the ranks. Vectors come in groups
// (SteeringVector::group); a group listed as deferred stays off until StartSteering switches it
// on from a position (conditional steering, triggered by a probe), and any group can be
// switched off from a position by StopSteering. Switches are token-exact: they take effect
// from a position the model has not run yet, and survive preemption (positions, not steps).
// A group's positions, from a spec's position selector: [start, stop) counted from position 0
// or from the end of the prompt (generated[a:b] is {true, a, b}); stop unset: open.
struct PositionWindow {
  bool from_prompt_end = false;
  int64_t start = 0;
  std::optional<int64_t> stop;
};

struct RequestSteering {
  std::shared_ptr<const worker::SteeringConfig> config;  // null or empty: none
  std::vector<int> deferred_groups = {};
  // Per group (index = group); missing: every position. A switch stays inside its window.
  std::vector<PositionWindow> windows = {};
  // Replaces the engine's base steering (SetBaseSteering) for this request: the spec steering
  // of the probe set that probes it, in a server with several (probe/runtime/probe_sets.h).
  // Its own `base` is ignored. Null: the engine's base.
  std::shared_ptr<const RequestSteering> base = nullptr;
};

// A prompt as text (tokenized with the model's tokenizer, BOS as it prescribes) or as ids.
struct Prompt {
  std::variant<std::string, std::vector<int32_t>> value;
  static Prompt Text(std::string text) { return {std::move(text)}; }
  static Prompt Ids(std::vector<int32_t> ids) { return {std::move(ids)}; }
};

struct RequestMetrics {
  double arrival_seconds = 0.0;      // engine clock
  double first_token_seconds = 0.0;  // 0 until the first token
  double finish_seconds = 0.0;
  int num_preemptions = 0;
  double time_to_first_token() const {
    return first_token_seconds > 0 ? first_token_seconds - arrival_seconds : 0.0;
  }
};

// What changed for one request in one step.
struct RequestOutput {
  std::string request_id;
  std::vector<int32_t> new_token_ids;  // sampled this step (0 or 1)
  std::string new_text;                // text released this step (complete UTF-8)
  // With SamplingParams::logprobs: one entry per new_token_ids (worker/logprobs.h).
  std::vector<worker::PositionLogprobs> new_logprobs;
  bool finished = false;
  // Set when finished:
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> output_ids;  // every generated id, including a final EOS / stop id
  std::string text;                 // the generated text, without any stop string
  FinishReason finish_reason = FinishReason::kLength;
  std::string stop_reason;  // "eos", "stop_token:<id>", "stop:<string>", "max_tokens", ...
  std::optional<AbortInfo> abort;
  RequestMetrics metrics;
  int num_cached_tokens = 0;  // prompt tokens served from the prefix cache
  // With SamplingParams::logprobs: one per output id. cumulative_logprob sums their chosen
  // logprobs (0 without).
  std::vector<worker::PositionLogprobs> logprobs;
  double cumulative_logprob = 0.0;
  // With SamplingParams::prompt_logprobs: one per prompt id, the first unset (nothing
  // predicts it). Also set in the output of the first token.
  std::vector<std::optional<worker::PositionLogprobs>> prompt_logprobs;
};

struct EngineStats {
  int num_running = 0;
  int num_waiting = 0;
  int num_kv_blocks = 0;
  int num_free_kv_blocks = 0;
  int64_t num_preemptions = 0;
  int64_t num_steps = 0;
  int64_t prompt_tokens_computed = 0;  // including recomputation
  int64_t generated_tokens = 0;
  int num_steering_configs = 0;      // distinct steering configs registered on the ranks
  int num_held = 0;                  // requests held by the observer (a probe escalated)
  bool prefix_caching = false;       // on (EngineOptions::enable_prefix_caching, and allowed)
  int64_t prefix_cache_queries = 0;  // tokens of admissions that could read the prefix cache
  int64_t prefix_cache_hits = 0;     // of those, tokens served from it
};

// A follower rank (any but the driver) of a multi-rank deployment, before
// deployment->worker().Loop(): gives its worker the grammar backend the driver's engine builds
// (the tokenizer's vocabulary and the stop ids), so that under pipeline parallelism the last
// stage, which samples, enforces constrained requests' grammars. Errors: the tokenizer does not
// load or does not fit the model.
Status PrepareFollower(Deployment& deployment, const EngineOptions& options);

class LLMEngine {
 public:
  // One process: loads the model and its tokenizer.
  static StatusOr<std::unique_ptr<LLMEngine>> Open(const EngineOptions& options);
  // The driver (world rank 0) of a multi-rank deployment; the other ranks run
  // deployment->worker().Loop(). Takes ownership of the deployment.
  static StatusOr<std::unique_ptr<LLMEngine>> OpenDriver(const EngineOptions& options,
                                                         std::unique_ptr<Deployment> deployment);
  ~LLMEngine();  // shuts the ranks down

  // Validates and queues a request. InvalidArgument (nothing queued, nothing else disturbed)
  // when the id is empty or in use, the prompt has no tokens, an id is outside the vocabulary,
  // the prompt leaves no room to generate within max_model_len, or a sampling parameter is
  // impossible (the message names the field).
  // With `steering`, also InvalidArgument when a vector does not fit the model
  // (SteeringConfig::Validate, field "steering").
  Status AddRequest(const std::string& request_id, const Prompt& prompt,
                    const worker::SamplingParams& params, const RequestSteering& steering = {});
  // Steering every request gets before its own (a spec's `steering:` entries): its vectors come
  // first, keep their groups and deferred groups; a request's own vectors join as one more
  // group, always on. Call before the first AddRequest. InvalidArgument when it does not fit
  // the model.
  Status SetBaseSteering(RequestSteering base);
  // Engine thread (a StepObserver's callbacks): switches vector group `group` of sequence
  // `seq_id` on for positions >= `position` (StartSteering; only a deferred group that is still
  // off) or off for positions >= `position` (StopSteering; once). False when nothing changed
  // (unknown sequence, no such group, already switched).
  bool StartSteering(uint64_t seq_id, int group, int32_t position);
  bool StopSteering(uint64_t seq_id, int group, int32_t position);
  // Ends a request at the next step (waiting, running or preempted); its final output has
  // finish_reason kAbort and `abort` set. False when the id is unknown or already finished.
  bool Abort(const std::string& request_id, AbortInfo info = AbortInfo("client", "aborted"));

  // Structured output (worker/structured_output.h): compiles `spec` against the model's
  // vocabulary (cached by content; AddRequest compiles a request's grammar the same way), so a
  // server can refuse a bad grammar before queuing anything. InvalidArgument (the grammar
  // engine's message) for an invalid or unsupported schema, regex or grammar;
  // FailedPrecondition when this deployment samples on a rank other than the driver (pipeline
  // parallelism) and the followers were not prepared (followers_enforce_grammars). Thread-safe.
  StatusOr<std::shared_ptr<const worker::CompiledGrammar>> CompileGrammar(
      const worker::GrammarSpec& spec) const;

  // Installs the probing layer (may be null) and gives it the engine's wake-up
  // (StepObserver::SetWakeup; the previous observer's is cleared). Call before the first
  // AddRequest; the observer must outlive the engine's last Step.
  void SetObserver(StepObserver* observer);

  // Called at the end of every Step that ran the model or returned outputs, on the engine
  // thread, with the stats after it, its wall time and its outputs (metrics, progress).
  using StepListener = std::function<void(const EngineStats& stats, double step_seconds,
                                          const std::vector<RequestOutput>& outputs)>;
  void SetStepListener(StepListener listener) { step_listener_ = std::move(listener); }

  // One schedule -> execute -> update step. Returns the outputs of requests that produced a
  // token or finished (aborted ones included). When every live request is held by the observer
  // (StepObserver::TakeHolds), it waits — at most kHoldPollInterval, less when a hold decision,
  // a request or an abort arrives — and returns nothing, so a caller looping on
  // HasUnfinished() neither spins nor exits while requests are held.
  std::vector<RequestOutput> Step();
  static constexpr std::chrono::milliseconds kHoldPollInterval{100};
  // Wakes a Step waiting on held requests (any thread).
  void Wake();
  // True while any request is queued, running, waiting or held.
  bool HasUnfinished() const;

  EngineStats stats() const;
  const Scheduler& scheduler() const { return *scheduler_; }
  const tokenizer::Tokenizer& tokenizer() const { return *tokenizer_; }
  const models::ModelConfig& config() const { return deployment_->checkpoint().config; }
  Deployment& deployment() { return *deployment_; }
  // The context every request gets (EngineOptions::max_model_len, or the fitted one).
  int max_model_len() const { return max_model_len_; }
  // The bytes this engine's KV cache reserved (its blocks, per rank) and the budget they were
  // cut from (kv_cache_plan.h).
  int64_t kv_cache_bytes() const { return kv_reservation_.bytes(); }
  int64_t kv_budget_bytes() const { return kv_budget_bytes_; }
  // The ids that end a request unless ignore_eos: the model's EOS ids and the tokenizer's.
  const std::vector<int32_t>& eos_token_ids() const { return eos_ids_; }
  const EngineOptions& options() const { return options_; }

 private:
  struct RequestState;
  LLMEngine() = default;
  Status Init(const EngineOptions& options);
  Status InitKvCache();
  StatusOr<std::vector<int32_t>> Tokenize(const Prompt& prompt) const;
  std::vector<RequestOutput> StepOnce();
  void DrainInbox(std::vector<RequestOutput>& outputs);
  // Holding (StepObserver::TakeHolds / TakeHoldDecisions).
  void ApplyHoldDecisions(std::vector<RequestOutput>& outputs);
  void WaitWhileHeld();
  // Applies one sampled token (with its logprobs when the request asked); true when the
  // request finished.
  bool ProcessToken(RequestState& r, int32_t token, RequestOutput& out,
                    const worker::PositionLogprobs* logprobs = nullptr);
  // Sets each scheduled sequence's logprob fields from its request (before execution), and
  // files the prompt logprobs a step returned.
  void AttachLogprobs(worker::SchedulerOutput& plan) const;
  // How a request uses the prefix cache (EngineOptions::enable_prefix_caching).
  PrefixCacheUse PrefixCacheUseOf(const RequestState& r) const;
  void StorePromptLogprobs(const worker::SequenceLogprobs& lp);
  // Stops `r` because `info` says so (a probe or a client), dropping nothing already returned.
  void AbortRequest(RequestState& r, AbortInfo info, RequestOutput& out);
  void FinishRequest(RequestState& r, RequestOutput& out);
  double Now() const;
  // Steering registry (engine thread): configs by content, shared by the requests using them.
  uint32_t InternSteering(const std::string& bytes);
  void ReleaseSteering(uint32_t id);
  // The request's merged config (base + own), and per group its window and whether deferred.
  struct PreparedSteering {
    std::string bytes;  // empty: no steering
    std::vector<PositionWindow> windows;
    std::vector<bool> deferred;
  };
  Status PrepareSteering(const RequestSteering& steering, PreparedSteering* out) const;
  void InitSteeringWindows(const PreparedSteering& prepared, int prompt_len, RequestState& r) const;
  // Fills plan's steering positions, registrations and drops.
  void AttachSteering(worker::SchedulerOutput& plan);

  EngineOptions options_;
  std::unique_ptr<Deployment> deployment_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::unique_ptr<BlockManager> blocks_;
  std::unique_ptr<Scheduler> scheduler_;
  int max_model_len_ = 0;
  // This engine's cache in the process-wide account (kv_cache_plan.h), and its budget.
  KvCacheReservation kv_reservation_;
  int64_t kv_budget_bytes_ = 0;
  std::vector<int32_t> eos_ids_;
  std::shared_ptr<worker::GrammarBackend> grammar_backend_;  // null: structured output refused
  std::chrono::steady_clock::time_point start_;

  // What a Step idling on held requests waits on. Shared with the observer's wake-up, which
  // may outlive the engine (a classifier answering late).
  struct WakeChannel {
    std::mutex mu;
    std::condition_variable cv;
    bool woken = false;  // set by Wake, AddRequest, Abort; cleared by the wait
    void Wake() {
      {
        std::lock_guard<std::mutex> lock(mu);
        woken = true;
      }
      cv.notify_all();
    }
  };
  std::shared_ptr<WakeChannel> wake_ = std::make_shared<WakeChannel>();

  mutable std::mutex inbox_mu_;  // guards the three fields below
  std::deque<std::unique_ptr<RequestState>> new_requests_;
  std::vector<std::pair<std::string, AbortInfo>> aborts_;
  std::unordered_map<std::string, uint64_t> ids_in_use_;  // request id -> seq id, until finished

  std::unordered_map<uint64_t, std::unique_ptr<RequestState>> requests_;  // engine thread
  uint64_t next_seq_id_ = 1;
  EngineStats stats_;
  // Registered configs by id (looked up every step, so never by their bytes, which can be
  // hundreds of kilobytes), and the id of each content (looked up once per request).
  struct SteeringSlot {
    std::string bytes;
    int refs = 0;
    bool sent = false;  // registered on the ranks
  };
  std::unordered_map<uint32_t, SteeringSlot> steering_by_id_;
  std::unordered_map<std::string, uint32_t> steering_id_by_bytes_;
  std::vector<uint32_t> steering_drops_;  // for the next plan
  uint32_t next_steering_id_ = 1;
  RequestSteering base_steering_;
  StepObserver* observer_ = nullptr;
  StepListener step_listener_;
};

}  // namespace uc::engine
