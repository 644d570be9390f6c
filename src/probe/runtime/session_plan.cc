#include <algorithm>
#include <map>
#include <utility>

#include "probe/runtime/session_state.h"

namespace uc::probe {

using session_internal::Wants;

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

namespace session_internal {

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

}  // namespace session_internal

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
}  // namespace uc::probe
