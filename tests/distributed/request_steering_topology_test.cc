// Per-request steering across ranks: run under `mpiexec -n T*P` with `--tp T --pp P`. Rank 0
// drives one engine over the deployment with the transformers reference's cases
// (tests/testdata/steering/requests.json): 32 requests with 6 steering configs and unsteered
// ones, at most 2 configs per step, a KV cache small enough to preempt, plus conditional
// steering switched on by the observer after the activation of generated[3]. Every request
// generates the reference's ids (TP: every rank adds the vector after the all-reduce; PP: each
// stage its own layers), its final-norm activations equal one process running the same batch
// (≤ 1e-5 of the row's scale: the TP all-reduce sums in another order) and have the bits it has
// alone in the same topology (batch-invariant matmuls).
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "common/steering_util.h"
#include "common/test_util.h"
#include "distributed/mpi/mpi_runtime.h"
#include "engine/deployment.h"
#include "engine/llm.h"
#include "engine/llm_engine.h"

namespace uc {
namespace {

struct Args {
  int tp = 1, pp = 1;
};

Args ParseArgs() {
  Args a;
  const std::vector<std::string> argv = ::testing::internal::GetArgvs();
  for (size_t i = 1; i + 1 < argv.size(); ++i) {
    if (argv[i] == "--tp") a.tp = std::stoi(argv[i + 1]);
    if (argv[i] == "--pp") a.pp = std::stoi(argv[i + 1]);
  }
  return a;
}

engine::EngineOptions Options() {
  engine::EngineOptions options;
  options.model_path = std::string(UC_SOURCE_DIR) + "/models/stories260K";
  options.num_threads = 1;
  options.max_model_len = 64;
  options.max_prefill_chunk = 8;
  options.block_size = 4;
  options.max_steering_configs = 2;
  options.num_kv_blocks = 40;
  options.load.batch_invariant = true;
  return options;
}

// Runs the workload on `llm`: 32 requests cycling through the cases; the conditional case's
// steering switches on at its from_position. Returns the requests (for their ids).
std::vector<engine::GenerateRequest> Workload() {
  const nlohmann::json& cases = testing::RequestSteeringReference()["cases"];
  std::vector<engine::GenerateRequest> requests;
  for (int i = 0; i < 32; ++i) {
    const nlohmann::json& c = cases[i % cases.size()];
    requests.push_back(
        {std::to_string(i) + "_" + c["name"].get<std::string>(),
         engine::Prompt::Ids(testing::JsonInts(testing::RequestSteeringReference()["input_ids"])),
         testing::Greedy(16), testing::RequestSteeringOf(c)});
  }
  return requests;
}

struct WorkloadRun {
  std::vector<engine::GenerateResult> results;
  std::map<std::pair<std::string, int>, std::vector<float>> rows;
  int max_configs = 0;
  int64_t preemptions = 0;
};

WorkloadRun RunWorkload(engine::LLM& llm) {
  testing::SteeringRecorder recorder(&llm.engine());
  const std::vector<engine::GenerateRequest> requests = Workload();
  const nlohmann::json& cases = testing::RequestSteeringReference()["cases"];
  for (size_t i = 0; i < requests.size(); ++i)
    recorder.Follow(requests[i].id, cases[i % cases.size()]);
  llm.engine().SetObserver(&recorder);
  WorkloadRun run;
  run.results = llm.Generate(requests);
  llm.engine().SetObserver(nullptr);
  run.rows = std::move(recorder.rows);
  run.max_configs = recorder.max_configs_per_step;
  run.preemptions = llm.engine().stats().num_preemptions;
  return run;
}

// Each reference case alone through `llm` (its conditional switches included), recorded under
// the case's name.
std::map<std::pair<std::string, int>, std::vector<float>> RunEachCaseAlone(engine::LLM& llm) {
  std::map<std::pair<std::string, int>, std::vector<float>> rows;
  for (const nlohmann::json& c : testing::RequestSteeringReference()["cases"]) {
    testing::SteeringRecorder recorder(&llm.engine());
    recorder.Follow(c["name"], c);
    llm.engine().SetObserver(&recorder);
    const auto results = llm.Generate(
        {{c["name"],
          engine::Prompt::Ids(testing::JsonInts(testing::RequestSteeringReference()["input_ids"])),
          testing::Greedy(16), testing::RequestSteeringOf(c)}});
    llm.engine().SetObserver(nullptr);
    EXPECT_TRUE(results[0].status.ok()) << results[0].status.ToString();
    rows.insert(recorder.rows.begin(), recorder.rows.end());
  }
  return rows;
}

TEST(RequestSteeringTopologyTest, BatchedSteeringEqualsOneProcess) {
  const Args args = ParseArgs();
  engine::DeploymentOptions options;
  options.model_path = Options().model_path;
  options.tensor_parallel_size = args.tp;
  options.pipeline_parallel_size = args.pp;
  options.num_threads = 1;
  options.step_timeout_seconds = 60;
  options.load = Options().load;
  distributed::MpiBackend backend;
  auto deployment = engine::Deployment::Create(options, &backend);
  ASSERT_TRUE(deployment.ok()) << deployment.status().ToString();
  if (!(*deployment)->is_driver()) {
    (*deployment)->worker().Loop();
    return;
  }
  auto engine = engine::LLMEngine::OpenDriver(Options(), std::move(deployment).value());
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  engine::LLM sharded(std::move(engine).value());
  // A switch-on needs the observer, which runs in the driver only: the rows it flags may live
  // on any stage.
  const WorkloadRun got = RunWorkload(sharded);
  const auto alone = RunEachCaseAlone(sharded);

  auto solo = engine::LLM::Open(Options());
  ASSERT_TRUE(solo.ok()) << solo.status().ToString();
  const WorkloadRun want = RunWorkload(**solo);

  const nlohmann::json& cases = testing::RequestSteeringReference()["cases"];
  ASSERT_EQ(got.results.size(), want.results.size());
  EXPECT_GT(got.preemptions, 0);
  EXPECT_EQ(got.max_configs, 2);
  for (size_t i = 0; i < got.results.size(); ++i) {
    const engine::GenerateResult& r = got.results[i];
    ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    EXPECT_EQ(r.output.output_ids, testing::JsonInts(cases[i % cases.size()]["greedy"])) << r.id;
    int missing = 0;
    EXPECT_LE(testing::MaxRelativeRowDiff(got.rows, r.id, want.rows, r.id, 33, &missing), 1e-5)
        << r.id;
    EXPECT_EQ(missing, 0) << r.id;
    // In the same topology, alone and among the 32: the same bits (the final norm is the LM
    // head's input, so the same logits).
    const std::string name = cases[i % cases.size()]["name"];
    EXPECT_EQ(testing::MaxRelativeRowDiff(got.rows, r.id, alone, name, 33, &missing), 0.0) << r.id;
    EXPECT_EQ(missing, 0) << r.id;
  }
  std::printf("tp %d pp %d: %lld preemptions, at most %d steering configs per step\n", args.tp,
              args.pp, static_cast<long long>(got.preemptions), got.max_configs);
}

}  // namespace
}  // namespace uc
