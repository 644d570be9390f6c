#include "probe/sinks/sink.h"

namespace uc::probe {

using nlohmann::json;

json SignalRecord(const std::string& request_id, const std::string& point,
                  const ProbeSignal& signal) {
  return {{"kind", "signal"},
          {"request_id", request_id},
          {"extraction_point_name", point},
          {"timestamp", UnixSeconds()},
          {"payload", signal.ToJson()}};
}

json ResultRecord(const ProbeResult& result) {
  return {{"kind", "result"},
          {"request_id", result.request_id},
          {"extraction_point_name", result.point},
          {"timestamp", UnixSeconds()},
          {"payload", result.ToJson()}};
}

void MemorySink::Write(const json& record) {
  std::lock_guard<std::mutex> lock(mu_);
  records_.push_back(record);
}

std::vector<json> MemorySink::records() const {
  std::lock_guard<std::mutex> lock(mu_);
  return records_;
}

size_t MemorySink::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return records_.size();
}

void WriteAll(const std::vector<std::shared_ptr<Sink>>& sinks, const json& record) {
  for (const std::shared_ptr<Sink>& sink : sinks) sink->Write(record);
}

}  // namespace uc::probe
