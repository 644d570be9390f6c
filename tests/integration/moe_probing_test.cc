// The mixture-of-experts tensor types through the probing session, on the tiny random
// Qwen3-MoE, OLMoE and Mixtral checkpoints of tools/reference/make_moe_fixtures.py:
// router_logits records equal transformers' output_router_logits (≤ 1e-5) at every layer and
// prompt position, expert_weights records equal the softmax / top-k / renormalisation computed
// here in float64 from those logits, a concat of both is their two rows one after the other,
// inline and async probes get num_experts-wide activations, a dense model refuses the types
// naming the field, and steering a MoE model moves the residual stream by exactly the vector.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <numeric>

#include "common/capture_util.h"
#include "common/probing_util.h"
#include "common/test_util.h"
#include "engine/llm.h"
#include "models/checkpoint.h"

namespace uc {
namespace {

using engine::GenerateRequest;
using engine::Prompt;
using testing::Greedy;
using testing::JsonFloats;
using testing::JsonInts;
using testing::TestData;

engine::EngineOptions Options(const std::string& model) {
  engine::EngineOptions o;
  o.model_path = TestData("arch/" + model).string();
  o.num_threads = 2;
  o.max_model_len = 64;
  o.max_num_seqs = 4;
  o.max_num_batched_tokens = 32;
  o.max_prefill_chunk = 7;  // the prompt's routing arrives over several chunks
  return o;
}

// Float64 routing of one token from its router logits: softmax over every expert, the top_k
// largest (lower index first on a tie), renormalised over the chosen when `renormalise`.
std::vector<double> Routing(const std::vector<float>& logits, int top_k, bool renormalise) {
  const double max = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(logits.size());
  double sum = 0.0;
  for (size_t e = 0; e < logits.size(); ++e) sum += p[e] = std::exp(double{logits[e]} - max);
  for (double& v : p) v /= sum;
  std::vector<size_t> order(p.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] > p[b]; });
  std::vector<double> w(p.size(), 0.0);
  double chosen = 0.0;
  for (int k = 0; k < top_k; ++k) chosen += w[order[k]] = p[order[k]];
  if (renormalise) {
    for (double& v : w) v /= chosen;
  }
  return w;
}

class MoeProbingTest : public ::testing::TestWithParam<std::string> {};

