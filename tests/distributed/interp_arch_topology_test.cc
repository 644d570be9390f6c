// The tiny GPT-2, GPT-NeoX and OLMo-2 fixtures (tests/testdata/arch) probed across processes,
// under `mpiexec -n T*P` with `--tp T --pp P --model DIR_OR_GGUF`: LayerNorm biases and the
// row-parallel biases added once, the parallel residual pair crossing a stage boundary, OLMo-2's
// full-width q/k norm all-reducing its sums of squares; and the mixtures of experts (Qwen2/3-MoE,
// OLMoE, Mixtral, gpt-oss with its attention sinks split with the heads and its expert down
// biases added once), every expert sliced over TP and the block all-reduced before its mlp_out
// tap, whose router_logits and expert_weights ([num_experts] rows: the replicated router on every
// TP rank, sent on by the owning PP stage) are captured too. The records of a spec on the first
// and last layers
// (residual stream, attention and MLP outputs, the final norm) must be the same sequence as one
// process (same order, values within 1e-5 relative), every TP replica must capture the same bits,
// and the greedy tokens must be the same. `--enable-expert-parallel` runs the MoE layers with
// whole experts per TP rank instead (the one process stays as it is).
#include <gtest/gtest.h>

#include <string>
#include <utility>

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
  bool expert_parallel = false;
  std::string model;  // under tests/testdata
};

Args ParseArgs() {
  Args a;
  const std::vector<std::string> argv = ::testing::internal::GetArgvs();
  for (size_t i = 1; i < argv.size(); ++i) {
    if (argv[i] == "--enable-expert-parallel") a.expert_parallel = true;
    if (i + 1 == argv.size()) break;
    if (argv[i] == "--tp") a.tp = std::stoi(argv[i + 1]);
    if (argv[i] == "--pp") a.pp = std::stoi(argv[i + 1]);
    if (argv[i] == "--model") a.model = argv[i + 1];
  }
  return a;
}

// LAST: the last decoder layer; FINAL: the final norm's layer (the number of layers).
constexpr const char* kSpecTemplate = R"(version: "1"
extraction_points:
  - {name: prompt_end, layers: [0, LAST], tensor_type: residual_stream, position: "prompt[-1]",
     probe_type: recorder, probe_kind: single_shot}
  - {name: stream, layers: [0, LAST], tensor_type: residual_stream, position: "generated[*]",
     probe_type: trajectory_recorder, probe_kind: trajectory}
  - {name: attn, layers: [0, LAST], tensor_type: attn_out, position: "generated[*]",
     probe_type: trajectory_recorder, probe_kind: trajectory}
  - {name: mlp, layers: [0, LAST], tensor_type: mlp_out, position: "prompt[1]",
     probe_type: recorder, probe_kind: single_shot}
  - {name: norm, layers: FINAL, tensor_type: final_norm, position: "generated[2]",
     probe_type: recorder, probe_kind: single_shot}
)";

// Beside the spec on a mixture of experts: the router's logits and the routing weights, alone and
// concatenated with the residual stream (rows of different widths in one record).
constexpr const char* kMoeSpec = R"(
  - {name: router, layers: [0, 1], tensor_type: router_logits, position: "generated[*]",
     probe_type: trajectory_recorder, probe_kind: trajectory}
  - {name: weights, layers: [0, 1], tensor_type: expert_weights, position: "prompt[-2]",
     probe_type: recorder, probe_kind: single_shot}
  - {name: routed, layers: [1], tensor_types: [expert_weights, residual_stream],
     combine: concat, position: "generated[1]", probe_type: recorder, probe_kind: single_shot}
)";

// kSpecTemplate on the first and last layers of a model of `num_layers` decoder layers.
std::string Spec(int num_layers) {
  std::string spec = kSpecTemplate;
  for (const auto& [key, value] : {std::pair<std::string, int>{"LAST", num_layers - 1},
                                   std::pair<std::string, int>{"FINAL", num_layers}}) {
    for (size_t at = spec.find(key); at != std::string::npos; at = spec.find(key, at)) {
      spec.replace(at, key.size(), std::to_string(value));
    }
  }
  return spec;
}

engine::EngineOptions Options(const std::string& model) {
  engine::EngineOptions o;
  o.model_path = model;
  o.max_model_len = 96;  // the fixtures have 128 positions
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

TEST(InterpArchTopologyTest, RecordsEqualOneProcess) {
  const Args args = ParseArgs();
  ASSERT_FALSE(args.model.empty()) << "--model DIR_OR_GGUF (under tests/testdata) is required";
  const std::string model = testing::TestData(args.model).string();
  engine::DeploymentOptions options;
  options.model_path = model;
  options.tensor_parallel_size = args.tp;
  options.pipeline_parallel_size = args.pp;
  options.load.expert_parallel = args.expert_parallel;
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
  const models::ModelConfig& config = llm.engine().config();
  const std::string spec =
      Spec(config.num_hidden_layers) + (config.num_experts > 0 ? kMoeSpec + 1 : "");
  auto session = testing::MakeSession(spec, config, debug);
  auto single_session = testing::MakeSession(spec, config);
  ASSERT_NE(session, nullptr);
  const std::vector<GenerateRequest> requests = Workload();
  const testing::ProbedRun got = testing::RunProbed(llm, *session, requests);
  const testing::ProbedRun want = testing::RunProbed(**single, *single_session, requests);
  ASSERT_EQ(got.records.size(), want.records.size());
  ASSERT_GT(got.records.size(), 100u);
  double worst = 0.0;
  int router_records = 0;
  for (size_t i = 0; i < got.records.size(); ++i) {
    const ActivationRecord& a = got.records[i];
    const ActivationRecord& b = want.records[i];
    ASSERT_EQ(std::tie(a.request_id, a.point, a.layer, a.token_pos, a.is_generated),
              std::tie(b.request_id, b.point, b.layer, b.token_pos, b.is_generated))
        << "record #" << i;
    ASSERT_EQ(a.values.size(), b.values.size()) << "record #" << i << " " << a.point;
    worst = std::max(worst, testing::RelativeDiff(a, b));
    router_records += a.tensor_type == probe::TensorType::kRouterLogits ||
                      a.tensor_type == probe::TensorType::kExpertWeights;
  }
  EXPECT_LE(worst, 1e-5);
  if (config.num_experts > 0) {
    EXPECT_GT(router_records, 50);
  }
  std::printf(
      "%s tp %d pp %d%s: %zu records (%d router), same order as one process, max relative "
      "diff %.3g\n",
      args.model.c_str(), args.tp, args.pp, args.expert_parallel ? " expert-parallel" : "",
      got.records.size(), router_records, worst);
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(got.results[i].output.output_ids, want.results[i].output.output_ids);
  }
}

}  // namespace
}  // namespace uc
