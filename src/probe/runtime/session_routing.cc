#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>

#include <algorithm>
#include <cstdio>
#include <deque>
#include <map>
#include <span>
#include <tuple>

#include "base/logging.h"
#include "probe/runtime/session_state.h"

namespace uc::probe {

using session_internal::WallSeconds;
using session_internal::Wants;

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
  // combine: concat bindings: the rows of each (request, position, binding), by input; the
  // records are assembled once the step's rows are all in (a token's layers run in one step).
  struct Parts {
    size_t request_order;
    RequestState* request;
    std::vector<std::span<const float>> rows;  // by input; empty until it arrives
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
    // models::SiteWidth of the item's site: hidden_size, or num_experts for the router sites.
    const int64_t width = captured[i].dim(1);
    for (size_t j = 0; j < plan_rows_[i].size(); ++j) {
      const RowRef& ref = plan_rows_[i][j];
      auto it = requests_.find(ref.seq_id);
      if (it == requests_.end()) continue;
      RequestState& r = *it->second;
      const float* row = captured[i].data<float>() + static_cast<int64_t>(j) * width;
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
            if (p.rows.empty()) {
              p = {order.at(ref.seq_id), &r, std::vector<std::span<const float>>(inputs.size())};
            }
            p.rows[k] = std::span<const float>(row, static_cast<size_t>(width));
          }
          continue;
        }
        if (static_cast<uint8_t>(b.point->site) != item.site || !b.point->HasLayer(item.layer)) {
          continue;
        }
        pending.push_back({order.at(ref.seq_id), ref.token_pos, item.layer, bi, row, &r, width});
      }
    }
  }
  std::deque<std::vector<float>> concatenated;  // owns the assembled records' values
  for (auto& [key, p] : parts) {
    const auto& [request, token_pos, bi] = key;
    if (std::any_of(p.rows.begin(), p.rows.end(),
                    [](std::span<const float> row) { return row.empty(); })) {
      continue;
    }
    std::vector<float>& values = concatenated.emplace_back();
    for (std::span<const float> row : p.rows) values.insert(values.end(), row.begin(), row.end());
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
  // First the records (generated[-k] candidates go to their rings), then the batched points'
  // calls, then routing in canonical order: a stop at token p drops the records after p.
  std::vector<Routable> routable;
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
    routable.push_back({&r, &b, std::move(record)});
  }
  std::vector<std::vector<BatchedSignal>> batches = CallBatched(routable);
  std::vector<engine::StopRequest> stops;
  for (Routable& e : routable) {
    RequestState& r = *e.request;
    if (r.stopped && e.record.token_pos > r.stop_pos) continue;
    const std::optional<ProbeSignal>* decided =
        e.batch >= 0 ? &batches[static_cast<size_t>(e.batch)][e.slot].signal : nullptr;
    const bool was_stopped = r.stopped;
    if (Route(r, *e.binding, std::move(e.record), decided) && !was_stopped) {
      stops.push_back({r.seq_id, *r.abort});
    }
  }
  for (const worker::ScheduledSequence& s : plan.scheduled) {
    auto it = requests_.find(s.seq_id);
    if (it == requests_.end()) continue;
    it->second->delivered_upto = std::max<int64_t>(it->second->delivered_upto, s.end_pos());
    it->second->fed_end = std::max<int64_t>(it->second->fed_end, s.end_pos());
  }
  return stops;
}

bool ProbingSession::Route(RequestState& request, Binding& binding, ActivationRecord record,
                           const std::optional<ProbeSignal>* decided) {
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
  std::optional<ProbeSignal> signal = decided != nullptr ? *decided : Dispatch(binding, record);
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
  std::string error;
  try {
    signal = probe.OnActivation(record);
  } catch (const std::exception& e) {
    error = e.what();
  }
  point.metrics->latency->Observe(std::chrono::duration<double>(Clock::now() - start).count());
  DeliverAsync(point, request_id, record.token_pos, std::move(signal), error);
}

void ProbingSession::RunAsyncBatch(PointState& point, Probe& probe, const std::string& request_id,
                                   std::span<ActivationRecord> records) {
  const size_t n = records.size();
  counters_->async_processed += static_cast<int64_t>(n);
  point.metrics->activations->Increment(static_cast<double>(n));
  const Clock::time_point start = Clock::now();
  std::vector<BatchedSignal> out;
  try {
    const std::vector<Probe*> probes(n, &probe);
    out = point.type->OnActivationBatch(probes, records);
    if (out.size() != n) {
      throw std::runtime_error("the probe returned " + std::to_string(out.size()) +
                               " outcomes for " + std::to_string(n) + " records");
    }
  } catch (const std::exception& e) {
    out.assign(n, BatchedSignal{std::nullopt, e.what()});
  }
  // The latency histogram keeps its meaning (seconds per record): the call's share of each.
  const double each = std::chrono::duration<double>(Clock::now() - start).count() / n;
  for (size_t i = 0; i < n; ++i) {
    point.metrics->latency->Observe(each);
    DeliverAsync(point, request_id, records[i].token_pos, std::move(out[i].signal), out[i].error);
  }
}

void ProbingSession::DeliverAsync(PointState& point, const std::string& request_id,
                                  int64_t token_pos, std::optional<ProbeSignal> signal,
                                  const std::string& error) {
  if (!error.empty()) {
    ++counters_->errors;
    point.metrics->errors->Increment();
    UC_LOG(WARNING) << "async probe '" << point.point->name << "' threw on token " << token_pos
                    << " of request '" << request_id << "': " << error;
    // What the sinks see of a failed call (v0.1's router_error signal); never stops anything.
    signal = ProbeSignal();
    signal->metadata = {{"router_error", true},
                        {"error_type", "exception"},
                        {"error", error},
                        {"extraction_point_name", point.point->name},
                        {"token_pos", token_pos}};
  }
  if (!signal.has_value()) return;
  if (signal->timestamp == 0.0) signal->timestamp = WallSeconds();
  CountSignal(point, *signal);
  if (!options_.sinks.empty()) {
    WriteAll(options_.sinks, SignalRecord(request_id, point.point->name, *signal));
  }
}
}  // namespace uc::probe
