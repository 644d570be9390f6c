// Logprobs from the serving engine on the bundled stories260K: a greedy token's logprob equals
// its row's top entry bit for bit; generated and prompt logprobs equal a log-softmax computed
// here, in double, from the logits the one-request Generator gives for the same tokens (an
// oracle independent of the engine's batching, paging and logprob code); chunked prefill and
// preemption change nothing; out-of-range values are refused naming the field.
#include <gtest/gtest.h>

#include <cmath>

#include "common/test_util.h"
#include "engine/generator.h"
#include "engine/llm.h"
#include "engine/llm_engine.h"

namespace uc {
namespace {

using engine::EngineOptions;
using engine::LLMEngine;
using engine::Prompt;
using engine::RequestOutput;

std::string LogprobsModelPath() { return std::string(UC_SOURCE_DIR) + "/models/stories260K"; }

EngineOptions LogprobsOptions(int chunk, int num_kv_blocks = 0) {
  EngineOptions o;
  o.model_path = LogprobsModelPath();
  o.num_threads = 2;
  o.max_model_len = 256;
  o.max_prefill_chunk = chunk;
  o.num_kv_blocks = num_kv_blocks;
  return o;
}

// Runs every request to the end; the finished outputs by request id.
std::map<std::string, RequestOutput> RunAll(LLMEngine& engine) {
  std::map<std::string, RequestOutput> done;
  while (engine.HasUnfinished()) {
    for (RequestOutput& out : engine.Step()) {
      if (out.finished) done[out.request_id] = std::move(out);
    }
  }
  return done;
}

// log softmax(row)[token] in double.
double OracleLogprob(const float* row, int64_t vocab, int32_t token) {
  double max = row[0];
  for (int64_t i = 1; i < vocab; ++i) max = std::max(max, static_cast<double>(row[i]));
  double sum = 0.0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(row[i]) - max);
  return static_cast<double>(row[token]) - max - std::log(sum);
}

worker::SamplingParams LogprobParams(int max_tokens) {
  worker::SamplingParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  p.logprobs = 5;
  p.prompt_logprobs = 3;
  return p;
}

const char* kLogprobPrompt = "Once upon a time, there was a little girl named Lily. She loved to";

TEST(LogprobsTest, MatchAnIndependentLogSoftmaxOfTheGeneratorsLogits) {
  auto engine = LLMEngine::Open(LogprobsOptions(/*chunk=*/7));
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  ASSERT_TRUE((*engine)->AddRequest("a", Prompt::Text(kLogprobPrompt), LogprobParams(12)).ok());
  const RequestOutput out = RunAll(**engine).at("a");
  ASSERT_EQ(out.output_ids.size(), 12u);
  ASSERT_EQ(out.logprobs.size(), 12u);
  ASSERT_EQ(out.prompt_logprobs.size(), out.prompt_ids.size());
  EXPECT_FALSE(out.prompt_logprobs[0].has_value());

  auto solo = engine::Generator::Open(
      {.model_path = LogprobsModelPath(), .tokenizer_path = {}, .num_threads = 2});
  ASSERT_TRUE(solo.ok()) << solo.status().ToString();
  std::vector<int32_t> all = out.prompt_ids;
  all.insert(all.end(), out.output_ids.begin(), out.output_ids.end());
  auto logits = (*solo)->ScoreAllPositions(all);
  ASSERT_TRUE(logits.ok()) << logits.status().ToString();
  const int64_t vocab = logits->shape()[1];
  const float* rows = logits->data<float>();
  const size_t prompt_len = out.prompt_ids.size();
  for (size_t q = 1; q < prompt_len; ++q) {
    ASSERT_TRUE(out.prompt_logprobs[q].has_value()) << "prompt position " << q;
    const worker::PositionLogprobs& p = *out.prompt_logprobs[q];
    EXPECT_EQ(p.chosen.token, all[q]);
    EXPECT_NEAR(p.chosen.logprob, OracleLogprob(rows + (q - 1) * vocab, vocab, all[q]), 2e-4)
        << "prompt position " << q;
    ASSERT_EQ(p.top.size(), 3u);
    EXPECT_NEAR(p.top[0].logprob, OracleLogprob(rows + (q - 1) * vocab, vocab, p.top[0].token),
                2e-4);
  }
  double cumulative = 0.0;
  for (size_t i = 0; i < out.output_ids.size(); ++i) {
    const worker::PositionLogprobs& p = out.logprobs[i];
    const size_t row = prompt_len - 1 + i;
    EXPECT_EQ(p.chosen.token, out.output_ids[i]);
    // Greedy: the top entry, bit for bit, and rank 1.
    ASSERT_EQ(p.top.size(), 5u);
    EXPECT_EQ(p.top[0].token, p.chosen.token);
    EXPECT_EQ(p.top[0].logprob, p.chosen.logprob);
    EXPECT_EQ(p.chosen.rank, 1);
    EXPECT_NEAR(p.chosen.logprob, OracleLogprob(rows + row * vocab, vocab, all[row + 1]), 2e-4);
    cumulative += p.chosen.logprob;
  }
  EXPECT_NEAR(out.cumulative_logprob, cumulative, 1e-9);
}

TEST(LogprobsTest, ChunkingBatchingAndPreemptionChangeNothing) {
  auto reference = LLMEngine::Open(LogprobsOptions(/*chunk=*/256));
  ASSERT_TRUE(reference.ok());
  ASSERT_TRUE((*reference)->AddRequest("r", Prompt::Text(kLogprobPrompt), LogprobParams(40)).ok());
  const RequestOutput alone = RunAll(**reference).at("r");
  // Small chunks, eight requests in a cache so small that some are preempted and recomputed.
  auto engine = LLMEngine::Open(LogprobsOptions(/*chunk=*/5, /*num_kv_blocks=*/16));
  ASSERT_TRUE(engine.ok());
  for (int i = 0; i < 8; ++i) {
    worker::SamplingParams p = LogprobParams(40);
    if (i % 2 == 1) p.prompt_logprobs.reset();
    ASSERT_TRUE((*engine)->AddRequest(std::to_string(i), Prompt::Text(kLogprobPrompt), p).ok());
  }
  const auto done = RunAll(**engine);
  EXPECT_GT((*engine)->stats().num_preemptions, 0);
  for (int i = 0; i < 8; ++i) {
    const RequestOutput& out = done.at(std::to_string(i));
    ASSERT_EQ(out.output_ids, alone.output_ids);
    ASSERT_EQ(out.logprobs.size(), alone.logprobs.size());
    for (size_t j = 0; j < out.logprobs.size(); ++j) {
      EXPECT_EQ(out.logprobs[j].chosen.logprob, alone.logprobs[j].chosen.logprob) << j;
    }
    if (i % 2 == 1) {
      EXPECT_TRUE(out.prompt_logprobs.empty());
      continue;
    }
    ASSERT_EQ(out.prompt_logprobs.size(), alone.prompt_logprobs.size());
    for (size_t q = 1; q < out.prompt_logprobs.size(); ++q) {
      ASSERT_TRUE(out.prompt_logprobs[q].has_value()) << q;
      EXPECT_EQ(out.prompt_logprobs[q]->chosen.logprob, alone.prompt_logprobs[q]->chosen.logprob);
    }
  }
}

TEST(LogprobsTest, OutOfRangeIsRefusedNamingTheField) {
  auto engine = LLMEngine::Open(LogprobsOptions(16));
  ASSERT_TRUE(engine.ok());
  worker::SamplingParams p = LogprobParams(4);
  p.logprobs = 21;
  Status s = (*engine)->AddRequest("x", Prompt::Text("Hi"), p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("logprobs"), std::string::npos) << s.message();
  p = LogprobParams(4);
  p.prompt_logprobs = -1;
  s = (*engine)->AddRequest("y", Prompt::Text("Hi"), p);
  EXPECT_NE(s.message().find("prompt_logprobs"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace uc
