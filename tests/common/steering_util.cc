#include "common/steering_util.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "common/test_util.h"

namespace uc::testing {

const nlohmann::json& RequestSteeringReference() {
  static const nlohmann::json* reference =
      new nlohmann::json(LoadJson(TestData("steering/requests.json")));
  return *reference;
}

std::shared_ptr<const worker::SteeringConfig> SteeringConfigOf(const nlohmann::json& c) {
  auto config = std::make_shared<worker::SteeringConfig>();
  for (const auto& v : c["vectors"]) {
    config->vectors.push_back({.layer = v["layer"],
                               .site = *worker::ParseSteeringSite(v["site"]),
                               .tokens = *worker::ParseSteeringTokens(v["tokens"]),
                               .scale = v["scale"],
                               .norm_match = v["norm_match"],
                               .values = JsonFloats(v["values"])});
  }
  return config;
}

engine::RequestSteering RequestSteeringOf(const nlohmann::json& c) {
  engine::RequestSteering steering{SteeringConfigOf(c), {}};
  if (c["from_position"].get<int>() > 0) steering.deferred_groups = {0};
  if (steering.config->empty()) steering.config = nullptr;
  return steering;
}

SteeringRecorder::SteeringRecorder(engine::LLMEngine* engine) : engine_(engine) {}

void SteeringRecorder::OnRequestAdded(uint64_t seq_id, const std::string& request_id,
                                      std::span<const int32_t>) {
  names_[seq_id] = request_id;
}

std::vector<worker::CaptureItem> SteeringRecorder::PlanCapture(
    const worker::SchedulerOutput& plan) {
  std::set<uint32_t> configs;
  for (const worker::ScheduledSequence& s : plan.scheduled) {
    if (s.steering_id != 0) configs.insert(s.steering_id);
  }
  max_configs_per_step = std::max(max_configs_per_step, static_cast<int>(configs.size()));
  worker::CaptureItem item{
      engine_->config().num_hidden_layers, static_cast<uint8_t>(models::Site::kFinalNorm), {}};
  for (int32_t r = 0; r < plan.total_tokens(); ++r) item.rows.push_back(r);
  return {item};
}

std::vector<engine::StopRequest> SteeringRecorder::OnStepExecuted(
    const worker::SchedulerOutput& plan, const std::vector<Tensor>& captured) {
  const int64_t hidden = captured[0].dim(1);
  int32_t row = 0;
  for (const worker::ScheduledSequence& s : plan.scheduled) {
    for (int32_t j = 0; j < s.num_tokens(); ++j, ++row) {
      const float* x = captured[0].data<float>() + row * hidden;
      rows[{names_[s.seq_id], s.start_pos + j}] = std::vector<float>(x, x + hidden);
      const auto sw = switches_.find(names_[s.seq_id]);
      if (sw == switches_.end()) continue;
      const int pos = s.start_pos + j;
      if (sw->second.first > 0 && pos == sw->second.first - 1) {
        engine_->StartSteering(s.seq_id, 0, sw->second.first);
      }
      if (sw->second.second > 0 && pos == sw->second.second - 1) {
        engine_->StopSteering(s.seq_id, 0, sw->second.second);
      }
    }
  }
  return {};
}

void SteeringRecorder::Follow(const std::string& request_id, const nlohmann::json& c) {
  const int from = c["from_position"];
  const int until =
      c.value("until_position", nlohmann::json()).is_null() ? 0 : c["until_position"].get<int>();
  if (from > 0 || until > 0) switches_[request_id] = {from, until};
}

double MaxRelativeRowDiff(const std::map<std::pair<std::string, int>, std::vector<float>>& got,
                          const std::string& got_id,
                          const std::map<std::pair<std::string, int>, std::vector<float>>& want,
                          const std::string& want_id, int positions, int* missing) {
  double worst = 0.0;
  *missing = 0;
  for (int p = 0; p < positions; ++p) {
    const auto g = got.find({got_id, p});
    const auto w = want.find({want_id, p});
    if (g == got.end() || w == want.end()) {
      ++*missing;
      continue;
    }
    double scale = 0.0;
    for (float x : w->second) scale = std::max(scale, double{std::fabs(x)});
    worst = std::max(worst, MaxAbsDiff(g->second, w->second).max_abs / scale);
  }
  return worst;
}

}  // namespace uc::testing
