#include "probe/spec/spec.h"

#include <array>

#include "probe/spec/spec_util.h"

namespace uc::probe {
namespace internal {
namespace {

constexpr std::array<std::string_view, 7> kTensorTypes = {
    "residual_stream", "attn_out",      "mlp_out",       "kv",
    "final_norm",      "router_logits", "expert_weights"};
constexpr std::array<std::string_view, 2> kProbeKinds = {"single_shot", "trajectory"};
constexpr std::array<std::string_view, 2> kExecutionModes = {"inline", "async"};
constexpr std::array<std::string_view, 3> kUntils = {"generation_end", "fixed_count", "stop_token"};
constexpr std::array<std::string_view, 2> kInterventionModes = {"reject", "block_until_signal"};
constexpr std::array<std::string_view, 2> kOnTimeouts = {"continue", "abort"};
constexpr std::array<std::string_view, 3> kOverflowPolicies = {"drop_oldest", "drop_newest",
                                                               "block"};
constexpr std::array<std::string_view, 2> kCombines = {"none", "concat"};

}  // namespace

template <>
std::span<const std::string_view> EnumNames<TensorType>() {
  return kTensorTypes;
}
template <>
std::span<const std::string_view> EnumNames<ProbeKind>() {
  return kProbeKinds;
}
template <>
std::span<const std::string_view> EnumNames<ExecutionMode>() {
  return kExecutionModes;
}
template <>
std::span<const std::string_view> EnumNames<Until>() {
  return kUntils;
}
template <>
std::span<const std::string_view> EnumNames<InterventionMode>() {
  return kInterventionModes;
}
template <>
std::span<const std::string_view> EnumNames<OnTimeout>() {
  return kOnTimeouts;
}
template <>
std::span<const std::string_view> EnumNames<OverflowPolicy>() {
  return kOverflowPolicies;
}
template <>
std::span<const std::string_view> EnumNames<Combine>() {
  return kCombines;
}

}  // namespace internal

namespace {
template <typename E>
std::string_view NameOf(E v) {
  return internal::EnumNames<E>()[static_cast<size_t>(v)];
}
}  // namespace

std::string_view Name(TensorType v) {
  return v == TensorType::kResidMid ? std::string_view("resid_mid") : NameOf(v);
}
std::string_view Name(ProbeKind v) { return NameOf(v); }
std::string_view Name(ExecutionMode v) { return NameOf(v); }
std::string_view Name(Until v) { return NameOf(v); }
std::string_view Name(InterventionMode v) { return NameOf(v); }
std::string_view Name(OnTimeout v) { return NameOf(v); }
std::string_view Name(OverflowPolicy v) { return NameOf(v); }
std::string_view Name(Combine v) { return NameOf(v); }

std::vector<PointInput> ExtractionPoint::Inputs() const {
  std::vector<PointInput> inputs;
  const std::vector<TensorType> types =
      tensor_types.empty() ? std::vector<TensorType>{tensor_type} : tensor_types;
  for (int layer : layers) {
    for (TensorType type : types) inputs.push_back({layer, type});
  }
  return inputs;
}
std::string_view Name(SteeringAction v) { return v == SteeringAction::kStop ? "stop" : "start"; }

}  // namespace uc::probe
