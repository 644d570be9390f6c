// Capture in every topology: run under `mpiexec -n T*P` with `--tp T --pp P`. Rank 0 drives one
// engine over the deployment with a spec mixing prompt and generated selectors on every tensor
// type (and a combine: concat point whose layers sit on different pipeline stages), 16
// concurrent requests, chunked prefill; the records must be the same sequence (same
// order, values within 1e-5 relative) as one process, the residual stream must match the
// independent implementation's activations within 1e-4, every TP replica must capture the same
// bits (the debug comparison), and an abort — or an escalation held for a classifier — on a
// layer of the first pipeline stage must be token-exact without touching the co-batched
// requests.
#include <gtest/gtest.h>

#include <string>

#include "common/batching_workload.h"
#include "common/classifier_util.h"
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
  - {name: prompt_end, layers: [0, 1, 2, 3, 4], tensor_type: residual_stream,
     position: "prompt[-1]", probe_type: recorder, probe_kind: single_shot}
  - {name: start, layers: [0, 4], tensor_type: attn_out, position: "prompt[0]",
     probe_type: recorder, probe_kind: single_shot}
  - {name: decode, layers: [0, 1, 2, 3, 4], tensor_type: residual_stream,
     position: "generated[*]", probe_type: trajectory_recorder, probe_kind: trajectory}
  - {name: mlp, layers: [2], tensor_type: mlp_out, position: "generated[1:9]", stride: 3,
     probe_type: trajectory_recorder, probe_kind: trajectory}
  - {name: norm, layers: 5, tensor_type: final_norm, position: "generated[2]",
     probe_type: recorder, probe_kind: single_shot}
  - {name: tail, layers: 3, tensor_type: residual_stream, position: "generated[-1]",
     probe_type: recorder, probe_kind: single_shot}
  - {name: cat, layers: [4, 1], tensor_types: [mlp_out, attn_out], combine: concat,
     position: "generated[2:6]", probe_type: trajectory_recorder, probe_kind: trajectory}
)";

engine::EngineOptions Options(const std::string& model) {
  engine::EngineOptions o;
  o.model_path = model;
  o.max_model_len = 256;
  o.max_num_seqs = 16;
  o.max_num_batched_tokens = 64;
  o.max_prefill_chunk = 8;
  o.num_threads = 1;
  return o;
}

std::vector<GenerateRequest> Workload() {
  std::vector<GenerateRequest> requests = testing::BatchingWorkload(16);
  for (GenerateRequest& r : requests) {
    r.params.stop.clear();
    r.params.ignore_eos = true;
  }
  // The start of the golden story, greedy, for the residual-stream oracle.
  requests.push_back({"golden", Prompt::Ids({1}), [] {
                        worker::SamplingParams p;
                        p.temperature = 0.0f;
                        p.max_tokens = 6;
                        p.ignore_eos = true;
                        return p;
                      }()});
  return requests;
}

void CheckGolden(const std::vector<ActivationRecord>& records) {
  const nlohmann::json golden =
      testing::LoadJson(testing::TestData("golden/stories260K_activations.json"));
  int compared = 0;
  for (const ActivationRecord& r : testing::RecordLog::Of(records, "golden")) {
    if (r.tensor_type != probe::TensorType::kResidualStream || r.token_pos > 3) continue;
    const auto expected = testing::JsonFloats(
        golden["layers"][r.layer]["resid_after_layer"][static_cast<size_t>(r.token_pos)]);
    EXPECT_LE(testing::MaxAbsDiff(r.values, expected).max_abs, 1e-4)
        << r.point << " layer " << r.layer << " pos " << r.token_pos;
    ++compared;
  }
  EXPECT_EQ(compared, 4 * 5);  // prompt[-1] = position 0, generated 0..2 = positions 1..3
}

void CheckAbortOnFirstStage(engine::LLM& llm, engine::LLM& single) {
  std::vector<GenerateRequest> requests = Workload();
  requests.resize(6);
  requests.push_back({"gated", Prompt::Text("Once upon a time there was"), [] {
                        worker::SamplingParams p;
                        p.temperature = 0.0f;
                        p.max_tokens = 20;
                        p.ignore_eos = true;
                        return p;
                      }()});
  const std::string spec = R"(version: "1"
extraction_points:
  - {name: gate, layers: 0, tensor_type: residual_stream, position: "generated[3]",
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

// Escalation is a scheduling decision on the driver: a request held for a classifier (on a
// layer of the first stage) is skipped while the others step on every rank; continue gives
// one process's ids for everyone, abort stops it after the escalated token.
void CheckEscalationOnFirstStage(engine::LLM& llm, engine::LLM& single) {
  std::vector<GenerateRequest> requests = Workload();
  requests.resize(6);
  requests.push_back({"gated", Prompt::Text("Once upon a time there was"), [] {
                        worker::SamplingParams p;
                        p.temperature = 0.0f;
                        p.max_tokens = 20;
                        p.ignore_eos = true;
                        return p;
                      }()});
  const testing::ProbedRun plain = [&] {
    auto session = testing::MakeSession(R"(version: "1"
extraction_points:
  - {name: none, layers: 0, tensor_type: residual_stream, position: "generated[3]",
     probe_type: recorder, probe_kind: single_shot}
)",
                                        single.engine().config());
    return testing::RunProbed(single, *session, requests);
  }();
  for (const std::string decision : {"continue", "abort"}) {
    testing::Classifier classifier(decision, 300);
    const std::string spec = R"(version: "1"
extraction_points:
  - {name: gate, layers: 0, tensor_type: residual_stream, position: "generated[3]",
     probe_type: always_escalate, probe_kind: single_shot, probe_args: {request: gated},
     escalation: {url: ")" + classifier.url() +
                             R"(", timeout_ms: 30000, on_timeout: continue}}
)";
    auto session = testing::MakeSession(spec, llm.engine().config());
    const testing::ProbedRun run = testing::RunProbed(llm, *session, requests);
    EXPECT_EQ(run.stats.escalations, 1) << decision;
    const engine::RequestOutput& gated = run.results.back().output;
    const std::vector<int32_t>& full = plain.results.back().output.output_ids;
    if (decision == "continue") {
      EXPECT_EQ(gated.output_ids, full);
    } else {
      EXPECT_EQ(gated.output_ids, std::vector<int32_t>(full.begin(), full.begin() + 4));
      EXPECT_EQ(gated.finish_reason, engine::FinishReason::kAbort);
    }
    for (size_t i = 0; i + 1 < run.results.size(); ++i) {
      EXPECT_EQ(run.results[i].output.output_ids, plain.results[i].output.output_ids)
          << decision << " " << run.results[i].id;
    }
  }
}

TEST(ProbingTopologyTest, RecordsEqualOneProcess) {
  const Args args = ParseArgs();
  const std::string model = std::string(UC_SOURCE_DIR) + "/models/stories260K";
  engine::DeploymentOptions options;
  options.model_path = model;
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
  ASSERT_GT(got.records.size(), 500u);
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
  std::printf("tp %d pp %d: %zu records, same order as one process, max relative diff %.3g\n",
              args.tp, args.pp, got.records.size(), worst);
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(got.results[i].output.output_ids, want.results[i].output.output_ids);
  }
  CheckGolden(got.records);
  CheckAbortOnFirstStage(llm, **single);
  CheckEscalationOnFirstStage(llm, **single);
}

}  // namespace
}  // namespace uc
