// `undercurrent calibrate` on the bundled stories260K: thresholds fitted at a 10% per-request
// false-positive rate on one half of 400 prompts give, on the other half (`calibrate
// --measure`), a rate inside the central 95% range of Binomial(200, 0.1), for a single-shot
// linear probe and an EMA-max monitor; the calibrated spec validates and records the rate, the
// sample count and the model fingerprint; bad input is a usage error or a named failure.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "common/test_util.h"
#include "probe/runtime/calibration.h"

namespace uc {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const char* const kWords[] = {"once",  "upon",  "a",      "time",    "there",   "was",  "little",
                              "girl",  "named", "lily",   "who",     "lived",   "in",   "small",
                              "house", "near",  "the",    "woods",   "with",    "her",  "mother",
                              "dog",   "max",   "every",  "morning", "she",     "went", "out",
                              "to",    "play",  "garden", "where",   "flowers", "red",  "yellow",
                              "birds", "sang",  "big",    "old",     "tree",    "by",   "fence"};

// `n` prompts of 3 to 9 words drawn with `seed`.
void WritePrompts(const fs::path& path, const std::string& prefix, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> length(3, 9);
  std::uniform_int_distribution<size_t> word(0, std::size(kWords) - 1);
  std::ofstream out(path);
  for (int i = 0; i < n; ++i) {
    std::string prompt;
    for (int w = length(rng); w > 0; --w)
      prompt += std::string(prompt.empty() ? "" : " ") + kWords[word(rng)];
    out << json({{"id", prefix + std::to_string(i)}, {"prompt", prompt}}).dump() << "\n";
  }
}

class CalibrateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // One directory per test: ctest runs the tests of this suite in parallel.
    dir_ = testing::ScratchDir(std::string("calibrate/") +
                               ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::mt19937 rng(11);
    std::normal_distribution<float> normal(0.0f, 0.125f);
    std::vector<float> w(64);
    for (float& x : w) x = normal(rng);
    std::ofstream(dir_ / "direction.json") << json({{"weight", w}}).dump();
    std::ofstream(dir_ / "spec.yaml") << R"(version: "1"
extraction_points:
  - name: direction
    layers: [4]
    tensor_type: residual_stream
    position: generated[*]
    probe_type: linear
    probe_kind: single_shot
    probe_args: {weights: direction.json, action: flag}
  - name: monitor
    layers: [2]
    tensor_type: residual_stream
    position: generated[*]
    probe_type: ema_max
    probe_kind: trajectory
    probe_args: {weights: direction.json, alpha: 0.3, action: flag}
)";
    WritePrompts(dir_ / "fit.jsonl", "fit-", 200, 1);
    WritePrompts(dir_ / "heldout.jsonl", "heldout-", 200, 2);
  }

  int Calibrate(const std::string& args, std::string* output) {
    return testing::RunCommand(testing::CliBinary().string() + " calibrate --model " +
                                   std::string(UC_SOURCE_DIR) + "/models/stories260K " +
                                   "--max-tokens 8 --json " + args + " 2>&1",
                               output);
  }

  // The JSON line of the command's output.
  static json JsonLine(const std::string& output) {
    const size_t at = output.rfind("\n{") == std::string::npos ? 0 : output.rfind("\n{") + 1;
    return json::parse(output.substr(at, output.find('\n', at) - at));
  }

  fs::path dir_;
};

TEST_F(CalibrateTest, HeldOutRateIsWithinTheBinomialRangeOfTheTarget) {
  const fs::path calibrated = dir_ / "spec.calibrated.yaml";
  std::string output;
  ASSERT_EQ(Calibrate("--spec " + (dir_ / "spec.yaml").string() + " --prompts " +
                          (dir_ / "fit.jsonl").string() + " --target-fpr 0.1 --out " +
                          calibrated.string(),
                      &output),
            0)
      << output;
  const json fitted = JsonLine(output);
  ASSERT_EQ(fitted["points"].size(), 2u) << output;
  for (const json& p : fitted["points"]) {
    EXPECT_EQ(p["requests"], 200);
    EXPECT_EQ(p["flagged"], 20) << p.dump();  // floor(0.1 × 200): continuous scores, no ties
  }
  std::ifstream in(calibrated);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("a share 0.1 of the 200 calibration requests"), std::string::npos) << text;
  EXPECT_NE(text.find("\"norm_weight_fnv1a64\""), std::string::npos) << text;  // the model
  EXPECT_NE(text.find("# point monitor: threshold "), std::string::npos) << text;
  std::string validated;
  EXPECT_EQ(
      testing::RunCommand(
          testing::CliBinary().string() + " validate " + calibrated.string() + " 2>&1", &validated),
      0)
      << validated;

  ASSERT_EQ(Calibrate("--spec " + calibrated.string() + " --prompts " +
                          (dir_ / "heldout.jsonl").string() + " --measure",
                      &output),
            0)
      << output;
  const probe::Interval range = probe::BinomialRange95(0.1, 200);
  const json measured = JsonLine(output);
  ASSERT_EQ(measured["points"].size(), 2u) << output;
  for (const json& p : measured["points"]) {
    const double rate = p["rate"];
    std::printf("%s: held-out rate %.3f (Binomial(200, 0.1) 95%%: %.3f-%.3f)\n",
                p["point"].get<std::string>().c_str(), rate, range.low, range.high);
    EXPECT_GE(rate, range.low) << p.dump();
    EXPECT_LE(rate, range.high) << p.dump();
  }
  // On the calibration half itself the thresholds flag exactly the fitted share.
  ASSERT_EQ(Calibrate("--spec " + calibrated.string() + " --prompts " +
                          (dir_ / "fit.jsonl").string() + " --measure",
                      &output),
            0);
  const json again = JsonLine(output);
  ASSERT_EQ(again["points"].size(), 2u) << output;
  for (const json& p : again["points"]) EXPECT_EQ(p["flagged"], 20) << p.dump();
}

TEST_F(CalibrateTest, BadInputIsNamed) {
  std::string output;
  const std::string spec = " --spec " + (dir_ / "spec.yaml").string();
  const std::string prompts = " --prompts " + (dir_ / "fit.jsonl").string();
  EXPECT_EQ(Calibrate(spec + prompts + " --out " + (dir_ / "x.yaml").string(), &output), 2)
      << output;  // no --target-fpr
  EXPECT_NE(output.find("--target-fpr"), std::string::npos) << output;
  EXPECT_NE(Calibrate(spec + prompts + " --target-fpr 1.5 --out x.yaml", &output), 0);
  // A point no request ever scores (a position past every prompt) names the point.
  std::ofstream(dir_ / "never.yaml") << R"(version: "1"
extraction_points:
  - name: far
    layers: [1]
    tensor_type: residual_stream
    position: 400
    probe_type: norm_gate
    probe_kind: single_shot
    probe_args: {threshold: 1.0}
)";
  EXPECT_EQ(Calibrate(" --spec " + (dir_ / "never.yaml").string() + prompts +
                          " --target-fpr 0.1 --out " + (dir_ / "x.yaml").string(),
                      &output),
            1)
      << output;
  EXPECT_NE(output.find("extraction point 'far': no calibration request gave it a score"),
            std::string::npos)
      << output;
}

}  // namespace
}  // namespace uc
