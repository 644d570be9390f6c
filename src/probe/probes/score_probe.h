// File: score_probe.h
// -----------------------------------------------------------------------------
// The machinery shared by the scoring probes (the single_shot built-ins, function probes, and
// the trajectory built-ins): a Scorer turns one activation into a number, and
// RecordingProbe keeps a probe's signal_history and builds its result.
//
// MakeScoreProbeType wraps a Scorer into a single_shot ProbeType with the threshold rule every
// scoring probe shares: a record scored s emits `action` when a threshold is set and
// s >= threshold, else continue; confidence = s, metadata {"score": s} (+ {"probe": name} when
// named). Records the scorer has no opinion on (nullopt) emit nothing and are not counted.
// Verdict: {"flagged", "max_score" (null before any score), "n"} (+ "last_score").
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "probe/probes/probe.h"

namespace uc::probe {

// Scores one activation. Immutable and shared by every instance of a probe type; thread-safe.
class Scorer {
 public:
  virtual ~Scorer() = default;
  // nullopt: no opinion on this record.
  virtual std::optional<double> Score(const ActivationRecord& record) const = 0;
};

// A Probe that records the signals it emits (stamped with the current time) and returns them
// as its result's signal_history.
class RecordingProbe : public Probe {
 protected:
  // Builds a signal, appends it to the history and returns it.
  ProbeSignal Emit(ProbeAction action, std::optional<double> confidence, nlohmann::json metadata);
  // Remembers the record's point name (for a result when the context names no point).
  void Saw(const ActivationRecord& record);
  // The result: ctx's request id and point name, `verdict`, the history.
  ProbeResult Finish(const RequestContext& ctx, nlohmann::json verdict);

 private:
  std::vector<ProbeSignal> history_;
  std::string point_seen_;
};

struct ScoreProbeOptions {
  std::optional<double> threshold;  // none: never acts, only continue signals
  ProbeAction action = ProbeAction::kAbort;
  std::string probe_name;           // adds {"probe": name} to signal metadata when non-empty
  bool verdict_last_score = false;  // adds "last_score" to the verdict
};

// A single_shot ProbeType. REQUIRES: scorer != nullptr.
std::unique_ptr<ProbeType> MakeScoreProbeType(std::shared_ptr<const Scorer> scorer,
                                              ScoreProbeOptions options);

}  // namespace uc::probe
