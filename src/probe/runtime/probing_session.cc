#include "probe/runtime/probing_session.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <tuple>

#include "base/logging.h"
#include "models/forward_hooks.h"
#include "models/steering.h"

namespace uc::probe {
namespace {

using Clock = std::chrono::steady_clock;

double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string Where(const Spec& spec, const ExtractionPoint& p, int index, const char* field) {
  std::string where;
  if (!spec.source.empty()) where += spec.source.string() + ":";
  if (p.line > 0) where += std::to_string(p.line) + ":";
  if (!where.empty()) where += " ";
  return where + "extraction_points[" + std::to_string(index) + "] '" + p.name + "'." + field +
         ": ";
}

std::optional<models::Site> SiteOf(TensorType t) {
  switch (t) {
    case TensorType::kResidualStream:
      return models::Site::kResidPost;
    case TensorType::kAttnOut:
      return models::Site::kAttnOut;
    case TensorType::kMlpOut:
      return models::Site::kMlpOut;
    case TensorType::kFinalNorm:
      return models::Site::kFinalNorm;
    case TensorType::kKv:
      return std::nullopt;
  }
  return std::nullopt;
}

// A steering entry's positions as a window: a point selector one position, a continuous one
// its slice (offsets applied), none every position.
engine::PositionWindow WindowOf(const std::optional<PositionSelector>& selector) {
  engine::PositionWindow w;
  if (!selector.has_value()) return w;
  const PositionSelector& s = *selector;
  switch (s.kind()) {
    case PositionSelector::Kind::kAbsolute:
      w.start = s.index();
      break;
    case PositionSelector::Kind::kPrompt:
      w.from_prompt_end = s.index() < 0;
      w.start = s.index() + s.offset();
      break;
    case PositionSelector::Kind::kGenerated:
    case PositionSelector::Kind::kGeneratedAll:
    case PositionSelector::Kind::kGeneratedSlice:
      w.from_prompt_end = true;
      w.start =
          (s.kind() == PositionSelector::Kind::kGenerated ? s.index() : s.start()) + s.offset();
      break;
  }
  if (s.kind() == PositionSelector::Kind::kGeneratedSlice && s.stop().has_value()) {
    w.stop = *s.stop() + s.offset();
  } else if (!s.continuous()) {
    w.stop = w.start + 1;
  }
  return w;
}

// The spec's steering entries as a request steering: entry i's file (relative to the spec),
// restricted to its layers, as vector group i.
StatusOr<engine::RequestSteering> LoadSpecSteering(const Spec& spec,
                                                   const models::ModelConfig& config) {
  engine::RequestSteering steering;
  if (spec.steering.empty()) return steering;
  auto steering_config = std::make_shared<worker::SteeringConfig>();
  for (size_t i = 0; i < spec.steering.size(); ++i) {
    const SteeringEntry& e = spec.steering[i];
    std::string where;
    if (!spec.source.empty()) where += spec.source.string() + ":";
    if (e.line > 0) where += std::to_string(e.line) + ":";
    where += (where.empty() ? "" : " ") + std::string("steering[") + std::to_string(i) + "] '" +
             e.name + "'";
    std::filesystem::path file = e.vector;
    if (file.is_relative() && !spec.source.empty()) file = spec.source.parent_path() / file;
    StatusOr<models::LayerVectors> vectors = models::ReadControlVectorFile(
        file, static_cast<int>(config.hidden_size), config.num_hidden_layers);
    if (!vectors.ok()) {
      return InvalidArgumentError(where + ".vector: " + vectors.status().message());
    }
    for (int layer : e.layers) {
      if (vectors->count(layer) == 0) {
        return InvalidArgumentError(where + ".layers: " + file.string() +
                                    " has no direction for block " + std::to_string(layer));
      }
    }
    UC_ASSIGN_OR_RETURN(const worker::SteeringTokens tokens, worker::ParseSteeringTokens(e.tokens));
    const std::optional<models::Site> site = SiteOf(e.tensor_type);
    for (auto& [layer, values] : *vectors) {
      if (!e.layers.empty() &&
          std::find(e.layers.begin(), e.layers.end(), layer) == e.layers.end()) {
        continue;
      }
      steering_config->vectors.push_back({.layer = layer,
                                          .site = site.value_or(models::Site::kResidPost),
                                          .tokens = tokens,
                                          .scale = static_cast<float>(e.scale),
                                          .norm_match = e.norm_match,
                                          .group = static_cast<uint8_t>(i),
                                          .values = std::move(values)});
    }
    if (e.when.has_value() && e.when->action == SteeringAction::kStart) {
      steering.deferred_groups.push_back(static_cast<int>(i));
    }
    steering.windows.push_back(WindowOf(e.position));
  }
  steering.config = std::move(steering_config);
  return steering;
}

ProbeSignal Fallback(const ExtractionPoint& point, const InterventionPolicy& policy,
                     const std::string& reason, const std::string& error) {
  ProbeSignal s;
  s.action = policy.on_timeout == OnTimeout::kAbort ? ProbeAction::kAbort : ProbeAction::kContinue;
  s.metadata = {{"intervention_fallback", true},
                {"reason", reason},
                {"extraction_point_name", point.name},
                {"timeout_ms", policy.timeout_ms.value_or(0)}};
  if (!error.empty()) s.metadata["error"] = error;
  s.timestamp = WallSeconds();
  return s;
}

}  // namespace

// One call of OnActivation handed to the pool, and its outcome.
struct CallState {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::optional<ProbeSignal> signal;
  std::string error;  // non-empty: the probe threw
};

struct ProbingSession::Counters {
  std::atomic<int64_t> records_routed{0};
  std::atomic<int64_t> inline_calls{0};
  std::atomic<int64_t> timeouts{0};
  std::atomic<int64_t> errors{0};
  std::atomic<int64_t> skipped_open_breaker{0};
  std::atomic<int64_t> aborts{0};
  std::atomic<int64_t> escalations{0};
  std::atomic<int64_t> async_accepted{0};
  std::atomic<int64_t> async_processed{0};
  std::atomic<int64_t> async_dropped{0};
  std::atomic<int64_t> results{0};
};

// A fixed set of threads running block_until_signal calls.
class ProbingSession::CallPool {
 public:
  explicit CallPool(int threads) {
    for (int i = 0; i < std::max(1, threads); ++i) workers_.emplace_back([this] { Run(); });
  }
  ~CallPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : workers_) t.join();
  }
  void Submit(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      tasks_.push_back(std::move(task));
    }
    cv_.notify_one();
  }

 private:
  void Run() {
    while (true) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stop_ || !tasks_.empty(); });
        if (tasks_.empty()) return;
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

