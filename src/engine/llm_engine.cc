#include "engine/llm_engine.h"

#include <algorithm>
#include <limits>

#include "base/fingerprint.h"
#include "base/logging.h"
#include "engine/scheduling/kv_cache_plan.h"
#include "engine/stop_matcher.h"
#include "tokenizer/incremental_decoder.h"

namespace uc::engine {
namespace {

bool IsOneOf(const std::vector<int32_t>& ids, int32_t id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

// The ids that end a request: the model's EOS ids, then the tokenizer's stop tokens.
std::vector<int32_t> StopIdsOf(const models::ModelConfig& config,
                               const tokenizer::Tokenizer& tokenizer) {
  std::vector<int32_t> ids;
  for (int id : config.eos_token_ids) ids.push_back(id);
  for (int32_t id : tokenizer.stop_ids()) ids.push_back(id);
  return ids;
}

// The grammar backend over the tokenizer's vocabulary (the same on every rank that builds it).
std::shared_ptr<worker::GrammarBackend> MakeGrammarBackend(const tokenizer::Tokenizer& tokenizer,
                                                           const models::ModelConfig& config,
                                                           std::vector<int32_t> stop_ids) {
  std::vector<std::string> vocab(static_cast<size_t>(tokenizer.vocab_size()));
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) vocab[id] = tokenizer.DecodedBytes(id);
  return std::make_shared<worker::GrammarBackend>(
      std::move(vocab), static_cast<int>(config.vocab_size), std::move(stop_ids));
}

}  // namespace

// Everything the driver keeps about one request between AddRequest and its final output.
struct LLMEngine::RequestState {
  std::string id;
  uint64_t seq_id = 0;
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> output_ids;
  worker::SamplingParams params;
  int budget = 0;  // tokens it may generate: max_tokens, capped by the context
  std::unique_ptr<tokenizer::IncrementalDecoder> decoder;
  std::unique_ptr<StopMatcher> stops;
  FinishReason finish_reason = FinishReason::kLength;
  std::string stop_reason;
  std::optional<AbortInfo> abort;
  RequestMetrics metrics;
  bool final_feed = false;     // done; its last token runs through the model once more
  std::string steering_bytes;  // serialized config; empty: none
  uint32_t steering_id = 0;    // registry id once drained
  // Per group: [from, until) flattened (ScheduledSequence::steering_windows); empty: all on.
  std::vector<int32_t> steering_windows;
  // Per group: the selector's bounds [lo, hi) flattened, and switch state (bit 0 deferred,
  // bit 1 started, bit 2 stopped).
  std::vector<int32_t> steering_bounds;
  std::vector<uint8_t> steering_state;
  bool held = false;                  // the observer holds it (TakeHolds)
  std::optional<int32_t> held_token;  // sampled in the step it was held in; not yet returned
  std::optional<worker::PositionLogprobs> held_logprobs;  // held_token's
  std::vector<worker::PositionLogprobs> logprobs;         // per output id, when asked
  double cumulative_logprob = 0.0;
  // Per prompt position when asked ([0] stays unset); filled once (a recompute after
  // preemption gives the same values and is ignored).
  std::vector<std::optional<worker::PositionLogprobs>> prompt_logprobs;
  int prompt_logprobs_filled = 0;  // positions 1 .. this are filled
};

StatusOr<std::unique_ptr<LLMEngine>> LLMEngine::Open(const EngineOptions& options) {
  DeploymentOptions deployment_options;
  deployment_options.model_path = options.model_path;
  deployment_options.num_threads = options.num_threads;
  deployment_options.load = options.load;
  UC_ASSIGN_OR_RETURN(std::unique_ptr<Deployment> deployment,
                      Deployment::Create(deployment_options));
  return OpenDriver(options, std::move(deployment));
}

StatusOr<std::unique_ptr<LLMEngine>> LLMEngine::OpenDriver(const EngineOptions& options,
                                                           std::unique_ptr<Deployment> deployment) {
  UC_CHECK(deployment != nullptr && deployment->is_driver(), "OpenDriver needs rank 0");
  std::unique_ptr<LLMEngine> engine(new LLMEngine());
  engine->deployment_ = std::move(deployment);
  const Status status = engine->Init(options);
  if (!status.ok()) {
    engine->deployment_->worker().Shutdown();
    return status;
  }
  return engine;
}

LLMEngine::~LLMEngine() {
  if (deployment_ != nullptr) deployment_->worker().Shutdown();
}

Status LLMEngine::Init(const EngineOptions& options) {
  options_ = options;
  start_ = std::chrono::steady_clock::now();
  for (const auto& [name, value] : {std::pair{"max_num_seqs", options.max_num_seqs},
                                    {"max_num_batched_tokens", options.max_num_batched_tokens},
                                    {"max_prefill_chunk", options.max_prefill_chunk},
                                    {"block_size", options.block_size}}) {
    if (value < 1) {
      return InvalidArgumentError(std::string(name) + " must be >= 1, got " +
                                  std::to_string(value));
    }
  }
  if (options.max_steering_configs < 0) {
    return InvalidArgumentError("max_steering_configs must be >= 0 (0: no limit), got " +
                                std::to_string(options.max_steering_configs));
  }
  UC_ASSIGN_OR_RETURN(tokenizer_,
                      LoadTokenizerFor(deployment_->checkpoint(), options.tokenizer_path));
  UC_RETURN_IF_ERROR(CheckTokenizerFits(*tokenizer_, config(), options.model_path));
  eos_ids_ = StopIdsOf(config(), *tokenizer_);
  // The driver's backend validates requests' grammars; when the driver samples it also holds
  // their matchers. Otherwise (pipeline parallelism) the last stage samples, with the backend
  // PrepareFollower gave it.
  grammar_backend_ = MakeGrammarBackend(*tokenizer_, config(), eos_ids_);
  if (deployment_->worker().samples_on_driver()) {
    deployment_->worker().SetGrammarBackend(grammar_backend_);
  }
  return InitKvCache();
}

Status PrepareFollower(Deployment& deployment, const EngineOptions& options) {
  UC_CHECK(!deployment.is_driver(), "PrepareFollower is for the ranks other than the driver");
  UC_ASSIGN_OR_RETURN(std::unique_ptr<tokenizer::Tokenizer> tokenizer,
                      LoadTokenizerFor(deployment.checkpoint(), options.tokenizer_path));
  const models::ModelConfig& config = deployment.checkpoint().config;
  UC_RETURN_IF_ERROR(CheckTokenizerFits(*tokenizer, config, options.model_path));
  // Every follower gets one (cheap until its first compile); only the rank that samples uses it.
  deployment.worker().SetGrammarBackend(
      MakeGrammarBackend(*tokenizer, config, StopIdsOf(config, *tokenizer)));
  return OkStatus();
}

// Sizes the paged cache and the context (kv_cache_plan.h: the policy every command shares).
Status LLMEngine::InitKvCache() {
  KvCacheRequest request;
  request.max_model_len = options_.max_model_len;
  request.kv_cache_bytes = options_.kv_cache_bytes;
  request.num_kv_blocks = options_.num_kv_blocks;
  request.block_size = options_.block_size;
  request.max_num_seqs = options_.max_num_seqs;
  request.max_chunk = std::min(options_.max_prefill_chunk, options_.max_num_batched_tokens);
  UC_ASSIGN_OR_RETURN(const KvCachePlan plan, PlanKvCacheFor(*deployment_, request));
  if (plan.fitted) {
    UC_LOG(WARNING) << plan.note;
  }
  max_model_len_ = plan.max_model_len;
  const int bs = options_.block_size;
  deployment_->worker().InitializeCache(static_cast<int>(plan.num_blocks), bs);
  kv_reservation_ = KvCacheReservation(plan.num_blocks * plan.block_bytes);
  kv_budget_bytes_ = plan.budget_bytes;
  blocks_ = std::make_unique<BlockManager>(static_cast<int>(plan.num_blocks), bs);
  SchedulerConfig sc;
  sc.max_num_seqs = options_.max_num_seqs;
  sc.max_num_batched_tokens = options_.max_num_batched_tokens;
  sc.max_prefill_chunk = options_.max_prefill_chunk;
  sc.max_model_len = max_model_len_;
  sc.sliding_window = config().MaxWindow();
  sc.max_steering_configs = options_.max_steering_configs;
  sc.enable_prefix_caching = options_.enable_prefix_caching && sc.sliding_window == 0;
  if (options_.enable_prefix_caching && !sc.enable_prefix_caching) {
    UC_LOG(WARNING) << "prefix caching is off: every layer of this model has a sliding window "
                       "of "
                    << sc.sliding_window << " tokens, so a prompt's blocks leave the cache";
  }
  scheduler_ = std::make_unique<Scheduler>(sc, blocks_.get());
  UC_LOG(INFO) << plan.Describe();
  return OkStatus();
}

double LLMEngine::Now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

StatusOr<std::vector<int32_t>> LLMEngine::Tokenize(const Prompt& prompt) const {
  if (const auto* text = std::get_if<std::string>(&prompt.value)) {
    return tokenizer_->Encode(*text, tokenizer_->add_bos_token(), /*parse_special=*/true);
  }
  return std::get<std::vector<int32_t>>(prompt.value);
}

Status LLMEngine::AddRequest(const std::string& request_id, const Prompt& prompt,
                             const worker::SamplingParams& params,
                             const RequestSteering& steering) {
  if (request_id.empty()) return InvalidArgumentError("request id must not be empty");
  PreparedSteering prepared;
  UC_RETURN_IF_ERROR(PrepareSteering(steering, &prepared).Annotate("request '" + request_id + "'"));
  UC_RETURN_IF_ERROR(params.Validate().Annotate("request '" + request_id + "'"));
  if (params.max_tokens < 1) {
    return InvalidArgumentError("request '" + request_id + "': max_tokens must be >= 1, got " +
                                std::to_string(params.max_tokens));
  }
  for (int32_t id : params.stop_token_ids) {
    if (id < 0 || id >= config().vocab_size) {
      return InvalidArgumentError("request '" + request_id + "': stop_token_ids has " +
                                  std::to_string(id) + ", outside the vocabulary [0, " +
                                  std::to_string(config().vocab_size) + ")");
    }
  }
  if (params.grammar.active()) {
    UC_RETURN_IF_ERROR(
        CompileGrammar(params.grammar).status().Annotate("request '" + request_id + "'"));
  }
  UC_ASSIGN_OR_RETURN(std::vector<int32_t> ids, Tokenize(prompt));
  if (ids.empty()) {
    return InvalidArgumentError("request '" + request_id +
                                "': the prompt has no tokens (this tokenizer adds no BOS)");
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= config().vocab_size) {
      return InvalidArgumentError("request '" + request_id + "': prompt token " +
                                  std::to_string(i) + " has id " + std::to_string(ids[i]) +
                                  ", outside the vocabulary [0, " +
                                  std::to_string(config().vocab_size) + ")");
    }
  }
  const int prompt_len = static_cast<int>(ids.size());
  if (prompt_len >= max_model_len_) {
    return InvalidArgumentError(
        "request '" + request_id + "': the prompt has " + std::to_string(prompt_len) +
        " tokens; the context (max_model_len) is " + std::to_string(max_model_len_) +
        ", which leaves no room to generate");
  }
  auto r = std::make_unique<RequestState>();
  r->id = request_id;
  r->prompt_ids = std::move(ids);
  r->params = params;
  r->budget = std::min(params.max_tokens, max_model_len_ - prompt_len);
  r->stop_reason = r->budget < params.max_tokens ? "max_model_len" : "max_tokens";
  const bool at_start = prompt_len == 1 && r->prompt_ids[0] == tokenizer_->bos_id();
  r->decoder = std::make_unique<tokenizer::IncrementalDecoder>(*tokenizer_, at_start);
  r->stops = std::make_unique<StopMatcher>(params.stop);
  r->metrics.arrival_seconds = Now();
  if (params.prompt_logprobs.has_value()) r->prompt_logprobs.resize(r->prompt_ids.size());
  r->steering_bytes = std::move(prepared.bytes);
  if (!r->steering_bytes.empty()) InitSteeringWindows(prepared, prompt_len, *r);
  std::lock_guard<std::mutex> lock(inbox_mu_);
  if (ids_in_use_.count(request_id) != 0) {
    return InvalidArgumentError("request id '" + request_id + "' is already in use");
  }
  r->seq_id = next_seq_id_++;
  ids_in_use_[request_id] = r->seq_id;
  new_requests_.push_back(std::move(r));
  wake_->Wake();
  return OkStatus();
}

