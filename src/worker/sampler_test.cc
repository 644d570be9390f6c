#include "worker/sampler.h"

#include <gtest/gtest.h>

#include <limits>
#include <map>
#include <random>
#include <vector>

namespace uc::worker {
namespace {

std::vector<float> Logits() { return {1.0f, 3.0f, 2.0f, 3.0f, -1.0f, 0.5f}; }

TEST(SamplerTest, GreedyTakesFirstMaximum) {
  SamplingParams p;
  p.temperature = 0.0f;
  Sampler s(p);
  EXPECT_EQ(s.Sample(Logits()), 1);
  EXPECT_EQ(Sampler::Argmax(std::vector<float>{-5.0f, -2.0f, -3.0f}), 1);
}

// The one-pass scan Argmax's two passes must equal: the first index whose logit beats every
// earlier best.
int32_t ScanArgmax(const std::vector<float>& logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
  }
  return best;
}

TEST(SamplerTest, ArgmaxIsTheFirstMaximumAtEveryLengthAndPosition) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-4.0f, 4.0f);
  for (size_t n : {1u, 2u, 7u, 8u, 9u, 16u, 17u, 31u, 262144u}) {
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<float> logits(n);
      for (float& v : logits) v = u(rng);
      // Ties, NaNs, signed zeros and infinities at random places (the first at 0 sometimes).
      const size_t a = rng() % n, b = rng() % n;
      switch (trial % 5) {
        case 1:
          logits[b] = logits[a] = 9.0f;
          break;
        case 2:
          logits[a] = nan;
          break;
        case 3:
          for (float& v : logits) v = -1.0f;
          logits[a] = -0.0f;
          logits[b] = 0.0f;
          break;
        case 4:
          logits[a] = -inf;
          logits[b] = trial % 2 ? inf : nan;
          logits[0] = trial % 3 ? logits[0] : nan;
          break;
        default:
          break;
      }
      EXPECT_EQ(Sampler::Argmax(logits), ScanArgmax(logits)) << "n " << n << " trial " << trial;
    }
  }
  EXPECT_EQ(Sampler::Argmax(std::vector<float>{}), 0);
}

TEST(SamplerTest, SameSeedSameSequenceDifferentSeedDiffers) {
  SamplingParams p;
  p.temperature = 1.5f;
  p.seed = 1234;
  std::vector<float> flat(64, 0.0f);
  Sampler a(p), b(p);
  std::vector<int32_t> sa, sb;
  for (int i = 0; i < 100; ++i) {
    sa.push_back(a.Sample(flat));
    sb.push_back(b.Sample(flat));
  }
  EXPECT_EQ(sa, sb);
  p.seed = 1235;
  Sampler c(p);
  std::vector<int32_t> sc;
  for (int i = 0; i < 100; ++i) sc.push_back(c.Sample(flat));
  EXPECT_NE(sa, sc);
}

TEST(SamplerTest, TopKRestrictsSupport) {
  SamplingParams p;
  p.top_k = 2;
  p.seed = 7;
  Sampler s(p);
  for (int i = 0; i < 500; ++i) {
    const int32_t id = s.Sample(Logits());
    EXPECT_TRUE(id == 1 || id == 3) << id;
  }
}

TEST(SamplerTest, TopPKeepsSmallestNucleus) {
  // probs ~ [0.7, 0.2, 0.1]: top_p 0.75 keeps ids 0 and 1 only.
  std::vector<float> logits = {std::log(0.7f), std::log(0.2f), std::log(0.1f)};
  SamplingParams p;
  p.top_p = 0.75f;
  p.seed = 3;
  Sampler s(p);
  std::map<int32_t, int> counts;
  for (int i = 0; i < 2000; ++i) ++counts[s.Sample(logits)];
  EXPECT_EQ(counts.count(2), 0u);
  // Renormalized: P(0) = 0.7 / 0.9 ~ 0.78.
  EXPECT_NEAR(counts[0] / 2000.0, 0.7 / 0.9, 0.04);
}

TEST(SamplerTest, MinPDropsUnlikelyTokens) {
  std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.04f), std::log(0.16f)};
  SamplingParams p;
  p.min_p = 0.2f;  // threshold 0.1: drops id 2
  p.seed = 11;
  Sampler s(p);
  for (int i = 0; i < 1000; ++i) EXPECT_NE(s.Sample(logits), 2);
}

TEST(SamplerTest, TemperatureSharpensDistribution) {
  std::vector<float> logits = {0.0f, 1.0f};
  SamplingParams cold, hot;
  cold.temperature = 0.25f;
  hot.temperature = 4.0f;
  cold.seed = hot.seed = 5;
  Sampler c(cold), h(hot);
  int cold_ones = 0, hot_ones = 0;
  for (int i = 0; i < 4000; ++i) {
    cold_ones += c.Sample(logits);
    hot_ones += h.Sample(logits);
  }
  // P(1) = sigmoid(1/T): 0.982 at T=0.25, 0.562 at T=4.
  EXPECT_NEAR(cold_ones / 4000.0, 0.982, 0.02);
  EXPECT_NEAR(hot_ones / 4000.0, 0.562, 0.03);
}

TEST(SamplingParamsTest, ValidateNamesField) {
  SamplingParams p;
  EXPECT_TRUE(p.Validate().ok());
  p.top_p = 0.0f;
  EXPECT_NE(p.Validate().message().find("top_p"), std::string::npos);
  p = SamplingParams();
  p.temperature = -1.0f;
  EXPECT_NE(p.Validate().message().find("temperature"), std::string::npos);
  p = SamplingParams();
  p.stop = {""};
  EXPECT_FALSE(p.Validate().ok());
}

}  // namespace
}  // namespace uc::worker