struct ProbingSession::PointState {
  const ExtractionPoint* point = nullptr;
  int index = 0;
  std::unique_ptr<ProbeType> type;
  models::Site site = models::Site::kResidPost;
  std::vector<int> layers;  // sorted, unique
  // combine: concat: the (layer, site) of each part of a record, in order.
  bool concat = false;
  std::vector<std::pair<int, models::Site>> inputs;
  InterventionPolicy policy;  // resolved
  bool inline_point = true;
  int queue_depth = 32;  // async
  OverflowPolicy overflow = OverflowPolicy::kDropOldest;
  PointMetrics* metrics = nullptr;
  // generated[-k]+o: candidates start at prompt_len - k + o; the last k - o are kept.
  int64_t ring_size = 0;
  int64_t ring_from_prompt_end = 0;  // candidates from prompt_len + this (<= 0)
  // Circuit breaker (block_until_signal).
  int consecutive_failures = 0;
  bool open = false;
  Clock::time_point opened_at;

  bool HasLayer(int layer) const { return std::binary_search(layers.begin(), layers.end(), layer); }
};

struct ProbingSession::Binding {
  PointState* point = nullptr;
  std::shared_ptr<Probe> probe;
  RequestContext ctx;
  bool done = false;                               // `until: stop_token` reached
  std::shared_ptr<CallState> inflight;             // the last blocking call
  std::deque<std::vector<ActivationRecord>> ring;  // generated[-k] candidates, by position
  std::shared_ptr<AsyncExecutor::Queue> queue;     // async points
};

// One escalation out: its answer (set by an Escalator worker) and what the decision needs.
struct ProbingSession::EscalationCall {
  PointState* point = nullptr;
  int64_t token_pos = 0;
  int layer = 0;
  std::optional<double> score;
  Clock::time_point started;
  Clock::time_point deadline;
  std::mutex mu;  // guards the three fields below
  bool answered = false;
  bool decided = false;  // by the answer, the deadline, or the request's end
  EscalationAnswer answer;
};

struct ProbingSession::RequestState {
  std::string id;
  uint64_t seq_id = 0;
  int64_t prompt_len = 0;
  std::vector<Binding> bindings;  // spec order
  int64_t delivered_upto = 0;     // positions below were delivered (never twice)
  int64_t fed_end = 0;            // positions below have been through the model
  bool stopped = false;
  int64_t stop_pos = -1;
  std::optional<engine::AbortInfo> abort;
  std::vector<int32_t> tokens;                 // prompt + generated so far (escalation only)
  std::shared_ptr<EscalationCall> escalation;  // the call this request is held for
  bool finishing = false;                      // OnRequestFinished is routing the last records
  // Ending (any thread, after the engine let go of the request).
  bool ended_by_shutdown = false;
  std::atomic<int> pending{0};                // queues still draining, +1 while closing them
  std::vector<AsyncExecutor::EndState> ends;  // per binding (async ones)
};

StatusOr<std::unique_ptr<ProbingSession>> ProbingSession::Create(const Spec& spec,
                                                                 const ProbeRegistry& registry,
                                                                 const models::ModelConfig& config,
                                                                 ProbingOptions options) {
  std::unique_ptr<ProbingSession> session(new ProbingSession());
  session->spec_ = spec;
  session->config_ = config;
  session->options_ = std::move(options);
  std::vector<std::string> problems;
  const int num_layers = config.num_hidden_layers;
  for (size_t i = 0; i < session->spec_.extraction_points.size(); ++i) {
    const ExtractionPoint& p = session->spec_.extraction_points[i];
    const int index = static_cast<int>(i);
    auto state = std::make_unique<PointState>();
    state->point = &p;
    state->index = index;
    const std::vector<TensorType> types =
        p.tensor_types.empty() ? std::vector<TensorType>{p.tensor_type} : p.tensor_types;
    const char* type_field = p.tensor_types.empty() ? "tensor_type" : "tensor_types";
    if (std::any_of(types.begin(), types.end(),
                    [](TensorType t) { return !SiteOf(t).has_value(); })) {
      problems.push_back(Where(spec, p, index, type_field) +
                         "kv is not capturable (the KV cache is paged blocks, not a per-token "
                         "activation); use residual_stream, attn_out, mlp_out or final_norm");
      continue;
    }
    state->site = *SiteOf(p.tensor_type);
    state->layers = p.layers;
    std::sort(state->layers.begin(), state->layers.end());
    state->layers.erase(std::unique(state->layers.begin(), state->layers.end()),
                        state->layers.end());
    for (TensorType type : types) {
      for (int layer : state->layers) {
        if (type == TensorType::kFinalNorm && layer != num_layers) {
          problems.push_back(Where(spec, p, index, "layers") + "final_norm is addressed as layer " +
                             std::to_string(num_layers) + " (the number of decoder layers), got " +
                             std::to_string(layer));
        } else if (type != TensorType::kFinalNorm && layer >= num_layers) {
          problems.push_back(Where(spec, p, index, "layers") + "layer " + std::to_string(layer) +
                             " does not exist: the model has " + std::to_string(num_layers) +
                             " decoder layers (0-" + std::to_string(num_layers - 1) + ")");
        }
      }
    }
    state->concat = p.combine == Combine::kConcat;
    if (state->concat) {
      for (const PointInput& in : p.Inputs()) {
        state->inputs.push_back({in.layer, *SiteOf(in.tensor_type)});
      }
    }
    state->inline_point = p.execution_mode == ExecutionMode::kInline;
    state->queue_depth = p.queue_depth.value_or(session->options_.async.default_queue_depth);
    state->overflow = p.overflow_policy.value_or(session->options_.async.default_overflow);
    state->policy = p.intervention.value_or(
        session->options_.default_intervention.value_or(InterventionPolicy{}));
    if (!state->inline_point && state->policy.mode == InterventionMode::kBlockUntilSignal) {
      if (!p.intervention.has_value()) state->policy = InterventionPolicy{};  // async: observe
    }
    if (p.position.needs_total()) {
      const int64_t k = -p.position.index();
      const int64_t o = p.position.offset();
      state->ring_size = std::max<int64_t>(0, k - o);
      state->ring_from_prompt_end = std::min<int64_t>(0, o - k);
    }
    ProbeEnv env;
    env.hidden_size = static_cast<int>(config.hidden_size) *
                      (state->concat ? static_cast<int>(state->inputs.size()) : 1);
    env.base_dir = spec.source.empty() ? std::filesystem::path() : spec.source.parent_path();
    env.point = &p;
    env.model_fingerprint = session->options_.model_fingerprint;
    env.artifact_policy = session->options_.artifact_policy;
    StatusOr<std::unique_ptr<ProbeType>> type = registry.Create(p, env);
    if (!type.ok()) {
      problems.push_back(Where(spec, p, index, "probe_type") + type.status().message());
      continue;
    }
    state->type = std::move(type).value();
    session->points_.push_back(std::move(state));
  }
  if (!problems.empty()) {
    if (problems.size() == 1) return InvalidArgumentError(problems[0]);
    std::string message = std::to_string(problems.size()) + " problems in the spec:";
    for (const std::string& p : problems) message += "\n  - " + p;
    return InvalidArgumentError(message);
  }
  session->counters_ = std::make_unique<Counters>();
  session->metrics_ = session->options_.metrics;
  if (session->metrics_ == nullptr) {
    session->owned_metrics_ = std::make_unique<Metrics>();
    session->metrics_ = session->owned_metrics_.get();
  }
  bool any_async = false;
  for (const std::unique_ptr<PointState>& ps : session->points_) {
    ps->metrics = &session->metrics_->Point(ps->point->name, ps->inline_point);
    any_async = any_async || !ps->inline_point;
  }
  if (any_async) {
    if (session->options_.async.workers < 1 || session->options_.async.default_queue_depth < 1 ||
        session->options_.async.drain_timeout_seconds < 0) {
      return InvalidArgumentError(
          "async probes need at least one worker, a default queue depth >= 1 and a drain "
          "timeout >= 0");
    }
    session->executor_ = std::make_unique<AsyncExecutor>(session->options_.async.workers);
  }
  session->pool_ = std::make_unique<CallPool>(session->options_.blocking_threads);
  for (const ExtractionPoint& p : session->spec_.extraction_points) {
    if (p.escalation.has_value() && session->escalator_ == nullptr) {
      session->escalator_ = std::make_unique<Escalator>(session->options_.escalation_threads);
    }
  }
  UC_ASSIGN_OR_RETURN(session->steering_, LoadSpecSteering(session->spec_, config));
  for (size_t i = 0; i < session->spec_.steering.size(); ++i) {
    const SteeringEntry& e = session->spec_.steering[i];
    if (e.when.has_value()) {
      session->steering_triggers_[e.when->point].push_back(static_cast<int>(i));
    }
  }
  return session;
}