StatusOr<std::shared_ptr<const worker::CompiledGrammar>> LLMEngine::CompileGrammar(
    const worker::GrammarSpec& spec) const {
  if (!deployment_->worker().samples_on_driver() && !options_.followers_enforce_grammars) {
    // The last pipeline stage samples, and its rank holds no grammar matcher.
    return FailedPreconditionError(
        "constrained sampling is unavailable here: under pipeline parallelism the last stage "
        "samples each token, and this deployment's ranks were not started with the grammar "
        "backend (undercurrent serve starts them so; other front ends do not yet)");
  }
  return grammar_backend_->Compile(spec);
}

bool LLMEngine::Abort(const std::string& request_id, AbortInfo info) {
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    if (ids_in_use_.count(request_id) == 0) return false;
    aborts_.emplace_back(request_id, std::move(info));
  }
  wake_->Wake();
  return true;
}

void LLMEngine::SetObserver(StepObserver* observer) {
  if (observer_ != nullptr && observer_ != observer) observer_->SetWakeup(nullptr);
  observer_ = observer;
  if (observer_ != nullptr) observer_->SetWakeup([wake = wake_] { wake->Wake(); });
}

void LLMEngine::Wake() { wake_->Wake(); }

void LLMEngine::WaitWhileHeld() {
  std::unique_lock<std::mutex> lock(wake_->mu);
  wake_->cv.wait_for(lock, kHoldPollInterval, [this] { return wake_->woken; });
  wake_->woken = false;
}

