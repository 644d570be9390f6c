#include "worker/logprobs.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "worker/sampler.h"

namespace uc::worker {
namespace {

std::vector<float> RowLogits() { return {1.0f, 3.0f, 2.0f, 3.0f, -1.0f, 0.5f}; }

TEST(LogprobsTest, LogSoftmaxOfTheRow) {
  const std::vector<float> logits = RowLogits();
  double sum = 0.0;
  for (float x : logits) sum += std::exp(static_cast<double>(x));
  const PositionLogprobs p = ComputeLogprobs(logits, 5, 3);
  EXPECT_NEAR(p.chosen.logprob, 0.5 - std::log(sum), 1e-6);
  EXPECT_EQ(p.chosen.token, 5);
  EXPECT_EQ(p.chosen.rank, 5);  // below 3, 3, 2 and 1
  ASSERT_EQ(p.top.size(), 3u);
  // Ties by id, as Argmax: the two 3.0s share rank 1.
  EXPECT_EQ(p.top[0].token, 1);
  EXPECT_EQ(p.top[1].token, 3);
  EXPECT_EQ(p.top[2].token, 2);
  EXPECT_EQ(p.top[0].rank, 1);
  EXPECT_EQ(p.top[1].rank, 1);
  EXPECT_EQ(p.top[2].rank, 3);
  double total = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    total += std::exp(ComputeLogprobs(logits, static_cast<int32_t>(i), 0).chosen.logprob);
  }
  EXPECT_NEAR(total, 1.0, 1e-6);
}

TEST(LogprobsTest, GreedyTokenEqualsTopEntryExactly) {
  std::vector<float> logits(1000);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(static_cast<float>(i) * 0.37f);
  const int32_t greedy = Sampler::Argmax(logits);
  const PositionLogprobs p = ComputeLogprobs(logits, greedy, 20);
  ASSERT_EQ(p.top.size(), 20u);
  EXPECT_EQ(p.top[0].token, greedy);
  EXPECT_EQ(p.chosen.logprob, p.top[0].logprob);  // bit for bit
  EXPECT_EQ(p.chosen.rank, 1);
  for (size_t i = 1; i < p.top.size(); ++i) EXPECT_GE(p.top[i - 1].logprob, p.top[i].logprob);
}

TEST(LogprobsTest, KLargerThanTheVocabularyKeepsEveryToken) {
  EXPECT_EQ(ComputeLogprobs(RowLogits(), 0, 20).top.size(), RowLogits().size());
  EXPECT_TRUE(ComputeLogprobs(RowLogits(), 0, 0).top.empty());
}

TEST(LogprobsTest, SerializeParseRoundTrip) {
  std::vector<SequenceLogprobs> in(2);
  in[0].seq_id = 7;
  in[0].first_prompt_position = 3;
  in[0].prompt = {ComputeLogprobs(RowLogits(), 2, 2), ComputeLogprobs(RowLogits(), 4, 0)};
  in[1].seq_id = 9;
  in[1].has_sampled = true;
  in[1].sampled = ComputeLogprobs(RowLogits(), 1, 5);
  const auto out = ParseLogprobs(SerializeLogprobs(in));
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ASSERT_EQ(out->size(), 2u);
  EXPECT_EQ((*out)[0].seq_id, 7u);
  EXPECT_EQ((*out)[0].first_prompt_position, 3);
  ASSERT_EQ((*out)[0].prompt.size(), 2u);
  EXPECT_EQ((*out)[0].prompt[0].top.size(), 2u);
  EXPECT_EQ((*out)[0].prompt[1].chosen.token, 4);
  EXPECT_FALSE((*out)[0].has_sampled);
  EXPECT_TRUE((*out)[1].has_sampled);
  EXPECT_EQ((*out)[1].sampled.chosen.logprob, in[1].sampled.chosen.logprob);
  EXPECT_EQ((*out)[1].sampled.top.size(), 5u);
  std::string bytes = SerializeLogprobs(in);
  bytes.pop_back();
  EXPECT_FALSE(ParseLogprobs(bytes).ok());
}

}  // namespace
}  // namespace uc::worker