Status ProbingSession::AttachTo(engine::LLMEngine& engine) {
  UC_RETURN_IF_ERROR(engine.SetBaseSteering(steering_));
  if (options_.tokenizer == nullptr) options_.tokenizer = &engine.tokenizer();
  engine.SetObserver(this);
  return OkStatus();
}

std::vector<engine::SteeringSwitch> ProbingSession::TakeSteeringSwitches() {
  std::vector<engine::SteeringSwitch> out;
  out.swap(switches_);
  return out;
}

ProbingSession::~ProbingSession() {
  // Calls to classifiers still running end within their timeout; their answers go nowhere.
  escalator_.reset();
  // Every registered request still gets its result; then the workers stop.
  Shutdown(/*wait=*/false, /*timeout_seconds=*/5.0);
  // In-flight blocking calls hold their probe; the pool joins them before anything else goes.
  pool_.reset();
}

ProbingStats ProbingSession::stats() const {
  ProbingStats s;
  s.records_routed = counters_->records_routed.load();
  s.inline_calls = counters_->inline_calls.load();
  s.timeouts = counters_->timeouts.load();
  s.errors = counters_->errors.load();
  s.skipped_open_breaker = counters_->skipped_open_breaker.load();
  s.aborts = counters_->aborts.load();
  s.escalations = counters_->escalations.load();
  s.async_accepted = counters_->async_accepted.load();
  s.async_processed = counters_->async_processed.load();
  s.async_dropped = counters_->async_dropped.load();
  s.results = counters_->results.load();
  return s;
}

void ProbingSession::OnRequestAdded(uint64_t seq_id, const std::string& request_id,
                                    std::span<const int32_t> prompt_ids) {
  if (shut_down_) {
    UC_LOG(WARNING) << "request '" << request_id << "' is not probed: the probing session was "
                    << "shut down";
    return;
  }
  auto r = std::make_shared<RequestState>();
  r->id = request_id;
  r->seq_id = seq_id;
  r->prompt_len = static_cast<int64_t>(prompt_ids.size());
  if (escalator_ != nullptr) r->tokens.assign(prompt_ids.begin(), prompt_ids.end());
  for (const std::unique_ptr<PointState>& ps : points_) {
    Binding b;
    b.point = ps.get();
    b.probe = ps->type->Spawn();
    b.ctx.request_id = request_id;
    b.ctx.prompt_metadata = {{"model", options_.model_name}, {"prompt_len", r->prompt_len}};
    b.ctx.point = ps->point;
    if (!ps->inline_point) {
      PointState* point = ps.get();
      b.queue = executor_->Open(
          ps->queue_depth, ps->overflow,
          [this, point, probe = b.probe, id = request_id](ActivationRecord& record) {
            RunAsync(*point, *probe, id, record);
          },
          ps->metrics);
    }
    r->bindings.push_back(std::move(b));
  }
  for (Binding& b : r->bindings) {
    try {
      b.probe->OnStart(b.ctx);
    } catch (const std::exception& e) {
      ++counters_->errors;
      UC_LOG(WARNING) << "probe '" << b.point->point->name << "' OnStart threw: " << e.what();
    }
  }
  requests_[seq_id] = std::move(r);
}

namespace {

// The match ordinal of generated position p in a continuous selector's window, counting
// every stride-th position from the window start.
int64_t Ordinal(const ExtractionPoint& p, int64_t token_pos, int64_t prompt_len) {
  const int64_t g = token_pos - prompt_len - p.position.offset();
  const int64_t start =
      p.position.kind() == PositionSelector::Kind::kGeneratedSlice ? p.position.start() : 0;
  return (g - start) / p.stride.value_or(1);
}

}  // namespace

// Whether binding `b` wants the activation at `token_pos` (candidates of generated[-k]
// included).
static bool Wants(const ProbingSession::Binding& b, int64_t token_pos, int64_t prompt_len,
                  std::optional<int64_t> total = std::nullopt);