// Decisions about held requests: a release returns the withheld token (and generation goes
// on); a stop aborts the request, dropping it.
void LLMEngine::ApplyHoldDecisions(std::vector<RequestOutput>& outputs) {
  if (observer_ == nullptr) return;
  for (HoldDecision& d : observer_->TakeHoldDecisions()) {
    auto it = requests_.find(d.seq_id);
    if (it == requests_.end() || !it->second->held) continue;
    RequestState& r = *it->second;
    RequestOutput out;
    if (d.abort.has_value()) {
      AbortRequest(r, std::move(*d.abort), out);  // releases the scheduler's hold too
      outputs.push_back(std::move(out));
      continue;
    }
    r.held = false;
    const std::optional<int32_t> token = r.held_token;
    const std::optional<worker::PositionLogprobs> token_logprobs = r.held_logprobs;
    r.held_token.reset();
    r.held_logprobs.reset();
    const uint64_t seq_id = r.seq_id;
    // The token first (AppendToken accepts a held sequence that was preempted meanwhile).
    if (token.has_value()) {
      ProcessToken(r, *token, out, token_logprobs.has_value() ? &*token_logprobs : nullptr);
      outputs.push_back(std::move(out));
    }
    scheduler_->Release(seq_id);  // false when the token finished it
  }
}

