#include "probe/probes/aggregate_probes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "probe/probes/probe_test_util.h"

namespace uc::probe {
namespace {

using nlohmann::json;
using testing::FirstWith;
using testing::Point;
using testing::Record;
using testing::RunProbe;

const std::filesystem::path kData =
    std::filesystem::path(UC_SOURCE_DIR) / "tests/testdata/probes/aggregate";

json Load(const std::string& name) {
  std::ifstream in(kData / name);
  return json::parse(in);
}

// The recorded streams (tools/reference/make_aggregate_reference.py) as activation records.
std::vector<std::vector<ActivationRecord>> Streams() {
  const json data = Load("streams.json");
  std::vector<std::vector<ActivationRecord>> streams;
  for (const json& stream : data["streams"]) {
    std::vector<ActivationRecord> records;
    for (const json& row : stream) {
      records.push_back(
          Record(row.get<std::vector<float>>(), static_cast<int64_t>(records.size()) + 1));
    }
    streams.push_back(std::move(records));
  }
  return streams;
}

double RelativeError(double got, double want) {
  return std::fabs(got - want) / std::max(std::fabs(want), 1e-9);
}

class AggregateProbesTest : public ::testing::TestWithParam<std::string> {
 protected:
  static const json& Case(const std::string& name) {
    static const json* reference = new json(Load("reference.json"));
    for (const json& c : (*reference)["cases"]) {
      if (c["name"] == name) return c;
    }
    ADD_FAILURE() << "no case " << name;
    return (*reference)["cases"][0];
  }

  std::unique_ptr<ProbeType> Create(const json& c, std::optional<double> threshold) {
    json args = c["args"];
    if (threshold) args["threshold"] = *threshold;
    args["action"] = "flag";
    point_ = Point("pt", c["probe_type"], ProbeKind::kTrajectory, args);
    ProbeEnv env;
    env.hidden_size = Load("streams.json")["hidden_size"];
    env.base_dir = kData;
    auto type = registry_.Create(point_, env);
    EXPECT_TRUE(type.ok()) << type.status().ToString();
    return type.ok() ? std::move(type).value() : nullptr;
  }

