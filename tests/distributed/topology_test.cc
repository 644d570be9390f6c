// Every legal topology reproduces the single process: run under `mpiexec -n T*P` with
// `--tp T --pp P --model PATH --golden PREFIX` (see CMakeLists.txt). Rank 0 drives: it checks the
// golden greedy ids of an independent implementation (llama2.c run.c), and logits at every
// position against this same model run in one process (within 2e-4) and against the golden
// logits. The other ranks serve steps until the driver shuts them down.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "common/test_util.h"
#include "distributed/mpi/mpi_runtime.h"
#include "engine/deployment.h"
#include "engine/generator.h"

namespace uc {
namespace {

using testing::JsonFloats;
using testing::JsonInts;
using testing::TestData;

struct Args {
  int tp = 1, pp = 1;
  std::string model, golden;
};

Args ParseArgs() {
  Args a;
  const std::vector<std::string> argv = ::testing::internal::GetArgvs();
  for (size_t i = 1; i + 1 < argv.size(); ++i) {
    if (argv[i] == "--tp") a.tp = std::stoi(argv[i + 1]);
    if (argv[i] == "--pp") a.pp = std::stoi(argv[i + 1]);
    if (argv[i] == "--model") a.model = argv[i + 1];
    if (argv[i] == "--golden") a.golden = argv[i + 1];
  }
  return a;
}

void CheckGreedy(engine::Generator& gen, const nlohmann::json& golden) {
  for (const auto& c : golden["cases"]) {
    const std::vector<int32_t> prompt_ids = JsonInts(c["prompt_ids"]);
    const std::vector<int32_t> expected = JsonInts(c["ids"]);
    const int budget = c["steps"].get<int>() + 1 - static_cast<int>(prompt_ids.size());
    if (budget <= 0) continue;
    worker::SamplingParams params;
    params.temperature = 0.0f;
    params.max_tokens = budget;
    params.ignore_eos = true;
    params.stop_token_ids = {1};
    auto result = gen.GenerateFromIds(prompt_ids, params);
    ASSERT_TRUE(result.ok()) << result.status().ToString();
    std::vector<int32_t> ids = result->prompt_ids;
    ids.insert(ids.end(), result->output_ids.begin(), result->output_ids.end());
    if (c["stop"] == "bos") ids.pop_back();
    EXPECT_EQ(ids, expected) << "prompt '" << c["prompt"].get<std::string>() << "'";
  }
}

void CheckLogits(engine::Generator& gen, engine::Generator& single, const nlohmann::json& seq) {
  const std::vector<int32_t> ids = JsonInts(seq["ids"]);
  auto sharded = gen.ScoreAllPositions(ids);
  auto reference = single.ScoreAllPositions(ids);
  ASSERT_TRUE(sharded.ok() && reference.ok());
  const auto d =
      testing::MaxAbsDiff({sharded->data<float>(), static_cast<size_t>(sharded->numel())},
                          {reference->data<float>(), static_cast<size_t>(reference->numel())});
  EXPECT_LE(d.max_abs, 2e-4) << "vs one process, element " << d.worst_index;
  std::printf("max |logit(sharded) - logit(one process)| over %zu positions: %.3g\n", ids.size(),
              d.max_abs);
  const int64_t vocab = sharded->dim(1);
  for (const auto& p : seq["positions"]) {
    const int pos = p["pos"].get<int>();
    const std::span<const float> row(sharded->data<float>() + pos * vocab, 16);
    EXPECT_LE(testing::MaxAbsDiff(row, JsonFloats(p["first16"])).max_abs, 2e-4) << "pos " << pos;
  }
}

TEST(TopologyTest, MatchesSingleProcessAndGolden) {
  const Args args = ParseArgs();
  ASSERT_FALSE(args.model.empty()) << "pass --model";
  engine::DeploymentOptions options;
  options.model_path = TestData(args.model);
  options.tensor_parallel_size = args.tp;
  options.pipeline_parallel_size = args.pp;
  options.num_threads = 1;
  options.step_timeout_seconds = 60;
  distributed::MpiBackend backend;
  auto deployment = engine::Deployment::Create(options, &backend);
  ASSERT_TRUE(deployment.ok()) << deployment.status().ToString();
  if (!(*deployment)->is_driver()) {
    (*deployment)->worker().Loop();
    return;
  }
  engine::GeneratorOptions gen_options;
  gen_options.model_path = options.model_path;
  gen_options.max_model_len = 1024;
  gen_options.prefill_chunk = 96;
  auto gen = engine::Generator::OpenDriver(gen_options, std::move(deployment).value());
  ASSERT_TRUE(gen.ok()) << gen.status().ToString();
  gen_options.num_threads = 1;
  auto single = engine::Generator::Open(gen_options);
  ASSERT_TRUE(single.ok()) << single.status().ToString();
  CheckGreedy(**gen, testing::LoadJson(TestData("golden/" + args.golden + "_generate.json")));
  const nlohmann::json logits =
      testing::LoadJson(TestData("golden/" + args.golden + "_logits.json"));
  CheckLogits(**gen, **single, logits["short"]);
  CheckLogits(**gen, **single, logits["long"]);
}

}  // namespace
}  // namespace uc
