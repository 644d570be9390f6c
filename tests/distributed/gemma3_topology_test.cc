// Gemma 3 270M (Q4_K_M; UC_GEMMA3_GGUF) probed across processes, under `mpiexec -n T*P` with
// `--tp T --pp P`. Its single KV head is replicated over the TP ranks; its 18 layers split into
// stages. The records of a spec on layers of every stage (residual stream, attention and MLP
// outputs, the final norm) must be the same sequence as one process (same order, values within
// 1e-5 relative), every TP replica must capture the same bits, and with pipeline stages an inline
// abort at generated[3] on a layer of the first stage must return exactly 4 tokens.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "common/probing_util.h"
#include "common/test_util.h"
#include "distributed/mpi/mpi_runtime.h"
#include "engine/deployment.h"
#include "engine/llm.h"

namespace uc {
namespace {

using engine::GenerateRequest;
using engine::Prompt;
using probe::ActivationRecord;

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

constexpr const char* kSpec = R"(version: "1"
extraction_points:
  - {name: prompt_end, layers: [0, 5, 6, 11, 12, 17], tensor_type: residual_stream,
     position: "prompt[-1]", probe_type: recorder, probe_kind: single_shot}
  - {name: attn, layers: [2, 9, 16], tensor_type: attn_out, position: "prompt[1]",
     probe_type: recorder, probe_kind: single_shot}
  - {name: decode, layers: [3, 8, 15], tensor_type: residual_stream, position: "generated[*]",
     probe_type: trajectory_recorder, probe_kind: trajectory}
  - {name: mlp, layers: [13], tensor_type: mlp_out, position: "generated[1:5]",
     probe_type: trajectory_recorder, probe_kind: trajectory}
  - {name: norm, layers: 18, tensor_type: final_norm, position: "generated[2]",
     probe_type: recorder, probe_kind: single_shot}
)";

engine::EngineOptions Options(const std::string& model) {
  engine::EngineOptions o;
  o.model_path = model;
  o.max_model_len = 256;
  o.max_num_seqs = 4;
  o.max_num_batched_tokens = 32;
  o.max_prefill_chunk = 16;
  o.num_threads = 1;
  return o;
}

using testing::Greedy;

std::vector<GenerateRequest> Workload() {
  return {
      {"story", Prompt::Text("Once upon a time, in a small village, there lived"), Greedy(8)},
      {"code", Prompt::Text("def add(a, b):\n    return"), Greedy(6)},
      {"fact", Prompt::Text("The capital of France is"), Greedy(7)},
      {"list", Prompt::Text("Monday, Tuesday, Wednesday,"), Greedy(5)},
  };
}

void CheckAbort(engine::LLM& llm, engine::LLM& single) {
  std::vector<GenerateRequest> requests = Workload();
  requests.push_back({"gated", Prompt::Text("Write a short poem about the sea."), Greedy(16)});
  const std::string spec = R"(version: "1"
extraction_points:
  - {name: gate, layers: 1, tensor_type: residual_stream, position: "generated[3]",
     probe_type: always_abort, probe_kind: single_shot, probe_args: {request: gated}}
)";
  auto session = testing::MakeSession(spec, llm.engine().config());
  auto single_session = testing::MakeSession(spec, llm.engine().config());
  const testing::ProbedRun run = testing::RunProbed(llm, *session, requests);
  const testing::ProbedRun want = testing::RunProbed(single, *single_session, requests);
  const engine::RequestOutput& gated = run.results.back().output;
  EXPECT_EQ(gated.output_ids.size(), 4u);  // tokens 0..3; the abort came from token 3
  EXPECT_EQ(gated.finish_reason, engine::FinishReason::kAbort);
  for (size_t i = 0; i < run.results.size(); ++i) {
    EXPECT_EQ(run.results[i].output.output_ids, want.results[i].output.output_ids)
        << run.results[i].id;
  }
}

TEST(Gemma3TopologyTest, RecordsEqualOneProcess) {
  const Args args = ParseArgs();
  const char* path = std::getenv("UC_GEMMA3_GGUF");
  ASSERT_TRUE(path != nullptr && *path != '\0')
      << "UC_GEMMA3_GGUF is not set: run scripts/fetch-gemma3.sh and export its output";
  const std::string model = path;
  engine::DeploymentOptions options;
  options.model_path = model;
  options.tensor_parallel_size = args.tp;
  options.pipeline_parallel_size = args.pp;
  options.num_threads = 1;
  options.step_timeout_seconds = 120;
  distributed::MpiBackend backend;
  auto deployment = engine::Deployment::Create(options, &backend);
  ASSERT_TRUE(deployment.ok()) << deployment.status().ToString();
  if (!(*deployment)->is_driver()) {
    (*deployment)->worker().Loop();
    return;
  }
  auto engine = engine::LLMEngine::OpenDriver(Options(model), std::move(deployment).value());
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  engine::LLM llm(std::move(engine).value());
  auto single = engine::LLM::Open(Options(model));
  ASSERT_TRUE(single.ok()) << single.status().ToString();

  probe::ProbingOptions debug;
  debug.compare_tp_replicas = true;  // a difference between TP replicas is a fatal error
  auto session = testing::MakeSession(kSpec, llm.engine().config(), debug);
  auto single_session = testing::MakeSession(kSpec, llm.engine().config());
  ASSERT_NE(session, nullptr);
  const std::vector<GenerateRequest> requests = Workload();
  const testing::ProbedRun got = testing::RunProbed(llm, *session, requests);
  const testing::ProbedRun want = testing::RunProbed(**single, *single_session, requests);
  ASSERT_EQ(got.records.size(), want.records.size());
  ASSERT_GT(got.records.size(), 100u);
  double worst = 0.0;
  for (size_t i = 0; i < got.records.size(); ++i) {
    const ActivationRecord& a = got.records[i];
    const ActivationRecord& b = want.records[i];
    ASSERT_EQ(std::tie(a.request_id, a.point, a.layer, a.token_pos, a.is_generated),
              std::tie(b.request_id, b.point, b.layer, b.token_pos, b.is_generated))
        << "record #" << i;
    worst = std::max(worst, testing::RelativeDiff(a, b));
  }
  EXPECT_LE(worst, 1e-5);
  std::printf(
      "gemma3 tp %d pp %d: %zu records, same order as one process, max relative diff %.3g\n",
      args.tp, args.pp, got.records.size(), worst);
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(got.results[i].output.output_ids, want.results[i].output.output_ids);
  }
  if (args.pp >= 2) CheckAbort(llm, **single);
}

}  // namespace
}  // namespace uc
