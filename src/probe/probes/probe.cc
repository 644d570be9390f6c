#include "probe/probes/probe.h"

#include <chrono>

namespace uc::probe {

using nlohmann::json;

json ActivationRecord::Metadata() const {
  return {
      {"request_id", request_id},
      {"extraction_point_name", point},
      {"layer", layer},
      {"token_pos", token_pos},
      {"tensor_type", std::string(Name(tensor_type))},
      {"is_generated", is_generated},
      {"generated_index", generated_index >= 0 ? json(generated_index) : json(nullptr)},
      {"timestamp", timestamp},
  };
}

std::string_view Name(ProbeAction a) {
  switch (a) {
    case ProbeAction::kContinue:
      return "continue";
    case ProbeAction::kFlag:
      return "flag";
    case ProbeAction::kAbort:
      return "abort";
    case ProbeAction::kEscalate:
      return "escalate";
  }
  return "unknown";
}

json ProbeSignal::ToJson() const {
  return {
      {"action", std::string(Name(action))},
      {"confidence", confidence ? json(*confidence) : json(nullptr)},
      {"metadata", metadata},
      {"timestamp", timestamp},
  };
}

json ProbeResult::ToJson() const {
  json history = json::array();
  for (const ProbeSignal& signal : signal_history) history.push_back(signal.ToJson());
  return {
      {"request_id", request_id}, {"extraction_point_name", point},
      {"verdict", verdict},       {"signal_history", std::move(history)},
      {"metadata", metadata},
  };
}

double UnixSeconds() {
  const auto since_epoch = std::chrono::system_clock::now().time_since_epoch();
  return std::chrono::duration<double>(since_epoch).count();
}

std::vector<BatchedSignal> ProbeType::OnActivationBatch(
    std::span<Probe* const> probes, std::span<const ActivationRecord> records) const {
  std::vector<BatchedSignal> out(records.size());
  for (size_t i = 0; i < records.size(); ++i) {
    try {
      out[i].signal = probes[i]->OnActivation(records[i]);
    } catch (const std::exception& e) {
      out[i].error = e.what();
      if (out[i].error.empty()) out[i].error = "exception";
    }
  }
  return out;
}

}  // namespace uc::probe
