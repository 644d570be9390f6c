#include "worker/steering_config.h"

#include <gtest/gtest.h>

#include <limits>

namespace uc::worker {
namespace {

SteeringConfig ExampleConfig() {
  SteeringConfig c;
  c.vectors.push_back({.layer = 1, .values = {1.0f, -2.0f, 0.5f, 0.0f}});
  c.vectors.push_back({.layer = 3,
                       .site = models::Site::kAttnOut,
                       .tokens = SteeringTokens::kGenerated,
                       .scale = -0.25f,
                       .norm_match = true,
                       .group = 2,
                       .values = {0.0f, 1.0f, 0.0f, 3.0f}});
  return c;
}

TEST(SteeringConfigTest, SerializeParseRoundTripAndCanonicalBytes) {
  const SteeringConfig in = ExampleConfig();
  StatusOr<SteeringConfig> out = SteeringConfig::Parse(in.Serialize());
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(*out, in);
  EXPECT_EQ(out->Serialize(), in.Serialize());
  SteeringConfig other = in;
  other.vectors[1].scale = -0.5f;
  EXPECT_NE(other.Serialize(), in.Serialize());
}

TEST(SteeringConfigTest, TruncatedOrPaddedBytesAreRefused) {
  const std::string bytes = ExampleConfig().Serialize();
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    EXPECT_FALSE(SteeringConfig::Parse(bytes.substr(0, cut)).ok()) << "cut at " << cut;
  }
  EXPECT_FALSE(SteeringConfig::Parse(bytes + "x").ok());
}

TEST(SteeringConfigTest, ValidateNamesTheFieldAndVector) {
  EXPECT_TRUE(ExampleConfig().Validate(4, 5, "steering_vectors").ok());
  auto message = [](const SteeringConfig& c) {
    return c.Validate(4, 5, "steering_vectors").ToString();
  };
  SteeringConfig bad = ExampleConfig();
  bad.vectors[1].layer = 5;

  EXPECT_NE(message(bad).find("steering_vectors[1] (layer 5): the model has layers 0 to 4"),
            std::string::npos)
      << message(bad);
  bad = ExampleConfig();
  bad.vectors[0].values.push_back(1.0f);
  EXPECT_NE(message(bad).find("steering_vectors[0] (layer 1) has 5 values; the model's hidden "
                              "size is 4"),
            std::string::npos)
      << message(bad);
  bad = ExampleConfig();
  bad.vectors[0].values[2] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_NE(message(bad).find("non-finite value at index 2"), std::string::npos) << message(bad);
  bad = ExampleConfig();
  bad.vectors[1].values = {0, 0, 0, 0};
  EXPECT_NE(message(bad).find("all zeros"), std::string::npos) << message(bad);
  bad = ExampleConfig();
  bad.vectors[0].site = models::Site::kFinalNorm;
  EXPECT_NE(message(bad).find("residual_stream, attn_out or mlp_out"), std::string::npos);
}

TEST(SteeringConfigTest, TokenScopes) {
  SteeringVector v;
  EXPECT_TRUE(v.AppliesTo(0, 4));
  EXPECT_TRUE(v.AppliesTo(9, 4));
  v.tokens = SteeringTokens::kPrompt;
  EXPECT_TRUE(v.AppliesTo(3, 4));
  EXPECT_FALSE(v.AppliesTo(4, 4));
  v.tokens = SteeringTokens::kGenerated;
  EXPECT_FALSE(v.AppliesTo(3, 4));
  EXPECT_TRUE(v.AppliesTo(4, 4));
  EXPECT_EQ(*ParseSteeringTokens("both"), SteeringTokens::kAll);
  EXPECT_EQ(*ParseSteeringTokens("prompt"), SteeringTokens::kPrompt);
  EXPECT_FALSE(ParseSteeringTokens("decode").ok());
  EXPECT_EQ(*ParseSteeringSite("attn_out"), models::Site::kAttnOut);
  EXPECT_EQ(SteeringSiteName(*ParseSteeringSite("mlp_out")), std::string("mlp_out"));
  EXPECT_FALSE(ParseSteeringSite("final_norm").ok());
}

}  // namespace
}  // namespace uc::worker
