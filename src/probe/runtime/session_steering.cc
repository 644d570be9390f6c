#include <algorithm>
#include <filesystem>

#include "models/steering.h"
#include "probe/runtime/session_state.h"

namespace uc::probe {
namespace {

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

}  // namespace

namespace session_internal {

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

}  // namespace session_internal

std::vector<engine::SteeringSwitch> ProbingSession::TakeSteeringSwitches() {
  std::vector<engine::SteeringSwitch> out;
  out.swap(switches_);
  return out;
}
}  // namespace uc::probe