// One recorder point per prompt position and tensor type (every layer), and a concat of
// router_logits, expert_weights and the residual stream at one position.
TEST_P(MoeProbingTest, RouterRecordsMatchTransformers) {
  const nlohmann::json reference =
      testing::LoadJson(TestData("arch/" + GetParam() + "/reference.json"));
  const std::vector<int32_t> ids = JsonInts(reference["input_ids"]);
  auto llm = engine::LLM::Open(Options(GetParam()));
  ASSERT_TRUE(llm.ok()) << llm.status().ToString();
  const models::ModelConfig& config = (*llm)->engine().config();
  ASSERT_GT(config.num_experts, 0);
  std::string layers = "[";
  for (int l = 0; l < config.num_hidden_layers; ++l) layers += (l ? ", " : "") + std::to_string(l);
  layers += "]";
  std::string yaml = "version: \"1\"\nextraction_points:\n";
  for (size_t p = 0; p < ids.size(); ++p) {
    for (const char* type : {"router_logits", "expert_weights"}) {
      yaml += std::string("  - {name: ") + type + "_" + std::to_string(p) + ", layers: " + layers +
              ", tensor_type: " + type + ", position: " + std::to_string(p) +
              ", probe_type: recorder, probe_kind: single_shot}\n";
    }
  }
  constexpr int kConcatPos = 5;
  yaml +=
      "  - {name: both, layers: [1], tensor_types: [router_logits, expert_weights, "
      "residual_stream], combine: concat, position: " +
      std::to_string(kConcatPos) + ", probe_type: recorder, probe_kind: single_shot}\n";
  auto session = testing::MakeSession(yaml, config);
  ASSERT_NE(session, nullptr);
  const testing::ProbedRun run =
      testing::RunProbed(**llm, *session, {{"r", Prompt::Ids(ids), Greedy(1)}});
  ASSERT_TRUE(run.results[0].status.ok());

  const size_t experts = static_cast<size_t>(config.num_experts);
  // The family's rule, from the checkpoint's own config.json: Mixtral always renormalises over
  // its top-k, Qwen3-MoE and OLMoE as norm_topk_prob says.
  const nlohmann::json hf = testing::LoadJson(TestData("arch/" + GetParam() + "/config.json"));
  const bool renormalise = GetParam() == "mixtral" || hf.value("norm_topk_prob", false);
  const int top_k = hf["num_experts_per_tok"].get<int>();
  const nlohmann::json& want_logits = reference["taps"]["router_logits"];
  const nlohmann::json& want_resid = reference["taps"]["residual_stream"];
  int router = 0, weights = 0, concat = 0;
  for (const probe::ActivationRecord& r : run.records) {
    const size_t p = static_cast<size_t>(r.token_pos);
    ASSERT_LT(p, ids.size());
    const std::vector<float> logits = JsonFloats(want_logits[r.layer][p]);
    const std::string where = r.point + " layer " + std::to_string(r.layer);
    if (r.point == "both") {
      // [router_logits | expert_weights | residual_stream] of layer 1.
      ASSERT_EQ(r.values.size(), 2 * experts + static_cast<size_t>(config.hidden_size));
      const std::span<const float> v(r.values);
      EXPECT_LE(testing::MaxAbsDiff(v.subspan(0, experts), logits).max_abs, 1e-5) << where;
      const std::vector<double> w = Routing(logits, top_k, renormalise);
      for (size_t e = 0; e < experts; ++e) EXPECT_NEAR(v[experts + e], w[e], 1e-5) << e;
      const std::vector<float> resid = JsonFloats(want_resid[r.layer][p]);
      EXPECT_LE(testing::MaxAbsDiff(v.subspan(2 * experts), resid).max_abs, 1e-4);
      ++concat;
      continue;
    }
    EXPECT_EQ(r.point.substr(r.point.rfind('_') + 1), std::to_string(p)) << where;
    ASSERT_EQ(r.values.size(), experts) << where;
    if (r.tensor_type == probe::TensorType::kRouterLogits) {
      const auto d = testing::MaxAbsDiff(r.values, logits);
      EXPECT_LE(d.max_abs, 1e-5) << where << " expert " << d.worst_index;
      ++router;
    } else {
      ASSERT_EQ(r.tensor_type, probe::TensorType::kExpertWeights) << where;
      const std::vector<double> w = Routing(logits, top_k, renormalise);
      int chosen = 0;
      for (size_t e = 0; e < experts; ++e) {
        EXPECT_NEAR(r.values[e], w[e], 1e-5) << where << " expert " << e;
        EXPECT_EQ(r.values[e] == 0.0f, w[e] == 0.0) << where << " expert " << e;
        chosen += r.values[e] != 0.0f;
      }
      EXPECT_EQ(chosen, top_k) << where;
      ++weights;
    }
  }
  const int expected = config.num_hidden_layers * static_cast<int>(ids.size());
  EXPECT_EQ(router, expected);
  EXPECT_EQ(weights, expected);
  EXPECT_EQ(concat, 1);
}

INSTANTIATE_TEST_SUITE_P(Moe, MoeProbingTest, ::testing::Values("qwen3moe", "olmoe", "mixtral"));

// Built-in probes of num_experts weights, inline and async: a linear probe with all-ones
// weights on expert_weights scores the routing weights' sum (1 where they are renormalised), and
// an async running_mean over router_logits gets one activation per generated token.
TEST(MoeProbingBuiltins, ProbesOfExpertWidthGiveVerdicts) {
  const std::filesystem::path dir = testing::ScratchDir("moe_probing_builtins");
  auto llm = engine::LLM::Open(Options("qwen3moe"));
  ASSERT_TRUE(llm.ok()) << llm.status().ToString();
  const models::ModelConfig& config = (*llm)->engine().config();
  ASSERT_TRUE(config.norm_topk_prob);
  { std::ofstream(dir / "ones.json") << nlohmann::json(std::vector<float>(config.num_experts, 1)); }
  probe::ProbingOptions options;
  const std::string yaml = R"(version: "1"
extraction_points:
  - {name: sum, layers: [1], tensor_type: expert_weights, position: "generated[*]",
     probe_type: linear, probe_kind: single_shot, probe_args: {weights: ones.json}}
  - {name: mean, layers: [0], tensor_type: router_logits, position: "generated[*]",
     probe_type: running_mean, probe_kind: trajectory, execution_mode: async,
     probe_args: {weights: ones.json, threshold: 1000000.0}}
)";
  { std::ofstream(dir / "spec.yaml") << yaml; }
  auto spec = probe::ParseSpecFile(dir / "spec.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  probe::ProbeRegistry registry;
  auto session = probe::ProbingSession::Create(*spec, registry, config, options);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  const testing::ProbedRun run =
      testing::RunProbed(**llm, **session, {{"g", Prompt::Ids({3, 17, 42}), Greedy(4)}});
  ASSERT_TRUE(run.results[0].status.ok());
  const probe::RequestProbeResults& results = run.probing.at("g");
  std::map<std::string, nlohmann::json> verdicts;
  for (const probe::ProbeResult& r : results.results) verdicts[r.point] = r.verdict;
  ASSERT_EQ(verdicts.count("sum"), 1u);
  EXPECT_EQ(verdicts["sum"]["n"], 4);
  EXPECT_NEAR(verdicts["sum"]["max_score"].get<double>(), 1.0, 1e-6);
  EXPECT_NEAR(verdicts["sum"]["last_score"].get<double>(), 1.0, 1e-6);
  ASSERT_EQ(verdicts.count("mean"), 1u);
  EXPECT_EQ(verdicts["mean"]["count"], 4) << verdicts["mean"].dump();
}

