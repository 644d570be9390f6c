#include "probe/probes/trained/artifact.h"

#include <gtest/gtest.h>

#include "io/io_test_util.h"
#include "io/safetensors/safetensors_writer.h"
#include "probe/probes/probe_test_util.h"
#include "probe/probes/registry.h"
#include "probe/probes/trained/weights.h"

namespace uc::probe {
namespace {

using io::testing::TempDir;
using io::testing::WriteBytes;
using nlohmann::json;

const json kModel = {{"architecture", "LlamaForCausalLM"},
                     {"hidden_size", 4},
                     {"num_hidden_layers", 5},
                     {"max_model_len", 512},
                     {"norm_weight_fnv1a64", "0123456789abcdef"}};

std::map<std::string, std::string> Metadata(const json& model, const std::string& layers,
                                            const std::string& site) {
  return {{"undercurrent.probe_version", "1"},
          {"model", model.dump()},
          {"layers", layers},
          {"tensor_type", site}};
}

ProbeEnv Env(const ExtractionPoint* point, ArtifactPolicy policy) {
  ProbeEnv env;
  env.hidden_size = 4;
  env.point = point;
  env.model_fingerprint = kModel;
  env.artifact_policy = policy;
  return env;
}

TEST(ArtifactTest, MatchingMetadataAndNoMetadataAlwaysLoad) {
  const ExtractionPoint point = testing::Point("p", "linear", ProbeKind::kSingleShot);  // layer 2
  json other_context = kModel;
  other_context["max_model_len"] = 4096;  // a serving choice, not the model
  for (const json& model : {kModel, other_context}) {
    EXPECT_EQ(ArtifactMismatches(Metadata(model, "[1, 2]", "residual_stream"),
                                 Env(&point, ArtifactPolicy::kRefuse)),
              "");
  }
  EXPECT_TRUE(CheckArtifact({}, "w.safetensors", Env(&point, ArtifactPolicy::kRefuse)).ok());
  // Unknown deployment model: nothing to compare it with.
  ProbeEnv unknown = Env(&point, ArtifactPolicy::kRefuse);
  unknown.model_fingerprint = nullptr;
  json other = kModel;
  other["hidden_size"] = 8;
  EXPECT_TRUE(
      CheckArtifact(Metadata(other, "[2]", "residual_stream"), "w.safetensors", unknown).ok());
}

TEST(ArtifactTest, EveryMismatchIsNamedAndThePolicyDecides) {
  const ExtractionPoint point = testing::Point("p", "linear", ProbeKind::kSingleShot);  // layer 2
  json other = kModel;
  other["hidden_size"] = 8;
  other["norm_weight_fnv1a64"] = "ffffffffffffffff";
  const auto metadata = Metadata(other, "[4]", "mlp_out");
  const std::string mismatches = ArtifactMismatches(metadata, Env(&point, ArtifactPolicy::kWarn));
  EXPECT_NE(mismatches.find("trained on another model (hidden_size 8, here 4"), std::string::npos)
      << mismatches;
  EXPECT_NE(mismatches.find("norm_weight_fnv1a64"), std::string::npos) << mismatches;
  EXPECT_NE(mismatches.find("trained on layers [4], deployed at layer 2"), std::string::npos)
      << mismatches;
  EXPECT_NE(mismatches.find("trained on mlp_out, deployed on residual_stream"), std::string::npos)
      << mismatches;
  const Status refused =
      CheckArtifact(metadata, "w.safetensors", Env(&point, ArtifactPolicy::kRefuse));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("w.safetensors: trained on another model"), std::string::npos);
  EXPECT_TRUE(CheckArtifact(metadata, "w.safetensors", Env(&point, ArtifactPolicy::kWarn)).ok());
  EXPECT_TRUE(CheckArtifact(metadata, "w.safetensors", Env(&point, ArtifactPolicy::kIgnore)).ok());
  EXPECT_EQ(*ParseArtifactPolicy("refuse"), ArtifactPolicy::kRefuse);
  EXPECT_FALSE(ParseArtifactPolicy("strict").ok());
}

// Through the registry: a linear probe whose safetensors (or .json) weights were made for another
// model is refused under kRefuse, naming the argument and the file, and loads under kWarn.
TEST(ArtifactTest, ProbesCheckTheirWeightsFiles) {
  TempDir dir;
  json other = kModel;
  other["num_hidden_layers"] = 30;
  io::SafetensorsWriter writer;
  ASSERT_TRUE(writer.Add("weight", Tensor::FromVector({1, 2, 3, 4}, {4})).ok());
  for (const auto& [key, value] : Metadata(other, "[2]", "residual_stream")) {
    writer.SetMetadata(key, value);
  }
  ASSERT_TRUE(writer.WriteFile(dir.path() / "w.safetensors").ok());
  WriteBytes(
      dir.path() / "w.json",
      json({{"weight", {1, 2, 3, 4}}, {"metadata", {{"model", other}, {"layers", {2}}}}}).dump());
  const StatusOr<VectorWeights> read = LoadVectorWeights(dir.path() / "w.json");
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->metadata.at("layers"), "[2]");

  ProbeRegistry registry;
  for (const char* file : {"w.safetensors", "w.json"}) {
    const ExtractionPoint point =
        testing::Point("p", "linear", ProbeKind::kSingleShot, {{"weights", file}});
    ProbeEnv env = Env(&point, ArtifactPolicy::kRefuse);
    env.base_dir = dir.path();
    const auto refused = registry.Create(point, env);
    ASSERT_FALSE(refused.ok()) << file;
    EXPECT_NE(refused.status().message().find("argument 'weights'"), std::string::npos);
    EXPECT_NE(refused.status().message().find(std::string(file) +
                                              ": trained on another model (num_hidden_layers 30, "
                                              "here 5)"),
              std::string::npos)
        << refused.status().message();
    env.artifact_policy = ArtifactPolicy::kWarn;
    EXPECT_TRUE(registry.Create(point, env).ok()) << file;
  }
}

}  // namespace
}  // namespace uc::probe