bool LLMEngine::HasUnfinished() const {
  std::lock_guard<std::mutex> lock(inbox_mu_);
  return !new_requests_.empty() || !aborts_.empty() || !requests_.empty();
}

// Moves queued requests into the scheduler and applies queued aborts.
void LLMEngine::DrainInbox(std::vector<RequestOutput>& outputs) {
  std::deque<std::unique_ptr<RequestState>> added;
  std::vector<std::pair<std::string, AbortInfo>> aborts;
  std::unordered_map<std::string, uint64_t> ids;
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    added.swap(new_requests_);
    aborts.swap(aborts_);
    ids = ids_in_use_;
  }
  for (std::unique_ptr<RequestState>& r : added) {
    // AddRequest checked everything the scheduler checks, against the same limits.
    if (!r->steering_bytes.empty()) r->steering_id = InternSteering(r->steering_bytes);
    const uint64_t seq_id = r->seq_id;
    if (observer_ != nullptr) observer_->OnRequestAdded(seq_id, r->id, r->prompt_ids);
    const Status status = scheduler_->AddSequence(r->seq_id, r->prompt_ids, r->params,
                                                  r->steering_id, PrefixCacheUseOf(*r));
    UC_CHECK(status.ok(), "%s", status.ToString().c_str());
    requests_[seq_id] = std::move(r);
  }
  for (auto& [id, info] : aborts) {
    auto it = ids.find(id);
    if (it == ids.end()) continue;
    auto req = requests_.find(it->second);
    if (req == requests_.end()) continue;  // finished meanwhile
    RequestOutput out;
    if (req->second->final_feed) {
      FinishRequest(*req->second, out);  // every token is out already: keep its reason
    } else {
      AbortRequest(*req->second, std::move(info), out);
    }
    outputs.push_back(std::move(out));
  }
}

std::vector<RequestOutput> LLMEngine::Step() {
  if (!step_listener_) return StepOnce();
  const auto start = std::chrono::steady_clock::now();
  const int64_t steps_before = stats_.num_steps;
  std::vector<RequestOutput> outputs = StepOnce();
  if (stats_.num_steps != steps_before || !outputs.empty()) {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    step_listener_(stats(), seconds, outputs);
  }
  return outputs;
}

