#include "probe/runtime/calibration.h"

#include <gtest/gtest.h>

#include <limits>

namespace uc::probe {
namespace {

TEST(FitThresholdTest, AtMostTheTargetShareOfRequestsReachTheThreshold) {
  // 20 requests, peaks 1..20: at 10% two may flag, so the threshold sits just above 18.
  std::vector<std::optional<double>> peaks;
  for (int i = 1; i <= 20; ++i) peaks.push_back(i);
  const auto c = FitThreshold("p", peaks, 0.1);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_GT(c->threshold, 18.0);
  EXPECT_LE(c->threshold, 19.0);
  EXPECT_EQ(c->flagged, 2);
  EXPECT_EQ(c->requests, 20);
  EXPECT_EQ(c->unscored, 0);
  // Below one request's share nothing may flag: just above the largest peak.
  const auto none = FitThreshold("p", peaks, 0.01);
  ASSERT_TRUE(none.ok());
  EXPECT_GT(none->threshold, 20.0);
  EXPECT_EQ(none->flagged, 0);
}

TEST(FitThresholdTest, TiesAndUnscoredRequestsNeverExceedTheShare) {
  // Peaks 5, 5, 5, 1 and 6 requests the point never scored: 10 requests, 30% = 3 may flag, and
  // all three 5s do; at 20% (2) none of the tied 5s may.
  std::vector<std::optional<double>> peaks = {5.0, 5.0, 5.0, 1.0};
  peaks.resize(10);
  auto c = FitThreshold("p", peaks, 0.3);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->flagged, 3);
  EXPECT_LE(c->threshold, 5.0);
  EXPECT_GT(c->threshold, 1.0);
  EXPECT_EQ(c->unscored, 6);
  c = FitThreshold("p", peaks, 0.2);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->flagged, 0);
  EXPECT_GT(c->threshold, 5.0);
  // Every scored request may flag: the threshold is the lowest peak.
  c = FitThreshold("p", peaks, 0.9);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->threshold, 1.0);
  EXPECT_EQ(c->flagged, 4);
}

TEST(FitThresholdTest, BadInputIsAnErrorNamingThePoint) {
  EXPECT_FALSE(FitThreshold("gate", {1.0}, 0.0).ok());
  EXPECT_FALSE(FitThreshold("gate", {1.0}, 1.0).ok());
  const auto empty = FitThreshold("gate", {std::nullopt, std::nullopt}, 0.1);
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("extraction point 'gate'"), std::string::npos);
  EXPECT_NE(empty.status().message().find("no calibration request"), std::string::npos);
}

TEST(CalibrationTest, ThresholdsOffAndOnAgain) {
  auto spec = ParseSpecText(R"(version: "1"
extraction_points:
  - name: a
    layers: [1]
    tensor_type: residual_stream
    position: generated[*]
    probe_type: norm_gate
    probe_kind: single_shot
    probe_args: {threshold: 3.0}
  - name: b
    layers: [2]
    tensor_type: residual_stream
    position: generated[*]
    probe_type: ema
    probe_kind: trajectory
    probe_args: {alpha: 0.5, threshold: 0.2, action: abort}
)");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  const Spec quiet = WithoutThresholds(*spec);
  for (const ExtractionPoint& p : quiet.extraction_points) {
    EXPECT_EQ(p.probe_args["threshold"].get<double>(), std::numeric_limits<double>::max());
    EXPECT_EQ(p.probe_args["action"], "flag");
  }
  PointCalibration a{.point = "a", .threshold = 7.5};
  const Spec calibrated = WithThresholds(*spec, {a});
  EXPECT_EQ(calibrated.extraction_points[0].probe_args["threshold"], 7.5);
  EXPECT_EQ(calibrated.extraction_points[1].probe_args["threshold"], 0.2);
  EXPECT_EQ(calibrated.extraction_points[1].probe_args["action"], "abort");
  // Round trip through the canonical YAML.
  const auto reread = ParseSpecText(WriteSpecYaml(calibrated));
  ASSERT_TRUE(reread.ok()) << reread.status().ToString();
  EXPECT_EQ(reread->extraction_points[0].probe_args["threshold"], 7.5);
}

TEST(CalibrationTest, PeakStatisticAndFlagged) {
  ProbeResult r;
  r.verdict = {{"max_score", 0.7}, {"n", 3}};
  EXPECT_EQ(PeakStatistic(r), 0.7);
  r.verdict = {{"max", 2.5}, {"final", 1.0}};
  EXPECT_EQ(PeakStatistic(r), 2.5);
  r.verdict = {{"max", nullptr}, {"count", 0}};
  EXPECT_EQ(PeakStatistic(r), std::nullopt);
  EXPECT_FALSE(Flagged(r));
  ProbeSignal signal;
  r.signal_history.push_back(signal);
  EXPECT_FALSE(Flagged(r));
  signal.action = ProbeAction::kFlag;
  r.signal_history.push_back(signal);
  EXPECT_TRUE(Flagged(r));
}

TEST(CalibrationTest, BinomialRangeAndWilsonInterval) {
  // Binomial(200, 0.1): mean 20; the 2.5% and 97.5% quantiles are 12 and 29 (scipy).
  const Interval range = BinomialRange95(0.1, 200);
  EXPECT_NEAR(range.low * 200, 12, 1e-9);
  EXPECT_NEAR(range.high * 200, 29, 1e-9);
  const Interval w = Wilson95(20, 200);
  EXPECT_LT(w.low, 0.1);
  EXPECT_GT(w.high, 0.1);
  EXPECT_NEAR(w.low, 0.0657, 1e-3);
  EXPECT_NEAR(w.high, 0.1496, 1e-3);
}

}  // namespace
}  // namespace uc::probe
