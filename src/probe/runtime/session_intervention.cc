#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>

#include <chrono>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/logging.h"
#include "probe/runtime/session_state.h"

namespace uc::probe {
namespace session_internal {

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

}  // namespace session_internal

using session_internal::Fallback;
using session_internal::WallSeconds;

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
std::vector<std::vector<BatchedSignal>> ProbingSession::CallBatched(
    std::vector<Routable>& routable) {
  std::unordered_map<PointState*, int> batch_of;
  std::vector<PointState*> points;
  std::vector<std::vector<size_t>> members;  // per batch: indices into `routable`
  for (size_t i = 0; i < routable.size(); ++i) {
    Routable& e = routable[i];
    PointState& ps = *e.binding->point;
    if (!ps.inline_point || !ps.type->batched() ||
        ps.policy.mode == InterventionMode::kBlockUntilSignal) {
      continue;
    }
    const auto [it, added] = batch_of.try_emplace(&ps, static_cast<int>(points.size()));
    if (added) {
      points.push_back(&ps);
      members.emplace_back();
    }
    e.batch = it->second;
    e.slot = members[static_cast<size_t>(it->second)].size();
    members[static_cast<size_t>(it->second)].push_back(i);
  }
  std::vector<std::vector<BatchedSignal>> out(points.size());
  for (size_t k = 0; k < points.size(); ++k) {
    PointState& ps = *points[k];
    const size_t n = members[k].size();
    std::vector<Probe*> probes;
    std::vector<ActivationRecord> records;
    probes.reserve(n);
    records.reserve(n);
    for (size_t i : members[k]) {
      probes.push_back(routable[i].binding->probe.get());
      records.push_back(std::move(routable[i].record));
    }
    counters_->inline_calls += static_cast<int64_t>(n);
    ps.metrics->activations->Increment(static_cast<double>(n));
    std::string error;
    const Clock::time_point start = Clock::now();
    try {
      out[k] = ps.type->OnActivationBatch(probes, records);
      if (out[k].size() != n) {
        error = "the batch call returned " + std::to_string(out[k].size()) + " signals for " +
                std::to_string(n) + " records";
      }
    } catch (const std::exception& e) {
      error = e.what();
      if (error.empty()) error = "exception";
    }
    ps.metrics->latency->Observe(std::chrono::duration<double>(Clock::now() - start).count());
    if (!error.empty()) out[k].assign(n, BatchedSignal{std::nullopt, error});
    for (size_t j = 0; j < n; ++j) {
      BatchedSignal& outcome = out[k][j];
      if (outcome.error.empty()) continue;
      // As a throwing OnActivation: counted, logged, and the policy's fallback decides.
      ++counters_->errors;
      ps.metrics->errors->Increment();
      ps.metrics->fallbacks_exception->Increment();
      UC_LOG(WARNING) << "probe '" << ps.point->name << "' threw on token " << records[j].token_pos
                      << ": " << outcome.error;
      outcome.signal = Fallback(*ps.point, ps.policy, "exception", outcome.error);
    }
    for (size_t j = 0; j < n; ++j) routable[members[k][j]].record = std::move(records[j]);
  }
  return out;
}

}  // namespace uc::probe