std::vector<RequestOutput> LLMEngine::StepOnce() {
  std::vector<RequestOutput> outputs;
  DrainInbox(outputs);
  ApplyHoldDecisions(outputs);
  worker::SchedulerOutput plan = scheduler_->Schedule();
  if (plan.empty()) {
    if (outputs.empty() && scheduler_->num_held() > 0) WaitWhileHeld();
    return outputs;
  }
  ++stats_.num_steps;
  for (const worker::ScheduledSequence& s : plan.scheduled) {
    const int32_t prompt_part =
        std::max(0, std::min(s.end_pos(), s.num_prompt_tokens) - s.start_pos);
    stats_.prompt_tokens_computed += prompt_part;
  }
  for (uint64_t id : plan.preempted_seq_ids) {
    auto it = requests_.find(id);
    if (it != requests_.end()) ++it->second->metrics.num_preemptions;
  }
  AttachSteering(plan);
  if (observer_ != nullptr && !plan.scheduled.empty()) plan.capture = observer_->PlanCapture(plan);
  AttachLogprobs(plan);
  std::vector<Tensor> captured;
  std::vector<worker::SequenceLogprobs> logprobs;
  const std::vector<int32_t> tokens =
      deployment_->worker().ExecuteModel(plan, &captured, &logprobs);
  // Sampled tokens' logprobs by sequence (at most one sampled token per sequence per step).
  std::unordered_map<uint64_t, const worker::PositionLogprobs*> sampled_logprobs;
  for (const worker::SequenceLogprobs& lp : logprobs) {
    StorePromptLogprobs(lp);
    if (lp.has_sampled) sampled_logprobs[lp.seq_id] = &lp.sampled;
  }
  UC_CHECK(static_cast<int32_t>(tokens.size()) == plan.num_sampled(),
           "%zu tokens for %d sampled sequences", tokens.size(), plan.num_sampled());
  // Probes see this step's activations before any token it sampled is returned.
  std::vector<StopRequest> stops;
  if (observer_ != nullptr && !plan.scheduled.empty()) {
    stops = observer_->OnStepExecuted(plan, captured);
    for (const SteeringSwitch& s : observer_->TakeSteeringSwitches()) {
      if (s.start) {
        StartSteering(s.seq_id, s.group, s.position);
      } else {
        StopSteering(s.seq_id, s.group, s.position);
      }
    }
  }
  for (StopRequest& stop : stops) {
    auto it = requests_.find(stop.seq_id);
    if (it == requests_.end() || it->second->final_feed) continue;  // all tokens are out
    RequestOutput out;
    AbortRequest(*it->second, std::move(stop.info), out);
    outputs.push_back(std::move(out));
  }
  if (observer_ != nullptr && !plan.scheduled.empty()) {
    for (uint64_t id : observer_->TakeHolds()) {
      auto it = requests_.find(id);
      if (it == requests_.end() || it->second->final_feed || it->second->held) continue;
      if (scheduler_->Hold(id)) it->second->held = true;
    }
  }
  size_t next = 0;
  for (const worker::ScheduledSequence& s : plan.scheduled) {
    auto it = requests_.find(s.seq_id);
    if (!s.sample) {
      // A final feed that has now run: the request is complete.
      if (it != requests_.end() && it->second->final_feed && s.end_pos() > 0) {
        const auto info = scheduler_->Info(s.seq_id);
        if (info.ok() && info->num_computed_tokens == info->num_tokens) {
          RequestOutput out;
          FinishRequest(*it->second, out);
          outputs.push_back(std::move(out));
        }
      }
      continue;
    }
    const int32_t token = tokens[next++];
    if (it == requests_.end()) continue;  // stopped by a probe in this very step
    const auto lp = sampled_logprobs.find(s.seq_id);
    const worker::PositionLogprobs* token_logprobs =
        lp == sampled_logprobs.end() ? nullptr : lp->second;
    if (it->second->held) {
      it->second->held_token = token;  // returned only if the hold is released
      if (token_logprobs != nullptr) it->second->held_logprobs = *token_logprobs;
      continue;
    }
    RequestOutput out;
    ProcessToken(*it->second, token, out, token_logprobs);
    outputs.push_back(std::move(out));
  }
  return outputs;
}

PrefixCacheUse LLMEngine::PrefixCacheUseOf(const RequestState& r) const {
  PrefixCacheUse use;
  // Steering that switches by position (a window, a deferred group, or a probe's switch, which
  // an observer may make at any step) makes a block's KV depend on more than its tokens and
  // the config: such requests keep to themselves.
  const bool steered = !r.steering_bytes.empty();
  if (steered && (!r.steering_windows.empty() || observer_ != nullptr)) return use;
  use.write = true;
  use.read_on_recompute = observer_ == nullptr;
  use.read = !r.params.prompt_logprobs.has_value() &&
             (observer_ == nullptr || !observer_->WantsPromptActivations(r.seq_id));
  if (steered || !r.params.cache_salt.empty()) {
    // The steering bytes' length first, so no (steering, salt) pair reads as another.
    std::string key = std::to_string(r.steering_bytes.size()) + ":" + r.steering_bytes;
    key += r.params.cache_salt;
    use.key = {Fnv1a64(key), Fnv1a64(key, 0x6a09e667f3bcc909ull)};
  }
  return use;
}

