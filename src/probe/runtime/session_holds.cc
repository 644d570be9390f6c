#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>

#include <algorithm>
#include <mutex>

#include "base/logging.h"
#include "probe/runtime/session_state.h"

namespace uc::probe {

using session_internal::WallSeconds;

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
