#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>

#include <chrono>
#include <mutex>

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
}  // namespace uc::probe