void LLMEngine::AttachLogprobs(worker::SchedulerOutput& plan) const {
  for (worker::ScheduledSequence& s : plan.scheduled) {
    const auto it = requests_.find(s.seq_id);
    if (it == requests_.end()) continue;
    const RequestState& r = *it->second;
    s.num_logprobs = r.params.logprobs.value_or(-1);
    const int prompt_len = static_cast<int>(r.prompt_ids.size());
    // Only while some row of the chunk predicts a prompt token still missing (after a
    // preemption the recompute covers filled positions again: those are ignored).
    const int filled = r.prompt_logprobs_filled;
    if (r.params.prompt_logprobs.has_value() && filled < prompt_len - 1 && s.start_pos <= filled &&
        filled < s.end_pos()) {
      s.num_prompt_logprobs = *r.params.prompt_logprobs;
      s.next_prompt_token = s.end_pos() < prompt_len ? r.prompt_ids[s.end_pos()] : -1;
    }
  }
}

void LLMEngine::StorePromptLogprobs(const worker::SequenceLogprobs& lp) {
  const auto it = requests_.find(lp.seq_id);
  if (it == requests_.end() || lp.prompt.empty()) return;
  RequestState& r = *it->second;
  UC_CHECK(lp.first_prompt_position <= r.prompt_logprobs_filled + 1 &&
               lp.first_prompt_position + lp.prompt.size() <= r.prompt_logprobs.size(),
           "prompt logprobs of positions %d.. for a request with %d filled of %zu",
           lp.first_prompt_position, r.prompt_logprobs_filled, r.prompt_logprobs.size());
  for (size_t i = 0; i < lp.prompt.size(); ++i) {
    const int position = lp.first_prompt_position + static_cast<int>(i);
    if (position <= r.prompt_logprobs_filled) continue;  // recomputed: the same values
    r.prompt_logprobs[position] = lp.prompt[i];
    r.prompt_logprobs_filled = position;
  }
}

bool LLMEngine::ProcessToken(RequestState& r, int32_t token, RequestOutput& out,
                             const worker::PositionLogprobs* logprobs) {
  ++stats_.generated_tokens;
  if (r.output_ids.empty()) r.metrics.first_token_seconds = Now();
  r.output_ids.push_back(token);
  out.request_id = r.id;
  out.new_token_ids = {token};
  // The prompt's logprobs are complete once the first token is sampled (streamed echo).
  if (r.output_ids.size() == 1) out.prompt_logprobs = r.prompt_logprobs;
  if (logprobs != nullptr) {
    r.logprobs.push_back(*logprobs);
    r.cumulative_logprob += logprobs->chosen.logprob;
    out.new_logprobs = {*logprobs};
  }
  const bool is_eos = !r.params.ignore_eos && IsOneOf(eos_ids_, token);
  const bool is_stop_id = IsOneOf(r.params.stop_token_ids, token);
  std::string text = (is_eos || is_stop_id) ? r.decoder->Flush() : r.decoder->Add(token);
  out.new_text = r.stops->Push(text);
  bool done = false;
  if (is_eos || is_stop_id || r.stops->stopped()) {
    r.finish_reason = FinishReason::kStop;
    r.stop_reason = r.stops->stopped() ? "stop:" + r.stops->matched()
                    : is_stop_id       ? "stop_token:" + std::to_string(token)
                                       : "eos";
    done = true;
  }
  if (static_cast<int>(r.output_ids.size()) >= r.budget) done = true;
  if (!done) {
    scheduler_->AppendToken(r.seq_id, token);
    return false;
  }
  if (!r.stops->stopped()) out.new_text += r.stops->Push(r.decoder->Flush()) + r.stops->Flush();
  if (observer_ != nullptr &&
      observer_->WantsFinalToken(r.seq_id, static_cast<int64_t>(r.output_ids.size()))) {
    // Finished once its last token has run through the model for the probes.
    scheduler_->AppendFinalToken(r.seq_id, token);
    r.final_feed = true;
    return false;
  }
  scheduler_->AppendToken(r.seq_id, token);
  FinishRequest(r, out);
  return true;
}

void LLMEngine::AbortRequest(RequestState& r, AbortInfo info, RequestOutput& out) {
  r.finish_reason = FinishReason::kAbort;
  r.stop_reason = info.by == "probe" ? "probe:" + info.point : "abort";
  r.abort = std::move(info);
  FinishRequest(r, out);
}

