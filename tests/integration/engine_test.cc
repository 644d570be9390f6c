// The serving engine on the bundled stories260K model, in one process: continuous batching of
// many requests gives exactly what each request gives alone (the one-request Generator is the
// oracle), with chunked prefill and with a KV budget small enough to force preemption; abort at
// every stage returns blocks to the free list; bad requests are rejected at AddRequest without
// disturbing the others.
#include <gtest/gtest.h>

#include <set>

#include "common/batching_workload.h"
#include "common/test_util.h"
#include "engine/generator.h"
#include "engine/llm.h"
#include "engine/llm_engine.h"

namespace uc {
namespace {

using engine::EngineOptions;
using engine::FinishReason;
using engine::GenerateRequest;
using engine::LLM;
using engine::LLMEngine;
using engine::Prompt;
using engine::RequestOutput;

std::string ModelPath() { return std::string(UC_SOURCE_DIR) + "/models/stories260K"; }

engine::Generator& Solo() {
  static engine::Generator* solo = [] {
    auto gen = engine::Generator::Open(
        {.model_path = ModelPath(), .tokenizer_path = {}, .num_threads = 2});
    UC_CHECK(gen.ok(), "%s", gen.status().ToString().c_str());
    return gen->release();
  }();
  return *solo;
}

EngineOptions Options() {
  EngineOptions o;
  o.model_path = ModelPath();
  o.num_threads = 2;
  o.max_model_len = 256;
  o.max_num_seqs = 32;
  o.max_num_batched_tokens = 96;
  o.max_prefill_chunk = 16;  // prompts of up to ~90 tokens take several chunks
  return o;
}

using testing::Greedy;

TEST(EngineTest, ThirtyTwoConcurrentRequestsMatchEachRunAlone) {
  const std::vector<GenerateRequest> requests = testing::BatchingWorkload(32);
  const auto alone = testing::RunAlone(Solo(), requests);
  auto llm = LLM::Open(Options());
  ASSERT_TRUE(llm.ok()) << llm.status().ToString();
  std::vector<std::string> finish_order;
  const auto batched = (*llm)->Generate(
      requests, [&](const engine::GenerateResult& r) { finish_order.push_back(r.id); });
  testing::ExpectSameAsAlone(batched, alone);
  EXPECT_EQ(finish_order.size(), requests.size());
  const engine::EngineStats stats = (*llm)->engine().stats();
  EXPECT_EQ(stats.num_preemptions, 0);
  EXPECT_EQ(stats.num_free_kv_blocks, stats.num_kv_blocks);
  // Batching happened: far fewer steps than tokens.
  EXPECT_LT(stats.num_steps, stats.generated_tokens / 4);
}

TEST(EngineTest, SmallKvBudgetForcesPreemptionAndStillMatches) {
  const std::vector<GenerateRequest> requests = testing::BatchingWorkload(32);
  const auto alone = testing::RunAlone(Solo(), requests);
  EngineOptions o = Options();
  o.num_kv_blocks = 24;  // 384 slots for 32 requests of up to ~150 tokens each
  auto llm = LLM::Open(o);
  ASSERT_TRUE(llm.ok()) << llm.status().ToString();
  const auto batched = (*llm)->Generate(requests);
  testing::ExpectSameAsAlone(batched, alone);
  const engine::EngineStats stats = (*llm)->engine().stats();
  EXPECT_GT(stats.num_preemptions, 0);
  int preempted_requests = 0;
  for (const auto& r : batched) preempted_requests += r.output.metrics.num_preemptions > 0;
  EXPECT_GT(preempted_requests, 0);
  EXPECT_EQ(stats.num_free_kv_blocks, stats.num_kv_blocks);
  std::printf("%lld preemptions over %d requests\n", static_cast<long long>(stats.num_preemptions),
              preempted_requests);
}

TEST(EngineTest, KvBudgetSizesTheCache) {
  EngineOptions o = Options();
  // Automatic (kv_cache_bytes 0): a few MiB here, so the bound is max_num_seqs full sequences.
  auto automatic = LLMEngine::Open(o);
  ASSERT_TRUE(automatic.ok()) << automatic.status().ToString();
  EXPECT_EQ((*automatic)->stats().num_kv_blocks, o.max_num_seqs * (256 / 16));
  EXPECT_EQ((*automatic)->max_model_len(), 256);
  o.kv_cache_bytes = 1 << 20;  // stories260K: 5 layers x 2 x 16 slots x 32 floats = 20 KiB/block
  auto engine = LLMEngine::Open(o);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  EXPECT_EQ((*engine)->stats().num_kv_blocks, (1 << 20) / (5 * 2 * 16 * 32 * 4));
  o.kv_cache_bytes = 100 << 10;  // 5 blocks: less than one 256-token sequence
  auto small = LLMEngine::Open(o);
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.status().message().find("--kv-cache-memory"), std::string::npos)
      << small.status().message();
}

// Runs steps until `id` produced at least `tokens` tokens; returns its outputs.
std::vector<RequestOutput> StepUntil(LLMEngine& engine, const std::string& id, int tokens) {
  std::vector<RequestOutput> all;
  int seen = 0;
  while (seen < tokens && engine.HasUnfinished()) {
    for (RequestOutput& out : engine.Step()) {
      if (out.request_id == id) seen += static_cast<int>(out.new_token_ids.size());
      all.push_back(std::move(out));
    }
  }
  return all;
}

TEST(EngineTest, AbortStopsAtTheNextStepAndFreesBlocks) {
  EngineOptions o = Options();
  o.max_num_seqs = 2;  // the third request waits
  auto engine_or = LLMEngine::Open(o);
  ASSERT_TRUE(engine_or.ok());
  LLMEngine& engine = **engine_or;
  const int total = engine.stats().num_kv_blocks;
  ASSERT_TRUE(engine.AddRequest("running", Prompt::Text("Once upon a time"), Greedy(100)).ok());
  ASSERT_TRUE(engine.AddRequest("other", Prompt::Text("The dog"), Greedy(30)).ok());
  ASSERT_TRUE(engine.AddRequest("waiting", Prompt::Text("Lily"), Greedy(30)).ok());
  StepUntil(engine, "running", 20);
  EXPECT_EQ(engine.stats().num_waiting, 1);
  const int free_before = engine.stats().num_free_kv_blocks;
  // 5 prompt tokens + ~20 generated: two blocks of 16.
  ASSERT_TRUE(engine.Abort("running", {"test", "enough"}));
  ASSERT_TRUE(engine.Abort("waiting", {"test", "never started"}));
  EXPECT_FALSE(engine.Abort("no-such-request"));
  const std::vector<RequestOutput> next = engine.Step();
  std::map<std::string, RequestOutput> finished;
  for (const RequestOutput& out : next) {
    if (out.finished) finished[out.request_id] = out;
    EXPECT_FALSE(out.request_id == "running" && !out.new_token_ids.empty())
        << "an aborted request produced a token after the abort";
  }
  ASSERT_EQ(finished.count("running"), 1u);
  ASSERT_EQ(finished.count("waiting"), 1u);
  EXPECT_EQ(finished["running"].finish_reason, FinishReason::kAbort);
  ASSERT_TRUE(finished["running"].abort.has_value());
  EXPECT_EQ(finished["running"].abort->by, "test");
  EXPECT_EQ(finished["running"].abort->reason, "enough");
  EXPECT_GE(finished["running"].output_ids.size(), 20u);
  EXPECT_EQ(finished["waiting"].finish_reason, FinishReason::kAbort);
  EXPECT_TRUE(finished["waiting"].output_ids.empty());
  // The aborted request's two blocks are back (the other request may have grown by one).
  EXPECT_GE(engine.stats().num_free_kv_blocks, free_before + 1);
  EXPECT_FALSE(engine.Abort("running")) << "already finished";
  while (engine.HasUnfinished()) engine.Step();
  EXPECT_EQ(engine.stats().num_free_kv_blocks, total);
}

TEST(EngineTest, BadRequestsAreRejectedWithoutDisturbingOthers) {
  auto engine_or = LLMEngine::Open(Options());
  ASSERT_TRUE(engine_or.ok());
  LLMEngine& engine = **engine_or;
  ASSERT_TRUE(engine.AddRequest("good", Prompt::Text("Once upon a time"), Greedy(40)).ok());
  StepUntil(engine, "good", 5);
  struct Bad {
    std::string id;
    Prompt prompt;
    worker::SamplingParams params;
    std::string message;
  };
  worker::SamplingParams hot = Greedy(10);
  hot.temperature = -1.0f;
  worker::SamplingParams no_nucleus = Greedy(10);
  no_nucleus.top_p = 0.0f;
  worker::SamplingParams nothing = Greedy(0);
  worker::SamplingParams bad_stop = Greedy(10);
  bad_stop.stop_token_ids = {100000};
  const std::vector<Bad> bad = {
      {"long", Prompt::Ids(std::vector<int32_t>(256, 42)), Greedy(10), "max_model_len"},
      {"empty", Prompt::Ids({}), Greedy(10), "no tokens"},
      {"vocab", Prompt::Ids({1, 512}), Greedy(10), "outside the vocabulary"},
      {"temp", Prompt::Text("a"), hot, "temperature"},
      {"top_p", Prompt::Text("a"), no_nucleus, "top_p"},
      {"zero", Prompt::Text("a"), nothing, "max_tokens"},
      {"stop_ids", Prompt::Text("a"), bad_stop, "stop_token_ids"},
      {"good", Prompt::Text("a"), Greedy(10), "already in use"},
      {"", Prompt::Text("a"), Greedy(10), "empty"},
  };
  for (const Bad& b : bad) {
    const Status status = engine.AddRequest(b.id, b.prompt, b.params);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << b.id;
    EXPECT_NE(status.message().find(b.message), std::string::npos)
        << b.id << ": " << status.message();
  }
  // An empty text prompt still gets BOS and is valid.
  ASSERT_TRUE(engine.AddRequest("bos-only", Prompt::Text(""), Greedy(12)).ok());
  std::map<std::string, RequestOutput> finished;
  std::vector<int32_t> good_ids;
  while (engine.HasUnfinished()) {
    for (RequestOutput& out : engine.Step()) {
      if (out.finished) finished[out.request_id] = std::move(out);
    }
  }
  ASSERT_EQ(finished.size(), 2u);
  auto alone = Solo().Generate("Once upon a time", Greedy(40));
  ASSERT_TRUE(alone.ok());
  EXPECT_EQ(finished["good"].output_ids, alone->output_ids);
  EXPECT_EQ(finished["bos-only"].prompt_ids, std::vector<int32_t>{1});
  EXPECT_EQ(finished["bos-only"].output_ids.size(), 12u);
}

TEST(EngineTest, StreamedTextAddsUpAndStopsAtStopStrings) {
  auto engine_or = LLMEngine::Open(Options());
  ASSERT_TRUE(engine_or.ok());
  LLMEngine& engine = **engine_or;
  worker::SamplingParams p = Greedy(60);
  p.stop = {"park"};
  ASSERT_TRUE(engine.AddRequest("s", Prompt::Text("Once upon a time"), p).ok());
  std::string streamed;
  RequestOutput last;
  while (engine.HasUnfinished()) {
    for (RequestOutput& out : engine.Step()) {
      streamed += out.new_text;
      if (out.finished) last = std::move(out);
    }
  }
  EXPECT_EQ(streamed, last.text);
  EXPECT_EQ(last.finish_reason, FinishReason::kStop);
  EXPECT_EQ(last.stop_reason, "stop:park");
  EXPECT_EQ(last.text.find("park"), std::string::npos);
  auto alone = Solo().Generate("Once upon a time", p);
  ASSERT_TRUE(alone.ok());
  EXPECT_EQ(last.text, alone->text);
}

TEST(EngineTest, RequestsThatReachTheContextEndStopThere) {
  EngineOptions o = Options();
  o.max_model_len = 40;
  auto engine_or = LLMEngine::Open(o);
  ASSERT_TRUE(engine_or.ok());
  LLMEngine& engine = **engine_or;
  ASSERT_TRUE(engine.AddRequest("x", Prompt::Text("Once upon a time"), Greedy(100)).ok());
  RequestOutput last;
  while (engine.HasUnfinished()) {
    for (RequestOutput& out : engine.Step()) {
      if (out.finished) last = std::move(out);
    }
  }
  EXPECT_EQ(last.prompt_ids.size() + last.output_ids.size(), 40u);
  EXPECT_EQ(last.stop_reason, "max_model_len");
  EXPECT_EQ(last.finish_reason, FinishReason::kLength);
}

}  // namespace
}  // namespace uc
