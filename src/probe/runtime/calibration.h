// File: calibration.h
// -----------------------------------------------------------------------------
// Thresholds at a target false-positive rate, fitted on benign traffic (`undercurrent
// calibrate`). The rate is counted per request: the share of benign requests that a point flags
// or stops. A probe flags a request when its statistic reaches the threshold at some token, so
// what decides is each request's peak statistic, which every built-in verdict reports: "max"
// (trajectory and aggregation probes) or "max_score" (the single-shot scorers and function
// probes). Calibration runs the spec with thresholds no score reaches (so no probe acts and
// every request runs to its end), takes each request's peak per point and picks the lowest
// threshold that at most floor(rate × requests) of them reach.
//
//   Spec quiet = WithoutThresholds(spec);
//   ... run the prompts with `quiet`, collect PeakStatistic(result) per point ...
//   StatusOr<PointCalibration> c = FitThreshold("gate", peaks, 0.01);
//   Spec calibrated = WithThresholds(spec, {*c});
//
// Plain functions and value types.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "probe/probes/probe.h"
#include "probe/spec/spec.h"

namespace uc::probe {

// `spec` with every point's probe_args.threshold set above any score (the largest double) and
// its action "flag", so that running it changes no request.
Spec WithoutThresholds(Spec spec);

// The request's peak statistic at the point: the verdict's "max" or "max_score" (the first
// present and numeric); nullopt when the probe saw no activation or reports neither.
std::optional<double> PeakStatistic(const ProbeResult& result);

// Whether the point flagged or stopped the request: a flag or abort in its signal history.
bool Flagged(const ProbeResult& result);

struct PointCalibration {
  std::string point;
  double threshold = 0.0;
  double target_rate = 0.0;
  int64_t requests = 0;  // calibration requests
  int64_t unscored = 0;  // of which the point saw no activation (never flagged)
  int64_t flagged = 0;   // of which the threshold flags (at most floor(target_rate × requests))
};

// The lowest threshold that at most floor(target_rate × peaks.size()) of the peaks reach (a
// nullopt peak never does). InvalidArgument naming the point when target_rate is not in (0, 1),
// there are no peaks, or none is set.
StatusOr<PointCalibration> FitThreshold(const std::string& point,
                                        const std::vector<std::optional<double>>& peaks,
                                        double target_rate);

// `spec` with probe_args.threshold of each calibrated point set (other points unchanged).
Spec WithThresholds(Spec spec, const std::vector<PointCalibration>& calibrations);

// The calibrated spec file `undercurrent calibrate --out` writes (and the Python package's
// LLM.calibrate): header comments with what it was fitted on (`target_rate`, `requests`, the
// prompts file's name and FNV-1a hash, the model's fingerprint JSON, each point's threshold and
// count), then WithThresholds(spec, calibrations) as YAML.
std::string CalibratedSpecFile(const Spec& spec, const std::vector<PointCalibration>& calibrations,
                               double target_rate, size_t requests, const std::string& prompts_file,
                               uint64_t prompts_hash, const std::string& model_fingerprint_json);

// The Wilson score interval of a binomial proportion at 95%: [low, high] for `hits` of `n`.
struct Interval {
  double low = 0.0;
  double high = 0.0;
};
Interval Wilson95(int64_t hits, int64_t n);

// The central 95% range of Binomial(n, p) as rates: [lo / n, hi / n] with lo the largest count
// such that P(X < lo) <= 2.5% and hi the smallest such that P(X > hi) <= 2.5% (exact). What a
// held-out run's rate should fall in when the threshold's true rate is p.
Interval BinomialRange95(double p, int64_t n);

}  // namespace uc::probe