// Frees the request's blocks (the next step tells the ranks) and fills its final output.
void LLMEngine::FinishRequest(RequestState& r, RequestOutput& out) {
  if (const auto info = scheduler_->Info(r.seq_id); info.ok()) {
    out.num_cached_tokens = info->num_cached_tokens;
  }
  scheduler_->Finish(r.seq_id);
  if (r.steering_id != 0) ReleaseSteering(r.steering_id);
  if (observer_ != nullptr) {
    observer_->OnRequestFinished(r.seq_id, static_cast<int64_t>(r.output_ids.size()),
                                 r.finish_reason == FinishReason::kAbort);
  }
  r.metrics.finish_seconds = Now();
  out.request_id = r.id;
  out.finished = true;
  out.prompt_ids = std::move(r.prompt_ids);
  out.output_ids = std::move(r.output_ids);
  out.text = r.stops->released();
  out.finish_reason = r.finish_reason;
  out.stop_reason = r.stop_reason;
  out.abort = r.abort;
  out.metrics = r.metrics;
  out.logprobs = std::move(r.logprobs);
  out.cumulative_logprob = r.cumulative_logprob;
  out.prompt_logprobs = std::move(r.prompt_logprobs);
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    ids_in_use_.erase(r.id);
  }
  requests_.erase(r.seq_id);  // destroys r
}

uint32_t LLMEngine::InternSteering(const std::string& bytes) {
  auto [it, added] = steering_id_by_bytes_.try_emplace(bytes, next_steering_id_);
  if (added) steering_by_id_[next_steering_id_++].bytes = bytes;
  ++steering_by_id_.at(it->second).refs;
  return it->second;
}

void LLMEngine::ReleaseSteering(uint32_t id) {
  const auto it = steering_by_id_.find(id);
  UC_CHECK(it != steering_by_id_.end(), "unknown steering config %u", id);
  if (--it->second.refs > 0) return;
  if (it->second.sent) steering_drops_.push_back(id);
  steering_id_by_bytes_.erase(it->second.bytes);
  steering_by_id_.erase(it);
}

void LLMEngine::AttachSteering(worker::SchedulerOutput& plan) {
  plan.dropped_steering = std::move(steering_drops_);
  steering_drops_.clear();
  for (worker::ScheduledSequence& s : plan.scheduled) {
    if (s.steering_id == 0) continue;
    const auto req = requests_.find(s.seq_id);
    UC_CHECK(req != requests_.end(), "steered sequence %llu without a request",
             static_cast<unsigned long long>(s.seq_id));
    s.steering_windows = req->second->steering_windows;
    SteeringSlot& slot = steering_by_id_.at(s.steering_id);
    if (!slot.sent) {
      plan.new_steering.push_back({s.steering_id, slot.bytes});
      slot.sent = true;
    }
  }
}

namespace {

constexpr int32_t kNever = std::numeric_limits<int32_t>::max();

int NumGroups(const worker::SteeringConfig& config) {
  int groups = 0;
  for (const worker::SteeringVector& v : config.vectors) groups = std::max(groups, v.group + 1);
  return groups;
}

}  // namespace

Status LLMEngine::SetBaseSteering(RequestSteering base) {
  if (base.config != nullptr && !base.config->empty()) {
    UC_RETURN_IF_ERROR(base.config->Validate(static_cast<int>(config().hidden_size),
                                             config().num_hidden_layers, "steering"));
  } else {
    base.config = nullptr;
  }
  base_steering_ = std::move(base);
  return OkStatus();
}

// The request's config (the base's vectors, then its own as one more group), serialized, with
// each group's window and deferral.
Status LLMEngine::PrepareSteering(const RequestSteering& steering, PreparedSteering* out) const {
  const bool own = steering.config != nullptr && !steering.config->empty();
  // The request's own base (a probe set's spec steering) replaces the engine's.
  const RequestSteering* base = steering.base != nullptr ? steering.base.get() : &base_steering_;
  const bool has_base = base->config != nullptr && !base->config->empty();
  if (!own && !has_base) return OkStatus();
  worker::SteeringConfig merged;
  std::vector<int> deferred;
  std::vector<PositionWindow> windows;
  int base_groups = 0;
  if (has_base) {
    if (steering.base != nullptr) {
      UC_RETURN_IF_ERROR(base->config->Validate(static_cast<int>(config().hidden_size),
                                                config().num_hidden_layers, "steering"));
    }
    base_groups = NumGroups(*base->config);
    merged.vectors = base->config->vectors;
    deferred = base->deferred_groups;
    windows = base->windows;
    windows.resize(static_cast<size_t>(base_groups));
  }
  if (own) {
    UC_RETURN_IF_ERROR(steering.config->Validate(static_cast<int>(config().hidden_size),
                                                 config().num_hidden_layers, "steering"));
    const int offset = base_groups;
    for (worker::SteeringVector v : steering.config->vectors) {
      if (offset + v.group > 255) return InvalidArgumentError("steering: too many vector groups");
      v.group = static_cast<uint8_t>(offset + v.group);
      merged.vectors.push_back(std::move(v));
    }
    for (int g : steering.deferred_groups) deferred.push_back(offset + g);
    windows.insert(windows.end(), steering.windows.begin(), steering.windows.end());
  }
  const size_t groups = static_cast<size_t>(NumGroups(merged));
  out->bytes = merged.Serialize();
  out->windows = std::move(windows);
  out->windows.resize(groups);
  out->deferred.assign(groups, false);
  for (int g : deferred) {
    if (g >= 0 && static_cast<size_t>(g) < groups) out->deferred[static_cast<size_t>(g)] = true;
  }
  return OkStatus();
}