// The same spec through `undercurrent generate --spec`: verdicts in the JSON output.
TEST(MoeProbingBuiltins, GenerateWithSpecGivesVerdicts) {
  const std::filesystem::path dir = testing::ScratchDir("moe_probing_generate");
  {
    std::ofstream(dir / "ones.json") << nlohmann::json(std::vector<float>(8, 1.0f));
    std::ofstream(dir / "spec.yaml") << R"(version: "1"
extraction_points:
  - {name: sum, layers: [1], tensor_type: expert_weights, position: "generated[*]",
     probe_type: linear, probe_kind: single_shot, probe_args: {weights: ones.json}}
  - {name: mean, layers: [0], tensor_type: router_logits, position: "generated[*]",
     probe_type: running_mean, probe_kind: trajectory, execution_mode: async,
     probe_args: {weights: ones.json, threshold: 1000000.0}}
)";
  }
  std::string output;
  const int code = testing::RunCommand(
      testing::CliBinary().string() + " generate --model " + TestData("arch/qwen3moe").string() +
          " --prompt 'the router' --max-tokens 3 --ignore-eos --temperature 0 --threads 2 --json "
          "--spec " +
          (dir / "spec.yaml").string() + " 2>/dev/null",
      &output);
  ASSERT_EQ(code, 0) << output;
  const nlohmann::json j = nlohmann::json::parse(output.substr(output.find('{')), nullptr, false);
  ASSERT_TRUE(j.is_object()) << output;
  const nlohmann::json& sum = j["probing"]["sum"]["verdict"];
  EXPECT_EQ(sum["n"], 3) << output;
  EXPECT_NEAR(sum.value("max_score", 0.0), 1.0, 1e-6) << output;
  EXPECT_EQ(j["probing"]["mean"]["verdict"]["count"], 3) << output;
}

