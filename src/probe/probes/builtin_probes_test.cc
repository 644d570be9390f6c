#include "probe/probes/builtin_probes.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "io/io_test_util.h"
#include "io/safetensors/safetensors_writer.h"
#include "probe/probes/probe_test_util.h"
#include "probe/probes/trained/weights_test_util.h"

namespace uc::probe {
namespace {

using io::testing::IsError;
using io::testing::TempDir;
using io::testing::WriteBytes;
using nlohmann::json;
using testing::ConstantRecords;
using testing::FirstWith;
using testing::NpyF4;
using testing::Point;
using testing::Record;
using testing::RunProbe;

constexpr int kHidden = 8;

std::vector<float> RandomVector(int n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = normal(rng);
  return v;
}

double Dot(const std::vector<float>& a, const std::vector<float>& b) {
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) sum += static_cast<double>(a[i]) * b[i];
  return sum;
}

double Sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }

class BuiltinProbesTest : public ::testing::Test {
 protected:
  BuiltinProbesTest() {
    env_.hidden_size = kHidden;
    env_.base_dir = dir_.path();
  }

  StatusOr<std::unique_ptr<ProbeType>> Create(const std::string& type, const json& args) {
    const ProbeKind kind = *registry_.KindOf(type);
    point_ = Point("pt", type, kind, args);
    return registry_.Create(point_, env_);
  }
  std::unique_ptr<ProbeType> CreateOrDie(const std::string& type, const json& args) {
    StatusOr<std::unique_ptr<ProbeType>> created = Create(type, args);
    EXPECT_TRUE(created.ok()) << created.status().ToString();
    return created.ok() ? std::move(created).value() : nullptr;
  }
  Status CreateError(const std::string& type, const json& args) {
    return Create(type, args).status();
  }
  // The score the probe reports for one activation.
  double ScoreOf(const ProbeType& type, const std::vector<float>& x) {
    const auto run = RunProbe(type, {Record(x)});
    EXPECT_TRUE(run.signals[0].has_value());
    return run.signals[0] ? run.signals[0]->metadata.at("score").get<double>() : NAN;
  }
  void WriteSafetensors(const std::string& name,
                        const std::vector<std::pair<std::string, Tensor>>& tensors) {
    io::SafetensorsWriter writer;
    for (const auto& [tensor_name, tensor] : tensors)
      ASSERT_TRUE(writer.Add(tensor_name, tensor).ok());
    ASSERT_TRUE(writer.WriteFile(dir_.path() / name).ok());
  }

  TempDir dir_;
  ProbeRegistry registry_;
  ProbeEnv env_;
  ExtractionPoint point_;
  const std::vector<float> w_ = RandomVector(kHidden, 1);
  const std::vector<float> x_ = RandomVector(kHidden, 2);
};

// --- linear -----------------------------------------------------------------------------------

TEST_F(BuiltinProbesTest, LinearFromSafetensorsUsesTheFileBias) {
  WriteSafetensors("probe.safetensors", {{"weight", Tensor::FromVector(w_, {1, kHidden})},
                                         {"bias", Tensor::FromVector({0.25f}, {1})}});
  const auto type = CreateOrDie("linear", {{"weights", "probe.safetensors"}});
  EXPECT_NEAR(ScoreOf(*type, x_), Dot(w_, x_) + 0.25, 1e-9);
}

TEST_F(BuiltinProbesTest, LinearFromNpyWithBiasArgument) {
  WriteBytes(dir_.path() / "probe.npy", NpyF4(w_, "(8,)"));
  const auto type = CreateOrDie("linear", {{"weights", "probe.npy"}, {"bias", -1.5}});
  EXPECT_NEAR(ScoreOf(*type, x_), Dot(w_, x_) - 1.5, 1e-9);
}

