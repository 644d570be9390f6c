#include "probe/runtime/probing_session.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>

#include <algorithm>
#include <chrono>
#include <mutex>

#include "base/logging.h"
#include "probe/runtime/session_state.h"

namespace uc::probe {
namespace session_internal {

double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
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
    case TensorType::kResidMid:
      return models::Site::kResidMid;
    case TensorType::kRouterLogits:
      return models::Site::kRouterLogits;
    case TensorType::kExpertWeights:
      return models::Site::kExpertWeights;
    case TensorType::kKv:
      return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace session_internal

using session_internal::LoadSpecSteering;
using session_internal::SiteOf;

int64_t PointWidth(const ExtractionPoint& point, const models::ModelConfig& config) {
  int64_t width = 0;
  for (const PointInput& in : point.Inputs()) {
    const std::optional<models::Site> site = SiteOf(in.tensor_type);
    if (!site.has_value()) return 0;
    width += models::SiteWidth(*site, config);
    if (point.combine != Combine::kConcat) break;
  }
  return width;
}

namespace {

std::string Where(const Spec& spec, const ExtractionPoint& p, int index, const char* field) {
  std::string where;
  if (!spec.source.empty()) where += spec.source.string() + ":";
  if (p.line > 0) where += std::to_string(p.line) + ":";
  if (!where.empty()) where += " ";
  return where + "extraction_points[" + std::to_string(index) + "] '" + p.name + "'." + field +
         ": ";
}

}  // namespace

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
      const bool router = models::IsRouterSite(*SiteOf(type));
      if (router && config.num_experts <= 0) {
        problems.push_back(Where(spec, p, index, type_field) + std::string(Name(type)) +
                           " exists only on a mixture-of-experts model, and this " +
                           config.ModelType() +
                           " model has no experts; capture residual_stream, attn_out or mlp_out");
        continue;
      }
      if (type == TensorType::kResidMid && config.parallel_residual) {
        problems.push_back(Where(spec, p, index, type_field) +
                           "hook_resid_mid does not exist on this model: its blocks are parallel "
                           "(attention and MLP both read the stream before the layer); capture "
                           "attn_out, mlp_out or residual_stream");
      }
      for (int layer : state->layers) {
        if (type == TensorType::kFinalNorm && layer != num_layers) {
          problems.push_back(Where(spec, p, index, "layers") + "final_norm is addressed as layer " +
                             std::to_string(num_layers) + " (the number of decoder layers), got " +
                             std::to_string(layer));
        } else if (type != TensorType::kFinalNorm && layer >= num_layers) {
          problems.push_back(Where(spec, p, index, "layers") + "layer " + std::to_string(layer) +
                             " does not exist: the model has " + std::to_string(num_layers) +
                             " decoder layers (0-" + std::to_string(num_layers - 1) + ")");
        } else if (router && !config.IsMoeLayer(layer)) {
          problems.push_back(Where(spec, p, index, "layers") + "layer " + std::to_string(layer) +
                             " has a dense MLP, not experts, so it has no " +
                             std::string(Name(type)) + "; name a mixture-of-experts layer");
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
    env.hidden_size = static_cast<int>(PointWidth(p, config));
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
      if (ps->type->batched()) {
        b.queue = executor_->OpenBatched(
            ps->queue_depth, ps->overflow,
            [this, point, probe = b.probe, id = request_id](std::span<ActivationRecord> records) {
              RunAsyncBatch(*point, *probe, id, records);
            },
            ps->metrics);
      } else {
        b.queue = executor_->Open(
            ps->queue_depth, ps->overflow,
            [this, point, probe = b.probe, id = request_id](ActivationRecord& record) {
              RunAsync(*point, *probe, id, record);
            },
            ps->metrics);
      }
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

}  // namespace uc::probe