// `undercurrent capture` of router_logits: rows of num_experts values beside hidden_size rows
// (the manifest says which), holding what the session records in process for the same prompt
// (held to transformers by RouterRecordsMatchTransformers).
TEST(MoeCapture, DatasetRowsAreExpertWide) {
  const std::filesystem::path dir = testing::ScratchDir("moe_capture");
  const std::string spec = R"(version: "1"
extraction_points:
  - {name: router, layers: [0, 1], tensor_type: router_logits, position: "prompt[-1]",
     probe_type: recorder, probe_kind: single_shot}
  - {name: resid, layers: [1], tensor_type: residual_stream, position: "prompt[-1]",
     probe_type: recorder, probe_kind: single_shot}
)";
  {
    std::ofstream(dir / "spec.yaml") << spec;
    std::ofstream(dir / "prompts.jsonl") << R"({"id": "a", "prompt": "hello there"})"
                                         << "\n";
  }
  const testing::CliRun run = testing::RunCapture(
      "--model " + TestData("arch/qwen3moe").string() + " --max-tokens 1 --temperature 0 --spec " +
      (dir / "spec.yaml").string() + " --prompts " + (dir / "prompts.jsonl").string() + " --out " +
      (dir / "out").string() + " --progress none");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const testing::LoadedDataset d = testing::LoadDataset(dir / "out");
  EXPECT_EQ(d.manifest["point_widths"], nlohmann::json({{"router", 8}}));
  ASSERT_EQ(d.index.size(), 3u);

  auto llm = engine::LLM::Open(Options("qwen3moe"));
  ASSERT_TRUE(llm.ok()) << llm.status().ToString();
  auto session = testing::MakeSession(spec, (*llm)->engine().config());
  ASSERT_NE(session, nullptr);
  const testing::ProbedRun in_process =
      testing::RunProbed(**llm, *session, {{"a", Prompt::Text("hello there"), Greedy(1)}});
  std::map<std::pair<std::string, int>, std::vector<float>> want;
  for (const probe::ActivationRecord& r : in_process.records) want[{r.point, r.layer}] = r.values;
  ASSERT_EQ(want.size(), 3u);
  for (size_t i = 0; i < d.index.size(); ++i) {
    const std::string point = d.index[i]["point"];
    EXPECT_EQ(d.values[i].size(), point == "router" ? 8u : 64u) << d.index_lines[i];
    const std::vector<float>& expected = want[{point, d.index[i]["layer"].get<int>()}];
    ASSERT_EQ(d.values[i].size(), expected.size()) << d.index_lines[i];
    EXPECT_LE(testing::MaxAbsDiff(d.values[i], expected).max_abs, 1e-5) << d.index_lines[i];
  }
}

// `undercurrent calibrate` fits a threshold for a probe on router_logits: a share 0.1 of 40
// requests flagged (floor(0.1 × 40) = 4 peaks reach it; continuous scores, no ties).
TEST(MoeCalibrate, FitsAThresholdOnRouterLogits) {
  const std::filesystem::path dir = testing::ScratchDir("moe_calibrate");
  {
    std::ofstream(dir / "w.json") << nlohmann::json(
        {{"weight", {0.3, -0.2, 0.5, 0.1, -0.4, 0.25, -0.15, 0.35}}});
    std::ofstream(dir / "spec.yaml") << R"(version: "1"
extraction_points:
  - {name: route, layers: [1], tensor_type: router_logits, position: "generated[*]",
     probe_type: linear, probe_kind: single_shot, probe_args: {weights: w.json, action: flag}}
)";
    std::ofstream prompts(dir / "fit.jsonl");
    for (int i = 0; i < 40; ++i) {
      prompts << nlohmann::json({{"id", "p" + std::to_string(i)},
                                 {"prompt", "word " + std::to_string(i * 7919 % 1000) + " and " +
                                                std::to_string(i * 104729 % 777)}})
                     .dump()
              << "\n";
    }
  }
  std::string output;
  ASSERT_EQ(testing::RunCommand(testing::CliBinary().string() + " calibrate --model " +
                                    TestData("arch/qwen3moe").string() +
                                    " --max-tokens 4 --json --target-fpr 0.1 --spec " +
                                    (dir / "spec.yaml").string() + " --prompts " +
                                    (dir / "fit.jsonl").string() + " --out " +
                                    (dir / "calibrated.yaml").string() + " 2>&1",
                                &output),
            0)
      << output;
  const size_t at = output.rfind("\n{") == std::string::npos ? 0 : output.rfind("\n{") + 1;
  const nlohmann::json fitted =
      nlohmann::json::parse(output.substr(at, output.find('\n', at) - at), nullptr, false);
  ASSERT_TRUE(fitted.is_object()) << output;
  ASSERT_EQ(fitted["points"].size(), 1u) << output;
  EXPECT_EQ(fitted["points"][0]["requests"], 40) << output;
  EXPECT_EQ(fitted["points"][0]["flagged"], 4) << output;
}