TEST_F(BuiltinProbesTest, LinearFromJsonBiasArgumentOverridesTheFile) {
  json doc = {{"weight", w_}, {"bias", 3.0}};
  WriteBytes(dir_.path() / "probe.json", doc.dump());
  const auto from_file = CreateOrDie("linear", {{"weights", "probe.json"}});
  EXPECT_NEAR(ScoreOf(*from_file, x_), Dot(w_, x_) + 3.0, 1e-6);
  const auto overridden = CreateOrDie("linear", {{"weights", "probe.json"}, {"bias", 0}});
  EXPECT_NEAR(ScoreOf(*overridden, x_), Dot(w_, x_), 1e-6);
  WriteBytes(dir_.path() / "plain.json", json(w_).dump());
  const auto plain = CreateOrDie("linear", {{"weights", "plain.json"}});
  EXPECT_NEAR(ScoreOf(*plain, x_), Dot(w_, x_), 1e-6);
}

TEST_F(BuiltinProbesTest, LinearAbsolutePathIgnoresBaseDir) {
  WriteBytes(dir_.path() / "probe.npy", NpyF4(w_, "(1, 8)"));
  env_.base_dir = "/somewhere/else";
  const auto type = CreateOrDie("linear", {{"weights", (dir_.path() / "probe.npy").string()}});
  EXPECT_NEAR(ScoreOf(*type, x_), Dot(w_, x_), 1e-9);
}

TEST_F(BuiltinProbesTest, LinearSigmoidThresholdAndAction) {
  WriteBytes(dir_.path() / "probe.npy", NpyF4(w_, "(8,)"));
  const double p = Sigmoid(Dot(w_, w_) + 0.5);  // x = w: above sigmoid(0.5), the zero's score
  const auto type = CreateOrDie(
      "linear",
      {{"weights", "probe.npy"}, {"bias", 0.5}, {"sigmoid", true}, {"threshold", p - 1e-6}});
  const auto run = RunProbe(*type, {Record(w_), Record(std::vector<float>(kHidden, 0.0f))});
  ASSERT_TRUE(run.signals[0] && run.signals[1]);
  EXPECT_EQ(run.signals[0]->action, ProbeAction::kAbort);  // default action
  EXPECT_NEAR(*run.signals[0]->confidence, p, 1e-9);
  EXPECT_EQ(run.signals[1]->action, ProbeAction::kContinue);
  EXPECT_NEAR(run.signals[1]->metadata.at("score").get<double>(), Sigmoid(0.5), 1e-12);
  EXPECT_EQ(run.result.verdict.at("flagged"), true);
  EXPECT_EQ(run.result.verdict.at("n"), 2);
  EXPECT_NEAR(run.result.verdict.at("max_score").get<double>(), p, 1e-9);
  EXPECT_NEAR(run.result.verdict.at("last_score").get<double>(), Sigmoid(0.5), 1e-12);

  const auto flag =
      CreateOrDie("linear", {{"weights", "probe.npy"}, {"threshold", -1e9}, {"action", "flag"}});
  EXPECT_EQ(RunProbe(*flag, {Record(x_)}).signals[0]->action, ProbeAction::kFlag);
  const auto quiet = CreateOrDie("linear", {{"weights", "probe.npy"}});
  EXPECT_EQ(RunProbe(*quiet, {Record(x_)}).signals[0]->action, ProbeAction::kContinue);
}

TEST_F(BuiltinProbesTest, LinearShapeErrorsNameTheFileAndSizes) {
  WriteBytes(dir_.path() / "short.npy", NpyF4({1, 2, 3}, "(3,)"));
  EXPECT_TRUE(IsError(CreateError("linear", {{"weights", "short.npy"}}),
                      StatusCode::kInvalidArgument,
                      {"extraction point 'pt': probe_type 'linear': argument 'weights': ",
                       (dir_.path() / "short.npy").string(), "holds 3 values", "hidden_size 8"}));
  WriteSafetensors("two_class.safetensors", {{"weight", Tensor::Zeros({2, kHidden}, DType::kF32)}});
  EXPECT_TRUE(IsError(CreateError("linear", {{"weights", "two_class.safetensors"}}),
                      StatusCode::kInvalidArgument,
                      {"probe_type 'linear': argument 'weights': ", "two_class.safetensors",
                       "tensor 'weight' has shape [2, 8], expected a vector"}));
}