bool Wants(const ProbingSession::Binding& b, int64_t token_pos, int64_t prompt_len,
           std::optional<int64_t> total) {
  const auto& ps = *b.point;
  const ExtractionPoint& p = *ps.point;
  if (b.done) return false;
  if (p.position.needs_total() && !total.has_value()) {
    return ps.ring_size > 0 && token_pos >= prompt_len + ps.ring_from_prompt_end;
  }
  if (!p.position.Matches(token_pos, prompt_len, p.stride.value_or(1), total)) return false;
  if (p.position.continuous() && p.until == Until::kFixedCount && p.count.has_value()) {
    return Ordinal(p, token_pos, prompt_len) < *p.count;
  }
  return true;
}

std::vector<worker::CaptureItem> ProbingSession::PlanCapture(const worker::SchedulerOutput& plan) {
  // (layer, site) -> rows, and for each row its (request, position).
  std::map<std::pair<int, int>, std::vector<std::pair<int32_t, RowRef>>> wanted;
  int32_t row0 = 0;
  for (const worker::ScheduledSequence& s : plan.scheduled) {
    auto it = requests_.find(s.seq_id);
    if (it != requests_.end() && !it->second->stopped) {
      const RequestState& r = *it->second;
      for (int64_t pos = std::max<int64_t>(s.start_pos, r.delivered_upto); pos < s.end_pos();
           ++pos) {
        const int32_t row = row0 + static_cast<int32_t>(pos - s.start_pos);
        auto want = [&](int layer, models::Site site) {
          auto& rows = wanted[{layer, static_cast<int>(site)}];
          if (rows.empty() || rows.back().first != row)
            rows.push_back({row, RowRef{s.seq_id, pos}});
        };
        for (const Binding& b : r.bindings) {
          if (!Wants(b, pos, r.prompt_len)) continue;
          if (b.point->concat) {
            for (const auto& [layer, site] : b.point->inputs) want(layer, site);
          } else {
            for (int layer : b.point->layers) want(layer, b.point->site);
          }
        }
      }
    }
    row0 += s.num_tokens();
  }
  std::vector<worker::CaptureItem> items;
  plan_rows_.clear();
  plan_items_.clear();
  for (auto& [key, rows] : wanted) {
    worker::CaptureItem item;
    item.layer = key.first;
    item.site = static_cast<uint8_t>(key.second);
    std::vector<RowRef> refs;
    for (const auto& [row, ref] : rows) {
      item.rows.push_back(row);
      refs.push_back(ref);
    }
    plan_items_.push_back({item.layer, item.site});
    items.push_back(std::move(item));
    plan_rows_.push_back(std::move(refs));
  }
  return items;
}

std::vector<engine::StopRequest> ProbingSession::OnStepExecuted(
    const worker::SchedulerOutput& plan, const std::vector<Tensor>& captured) {
  // Batch order of each request, and the token id at each scheduled position.
  std::unordered_map<uint64_t, size_t> order;
  for (size_t i = 0; i < plan.scheduled.size(); ++i) order[plan.scheduled[i].seq_id] = i;
  struct Pending {
    size_t request_order;
    int64_t token_pos;
    int layer;
    size_t binding;
    const float* values;
    RequestState* request;
    int64_t length;  // values
  };
  std::vector<Pending> pending;
  const int64_t hidden = config_.hidden_size;
  // combine: concat bindings: the rows of each (request, position, binding), by input; the
  // records are assembled once the step's rows are all in (a token's layers run in one step).
  struct Parts {
    size_t request_order;
    RequestState* request;
    std::vector<const float*> rows;
  };
  std::map<std::tuple<RequestState*, int64_t, size_t>, Parts> parts;
  if (escalator_ != nullptr) {
    // The text so far, for the classifiers: every position this step runs is known now.
    for (const worker::ScheduledSequence& s : plan.scheduled) {
      auto it = requests_.find(s.seq_id);
      if (it == requests_.end()) continue;
      std::vector<int32_t>& tokens = it->second->tokens;
      for (int64_t pos = static_cast<int64_t>(tokens.size());
           pos >= s.start_pos && pos < s.end_pos(); ++pos) {
        tokens.push_back(s.token_ids[static_cast<size_t>(pos - s.start_pos)]);
      }
    }
  }
  for (size_t i = 0; i < plan_rows_.size() && i < captured.size(); ++i) {
    const PlanItem& item = plan_items_[i];
    UC_CHECK(
        captured[i].defined() && captured[i].dim(0) == static_cast<int64_t>(plan_rows_[i].size()),
        "capture item %zu came back with the wrong shape", i);
    for (size_t j = 0; j < plan_rows_[i].size(); ++j) {
      const RowRef& ref = plan_rows_[i][j];
      auto it = requests_.find(ref.seq_id);
      if (it == requests_.end()) continue;
      RequestState& r = *it->second;
      const float* row = captured[i].data<float>() + static_cast<int64_t>(j) * hidden;
      for (size_t bi = 0; bi < r.bindings.size(); ++bi) {
        const Binding& b = r.bindings[bi];
        if (!Wants(b, ref.token_pos, r.prompt_len)) continue;
        if (b.point->concat) {
          const auto& inputs = b.point->inputs;
          for (size_t k = 0; k < inputs.size(); ++k) {
            if (inputs[k].first != item.layer ||
                static_cast<uint8_t>(inputs[k].second) != item.site) {
              continue;
            }
            Parts& p = parts[{&r, ref.token_pos, bi}];
            if (p.rows.empty())
              p = {order.at(ref.seq_id), &r, std::vector<const float*>(inputs.size())};
            p.rows[k] = row;
          }
          continue;
        }
        if (static_cast<uint8_t>(b.point->site) != item.site || !b.point->HasLayer(item.layer)) {
          continue;
        }
        pending.push_back({order.at(ref.seq_id), ref.token_pos, item.layer, bi, row, &r, hidden});
      }
    }
  }
  std::deque<std::vector<float>> concatenated;  // owns the assembled records' values
  for (auto& [key, p] : parts) {
    const auto& [request, token_pos, bi] = key;
    if (std::find(p.rows.begin(), p.rows.end(), nullptr) != p.rows.end()) continue;
    std::vector<float>& values = concatenated.emplace_back();
    values.reserve(p.rows.size() * static_cast<size_t>(hidden));
    for (const float* row : p.rows) values.insert(values.end(), row, row + hidden);
    const int first_layer = request->bindings[bi].point->inputs.front().first;
    pending.push_back({p.request_order, token_pos, first_layer, bi, values.data(), request,
                       static_cast<int64_t>(values.size())});
  }
  std::stable_sort(pending.begin(), pending.end(), [](const Pending& a, const Pending& b) {
    return std::tie(a.request_order, a.token_pos, a.layer, a.binding) <
           std::tie(b.request_order, b.token_pos, b.layer, b.binding);
  });
  // Token ids of the scheduled positions, for `until: stop_token`.
  auto token_at = [&](size_t request_order, int64_t pos) {
    const worker::ScheduledSequence& s = plan.scheduled[request_order];
    return s.token_ids[static_cast<size_t>(pos - s.start_pos)];
  };
  std::vector<engine::StopRequest> stops;
  const double now = WallSeconds();
  for (const Pending& p : pending) {
    RequestState& r = *p.request;
    if (r.stopped && p.token_pos > r.stop_pos) continue;
    Binding& b = r.bindings[p.binding];
    const ExtractionPoint& point = *b.point->point;
    const bool generated = p.token_pos >= r.prompt_len;
    if (generated && point.until == Until::kStopToken &&
        std::find(options_.stop_token_ids.begin(), options_.stop_token_ids.end(),
                  token_at(p.request_order, p.token_pos)) != options_.stop_token_ids.end()) {
      b.done = true;
      continue;
    }
    ActivationRecord record;
    record.request_id = r.id;
    record.point = point.name;
    record.layer = p.layer;
    record.token_pos = p.token_pos;
    record.is_generated = generated;
    record.generated_index = generated ? p.token_pos - r.prompt_len : -1;
    record.tensor_type = point.tensor_type;
    record.values.assign(p.values, p.values + p.length);
    record.timestamp = now;
    if (point.position.needs_total()) {
      if (b.ring.empty() || b.ring.back().front().token_pos != p.token_pos) {
        b.ring.emplace_back();
        if (static_cast<int64_t>(b.ring.size()) > b.point->ring_size) b.ring.pop_front();
      }
      b.ring.back().push_back(std::move(record));
      continue;
    }
    const bool was_stopped = r.stopped;
    if (Route(r, b, std::move(record)) && !was_stopped) stops.push_back({r.seq_id, *r.abort});
  }
  for (const worker::ScheduledSequence& s : plan.scheduled) {
    auto it = requests_.find(s.seq_id);
    if (it == requests_.end()) continue;
    it->second->delivered_upto = std::max<int64_t>(it->second->delivered_upto, s.end_pos());
    it->second->fed_end = std::max<int64_t>(it->second->fed_end, s.end_pos());
  }
  return stops;
}

