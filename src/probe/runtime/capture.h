// File: capture.h
// -----------------------------------------------------------------------------
// Activation capture for datasets (`undercurrent capture`), built on the probing layer without
// changing it: CaptureSpec rewrites a spec so that every extraction point feeds a private
// "capture" probe — inline, reject policy, no arguments, never a verdict that stops anything —
// and a CaptureCollector registered in a private ProbeRegistry keeps what those probes see,
// per request, until the caller takes it.
//
//   CaptureCollector collector(spec);
//   ProbeRegistry registry;
//   UC_RETURN_IF_ERROR(collector.RegisterProbes(registry));
//   auto session = ProbingSession::Create(CaptureSpec(spec), registry, config);
//   engine.SetObserver(session.get());
//   ... when a request finishes: collector.Take(request_id)
//
// The selectors, layers and tensor types of the spec are kept as written, so the captured
// rows are exactly what a probe deployed through the same spec would see.
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "probe/probes/probe.h"
#include "probe/probes/registry.h"
#include "probe/spec/spec.h"

namespace uc::probe {

// Probe types of the capture spec, one per kind.
inline constexpr const char* kCaptureSingleShot = "capture_single_shot";
inline constexpr const char* kCaptureTrajectory = "capture_trajectory";

// `spec` with every point's probe replaced by the capture probe of its kind, run inline with
// the reject policy; probe_args, queue and intervention settings dropped.
Spec CaptureSpec(const Spec& spec);

// Datasets store one row per (layer, tensor type): InvalidArgument naming the file, line and
// point of a `combine: concat` point (capture it without combine; its probe's input is its
// layers' rows one after the other).
Status CheckCapturable(const Spec& spec);

// The points of `spec` as JSON for a dataset manifest: [{name, tensor_type, layers (sorted,
// unique), position (canonical text), stride?, until?, count?}].
nlohmann::json CapturePointsJson(const Spec& spec);

class CaptureCollector {
 public:
  explicit CaptureCollector(const Spec& spec);

  // Registers the two capture probe types into `registry`; their probes report to this
  // collector, which must outlive every probe they spawn.
  Status RegisterProbes(ProbeRegistry& registry);

  // Takes the records captured so far for `request_id`, ordered by (token_pos, layer, point
  // order in the spec) whatever order they arrived in.
  std::vector<ActivationRecord> Take(const std::string& request_id);
  // Records received so far, all requests.
  int64_t num_records() const;

  void Add(const ActivationRecord& record);  // called by the capture probes

 private:
  std::map<std::string, int> point_order_;  // point name -> index in the spec
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::vector<ActivationRecord>> records_;  // by request id
  int64_t num_records_ = 0;
};

}  // namespace uc::probe
