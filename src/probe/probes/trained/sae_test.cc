#include "probe/probes/trained/sae.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "io/io_test_util.h"
#include "probe/probes/probe_test_util.h"

namespace uc::probe {
namespace {

using nlohmann::json;

const std::filesystem::path kTestData = std::filesystem::path(UC_SOURCE_DIR) / "tests/testdata";

json Load(const std::filesystem::path& path) {
  std::ifstream in(path);
  return json::parse(in);
}

class SaeTest : public ::testing::TestWithParam<std::string> {};

// The named features of every token of the recorded streams equal what sae-lens's encode()
// gives (tools/reference/make_sae_reference.py) within 1e-5 of max(|value|, 0.1): sae-lens
// works in float32, we in double.
TEST_P(SaeTest, FeaturesMatchSaeLens) {
  const json reference = Load(kTestData / "probes/sae/reference.json");
  const json streams = Load(kTestData / "probes/aggregate/streams.json")["streams"];
  const auto features = reference["features"].get<std::vector<int64_t>>();
  const auto sae = SaeEncoder::Load(kTestData / "probes/sae" / GetParam(), features);
  ASSERT_TRUE(sae.ok()) << sae.status().ToString();
  const json& encoded = reference["saes"][GetParam()]["encoded"];
  double worst = 0.0;
  int active = 0, compared = 0;
  for (size_t s = 0; s < streams.size(); ++s) {
    for (size_t t = 0; t < streams[s].size(); ++t) {
      const std::vector<double> got = (*sae)->Encode(streams[s][t].get<std::vector<float>>());
      const auto want = encoded[s][t].get<std::vector<double>>();
      ASSERT_EQ(got.size(), want.size());
      for (size_t j = 0; j < got.size(); ++j) {
        worst = std::max(worst, std::fabs(got[j] - want[j]) / std::max(std::fabs(want[j]), 0.1));
        active += want[j] > 0;
        EXPECT_EQ(got[j] > 0, want[j] > 0)
            << "stream " << s << " token " << t << " feature " << features[j];
        ++compared;
      }
    }
  }
  EXPECT_LE(worst, 1e-5);
  EXPECT_GT(active, compared / 50) << "too few active features to test anything";
  // Only the named columns of W_enc are read, except for TopK (which ranks every feature).
  const int64_t columns = (*sae)->architecture() == SaeEncoder::Architecture::kTopK
                              ? (*sae)->d_sae()
                              : static_cast<int64_t>(features.size());
  EXPECT_EQ((*sae)->encoder_values_read(), columns * (*sae)->d_in());
  std::printf("%s: %d of %d feature values active; W_enc values read %lld of %lld\n",
              GetParam().c_str(), active, compared,
              static_cast<long long>((*sae)->encoder_values_read()),
              static_cast<long long>((*sae)->d_in() * (*sae)->d_sae()));
}

INSTANTIATE_TEST_SUITE_P(SaeLens, SaeTest,
                         ::testing::Values("standard", "standard_nobdec", "jumprelu", "topk",
                                           "topk_rescaled"));

TEST(SaeProbeTest, ScoresTheNamedFeaturesAndNamesBadArguments) {
  ProbeRegistry registry;
  ProbeEnv env;
  env.hidden_size = 64;
  env.base_dir = kTestData / "probes/sae";
  const auto create = [&](const json& args) {
    const ExtractionPoint point = testing::Point("p", "sae", ProbeKind::kSingleShot, args);
    return registry.Create(point, env);
  };
  const auto type = create({{"sae", "jumprelu"}, {"features", {3, 17}}, {"score", "sum"}});
  ASSERT_TRUE(type.ok()) << type.status().ToString();
  const json streams = Load(kTestData / "probes/aggregate/streams.json")["streams"];
  const auto x = streams[0][5].get<std::vector<float>>();
  const auto sae = SaeEncoder::Load(kTestData / "probes/sae/jumprelu", {3, 17});
  ASSERT_TRUE(sae.ok());
  const std::vector<double> f = (*sae)->Encode(x);
  const testing::ProbeRun run = testing::RunProbe(**type, {testing::Record(x)});
  EXPECT_DOUBLE_EQ(run.result.verdict["last_score"].get<double>(), f[0] + f[1]);

  const auto expect_error = [&](const json& args, const std::string& needle) {
    const auto bad = create(args);
    ASSERT_FALSE(bad.ok()) << args.dump();
    EXPECT_NE(bad.status().message().find(needle), std::string::npos) << bad.status().message();
  };
  expect_error({{"features", {1}}}, "argument 'sae'");
  expect_error({{"sae", "standard"}}, "argument 'features'");
  expect_error({{"sae", "standard"}, {"features", {256}}}, "feature 256 is out of range");
  expect_error({{"sae", "nowhere"}, {"features", {1}}}, "nowhere/cfg.json");
  expect_error({{"sae", "standard"}, {"features", {1}}, {"score", "mean"}}, "'score'");
  env.hidden_size = 32;
  expect_error({{"sae", "standard"}, {"features", {1}}}, "has d_in 64, but the activations");
}

// sae-lens's hook_name places an SAE: the point must capture that tap (a TransformerLens name,
// written as the point's tensor_type), and a mismatch names both.
TEST(SaeProbeTest, HookNameOfCfgMustBeWhereThePointCaptures) {
  io::testing::TempDir dir;
  ProbeRegistry registry;
  ProbeEnv env;
  env.hidden_size = 64;
  env.base_dir = dir.path();
  const auto make_sae = [&](const std::string& name, const json& extra, bool in_metadata) {
    const std::filesystem::path d = dir.path() / name;
    std::filesystem::create_directories(d);
    std::filesystem::copy_file(kTestData / "probes/sae/standard/sae_weights.safetensors",
                               d / "sae_weights.safetensors");
    json cfg = Load(kTestData / "probes/sae/standard/cfg.json");
    for (const auto& [k, v] : extra.items()) (in_metadata ? cfg["metadata"][k] : cfg[k]) = v;
    std::ofstream(d / "cfg.json") << cfg.dump();
  };
  make_sae("pre1", {{"hook_name", "blocks.1.hook_resid_pre"}, {"hook_layer", 1}}, false);
  make_sae("attn3", {{"hook_name", "hook_attn_out"}, {"hook_layer", 3}}, true);
  make_sae("pre0", {{"hook_name", "blocks.0.hook_resid_pre"}}, false);
  const auto create = [&](const std::string& sae, int layer, TensorType type) {
    ExtractionPoint point =
        testing::Point("p", "sae", ProbeKind::kSingleShot, {{"sae", sae}, {"features", {1}}});
    point.layers = {layer};
    point.tensor_type = type;
    return registry.Create(point, env);
  };
  EXPECT_TRUE(create("pre1", 0, TensorType::kResidualStream).ok());
  EXPECT_TRUE(create("attn3", 3, TensorType::kAttnOut).ok());
  const auto wrong = create("pre1", 1, TensorType::kResidualStream);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find(
                "hook_name 'blocks.1.hook_resid_pre' is residual_stream of layer 0, but extraction "
                "point 'p' captures residual_stream of layer 1"),
            std::string::npos)
      << wrong.status().message();
  const auto wrong_site = create("attn3", 3, TensorType::kMlpOut);
  ASSERT_FALSE(wrong_site.ok());
  EXPECT_NE(wrong_site.status().message().find("is attn_out of layer 3"), std::string::npos);
  const auto embeddings = create("pre0", 0, TensorType::kResidualStream);
  ASSERT_FALSE(embeddings.ok());
  EXPECT_NE(embeddings.status().message().find("embedding output"), std::string::npos);
}

}  // namespace
}  // namespace uc::probe