bool ProbingSession::Route(RequestState& request, Binding& binding, ActivationRecord record) {
  ++counters_->records_routed;
  if (!binding.point->inline_point) {
    // Async: enqueue and return; the queue's policy decides what a full queue loses.
    const PushResult pushed = executor_->Push(binding.queue, std::move(record));
    if (pushed != PushResult::kClosed) ++counters_->async_accepted;
    if (pushed == PushResult::kAcceptedEvicted || pushed == PushResult::kDroppedNewest) {
      ++counters_->async_dropped;
    }
    return false;
  }
  const int64_t pos = record.token_pos;
  const int layer = record.layer;
  std::optional<ProbeSignal> signal = Dispatch(binding, record);
  if (!signal.has_value()) return false;
  if (signal->timestamp == 0.0) signal->timestamp = WallSeconds();
  CountSignal(*binding.point, *signal);
  if (signal->action != ProbeAction::kContinue && !options_.sinks.empty()) {
    WriteAll(options_.sinks, SignalRecord(request.id, binding.point->point->name, *signal));
  }
  if (signal->action == ProbeAction::kFlag && !request.stopped) {
    // Conditional steering: from the token after this one (its row has not run yet).
    const auto triggers = steering_triggers_.find(binding.point->point->name);
    if (triggers != steering_triggers_.end()) {
      for (int group : triggers->second) {
        const bool start =
            spec_.steering[static_cast<size_t>(group)].when->action == SteeringAction::kStart;
        switches_.push_back({request.seq_id, group, static_cast<int32_t>(pos + 1), start});
      }
    }
  }
  if (signal->action == ProbeAction::kEscalate) {
    Escalate(request, binding, pos, layer, *signal);
    return false;
  }
  if (signal->action != ProbeAction::kAbort || request.stopped) return false;
  ++counters_->aborts;
  binding.point->metrics->generation_aborts->Increment();
  request.stopped = true;
  request.stop_pos = pos;
  engine::AbortInfo info("probe", "");
  info.point = binding.point->point->name;
  info.token_pos = pos;
  info.confidence = signal->confidence;
  const bool fallback = signal->metadata.contains("intervention_fallback");
  char detail[160];
  std::snprintf(detail, sizeof(detail), " at token %lld (layer %d%s)", static_cast<long long>(pos),
                layer,
                signal->confidence.has_value()
                    ? (", confidence " + std::to_string(*signal->confidence)).c_str()
                    : "");
  info.reason = "extraction point '" + info.point + "' aborted generation" +
                (fallback ? " (intervention fallback after " +
                                signal->metadata.value("reason", std::string("timeout")) + ")"
                          : std::string()) +
                detail;
  request.abort = info;
  return true;
}

std::optional<ProbeSignal> ProbingSession::Dispatch(Binding& binding,
                                                    const ActivationRecord& record) {
  PointState& ps = *binding.point;
  if (ps.inline_point && ps.policy.mode == InterventionMode::kBlockUntilSignal) {
    return DispatchBlocking(binding, record);
  }
  ++counters_->inline_calls;
  ps.metrics->activations->Increment();
  const Clock::time_point start = Clock::now();
  try {
    std::optional<ProbeSignal> signal = binding.probe->OnActivation(record);
    ps.metrics->latency->Observe(std::chrono::duration<double>(Clock::now() - start).count());
    return signal;
  } catch (const std::exception& e) {
    ps.metrics->latency->Observe(std::chrono::duration<double>(Clock::now() - start).count());
    ++counters_->errors;
    ps.metrics->errors->Increment();
    ps.metrics->fallbacks_exception->Increment();
    UC_LOG(WARNING) << "probe '" << ps.point->name << "' threw on token " << record.token_pos
                    << ": " << e.what();
    return Fallback(*ps.point, ps.policy, "exception", e.what());
  }
}

void ProbingSession::CountSignal(PointState& point, const ProbeSignal& signal) {
  switch (signal.action) {
    case ProbeAction::kContinue:
      point.metrics->signals_continue->Increment();
      break;
    case ProbeAction::kFlag:
      point.metrics->signals_flag->Increment();
      break;
    case ProbeAction::kAbort:
      point.metrics->signals_abort->Increment();
      break;
    case ProbeAction::kEscalate:
      point.metrics->signals_escalate->Increment();
      break;
  }
}

