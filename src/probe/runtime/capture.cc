#include "probe/runtime/capture.h"

#include <algorithm>
#include <memory>
#include <tuple>

namespace uc::probe {
namespace {

using nlohmann::json;

// Hands every record to the collector; never says anything that could stop a request.
class CaptureProbe : public Probe {
 public:
  explicit CaptureProbe(CaptureCollector* collector) : collector_(collector) {}
  std::optional<ProbeSignal> OnActivation(const ActivationRecord& record) override {
    collector_->Add(record);
    return std::nullopt;
  }
  ProbeResult OnEnd(const RequestContext& ctx) override {
    ProbeResult result;
    result.request_id = ctx.request_id;
    if (ctx.point != nullptr) result.point = ctx.point->name;
    result.verdict = "captured";
    return result;
  }

 private:
  CaptureCollector* collector_;
};

class CaptureProbeType : public ProbeType {
 public:
  CaptureProbeType(ProbeKind kind, CaptureCollector* collector)
      : kind_(kind), collector_(collector) {}
  ProbeKind kind() const override { return kind_; }
  std::unique_ptr<Probe> Spawn() const override {
    return std::make_unique<CaptureProbe>(collector_);
  }

 private:
  ProbeKind kind_;
  CaptureCollector* collector_;
};

}  // namespace

Spec CaptureSpec(const Spec& spec) {
  Spec capture = spec;
  for (ExtractionPoint& p : capture.extraction_points) {
    p.probe_type = p.probe_kind == ProbeKind::kTrajectory ? kCaptureTrajectory : kCaptureSingleShot;
    p.probe_args = json::object();
    p.execution_mode = ExecutionMode::kInline;
    p.queue_depth.reset();
    p.overflow_policy.reset();
    p.intervention = InterventionPolicy{};
  }
  return capture;
}

Status CheckCapturable(const Spec& spec) {
  for (size_t i = 0; i < spec.extraction_points.size(); ++i) {
    const ExtractionPoint& p = spec.extraction_points[i];
    if (p.combine == Combine::kNone) continue;
    return InvalidArgumentError(
        (spec.source.empty() ? "" : spec.source.string() + ":" + std::to_string(p.line) + ": ") +
        "extraction_points[" + std::to_string(i) + "] '" + p.name +
        "'.combine: capture stores one row per layer and tensor type; remove combine (and list "
        "one tensor_type) to capture this point's rows — its probe's input is those rows one "
        "after the other, layer-major");
  }
  return OkStatus();
}

json CapturePointsJson(const Spec& spec) {
  json points = json::array();
  for (const ExtractionPoint& p : spec.extraction_points) {
    std::vector<int> layers = p.layers;
    std::sort(layers.begin(), layers.end());
    layers.erase(std::unique(layers.begin(), layers.end()), layers.end());
    json point = {{"name", p.name},
                  {"tensor_type", std::string(Name(p.tensor_type))},
                  {"layers", layers},
                  {"position", p.position.ToString()}};
    if (p.stride) point["stride"] = *p.stride;
    if (p.until) point["until"] = std::string(Name(*p.until));
    if (p.count) point["count"] = *p.count;
    points.push_back(std::move(point));
  }
  return points;
}

CaptureCollector::CaptureCollector(const Spec& spec) {
  for (size_t i = 0; i < spec.extraction_points.size(); ++i) {
    point_order_[spec.extraction_points[i].name] = static_cast<int>(i);
  }
}

Status CaptureCollector::RegisterProbes(ProbeRegistry& registry) {
  for (const ProbeKind kind : {ProbeKind::kSingleShot, ProbeKind::kTrajectory}) {
    const char* name = kind == ProbeKind::kTrajectory ? kCaptureTrajectory : kCaptureSingleShot;
    UC_RETURN_IF_ERROR(registry.Register(
        name, kind,
        [this, kind](const json& /*args*/,
                     const ProbeEnv& /*env*/) -> StatusOr<std::unique_ptr<ProbeType>> {
          return std::unique_ptr<ProbeType>(std::make_unique<CaptureProbeType>(kind, this));
        },
        /*override=*/true));
  }
  return OkStatus();
}

void CaptureCollector::Add(const ActivationRecord& record) {
  std::lock_guard<std::mutex> lock(mu_);
  records_[record.request_id].push_back(record);
  ++num_records_;
}

std::vector<ActivationRecord> CaptureCollector::Take(const std::string& request_id) {
  std::vector<ActivationRecord> records;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = records_.find(request_id);
    if (it == records_.end()) return records;
    records = std::move(it->second);
    records_.erase(it);
  }
  auto key = [this](const ActivationRecord& r) {
    auto order = point_order_.find(r.point);
    return std::make_tuple(r.token_pos, r.layer, order == point_order_.end() ? -1 : order->second);
  };
  std::stable_sort(
      records.begin(), records.end(),
      [&](const ActivationRecord& a, const ActivationRecord& b) { return key(a) < key(b); });
  return records;
}

int64_t CaptureCollector::num_records() const {
  std::lock_guard<std::mutex> lock(mu_);
  return num_records_;
}

}  // namespace uc::probe