// Resolves the groups' windows against the prompt length into bounds and initial windows
// (left empty when every group is on everywhere).
void LLMEngine::InitSteeringWindows(const PreparedSteering& prepared, int prompt_len,
                                    RequestState& r) const {
  const size_t groups = prepared.windows.size();
  r.steering_bounds.assign(groups * 2, 0);
  r.steering_state.assign(groups, 0);
  bool trivial = true;
  auto clamp = [](int64_t v) { return static_cast<int32_t>(std::clamp<int64_t>(v, 0, kNever)); };
  for (size_t g = 0; g < groups; ++g) {
    const PositionWindow& w = prepared.windows[g];
    const int64_t base = w.from_prompt_end ? prompt_len : 0;
    const int32_t lo = clamp(base + w.start);
    const int32_t hi = w.stop.has_value() ? std::max(lo, clamp(base + *w.stop)) : kNever;
    r.steering_bounds[2 * g] = lo;
    r.steering_bounds[2 * g + 1] = hi;
    if (prepared.deferred[g]) r.steering_state[g] = 1;
    trivial = trivial && lo == 0 && hi == kNever && !prepared.deferred[g];
  }
  if (trivial) return;
  r.steering_windows = r.steering_bounds;
  for (size_t g = 0; g < groups; ++g) {
    if (prepared.deferred[g]) r.steering_windows[2 * g] = r.steering_windows[2 * g + 1] = kNever;
  }
}

bool LLMEngine::StartSteering(uint64_t seq_id, int group, int32_t position) {
  const auto it = requests_.find(seq_id);
  if (it == requests_.end() || it->second->steering_id == 0 || group < 0) return false;
  RequestState& r = *it->second;
  const size_t g = static_cast<size_t>(group);
  if (g >= r.steering_state.size() || r.steering_state[g] != 1) return false;  // not deferred
  r.steering_state[g] |= 2;
  r.steering_windows[2 * g] = std::max(position, r.steering_bounds[2 * g]);
  r.steering_windows[2 * g + 1] = r.steering_bounds[2 * g + 1];
  return true;
}

bool LLMEngine::StopSteering(uint64_t seq_id, int group, int32_t position) {
  const auto it = requests_.find(seq_id);
  if (it == requests_.end() || it->second->steering_id == 0 || group < 0) return false;
  RequestState& r = *it->second;
  const size_t g = static_cast<size_t>(group);
  if (g >= r.steering_state.size() || (r.steering_state[g] & 4) != 0) return false;
  r.steering_state[g] |= 4;
  if (r.steering_windows.empty()) r.steering_windows = r.steering_bounds;
  int32_t& from = r.steering_windows[2 * g];
  int32_t& until = r.steering_windows[2 * g + 1];
  if (from == kNever) {
    from = until = position;  // never started: stays off
  } else {
    until = std::max(from, std::min(until, position));
  }
  return true;
}

EngineStats LLMEngine::stats() const {
  EngineStats s = stats_;
  s.num_steering_configs = static_cast<int>(steering_by_id_.size());
  s.num_running = scheduler_->num_running();
  s.num_waiting = scheduler_->num_waiting();
  s.num_kv_blocks = blocks_->num_blocks();
  s.num_free_kv_blocks = blocks_->num_free_blocks();
  s.prefix_caching = scheduler_->config().enable_prefix_caching;
  s.prefix_cache_queries = scheduler_->prefix_cache_queries();
  s.prefix_cache_hits = scheduler_->prefix_cache_hits();
  s.num_preemptions = scheduler_->num_preemptions();
  s.num_held = scheduler_->num_held();
  return s;
}

}  // namespace uc::engine