void ProbingSession::RunAsync(PointState& point, Probe& probe, const std::string& request_id,
                              ActivationRecord& record) {
  ++counters_->async_processed;
  point.metrics->activations->Increment();
  const Clock::time_point start = Clock::now();
  std::optional<ProbeSignal> signal;
  try {
    signal = probe.OnActivation(record);
  } catch (const std::exception& e) {
    ++counters_->errors;
    point.metrics->errors->Increment();
    UC_LOG(WARNING) << "async probe '" << point.point->name << "' threw on token "
                    << record.token_pos << " of request '" << request_id << "': " << e.what();
    // What the sinks see of a failed call (v0.1's router_error signal); never stops anything.
    signal = ProbeSignal();
    signal->metadata = {{"router_error", true},
                        {"error_type", "exception"},
                        {"error", e.what()},
                        {"extraction_point_name", point.point->name},
                        {"token_pos", record.token_pos}};
  }
  point.metrics->latency->Observe(std::chrono::duration<double>(Clock::now() - start).count());
  if (!signal.has_value()) return;
  if (signal->timestamp == 0.0) signal->timestamp = WallSeconds();
  CountSignal(point, *signal);
  if (!options_.sinks.empty()) {
    WriteAll(options_.sinks, SignalRecord(request_id, point.point->name, *signal));
  }
}

std::optional<ProbeSignal> ProbingSession::DispatchBlocking(Binding& binding,
                                                            const ActivationRecord& record) {
  PointState& ps = *binding.point;
  const ExtractionPoint& point = *ps.point;
  if (ps.open) {
    const double since = std::chrono::duration<double>(Clock::now() - ps.opened_at).count();
    if (since < options_.circuit_breaker_cooldown_seconds) {
      ++counters_->skipped_open_breaker;
      ps.metrics->breaker_skipped->Increment();
      return std::nullopt;
    }
    ps.metrics->breaker_state->Set(2);  // half-open: this call decides
  }
  auto fail = [&](const std::string& reason, const std::string& error) {
    ++ps.consecutive_failures;
    if (reason == "timeout") {
      ++counters_->timeouts;
      ps.metrics->timeouts->Increment();
      ps.metrics->fallbacks_timeout->Increment();
    } else {
      ++counters_->errors;
      ps.metrics->errors->Increment();
      ps.metrics->fallbacks_exception->Increment();
    }
    if (ps.open || ps.consecutive_failures >= options_.circuit_breaker_threshold) {
      if (!ps.open) {
        UC_LOG(WARNING) << "extraction point '" << point.name << "': circuit breaker open after "
                        << ps.consecutive_failures << " consecutive failures; retrying in "
                        << options_.circuit_breaker_cooldown_seconds << " s";
        ps.metrics->breaker_trips->Increment();
        if (!options_.sinks.empty()) {
          ProbeSignal trip;
          trip.action = ProbeAction::kFlag;
          trip.timestamp = WallSeconds();
          trip.metadata = {{"circuit_breaker", "open"},
                           {"extraction_point_name", point.name},
                           {"consecutive_failures", ps.consecutive_failures},
                           {"cooldown_seconds", options_.circuit_breaker_cooldown_seconds}};
          WriteAll(options_.sinks, SignalRecord(binding.ctx.request_id, point.name, trip));
        }
      }
      ps.metrics->breaker_state->Set(1);
      ps.open = true;
      ps.opened_at = Clock::now();
    }
    return Fallback(point, ps.policy, reason, error);
  };
  if (binding.inflight != nullptr) {
    std::lock_guard<std::mutex> lock(binding.inflight->mu);
    if (!binding.inflight->done) return fail("timeout", "the previous call is still running");
  }
  auto state = std::make_shared<CallState>();
  binding.inflight = state;
  ++counters_->inline_calls;
  ps.metrics->activations->Increment();
  pool_->Submit([probe = binding.probe, record, state] {
    std::optional<ProbeSignal> signal;
    std::string error;
    try {
      signal = probe->OnActivation(record);
    } catch (const std::exception& e) {
      error = e.what();
      if (error.empty()) error = "exception";
    }
    std::lock_guard<std::mutex> lock(state->mu);
    state->signal = std::move(signal);
    state->error = std::move(error);
    state->done = true;
    state->cv.notify_all();
  });
  const Clock::time_point started = Clock::now();
  std::unique_lock<std::mutex> lock(state->mu);
  const auto timeout = std::chrono::milliseconds(ps.policy.timeout_ms.value_or(1000));
  if (!state->cv.wait_for(lock, timeout, [&] { return state->done; })) {
    lock.unlock();
    return fail("timeout", "");
  }
  if (!state->error.empty()) {
    const std::string error = state->error;
    lock.unlock();
    return fail("exception", error);
  }
  ps.metrics->latency->Observe(std::chrono::duration<double>(Clock::now() - started).count());
  ps.consecutive_failures = 0;
  if (ps.open) ps.metrics->breaker_state->Set(0);
  ps.open = false;
  return state->signal;
}

bool ProbingSession::WantsPromptActivations(uint64_t seq_id) {
  (void)seq_id;
  for (const ExtractionPoint& point : spec_.extraction_points) {
    const PositionSelector::Kind kind = point.position.kind();
    const bool generated = kind == PositionSelector::Kind::kGenerated ||
                           kind == PositionSelector::Kind::kGeneratedAll ||
                           kind == PositionSelector::Kind::kGeneratedSlice;
    if (!generated || point.position.offset() < 0) return true;
  }
  return false;
}

bool ProbingSession::WantsFinalToken(uint64_t seq_id, int64_t num_generated) {
  auto it = requests_.find(seq_id);
  if (it == requests_.end() || it->second->stopped) return false;
  const RequestState& r = *it->second;
  const int64_t final_pos = r.prompt_len + num_generated - 1;
  for (const Binding& b : r.bindings) {
    if (Wants(b, final_pos, r.prompt_len, num_generated)) return true;
  }
  return false;
}