// A dense model has no router: both types are refused naming the field and the type; a MoE
// model refuses them at a layer whose MLP is dense.
TEST(MoeProbingRefusals, RouterTypesNeedExperts) {
  const std::string yaml = R"(version: "1"
extraction_points:
  - {name: r, layers: [1], tensor_type: router_logits, position: 0, probe_type: recorder,
     probe_kind: single_shot}
  - {name: c, layers: [1], tensor_types: [residual_stream, expert_weights], combine: concat,
     position: 0, probe_type: recorder, probe_kind: single_shot}
)";
  auto spec = probe::ParseSpecText(yaml, "dense.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  probe::ProbeRegistry registry;
  testing::RegisterTestProbes(registry);
  auto dense = models::OpenCheckpoint(TestData("arch/qwen3"));
  ASSERT_TRUE(dense.ok()) << dense.status().ToString();
  auto refused = probe::ProbingSession::Create(*spec, registry, dense->config, {});
  ASSERT_FALSE(refused.ok());
  const std::string message(refused.status().message());
  EXPECT_NE(message.find("extraction_points[0] 'r'.tensor_type: router_logits exists only on a "
                         "mixture-of-experts model"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("extraction_points[1] 'c'.tensor_types: expert_weights exists only"),
            std::string::npos)
      << message;

  auto moe = models::OpenCheckpoint(TestData("arch/qwen3moe"));
  ASSERT_TRUE(moe.ok()) << moe.status().ToString();
  models::ModelConfig config = moe->config;
  config.mlp_only_layers = {1};
  auto dense_layer = probe::ProbingSession::Create(*spec, registry, config, {});
  ASSERT_FALSE(dense_layer.ok());
  EXPECT_NE(std::string(dense_layer.status().message())
                .find("'r'.layers: layer 1 has a dense MLP, not experts, so it has no "
                      "router_logits"),
            std::string::npos)
      << dense_layer.status().message();
}

// Steering a MoE model: a zero vector at layer 0's residual stream leaves every record (the
// next layer's routing included) bit-identical; a nonzero one moves layer 0's residual stream
// by the vector at every position (to float32 rounding) and changes layer 1's router logits.
TEST(MoeSteering, ResidualMovesByTheVector) {
  auto llm = engine::LLM::Open(Options("qwen3moe"));
  ASSERT_TRUE(llm.ok()) << llm.status().ToString();
  const models::ModelConfig& config = (*llm)->engine().config();
  const std::vector<int32_t> prompt = {5, 9, 200, 31, 77, 4};
  std::string yaml = "version: \"1\"\nextraction_points:\n";
  for (size_t p = 0; p < prompt.size(); ++p) {
    yaml += "  - {name: resid_" + std::to_string(p) +
            ", layers: [0], tensor_type: " + "residual_stream, position: " + std::to_string(p) +
            ", probe_type: recorder, probe_kind: single_shot}\n";
    yaml += "  - {name: router_" + std::to_string(p) +
            ", layers: [1], tensor_type: " + "router_logits, position: " + std::to_string(p) +
            ", probe_type: recorder, probe_kind: single_shot}\n";
  }
  auto run = [&](const std::vector<float>& vector) {
    engine::RequestSteering steering;
    if (!vector.empty()) {
      auto c = std::make_shared<worker::SteeringConfig>();
      worker::SteeringVector v;
      v.layer = 0;
      v.site = models::Site::kResidPost;
      v.values = vector;
      c->vectors.push_back(v);
      steering.config = c;
    }
    auto session = testing::MakeSession(yaml, config);
    EXPECT_NE(session, nullptr);
    GenerateRequest request{"s", Prompt::Ids(prompt), Greedy(1), steering};
    std::map<std::string, std::vector<float>> out;
    for (probe::ActivationRecord& r : testing::RunProbed(**llm, *session, {request}).records) {
      out[r.point] = std::move(r.values);
    }
    return out;
  };
  const auto base = run({});
  ASSERT_EQ(base.size(), 2 * prompt.size());
  EXPECT_EQ(run(std::vector<float>(config.hidden_size, 0.0f)), base);
  std::vector<float> v(config.hidden_size);
  for (int i = 0; i < config.hidden_size; ++i) v[i] = 0.25f * std::sin(0.7f * i + 1.0f);
  const auto steered = run(v);
  ASSERT_EQ(steered.size(), base.size());
  for (size_t p = 0; p < prompt.size(); ++p) {
    const std::string resid = "resid_" + std::to_string(p);
    std::vector<float> moved(v.size());
    for (size_t i = 0; i < v.size(); ++i) moved[i] = steered.at(resid)[i] - base.at(resid)[i];
    // Two float32 roundings of the stream's sum: within a few ulps of its scale.
    float scale = 1.0f;
    for (float x : base.at(resid)) scale = std::max(scale, std::fabs(x));
    EXPECT_LE(testing::MaxAbsDiff(moved, v).max_abs, 1e-6 * scale) << resid;
    EXPECT_NE(steered.at("router_" + std::to_string(p)), base.at("router_" + std::to_string(p)));
  }
}

}  // namespace
}  // namespace uc