  ProbeRegistry registry_;
  ExtractionPoint point_;
};

// After every token of every stream, the statistic (the verdict's "final" over that prefix) and
// its running maximum (the verdict's "max") equal numpy's from the definition within 1e-6
// relative.
TEST_P(AggregateProbesTest, AggregateAfterEveryTokenMatchesNumpy) {
  const json& c = Case(GetParam());
  const auto type = Create(c, std::nullopt);
  ASSERT_NE(type, nullptr);
  const auto streams = Streams();
  double worst = 0.0;
  int compared = 0;
  for (size_t s = 0; s < streams.size(); ++s) {
    const json& want = c["values"][s];
    const json& want_max = c["max"][s];
    ASSERT_EQ(want.size(), streams[s].size());
    for (size_t t = 0; t < streams[s].size(); ++t) {
      const std::vector<ActivationRecord> prefix(streams[s].begin(),
                                                 streams[s].begin() + static_cast<long>(t) + 1);
      const testing::ProbeRun run = RunProbe(*type, prefix, &point_);
      const json& verdict = run.result.verdict;
      ASSERT_TRUE(verdict["final"].is_number()) << verdict.dump();
      worst = std::max(worst, RelativeError(verdict["final"], want[t].get<double>()));
      worst = std::max(worst, RelativeError(verdict["max"], want_max[t].get<double>()));
      ++compared;
      EXPECT_EQ(verdict["count"], static_cast<int64_t>(t) + 1);
      EXPECT_EQ(FirstWith(run, ProbeAction::kFlag), -1) << "no threshold, no action";
    }
  }
  EXPECT_LE(worst, 1e-6) << compared << " prefixes";
}

// With numpy's threshold, the probe flags exactly once, at the token where numpy's statistic
// first reaches it (or never), and the verdict records it, the largest and the last value.
TEST_P(AggregateProbesTest, FiresAtTheTokenNumpyCrosses) {
  const json& c = Case(GetParam());
  const auto type = Create(c, c["threshold"].get<double>());
  ASSERT_NE(type, nullptr);
  const auto streams = Streams();
  for (size_t s = 0; s < streams.size(); ++s) {
    SCOPED_TRACE("stream " + std::to_string(s));
    const testing::ProbeRun run = RunProbe(*type, streams[s], &point_);
    const json& fired = c["fired_at"][s];
    const int first = FirstWith(run, ProbeAction::kFlag);
    int flags = 0;
    for (const auto& signal : run.signals) flags += signal && signal->action == ProbeAction::kFlag;
    const json& verdict = run.result.verdict;
    if (fired.is_null()) {
      EXPECT_EQ(first, -1);
      EXPECT_TRUE(verdict["fired_at"].is_null());
      EXPECT_FALSE(verdict["flagged"].get<bool>());
    } else {
      EXPECT_EQ(first, fired.get<int>());
      EXPECT_EQ(flags, 1);
      EXPECT_EQ(verdict["fired_at"], streams[s][fired.get<size_t>()].token_pos);
      EXPECT_TRUE(verdict["flagged"].get<bool>());
      const json& metadata = run.signals[static_cast<size_t>(first)]->metadata;
      EXPECT_LE(RelativeError(metadata["aggregate"], c["values"][s][fired.get<size_t>()]), 1e-6);
      EXPECT_LE(RelativeError(metadata["score"], c["scores"][s][fired.get<size_t>()]), 1e-6);
      EXPECT_GE(metadata["aggregate"].get<double>(), c["threshold"].get<double>());
    }
    EXPECT_LE(RelativeError(verdict["max"], c["max"][s].back()), 1e-6);
    EXPECT_LE(RelativeError(verdict["final"], c["values"][s].back()), 1e-6);
  }
}

INSTANTIATE_TEST_SUITE_P(Numpy, AggregateProbesTest,
                         ::testing::Values("ema_max_linear", "ema_max_mlp_sigmoid",
                                           "rolling_mean_max_5", "rolling_mean_max_1_sigmoid",
                                           "attention_pool", "attention_pool_sigmoid"));

class AggregateArgsTest : public ::testing::Test {
 protected:
  Status CreateStatus(const std::string& type, const json& args) {
    point_ = Point("pt", type, ProbeKind::kTrajectory, args);
    ProbeEnv env;
    env.hidden_size = 64;
    env.base_dir = kData;
    return registry_.Create(point_, env).status();
  }
  ProbeRegistry registry_;
  ExtractionPoint point_;
};

TEST_F(AggregateArgsTest, BadArgumentsNameTheArgument) {
  const auto expect_error = [&](const std::string& type, const json& args,
                                const std::string& needle) {
    const Status status = CreateStatus(type, args);
    EXPECT_FALSE(status.ok()) << type << " " << args.dump();
    EXPECT_NE(status.message().find(needle), std::string::npos) << status.message();
  };
  expect_error("ema_max", {{"weights", "linear.json"}}, "'alpha'");
  expect_error("ema_max", {{"weights", "linear.json"}, {"alpha", 1.5}}, "(0, 1]");
  expect_error("rolling_mean_max", {{"weights", "linear.json"}, {"window", 2.5}}, "whole number");
  expect_error("rolling_mean_max", {{"weights", "linear.json"}, {"window", 0}}, "'window'");
  expect_error("ema_max", {{"weights", "linear.json"}, {"alpha", 0.5}, {"scorer", "mlpp"}},
               "did you mean 'mlp'");
  expect_error("ema_max", {{"weights", "linear.json"}, {"alpha", 0.5}, {"fc1", "x"}},
               "scorer 'mlp' only");
  expect_error("attention_pool", {{"weights", "linear.json"}}, "query");
  expect_error("attention_pool", {{"weights", "missing.json"}}, "missing.json");
  expect_error("attention_pool", {{"weights", "attention.json"}, {"window", 3}}, "'window'");
  EXPECT_TRUE(CreateStatus("ema_max", {{"weights", "linear.json"}, {"alpha", 0.5}}).ok());
  EXPECT_TRUE(
      CreateStatus("ema_max", {{"weights", "mlp.safetensors"}, {"alpha", 0.5}, {"scorer", "mlp"}})
          .ok());
}

TEST_F(AggregateArgsTest, NoActivationsGiveNullAggregates) {
  point_ = Point("pt", "rolling_mean_max", ProbeKind::kTrajectory,
                 {{"weights", "linear.json"}, {"window", 3}, {"threshold", 0.0}});
  ProbeEnv env;
  env.base_dir = kData;
  const auto type = registry_.Create(point_, env);
  ASSERT_TRUE(type.ok()) << type.status().ToString();
  const testing::ProbeRun run = RunProbe(**type, {}, &point_);
  EXPECT_TRUE(run.result.verdict["max"].is_null());
  EXPECT_TRUE(run.result.verdict["final"].is_null());
  EXPECT_EQ(run.result.verdict["count"], 0);
  EXPECT_FALSE(run.result.verdict["aborted"].get<bool>());
}

}  // namespace
}  // namespace uc::probe