void ProbingSession::OnRequestFinished(uint64_t seq_id, int64_t num_generated, bool aborted) {
  auto it = requests_.find(seq_id);
  if (it == requests_.end()) return;
  std::shared_ptr<RequestState> r = std::move(it->second);
  requests_.erase(it);
  if (r->escalation != nullptr) {  // ended while held (e.g. the client went away)
    std::lock_guard<std::mutex> lock(r->escalation->mu);
    r->escalation->decided = true;
  }
  r->escalation.reset();
  std::erase(escalating_, seq_id);
  r->finishing = true;
  // generated[-k]: resolved now that the number of generated tokens is final.
  if (!r->stopped) {
    for (Binding& b : r->bindings) {
      const ExtractionPoint& p = *b.point->point;
      if (!p.position.needs_total()) continue;
      for (std::vector<ActivationRecord>& records : b.ring) {
        if (records.empty() || records.front().token_pos >= r->fed_end ||
            !p.position.Matches(records.front().token_pos, r->prompt_len, 1, num_generated)) {
          continue;
        }
        for (ActivationRecord& record : records) {
          if (Route(*r, b, std::move(record)) || r->stopped) break;
        }
      }
    }
  }
  (void)aborted;
  const auto drain = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(options_.async.drain_timeout_seconds));
  EndRequest(std::move(r), Clock::now() + drain);
}

void ProbingSession::EndRequest(std::shared_ptr<RequestState> r, Clock::time_point deadline) {
  {
    std::lock_guard<std::mutex> lock(ending_mu_);
    ending_[r.get()] = r;
  }
  r->ends.resize(r->bindings.size());
  int async_bindings = 0;
  for (const Binding& b : r->bindings) async_bindings += b.queue != nullptr ? 1 : 0;
  r->pending.store(async_bindings + 1);  // +1: held while the queues are being closed
  for (size_t i = 0; i < r->bindings.size(); ++i) {
    Binding& b = r->bindings[i];
    if (b.queue == nullptr) continue;
    // ending_ holds the request until Finalize; the callback must not (it lives in the queue).
    std::weak_ptr<RequestState> weak = r;
    executor_->Close(b.queue, deadline, [this, weak, i](const AsyncExecutor::EndState& end) {
      std::shared_ptr<RequestState> request = weak.lock();
      if (request == nullptr) return;
      request->ends[i] = end;
      if (request->pending.fetch_sub(1) == 1) Finalize(request);
    });
  }
  if (r->pending.fetch_sub(1) == 1) Finalize(r);
}

void ProbingSession::Finalize(const std::shared_ptr<RequestState>& request) {
  RequestState& r = *request;
  RequestProbeResults out;
  out.request_id = r.id;
  out.abort = r.abort;
  for (size_t i = 0; i < r.bindings.size(); ++i) {
    Binding& b = r.bindings[i];
    ProbeResult result;
    bool ran_on_end = false;
    if (b.inflight != nullptr) {
      // Never run OnEnd while OnActivation may still be running on the pool.
      std::unique_lock<std::mutex> lock(b.inflight->mu);
      b.inflight->cv.wait_for(lock, std::chrono::seconds(5), [&] { return b.inflight->done; });
      if (!b.inflight->done) {
        result.metadata = {{"error", "the probe was still running when the request ended"}};
        ran_on_end = true;  // nothing to call
      }
    }
    const AsyncExecutor::EndState* end = b.queue != nullptr ? &r.ends[i] : nullptr;
    if (end != nullptr && end->still_running) {
      // The probe is busy on a worker past the drain deadline: its OnEnd cannot run now.
      result.metadata = {{"error",
                          "the probe was still running at the drain deadline; no "
                          "verdict"}};
      ran_on_end = true;
    }
    if (!ran_on_end) {
      try {
        result = b.probe->OnEnd(b.ctx);
      } catch (const std::exception& e) {
        ++counters_->errors;
        b.point->metrics->errors->Increment();
        result = ProbeResult();
        result.metadata = {{"error", std::string("on_end threw: ") + e.what()}};
      }
    }
    result.request_id = r.id;
    result.point = b.point->point->name;
    if (!result.metadata.is_object()) result.metadata = nlohmann::json::object();
    if (end != nullptr) {
      result.metadata["queue"] = end->counts.ToJson();
      if (!end->drained) result.metadata["drain_timed_out"] = true;
      if (end->still_running) result.metadata["probe_still_running"] = true;
      counters_->async_dropped += end->counts.dropped_drain_timeout + end->counts.dropped_shutdown;
    }
    if (r.ended_by_shutdown) result.metadata["ended_by"] = "shutdown";
    out.results.push_back(std::move(result));
  }
  for (const ProbeResult& result : out.results) {
    if (!options_.sinks.empty()) WriteAll(options_.sinks, ResultRecord(result));
  }
  {
    std::lock_guard<std::mutex> lock(deliver_mu_);
    ++counters_->results;
    if (on_result_) {
      try {
        on_result_(std::move(out));
      } catch (const std::exception& e) {
        UC_LOG(WARNING) << "probe result callback threw: " << e.what();
      }
    }
  }
  {
    std::lock_guard<std::mutex> lock(ending_mu_);
    ending_.erase(request.get());
  }
  ending_cv_.notify_all();
}

void ProbingSession::Shutdown(bool wait, double timeout_seconds) {
  if (shut_down_) return;
  shut_down_ = true;
  const double seconds =
      timeout_seconds < 0 ? options_.async.drain_timeout_seconds : timeout_seconds;
  const Clock::time_point deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                        std::chrono::duration<double>(seconds));
  // Requests held for an escalation can no longer be decided: the engine aborts them.
  shutdown_holds_.insert(shutdown_holds_.end(), escalating_.begin(), escalating_.end());
  escalating_.clear();
  // Requests still generating end here.
  std::vector<std::shared_ptr<RequestState>> live;
  for (auto& [seq_id, r] : requests_) live.push_back(std::move(r));
  requests_.clear();
  for (std::shared_ptr<RequestState>& r : live) {
    r->ended_by_shutdown = true;
    EndRequest(std::move(r), deadline);
  }
  // Every request still draining: bounded by the deadline; without wait, its backlog goes.
  std::vector<std::shared_ptr<RequestState>> draining;
  {
    std::lock_guard<std::mutex> lock(ending_mu_);
    for (auto& [raw, r] : ending_) draining.push_back(r);
  }
  for (const std::shared_ptr<RequestState>& r : draining) {
    for (Binding& b : r->bindings) {
      if (b.queue == nullptr) continue;
      if (!wait) executor_->Discard(b.queue, DropReason::kShutdown);
      executor_->Close(b.queue, deadline, nullptr);
    }
  }
  draining.clear();
  {
    std::unique_lock<std::mutex> lock(ending_mu_);
    ending_cv_.wait(lock, [this] { return ending_.empty(); });
  }
  if (executor_ != nullptr) executor_->Stop();
}

