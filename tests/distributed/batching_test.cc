// Continuous batching across ranks: run under `mpiexec -n T*P` with `--tp T --pp P
// [--kv-blocks N]`. Rank 0 drives one engine over the deployment; 32 concurrent requests of
// mixed prompt lengths (several longer than a prefill chunk) must give exactly what each gives
// run alone in one process (the one-request Generator). With --kv-blocks small the KV cache
// cannot hold them all and preemption by recompute must happen — with the same result, and
// (batch-invariant matmuls) every activation row of every request with the bits it has when the
// request runs alone in the same topology. Then an abort mid-generation ends the request at the
// next step and returns its blocks.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <string>

#include "common/batching_workload.h"
#include "common/test_util.h"
#include "distributed/mpi/mpi_runtime.h"
#include "engine/deployment.h"
#include "engine/llm.h"
#include "engine/llm_engine.h"

namespace uc {
namespace {

struct Args {
  int tp = 1, pp = 1, kv_blocks = 0;
};

Args ParseArgs() {
  Args a;
  const std::vector<std::string> argv = ::testing::internal::GetArgvs();
  for (size_t i = 1; i + 1 < argv.size(); ++i) {
    if (argv[i] == "--tp") a.tp = std::stoi(argv[i + 1]);
    if (argv[i] == "--pp") a.pp = std::stoi(argv[i + 1]);
    if (argv[i] == "--kv-blocks") a.kv_blocks = std::stoi(argv[i + 1]);
  }
  return a;
}

void CheckAbort(engine::LLMEngine& engine) {
  const int total = engine.stats().num_kv_blocks;
  worker::SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = 100;
  p.ignore_eos = true;
  ASSERT_TRUE(engine.AddRequest("long", engine::Prompt::Text("Once upon a time"), p).ok());
  ASSERT_TRUE(engine.AddRequest("short", engine::Prompt::Text("The cat"), p).ok());
  int generated = 0;
  while (generated < 10) {
    for (const engine::RequestOutput& out : engine.Step()) {
      if (out.request_id == "long") generated += static_cast<int>(out.new_token_ids.size());
    }
  }
  const int free_before = engine.stats().num_free_kv_blocks;
  ASSERT_TRUE(engine.Abort("long", {"test", "stop now"}));
  bool aborted = false;
  for (const engine::RequestOutput& out : engine.Step()) {
    if (out.request_id != "long") continue;
    EXPECT_TRUE(out.new_token_ids.empty()) << "a token after the abort";
    EXPECT_TRUE(out.finished);
    EXPECT_EQ(out.finish_reason, engine::FinishReason::kAbort);
    EXPECT_EQ(out.output_ids.size(), 10u);
    aborted = true;
  }
  EXPECT_TRUE(aborted);
  EXPECT_GT(engine.stats().num_free_kv_blocks, free_before);
  while (engine.HasUnfinished()) engine.Step();
  EXPECT_EQ(engine.stats().num_free_kv_blocks, total);
}

// Logprobs travel from the last stage to the driver: generated and prompt logprobs equal a
// log-softmax of the one-process Generator's logits (topologies agree to 2e-4).
void CheckLogprobs(engine::LLMEngine& engine, engine::Generator& solo) {
  worker::SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = 8;
  p.ignore_eos = true;
  p.logprobs = 2;
  p.prompt_logprobs = 1;
  const std::string prompt = "Once upon a time, there was a little dog who liked to run";
  ASSERT_TRUE(engine.AddRequest("lp", engine::Prompt::Text(prompt), p).ok());
  std::optional<engine::RequestOutput> out;
  while (engine.HasUnfinished()) {
    for (engine::RequestOutput& o : engine.Step()) {
      if (o.finished) out = std::move(o);
    }
  }
  ASSERT_TRUE(out.has_value());
  std::vector<int32_t> all = out->prompt_ids;
  all.insert(all.end(), out->output_ids.begin(), out->output_ids.end());
  auto logits = solo.ScoreAllPositions(all);
  ASSERT_TRUE(logits.ok()) << logits.status().ToString();
  const int64_t vocab = logits->shape()[1];
  auto oracle = [&](size_t row, int32_t token) {
    const float* x = logits->data<float>() + row * vocab;
    double max = x[0], sum = 0.0;
    for (int64_t i = 1; i < vocab; ++i) max = std::max(max, static_cast<double>(x[i]));
    for (int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(x[i]) - max);
    return static_cast<double>(x[token]) - max - std::log(sum);
  };
  const size_t prompt_len = out->prompt_ids.size();
  ASSERT_EQ(out->prompt_logprobs.size(), prompt_len);
  for (size_t q = 1; q < prompt_len; ++q) {
    ASSERT_TRUE(out->prompt_logprobs[q].has_value()) << q;
    EXPECT_NEAR(out->prompt_logprobs[q]->chosen.logprob, oracle(q - 1, all[q]), 2e-4) << q;
  }
  ASSERT_EQ(out->logprobs.size(), out->output_ids.size());
  for (size_t i = 0; i < out->logprobs.size(); ++i) {
    const worker::PositionLogprobs& lp = out->logprobs[i];
    EXPECT_EQ(lp.top[0].logprob, lp.chosen.logprob);
    EXPECT_NEAR(lp.chosen.logprob, oracle(prompt_len - 1 + i, out->output_ids[i]), 2e-4) << i;
  }
}

// Prefix caching across ranks: every rank holds the same block ids, so a repeated prompt
// starts from the first one's blocks and generates what the one-process Generator does.
void CheckPrefixCache(engine::LLMEngine& engine, engine::Generator& solo) {
  const std::string prompt =
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
      "park with her friends. One day, she saw a big red ball under a tree and";
  std::vector<engine::RequestOutput> outs;
  for (const char* id : {"pc1", "pc2"}) {
    ASSERT_TRUE(engine.AddRequest(id, engine::Prompt::Text(prompt), testing::Greedy(10)).ok());
    while (engine.HasUnfinished()) {
      for (engine::RequestOutput& o : engine.Step()) {
        if (o.finished) outs.push_back(std::move(o));
      }
    }
  }
  ASSERT_EQ(outs.size(), 2u);
  EXPECT_EQ(outs[0].num_cached_tokens, 0);
  EXPECT_GE(outs[1].num_cached_tokens, 48);
  auto alone = solo.GenerateFromIds(outs[0].prompt_ids, testing::Greedy(10));
  ASSERT_TRUE(alone.ok()) << alone.status().ToString();
  EXPECT_EQ(outs[0].output_ids, alone->output_ids);
  EXPECT_EQ(outs[1].output_ids, alone->output_ids);
}

TEST(BatchingTest, ConcurrentRequestsMatchEachRunAlone) {
  const Args args = ParseArgs();
  engine::DeploymentOptions options;
  options.model_path = std::string(UC_SOURCE_DIR) + "/models/stories260K";
  options.tensor_parallel_size = args.tp;
  options.pipeline_parallel_size = args.pp;
  options.num_threads = 1;
  options.step_timeout_seconds = 60;
  options.load.batch_invariant = true;
  distributed::MpiBackend backend;
  auto deployment = engine::Deployment::Create(options, &backend);
  ASSERT_TRUE(deployment.ok()) << deployment.status().ToString();
  if (!(*deployment)->is_driver()) {
    (*deployment)->worker().Loop();
    return;
  }
  engine::EngineOptions engine_options;
  engine_options.model_path = options.model_path;
  engine_options.max_model_len = 256;
  engine_options.max_num_seqs = 32;
  engine_options.max_num_batched_tokens = 96;
  engine_options.max_prefill_chunk = 16;
  engine_options.num_kv_blocks = args.kv_blocks;
  engine_options.load = options.load;
  auto engine = engine::LLMEngine::OpenDriver(engine_options, std::move(deployment).value());
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  engine::LLM llm(std::move(engine).value());

  engine::GeneratorOptions solo_options;
  solo_options.model_path = options.model_path;
  solo_options.num_threads = 1;
  auto solo = engine::Generator::Open(solo_options);
  ASSERT_TRUE(solo.ok()) << solo.status().ToString();
  const std::vector<engine::GenerateRequest> requests = testing::BatchingWorkload(32);
  const auto alone = testing::RunAlone(**solo, requests);
  const auto batched = llm.Generate(requests);
  testing::ExpectSameAsAlone(batched, alone);
  const engine::EngineStats stats = llm.engine().stats();
  std::printf("tp %d pp %d: %lld steps, %lld tokens, %lld preemptions, %d KV blocks\n", args.tp,
              args.pp, static_cast<long long>(stats.num_steps),
              static_cast<long long>(stats.generated_tokens),
              static_cast<long long>(stats.num_preemptions), stats.num_kv_blocks);
  if (args.kv_blocks > 0) {
    EXPECT_GT(stats.num_preemptions, 0) << "the small KV cache should force preemption";
  } else {
    EXPECT_EQ(stats.num_preemptions, 0);
  }
  EXPECT_EQ(stats.num_free_kv_blocks, stats.num_kv_blocks);
  if (args.kv_blocks > 0) {
    // Batch invariance within the topology: every row of every request (each block's taps and
    // the final norm, the LM head's input) has the same bits alone and among the 32, with
    // preemption. TP 2 all-reduces two partial sums, and a + b is b + a bit for bit.
    const testing::RecordedRun one_by_one = testing::RunRecorded(llm, requests, false);
    const testing::RecordedRun together = testing::RunRecorded(llm, requests, true);
    EXPECT_GT(together.preemptions, 0);
    testing::ExpectSameBits(together, one_by_one,
                            "tp " + std::to_string(args.tp) + " pp " + std::to_string(args.pp));
  }
  CheckLogprobs(llm.engine(), **solo);
  if (args.kv_blocks == 0) CheckPrefixCache(llm.engine(), **solo);
  CheckAbort(llm.engine());
}

}  // namespace
}  // namespace uc
