// File: probe_test_util.h
// -----------------------------------------------------------------------------
// Helpers for the probe-layer tests: synthetic activation records, extraction points, and a
// driver that runs one fresh probe instance through its whole lifecycle the way the router
// does (OnStart, OnActivation per record in order, OnEnd once).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "probe/probes/probe.h"
#include "probe/probes/registry.h"

namespace uc::probe::testing {

inline ActivationRecord Record(std::vector<float> values, int64_t token_pos = 0,
                               std::string point = "p", std::string request_id = "req-1") {
  ActivationRecord record;
  record.request_id = std::move(request_id);
  record.point = std::move(point);
  record.layer = 2;
  record.token_pos = token_pos;
  record.values = std::move(values);
  record.timestamp = 1700000000.5;
  return record;
}

// `n` records whose activations are constant: value scores[i] in every element (so their mean
// is scores[i]).
inline std::vector<ActivationRecord> ConstantRecords(const std::vector<double>& scores,
                                                     int hidden_size = 4) {
  std::vector<ActivationRecord> records;
  for (size_t i = 0; i < scores.size(); ++i) {
    records.push_back(
        Record(std::vector<float>(static_cast<size_t>(hidden_size), static_cast<float>(scores[i])),
               static_cast<int64_t>(i)));
  }
  return records;
}

inline ExtractionPoint Point(std::string name, std::string probe_type, ProbeKind kind,
                             nlohmann::json args = nlohmann::json::object()) {
  ExtractionPoint point;
  point.name = std::move(name);
  point.layers = {2};
  point.probe_type = std::move(probe_type);
  point.probe_kind = kind;
  point.probe_args = std::move(args);
  return point;
}

struct ProbeRun {
  std::vector<std::optional<ProbeSignal>> signals;  // one per record
  ProbeResult result;
};

// Spawns a fresh instance of `type` and runs it over `records`.
inline ProbeRun RunProbe(const ProbeType& type, const std::vector<ActivationRecord>& records,
                         const ExtractionPoint* point = nullptr) {
  RequestContext ctx;
  ctx.request_id = "req-1";
  ctx.point = point;
  std::unique_ptr<Probe> probe = type.Spawn();
  ProbeRun run;
  probe->OnStart(ctx);
  for (const ActivationRecord& record : records) run.signals.push_back(probe->OnActivation(record));
  run.result = probe->OnEnd(ctx);
  return run;
}

// Index of the first signal with `action`, or -1.
inline int FirstWith(const ProbeRun& run, ProbeAction action) {
  for (size_t i = 0; i < run.signals.size(); ++i) {
    if (run.signals[i] && run.signals[i]->action == action) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace uc::probe::testing