std::vector<uint64_t> ProbingSession::TakeHolds() {
  std::vector<uint64_t> out;
  out.swap(holds_);
  return out;
}

void ProbingSession::SetWakeup(std::function<void()> wake) {
  std::lock_guard<std::mutex> lock(wake_mu_);
  wake_ = std::move(wake);
}

void ProbingSession::Wake() {
  std::lock_guard<std::mutex> lock(wake_mu_);
  if (wake_) wake_();
}

void ProbingSession::Escalate(RequestState& r, Binding& b, int64_t pos, int layer,
                              const ProbeSignal& signal) {
  PointState& ps = *b.point;
  const ExtractionPoint& point = *ps.point;
  if (r.stopped || r.finishing || r.escalation != nullptr || escalator_ == nullptr ||
      !point.escalation.has_value()) {
    return;  // one hold at a time; nothing to hold at the end; no classifier to ask
  }
  const EscalationConfig& config = *point.escalation;
  auto call = std::make_shared<EscalationCall>();
  call->point = &ps;
  call->token_pos = pos;
  call->layer = layer;
  call->score = signal.confidence;
  call->started = Clock::now();
  call->deadline = call->started + std::chrono::milliseconds(config.timeout_ms);
  r.escalation = call;
  escalating_.push_back(r.seq_id);
  holds_.push_back(r.seq_id);
  ++counters_->escalations;
  ps.metrics->escalations->Increment();
  // The text through token `pos` (the last one released; the one sampled after it is held).
  const size_t end = static_cast<size_t>(std::min<int64_t>(pos + 1, r.tokens.size()));
  const size_t prompt_end = static_cast<size_t>(std::min<int64_t>(r.prompt_len, end));
  const std::span<const int32_t> ids(r.tokens.data(), end);
  nlohmann::json body = {
      {"request_id", r.id},
      {"extraction_point_name", point.name},
      {"token_pos", pos},
      {"layer", layer},
      {"score", signal.confidence ? nlohmann::json(*signal.confidence) : nlohmann::json(nullptr)},
      {"prompt_len", r.prompt_len},
      {"token_ids", std::vector<int32_t>(ids.begin(), ids.end())}};
  if (options_.tokenizer != nullptr) {
    body["prompt"] = options_.tokenizer->Decode(ids.subspan(0, prompt_end));
    body["text"] = options_.tokenizer->Decode(ids.subspan(prompt_end));
  }
  escalator_->Submit(config, body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                     [this, call](EscalationAnswer answer) {
                       {
                         std::lock_guard<std::mutex> lock(call->mu);
                         if (call->decided) return;
                         call->answer = std::move(answer);
                         call->answered = true;
                       }
                       Wake();
                     });
}

std::vector<engine::HoldDecision> ProbingSession::TakeHoldDecisions() {
  std::vector<engine::HoldDecision> out;
  for (uint64_t seq_id : shutdown_holds_) {
    out.push_back({seq_id, engine::AbortInfo("shutdown",
                                             "the probing session shut down while the request "
                                             "was held for an escalation")});
  }
  shutdown_holds_.clear();
  if (escalating_.empty()) return out;
  const Clock::time_point now = Clock::now();
  std::vector<uint64_t> still;
  for (uint64_t seq_id : escalating_) {
    auto it = requests_.find(seq_id);
    if (it == requests_.end() || it->second->escalation == nullptr) continue;
    RequestState& r = *it->second;
    EscalationCall& call = *r.escalation;
    const ExtractionPoint& point = *call.point->point;
    const EscalationConfig& config = *point.escalation;
    EscalationAnswer answer;
    {
      std::lock_guard<std::mutex> lock(call.mu);
      if (!call.answered && now < call.deadline) {
        still.push_back(seq_id);
        continue;
      }
      call.decided = true;
      if (call.answered) {
        answer = call.answer;
      } else {
        answer = {EscalationAnswer::Outcome::kTimeout, "no answer from " + config.url + " within " +
                                                           std::to_string(config.timeout_ms) +
                                                           " ms"};
      }
    }
    PointMetrics& m = *call.point->metrics;
    m.escalation_hold->Observe(std::chrono::duration<double>(now - call.started).count());
    using Outcome = EscalationAnswer::Outcome;
    switch (answer.outcome) {
      case Outcome::kContinue:
        m.escalation_continue->Increment();
        break;
      case Outcome::kAbort:
        m.escalation_abort->Increment();
        break;
      case Outcome::kTimeout:
        m.escalation_timeout->Increment();
        break;
      case Outcome::kError:
        m.escalation_error->Increment();
        break;
    }
    const bool fallback = answer.outcome == Outcome::kTimeout || answer.outcome == Outcome::kError;
    const bool abort =
        answer.outcome == Outcome::kAbort || (fallback && config.on_timeout == OnTimeout::kAbort);
    if (fallback) {
      UC_LOG(WARNING) << "extraction point '" << point.name << "', request '" << r.id
                      << "': escalation " << Name(answer.outcome) << " (" << answer.detail
                      << "); on_timeout " << Name(config.on_timeout);
    }
    if (!options_.sinks.empty()) {
      ProbeSignal s;
      s.action = abort ? ProbeAction::kAbort : ProbeAction::kContinue;
      s.confidence = call.score;
      s.timestamp = WallSeconds();
      s.metadata = {{"escalation", std::string(Name(answer.outcome))},
                    {"extraction_point_name", point.name},
                    {"token_pos", call.token_pos}};
      if (!answer.detail.empty()) s.metadata["detail"] = answer.detail;
      WriteAll(options_.sinks, SignalRecord(r.id, point.name, s));
    }
    engine::HoldDecision d;
    d.seq_id = seq_id;
    if (abort) {
      ++counters_->aborts;
      m.generation_aborts->Increment();
      engine::AbortInfo info("probe", "");
      info.point = point.name;
      info.token_pos = call.token_pos;
      info.confidence = call.score;
      info.reason =
          "extraction point '" + point.name + "' escalated at token " +
          std::to_string(call.token_pos) + " (layer " + std::to_string(call.layer) + ") and " +
          (fallback ? "the classifier did not decide (" + answer.detail + "); on_timeout abort"
                    : std::string("the classifier answered abort"));
      r.stopped = true;
      r.stop_pos = call.token_pos;
      r.abort = info;
      d.abort = std::move(info);
    }
    r.escalation.reset();
    out.push_back(std::move(d));
  }
  escalating_ = std::move(still);
  return out;
}

}  // namespace uc::probe