// A NaN threshold never fires (NaN compares false) and a NaN weight makes every score NaN: both
// are refused when the probe is created, naming the argument or the file and index.
TEST_F(BuiltinProbesTest, NonFiniteThresholdsAndWeightsAreRefused) {
  EXPECT_TRUE(IsError(CreateError("norm_gate", {{"threshold", std::nan("")}}),
                      StatusCode::kInvalidArgument,
                      {"argument 'threshold': expected a finite number (got NaN)"}));
  EXPECT_TRUE(IsError(CreateError("ema", {{"alpha", 0.5}, {"threshold", HUGE_VAL}}),
                      StatusCode::kInvalidArgument,
                      {"argument 'threshold': expected a finite number (got inf)"}));
  std::vector<float> bad = w_;
  bad[3] = std::nanf("");
  WriteBytes(dir_.path() / "nan.npy", NpyF4(bad, "(8,)"));
  EXPECT_TRUE(IsError(CreateError("linear", {{"weights", "nan.npy"}}), StatusCode::kInvalidArgument,
                      {"nan.npy", "holds NaN at index 3", "must be finite"}));
  bad[3] = -HUGE_VALF;
  WriteSafetensors("inf.safetensors", {{"fc1.weight", Tensor::FromVector(bad, {1, kHidden})},
                                       {"fc2.weight", Tensor::FromVector({1}, {1, 1})}});
  EXPECT_TRUE(IsError(CreateError("mlp", {{"weights", "inf.safetensors"}}),
                      StatusCode::kInvalidArgument,
                      {"inf.safetensors", "tensor 'fc1.weight' holds an infinity at index 3"}));
}

TEST_F(BuiltinProbesTest, LinearArgumentErrors) {
  WriteBytes(dir_.path() / "probe.npy", NpyF4(w_, "(8,)"));
  EXPECT_TRUE(IsError(CreateError("linear", {}), StatusCode::kInvalidArgument,
                      {"probe_type 'linear': argument 'weights': required"}));
  EXPECT_TRUE(IsError(CreateError("linear", {{"weights", "missing.npy"}}),
                      StatusCode::kInvalidArgument,
                      {"argument 'weights': file '", "missing.npy' does not exist"}));
  EXPECT_TRUE(IsError(CreateError("linear", {{"weights", "probe.npy"}, {"treshold", 1}}),
                      StatusCode::kInvalidArgument,
                      {"probe_type 'linear': unknown argument 'treshold' (did you mean "
                       "'threshold'?)"}));
  EXPECT_TRUE(IsError(CreateError("linear", {{"weights", "probe.npy"}, {"sigmoid", "yes"}}),
                      StatusCode::kInvalidArgument,
                      {"argument 'sigmoid': expected true or false (got \"yes\")"}));
  EXPECT_TRUE(IsError(CreateError("linear", {{"weights", 3}}), StatusCode::kInvalidArgument,
                      {"argument 'weights': expected a string"}));
  EXPECT_TRUE(IsError(CreateError("linear", {{"weights", "probe.npy"}, {"action", "block"}}),
                      StatusCode::kInvalidArgument, {"argument 'action': 'block' is not one of"}));
}

// --- mlp --------------------------------------------------------------------------------------

// fc1: [2, 3], fc2: [1, 2]; a hand computation for x = [1, -2, 0.5].
class MlpProbeTest : public BuiltinProbesTest {
 protected:
  void SetUp() override {
    env_.hidden_size = 3;
    WriteSafetensors(
        "mlp.safetensors",
        {{"fc1.weight", Tensor::FromVector({0.5f, -1.0f, 2.0f, 1.0f, 1.0f, 1.0f}, {2, 3})},
         {"fc1.bias", Tensor::FromVector({0.1f, -0.2f}, {2})},
         {"fc2.weight", Tensor::FromVector({1.5f, -2.0f}, {1, 2})},
         {"fc2.bias", Tensor::FromVector({0.3f}, {1})}});
  }
  // h = fc1(x) = [0.5 + 2 + 1 + 0.1, 1 - 2 + 0.5 - 0.2] = [3.6, -0.7]
  static double Expected(double (*act)(double)) { return 0.3 + 1.5 * act(3.6) - 2.0 * act(-0.7); }
  const std::vector<float> x3_ = {1.0f, -2.0f, 0.5f};
};

