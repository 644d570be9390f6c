#include "probe/runtime/calibration.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/fingerprint.h"

namespace uc::probe {

Spec WithoutThresholds(Spec spec) {
  for (ExtractionPoint& point : spec.extraction_points) {
    if (!point.probe_args.is_object()) point.probe_args = nlohmann::json::object();
    point.probe_args["threshold"] = std::numeric_limits<double>::max();
    point.probe_args["action"] = "flag";
  }
  return spec;
}

std::optional<double> PeakStatistic(const ProbeResult& result) {
  if (!result.verdict.is_object()) return std::nullopt;
  for (const char* key : {"max", "max_score"}) {
    const auto it = result.verdict.find(key);
    if (it != result.verdict.end() && it->is_number()) return it->get<double>();
  }
  return std::nullopt;
}

bool Flagged(const ProbeResult& result) {
  return std::any_of(result.signal_history.begin(), result.signal_history.end(),
                     [](const ProbeSignal& s) { return s.action != ProbeAction::kContinue; });
}

StatusOr<PointCalibration> FitThreshold(const std::string& point,
                                        const std::vector<std::optional<double>>& peaks,
                                        double target_rate) {
  const std::string where = "extraction point '" + point + "': ";
  if (!(target_rate > 0.0 && target_rate < 1.0)) {
    return InvalidArgumentError(where + "the target false-positive rate must be in (0, 1), got " +
                                std::to_string(target_rate));
  }
  std::vector<double> scored;
  for (const std::optional<double>& p : peaks) {
    if (p.has_value()) scored.push_back(*p);
  }
  if (scored.empty()) {
    return InvalidArgumentError(
        where + "no calibration request gave it a score (" + std::to_string(peaks.size()) +
        " requests): check its position and probe, or give more or longer prompts");
  }
  std::sort(scored.begin(), scored.end(), std::greater<>());
  PointCalibration c;
  c.point = point;
  c.target_rate = target_rate;
  c.requests = static_cast<int64_t>(peaks.size());
  c.unscored = c.requests - static_cast<int64_t>(scored.size());
  const auto allowed =
      static_cast<size_t>(std::floor(target_rate * static_cast<double>(c.requests)));
  if (allowed >= scored.size()) {
    c.threshold = scored.back();  // every scored request may flag
  } else {
    // Just above the (allowed + 1)-th largest peak: only the peaks strictly above it reach it.
    c.threshold = std::nextafter(scored[allowed], std::numeric_limits<double>::infinity());
  }
  c.flagged =
      std::count_if(scored.begin(), scored.end(), [&](double p) { return p >= c.threshold; });
  return c;
}

Spec WithThresholds(Spec spec, const std::vector<PointCalibration>& calibrations) {
  for (ExtractionPoint& point : spec.extraction_points) {
    for (const PointCalibration& c : calibrations) {
      if (c.point != point.name) continue;
      if (!point.probe_args.is_object()) point.probe_args = nlohmann::json::object();
      point.probe_args["threshold"] = c.threshold;
    }
  }
  return spec;
}

Interval Wilson95(int64_t hits, int64_t n) {
  if (n <= 0) return {0.0, 1.0};
  constexpr double z = 1.959963984540054;
  const double nn = static_cast<double>(n);
  const double p = static_cast<double>(hits) / nn;
  const double denominator = 1.0 + z * z / nn;
  const double center = (p + z * z / (2.0 * nn)) / denominator;
  const double half = z * std::sqrt(p * (1.0 - p) / nn + z * z / (4.0 * nn * nn)) / denominator;
  return {std::max(0.0, center - half), std::min(1.0, center + half)};
}

Interval BinomialRange95(double p, int64_t n) {
  if (n <= 0) return {0.0, 1.0};
  const double nn = static_cast<double>(n);
  const auto pmf = [&](int64_t k) {
    if (p <= 0.0) return k == 0 ? 1.0 : 0.0;
    if (p >= 1.0) return k == n ? 1.0 : 0.0;
    const double kk = static_cast<double>(k);
    return std::exp(std::lgamma(nn + 1) - std::lgamma(kk + 1) - std::lgamma(nn - kk + 1) +
                    kk * std::log(p) + (nn - kk) * std::log1p(-p));
  };
  int64_t lo = 0;
  double below = 0.0;  // P(X < lo)
  while (lo < n && below + pmf(lo) <= 0.025) below += pmf(lo++);
  int64_t hi = n;
  double above = 0.0;  // P(X > hi)
  while (hi > 0 && above + pmf(hi) <= 0.025) above += pmf(hi--);
  return {static_cast<double>(lo) / nn, static_cast<double>(hi) / nn};
}

std::string CalibratedSpecFile(const Spec& spec, const std::vector<PointCalibration>& calibrations,
                               double target_rate, size_t requests, const std::string& prompts_file,
                               uint64_t prompts_hash, const std::string& model_fingerprint_json) {
  std::ostringstream out;
  out << "# Calibrated by `undercurrent calibrate`: each point's threshold is the lowest that at "
         "most\n# a share "
      << target_rate << " of the " << requests << " calibration requests reach (" << prompts_file
      << ", fnv1a64 " << Hex64(prompts_hash) << ").\n# model: " << model_fingerprint_json << "\n";
  for (const PointCalibration& c : calibrations) {
    out << "# point " << c.point << ": threshold " << nlohmann::json(c.threshold).dump() << ", "
        << c.flagged << " of " << c.requests << " calibration requests reach it\n";
  }
  out << WriteSpecYaml(WithThresholds(spec, calibrations));
  return out.str();
}

}  // namespace uc::probe