double Relu(double x) { return x > 0 ? x : 0; }
double Gelu(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double Tanh(double x) { return std::tanh(x); }

TEST_F(MlpProbeTest, MatchesAHandComputation) {
  const auto relu = CreateOrDie("mlp", {{"weights", "mlp.safetensors"}});
  EXPECT_NEAR(ScoreOf(*relu, x3_), 0.3 + 1.5 * 3.6, 1e-6);
  EXPECT_NEAR(ScoreOf(*relu, x3_), Expected(Relu), 1e-6);
  const auto gelu = CreateOrDie("mlp", {{"weights", "mlp.safetensors"}, {"activation", "gelu"}});
  EXPECT_NEAR(ScoreOf(*gelu, x3_), Expected(Gelu), 1e-6);
  const auto tanh = CreateOrDie("mlp", {{"weights", "mlp.safetensors"},
                                        {"activation", "tanh"},
                                        {"sigmoid", true},
                                        {"threshold", 0.5}});
  const auto run = RunProbe(*tanh, {Record(x3_)});
  EXPECT_NEAR(*run.signals[0]->confidence, Sigmoid(Expected(Tanh)), 1e-6);
  EXPECT_EQ(run.signals[0]->action, ProbeAction::kAbort);
}

TEST_F(MlpProbeTest, TensorPrefixesAreConfigurable) {
  WriteSafetensors(
      "seq.safetensors",
      {{"net.0.weight", Tensor::FromVector({0.5f, -1.0f, 2.0f, 1.0f, 1.0f, 1.0f}, {2, 3})},
       {"net.0.bias", Tensor::FromVector({0.1f, -0.2f}, {2})},
       {"net.2.weight", Tensor::FromVector({1.5f, -2.0f}, {2})},
       {"net.2.bias", Tensor::FromVector({0.3f}, {})}});
  const auto type =
      CreateOrDie("mlp", {{"weights", "seq.safetensors"}, {"fc1", "net.0"}, {"fc2", "net.2"}});
  EXPECT_NEAR(ScoreOf(*type, x3_), Expected(Relu), 1e-6);
}

TEST_F(MlpProbeTest, ShapeErrors) {
  env_.hidden_size = 4;
  EXPECT_TRUE(IsError(CreateError("mlp", {{"weights", "mlp.safetensors"}}),
                      StatusCode::kInvalidArgument,
                      {"probe_type 'mlp': argument 'weights': ", "mlp.safetensors",
                       "'fc1.weight' takes 3 inputs, but the activations have hidden_size 4"}));
  env_.hidden_size = 3;
  WriteSafetensors("bad.safetensors", {{"fc1.weight", Tensor::Zeros({2, 3}, DType::kF32)},
                                       {"fc2.weight", Tensor::Zeros({1, 5}, DType::kF32)}});
  EXPECT_TRUE(IsError(CreateError("mlp", {{"weights", "bad.safetensors"}}),
                      StatusCode::kInvalidArgument,
                      {"bad.safetensors", "'fc2.weight' has shape [1, 5], expected [1, 2]"}));
  EXPECT_TRUE(IsError(CreateError("mlp", {{"weights", "mlp.safetensors"}, {"fc1", "layer1"}}),
                      StatusCode::kInvalidArgument, {"no tensor 'layer1.weight'"}));
  EXPECT_TRUE(IsError(CreateError("mlp", {{"weights", "mlp.safetensors"}, {"activation", "relu6"}}),
                      StatusCode::kInvalidArgument,
                      {"argument 'activation': 'relu6' is not one of 'relu', 'gelu', 'tanh' "
                       "(did you mean 'relu'?)"}));
  WriteBytes(dir_.path() / "mlp.json", "{}");
  EXPECT_TRUE(IsError(CreateError("mlp", {{"weights", "mlp.json"}}), StatusCode::kInvalidArgument,
                      {"mlp.json", "reads a .safetensors file"}));
}

// --- norm_gate, cosine ------------------------------------------------------------------------

TEST_F(BuiltinProbesTest, NormGate) {
  EXPECT_TRUE(IsError(CreateError("norm_gate", {}), StatusCode::kInvalidArgument,
                      {"probe_type 'norm_gate': argument 'threshold': required"}));
  const auto type = CreateOrDie("norm_gate", {{"threshold", 5.0}, {"action", "flag"}});
  std::vector<float> x(kHidden, 0.0f);
  x[0] = 3.0f;
  x[5] = -4.0f;
  const auto run = RunProbe(*type, {Record(x), Record(std::vector<float>(kHidden, 1.0f))});
  EXPECT_EQ(*run.signals[0]->confidence, 5.0);
  EXPECT_EQ(run.signals[0]->action, ProbeAction::kFlag);  // >= threshold
  EXPECT_NEAR(*run.signals[1]->confidence, std::sqrt(8.0), 1e-12);
  EXPECT_EQ(run.signals[1]->action, ProbeAction::kContinue);
}

TEST_F(BuiltinProbesTest, Cosine) {
  std::vector<float> direction(kHidden, 0.0f);
  direction[0] = 2.0f;
  WriteBytes(dir_.path() / "dir.json", json({{"direction", direction}}).dump());
  const auto type = CreateOrDie("cosine", {{"direction", "dir.json"}, {"threshold", 0.9}});
  std::vector<float> x(kHidden, 0.0f);
  x[0] = 1.0f;
  x[1] = 1.0f;
  const auto run =
      RunProbe(*type, {Record(x), Record(std::vector<float>(kHidden, 0.0f)), Record(direction)});
  EXPECT_NEAR(*run.signals[0]->confidence, 1.0 / std::sqrt(2.0), 1e-9);
  EXPECT_EQ(run.signals[0]->action, ProbeAction::kContinue);
  EXPECT_EQ(*run.signals[1]->confidence, 0.0);  // zero activation
  EXPECT_NEAR(*run.signals[2]->confidence, 1.0, 1e-12);
  EXPECT_EQ(run.signals[2]->action, ProbeAction::kAbort);

  WriteBytes(dir_.path() / "w.npy", NpyF4(w_, "(8,)"));
  const auto from_npy = CreateOrDie("cosine", {{"direction", "w.npy"}});
  EXPECT_NEAR(ScoreOf(*from_npy, x_), Dot(w_, x_) / std::sqrt(Dot(w_, w_) * Dot(x_, x_)), 1e-9);

  WriteBytes(dir_.path() / "zero.json", json(std::vector<float>(kHidden, 0.0f)).dump());
  EXPECT_TRUE(IsError(CreateError("cosine", {{"direction", "zero.json"}}),
                      StatusCode::kInvalidArgument,
                      {"probe_type 'cosine': argument 'direction': ", "all zeros"}));
}

// --- trajectory probes ------------------------------------------------------------------------

TEST_F(BuiltinProbesTest, EmaAbortsAtCountSix) {  // inventory §10, scenario 10
  const auto type = CreateOrDie("ema", {{"alpha", 0.3}, {"threshold", 120}});
  const std::vector<double> scores = {90, 90, 130, 130, 130, 130, 130, 90};
  const auto run = RunProbe(*type, ConstantRecords(scores));
  EXPECT_EQ(FirstWith(run, ProbeAction::kAbort), 5);  // the 6th activation
  int emitted = 0;
  for (const auto& signal : run.signals) emitted += signal.has_value();
  EXPECT_EQ(emitted, 1);  // once
  double ema = scores[0];
  for (size_t i = 1; i < scores.size(); ++i) ema = 0.3 * scores[i] + 0.7 * ema;
  EXPECT_NEAR(run.result.verdict.at("final_ema").get<double>(), ema, 1e-4);
  EXPECT_EQ(run.result.verdict.at("count"), 8);
  EXPECT_EQ(run.result.verdict.at("aborted"), true);
  ASSERT_EQ(run.result.signal_history.size(), 1u);
  const ProbeSignal& signal = run.result.signal_history[0];
  EXPECT_NEAR(*signal.confidence, 120.396, 1e-3);
  EXPECT_EQ(signal.metadata.at("count"), 6);
  EXPECT_EQ(signal.metadata.at("threshold"), 120);
  EXPECT_EQ(run.result.metadata, json({{"threshold", 120.0}}));
}

TEST_F(BuiltinProbesTest, EmaOverLinearScoresWithFlag) {
  WriteBytes(dir_.path() / "probe.npy", NpyF4(w_, "(8,)"));
  const double s = Dot(w_, x_) + 1.0;
  const auto type = CreateOrDie("ema", {{"alpha", 1.0},
                                        {"threshold", s - 1e-6},
                                        {"weights", "probe.npy"},
                                        {"bias", 1.0},
                                        {"action", "flag"}});
  const auto run = RunProbe(*type, {Record(x_)});
  EXPECT_EQ(run.signals[0]->action, ProbeAction::kFlag);
  EXPECT_NEAR(run.signals[0]->metadata.at("score").get<double>(), s, 1e-9);
  EXPECT_EQ(run.result.verdict.at("flagged"), true);
  EXPECT_FALSE(run.result.verdict.contains("aborted"));
}

TEST_F(BuiltinProbesTest, EmaArgumentErrors) {
  EXPECT_TRUE(IsError(CreateError("ema", {{"threshold", 1}}), StatusCode::kInvalidArgument,
                      {"probe_type 'ema': argument 'alpha': required"}));
  for (const double alpha : {0.0, -0.5, 1.5}) {
    EXPECT_TRUE(IsError(CreateError("ema", {{"alpha", alpha}}), StatusCode::kInvalidArgument,
                        {"argument 'alpha': must be in (0, 1]"}));
  }
  EXPECT_TRUE(IsError(CreateError("ema", {{"alpha", 0.5}, {"bias", 1}}),
                      StatusCode::kInvalidArgument, {"argument 'bias': needs 'weights'"}));
  EXPECT_TRUE(IsError(CreateError("ema", {{"alpha", 0.5}, {"window", 3}}),
                      StatusCode::kInvalidArgument, {"unknown argument 'window'"}));
}

TEST_F(BuiltinProbesTest, EmaWithoutThresholdOnlyObserves) {
  const auto type = CreateOrDie("ema", {{"alpha", 0.5}});
  const auto run = RunProbe(*type, ConstantRecords({1e9, 1e9}));
  EXPECT_EQ(FirstWith(run, ProbeAction::kAbort), -1);
  EXPECT_EQ(run.result.verdict,
            json({{"final_ema", 1e9}, {"max", 1e9}, {"count", 2}, {"aborted", false}}));
}

TEST_F(BuiltinProbesTest, RunningMeanLikeTrajectoryScoreProbe) {
  const auto type = CreateOrDie("running_mean", {});  // threshold 0.8
  const auto run = RunProbe(*type, ConstantRecords({0.5, 0.9, 1.2, 0.0}));
  EXPECT_EQ(FirstWith(run, ProbeAction::kAbort), 2);  // means 0.5, 0.7, 0.8667
  EXPECT_EQ(run.result.signal_history.size(), 1u);
  EXPECT_NEAR(*run.result.signal_history[0].confidence, 2.6 / 3, 1e-6);
  EXPECT_NEAR(run.result.verdict.at("final_mean").get<double>(), 0.65, 1e-6);
  EXPECT_EQ(run.result.verdict.at("count"), 4);
  EXPECT_EQ(run.result.verdict.at("aborted"), true);
  EXPECT_EQ(run.result.metadata, json({{"threshold", 0.8}}));

  const auto high = CreateOrDie("running_mean", {{"threshold", 2}, {"sigmoid", true}});
  const auto quiet = RunProbe(*high, ConstantRecords({5, 5}));
  EXPECT_EQ(FirstWith(quiet, ProbeAction::kAbort), -1);  // sigmoid scores < 1
  EXPECT_NEAR(quiet.result.verdict.at("final_mean").get<double>(), Sigmoid(5), 1e-6);
}

// What v0.1's TrajectoryScoreProbe emitted on the same activations (recorded by
// tools/reference/v0_1_behaviour.py): the same signals at the same tokens, with v0.1's metadata
// keys and values (ours adds "score" and "threshold"), and the same verdict.
TEST_F(BuiltinProbesTest, RunningMeanSignalsAndVerdictAreV01s) {
  std::ifstream in(std::filesystem::path(UC_SOURCE_DIR) / "tests/testdata/v0_1/running_mean.json");
  ASSERT_TRUE(in.good());
  const json recorded = json::parse(in);
  ASSERT_GE(recorded["cases"].size(), 4u);
  for (const json& c : recorded["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const auto type = CreateOrDie("running_mean", {{"threshold", c["threshold"]}});
    std::vector<ActivationRecord> records;
    for (const json& values : c["activations"]) {
      records.push_back(Record(values.get<std::vector<float>>()));
    }
    const auto run = RunProbe(*type, records);
    std::vector<int> fired;
    for (size_t i = 0; i < run.signals.size(); ++i) {
      if (run.signals[i].has_value()) fired.push_back(static_cast<int>(i));
    }
    ASSERT_EQ(fired.size(), c["signals"].size());
    for (size_t k = 0; k < fired.size(); ++k) {
      const json& expected = c["signals"][k];
      const json got = run.signals[fired[k]]->ToJson();
      EXPECT_EQ(fired[k], expected["index"]);
      EXPECT_EQ(got["action"], expected["action"]);
      EXPECT_NEAR(got["confidence"].get<double>(), expected["confidence"].get<double>(), 1e-6);
      for (const auto& [key, value] : expected["metadata"].items()) {
        ASSERT_TRUE(got["metadata"].contains(key)) << "missing v0.1's key " << key;
        EXPECT_NEAR(got["metadata"][key].get<double>(), value.get<double>(), 1e-6) << key;
      }
    }
    const json& verdict = c["verdict"];
    EXPECT_EQ(run.result.verdict.at("count"), verdict["count"]);
    EXPECT_EQ(run.result.verdict.at("aborted"), verdict["aborted"]);
    EXPECT_NEAR(run.result.verdict.at("final_mean").get<double>(),
                verdict["final_mean"].get<double>(), 1e-6);
    EXPECT_EQ(run.result.metadata, c["result_metadata"]);
  }
}

// --- every built-in ---------------------------------------------------------------------------

// A ProbeType of every built-in, with arguments that make `Trigger()` fire the action.
class EveryBuiltinTest : public BuiltinProbesTest {
 protected:
  void SetUp() override {
    WriteBytes(dir_.path() / "ones.npy", NpyF4(std::vector<float>(kHidden, 1.0f), "(8,)"));
    std::vector<float> fc1(2 * kHidden, 0.5f);
    WriteSafetensors("mlp.safetensors", {{"fc1.weight", Tensor::FromVector(fc1, {2, kHidden})},
                                         {"fc2.weight", Tensor::FromVector({1, 1}, {1, 2})}});
    types_["linear"] = CreateOrDie("linear", {{"weights", "ones.npy"}, {"threshold", 4}});
    types_["mlp"] = CreateOrDie("mlp", {{"weights", "mlp.safetensors"}, {"threshold", 4}});
    types_["norm_gate"] = CreateOrDie("norm_gate", {{"threshold", 2}});
    types_["cosine"] = CreateOrDie("cosine", {{"direction", "ones.npy"}, {"threshold", 0.99}});
    types_["ema"] = CreateOrDie("ema", {{"alpha", 0.5}, {"threshold", 0.9}});
    types_["running_mean"] = CreateOrDie("running_mean", {});
    // The streaming aggregations (aggregate_probes.h): a score of 8 on Trigger(), 0 on Calm().
    WriteBytes(dir_.path() / "attention.json", json({{"query", std::vector<float>(kHidden, 0.0f)},
                                                     {"value", std::vector<float>(kHidden, 1.0f)}})
                                                   .dump());
    types_["ema_max"] =
        CreateOrDie("ema_max", {{"weights", "ones.npy"}, {"alpha", 0.5}, {"threshold", 4}});
    types_["rolling_mean_max"] =
        CreateOrDie("rolling_mean_max", {{"weights", "ones.npy"}, {"window", 2}, {"threshold", 4}});
    types_["attention_pool"] =
        CreateOrDie("attention_pool", {{"weights", "attention.json"}, {"threshold", 4}});
    // A one-feature ReLU SAE (sae.h) whose feature is the sum of the activation.
    std::filesystem::create_directories(dir_.path() / "sae");
    WriteBytes(dir_.path() / "sae" / "cfg.json", json({{"d_in", kHidden},
                                                       {"d_sae", 2},
                                                       {"architecture", "standard"},
                                                       {"apply_b_dec_to_input", false}})
                                                     .dump());
    WriteSafetensors(
        "sae/sae_weights.safetensors",
        {{"W_enc", Tensor::FromVector(std::vector<float>(2 * kHidden, 1.0f), {kHidden, 2})},
         {"b_enc", Tensor::FromVector({0, 0}, {2})},
         {"b_dec", Tensor::FromVector(std::vector<float>(kHidden, 0.0f), {kHidden})}});
    types_["sae"] = CreateOrDie("sae", {{"sae", "sae"}, {"features", {1}}, {"threshold", 4}});
  }
  static ActivationRecord Trigger() { return Record(std::vector<float>(kHidden, 1.0f)); }
  static ActivationRecord Calm() { return Record(std::vector<float>(kHidden, 0.0f)); }

  std::map<std::string, std::unique_ptr<ProbeType>> types_;
};

TEST_F(EveryBuiltinTest, CoversTheRegistry) {
  std::vector<std::string> names;
  for (const auto& [name, type] : types_) names.push_back(name);
  EXPECT_EQ(names, registry_.List());
}

TEST_F(EveryBuiltinTest, ZeroActivationsGiveAValidResult) {
  for (const auto& [name, type] : types_) {
    ASSERT_NE(type, nullptr) << name;
    const auto run = RunProbe(*type, {}, &point_);
    EXPECT_EQ(run.result.request_id, "req-1") << name;
    EXPECT_EQ(run.result.point, "pt") << name;
    EXPECT_TRUE(run.result.signal_history.empty()) << name;
    ASSERT_TRUE(run.result.verdict.is_object()) << name;
    const bool trajectory = type->kind() == ProbeKind::kTrajectory;
    EXPECT_EQ(run.result.verdict.at(trajectory ? "count" : "n"), 0) << name;
    EXPECT_EQ(run.result.verdict.value(trajectory ? "aborted" : "flagged", true), false) << name;
    EXPECT_NO_THROW(run.result.ToJson().dump()) << name;
  }
}

TEST_F(EveryBuiltinTest, InstancesDoNotShareState) {
  for (const auto& [name, type] : types_) {
    ASSERT_NE(type, nullptr) << name;
    std::unique_ptr<Probe> a = type->Spawn();
    std::unique_ptr<Probe> b = type->Spawn();
    const std::optional<ProbeSignal> fired = a->OnActivation(Trigger());
    ASSERT_TRUE(fired.has_value()) << name;
    EXPECT_EQ(fired->action, ProbeAction::kAbort) << name;
    const std::optional<ProbeSignal> calm = b->OnActivation(Calm());
    EXPECT_TRUE(!calm || calm->action == ProbeAction::kContinue) << name;
    RequestContext ctx;
    const ProbeResult ra = a->OnEnd(ctx);
    const ProbeResult rb = b->OnEnd(ctx);
    EXPECT_EQ(ra.signal_history.size(), 1u) << name;
    EXPECT_EQ(rb.signal_history.size(), calm ? 1u : 0u) << name;
    const char* fired_key = type->kind() == ProbeKind::kTrajectory ? "aborted" : "flagged";
    EXPECT_EQ(ra.verdict.at(fired_key), true) << name;
    EXPECT_EQ(rb.verdict.at(fired_key), false) << name;
    // A third instance spawned after the others ran starts clean.
    EXPECT_EQ(type->Spawn()->OnEnd(ctx).verdict.at(fired_key), false) << name;
  }
}

}  // namespace
}  // namespace uc::probe
