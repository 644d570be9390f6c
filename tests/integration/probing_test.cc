// Capture, routing and inline probes on the bundled stories260K model, in one process: the
// residual stream equals the independent implementation's activations; records map to the right
// (request, position) through chunked prefill, batching and preemption, each delivered once and
// in (request, token_pos, layer) order; abort is token-exact; intervention policies, the circuit
// breaker and registration errors behave as documented (inventory section 10 scenarios 2, 4, 5,
// 9, adapted to our fixes).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <span>
#include <thread>
#include <tuple>

#include "common/batching_workload.h"
#include "common/probing_util.h"
#include "common/test_util.h"
#include "engine/generator.h"
#include "engine/llm.h"

namespace uc {
namespace {

using engine::GenerateRequest;
using engine::Prompt;
using probe::ActivationRecord;
using testing::ProbedRun;

std::string ModelPath() { return std::string(UC_SOURCE_DIR) + "/models/stories260K"; }

engine::EngineOptions Options() {
  engine::EngineOptions o;
  o.model_path = ModelPath();
  o.num_threads = 2;
  o.max_model_len = 256;
  o.max_num_seqs = 16;
  o.max_num_batched_tokens = 64;
  o.max_prefill_chunk = 6;
  return o;
}

std::unique_ptr<engine::LLM> OpenLLM(engine::EngineOptions o = Options()) {
  auto llm = engine::LLM::Open(o);
  EXPECT_TRUE(llm.ok()) << llm.status().ToString();
  return llm.ok() ? std::move(llm).value() : nullptr;
}

using testing::Greedy;

std::vector<float> GoldenRow(const nlohmann::json& rows, int64_t pos) {
  return testing::JsonFloats(rows[static_cast<size_t>(pos)]);
}

// Golden: ids [1, 403, 407, 261] are the greedy start of the story; the residual stream after
// layers 0..4 at every position, prefilled (absolute selectors) and decoded (generated[*]).
TEST(ProbingTest, ResidualStreamMatchesTheIndependentImplementation) {
  const nlohmann::json golden =
      testing::LoadJson(testing::TestData("golden/stories260K_activations.json"));
  auto llm = OpenLLM();
  ASSERT_NE(llm, nullptr);
  auto session = testing::MakeSession(R"(version: "1"
extraction_points:
  - {name: p0, layers: [0, 1, 2, 3, 4], tensor_type: residual_stream, position: "prompt[0]",
     probe_type: recorder, probe_kind: single_shot}
  - {name: gen, layers: [0, 1, 2, 3, 4], tensor_type: residual_stream, position: "generated[0:3]",
     probe_type: trajectory_recorder, probe_kind: trajectory}
  - {name: abs, layers: [0, 1, 2, 3, 4], tensor_type: residual_stream, position: 2,
     probe_type: recorder, probe_kind: single_shot}
)",
                                      llm->engine().config());
  ASSERT_NE(session, nullptr);
  const ProbedRun decoded =
      testing::RunProbed(*llm, *session,
                         {{"decode", Prompt::Ids({1}), Greedy(5)},
                          {"prefill", Prompt::Ids({1, 403, 407, 261}), Greedy(2)}});
  ASSERT_EQ(decoded.results[0].output.output_ids[0], 403);
  int compared = 0;
  for (const ActivationRecord& r : decoded.records) {
    if (r.token_pos > 3) continue;
    const nlohmann::json& rows = golden["layers"][r.layer]["resid_after_layer"];
    const auto d = testing::MaxAbsDiff(r.values, GoldenRow(rows, r.token_pos));
    EXPECT_LE(d.max_abs, 1e-4) << r.request_id << " " << r.point << " layer " << r.layer << " pos "
                               << r.token_pos;
    ++compared;
  }
  // decode: p0 (position 0) + gen (1..3) + abs (2) = 5 x 5 layers; prefill: p0 + abs = 2 x 5.
  EXPECT_EQ(compared, 5 * 5 + 2 * 5);
}

// combine: concat — one record per token holding the layers' rows in the order written, each
// equal to the independent implementation's; with several tensor types, each record equals the
// per-site records of the same token (layer-major), through batching and chunked prefill.
TEST(ProbingTest, ConcatenatedLayersMatchTheIndependentImplementation) {
  const nlohmann::json golden =
      testing::LoadJson(testing::TestData("golden/stories260K_activations.json"));
  auto llm = OpenLLM();
  ASSERT_NE(llm, nullptr);
  auto session = testing::MakeSession(R"(version: "1"
extraction_points:
  - {name: cat, layers: [4, 0, 2], tensor_type: residual_stream, combine: concat,
     position: "generated[0:3]", probe_type: trajectory_recorder, probe_kind: trajectory}
  - {name: cat0, layers: [4, 0, 2], tensor_type: residual_stream, combine: concat,
     position: "prompt[0]", probe_type: recorder, probe_kind: single_shot}
)",
                                      llm->engine().config());
  ASSERT_NE(session, nullptr);
  const ProbedRun run =
      testing::RunProbed(*llm, *session, {{"decode", Prompt::Ids({1}), Greedy(5)}});
  ASSERT_EQ(run.results[0].output.output_ids[0], 403);
  const int64_t hidden = llm->engine().config().hidden_size;
  std::vector<int64_t> positions;
  for (const ActivationRecord& r : run.records) {
    positions.push_back(r.token_pos);
    EXPECT_EQ(r.layer, 4);
    ASSERT_EQ(static_cast<int64_t>(r.values.size()), 3 * hidden);
    int part = 0;
    for (int layer : {4, 0, 2}) {
      const std::vector<float> want =
          GoldenRow(golden["layers"][layer]["resid_after_layer"], r.token_pos);
      const std::span<const float> got(r.values.data() + part * hidden,
                                       static_cast<size_t>(hidden));
      EXPECT_LE(testing::MaxAbsDiff(got, want).max_abs, 1e-4)
          << r.point << " pos " << r.token_pos << " part " << part;
      ++part;
    }
  }
  EXPECT_EQ(positions, (std::vector<int64_t>{0, 1, 2, 3}));  // one record per token
}

TEST(ProbingTest, ConcatenatedSitesEqualEachSitesRecordsInABatch) {
  auto llm = OpenLLM();
  ASSERT_NE(llm, nullptr);
  auto session = testing::MakeSession(R"(version: "1"
extraction_points:
  - {name: cat, layers: [3, 1], tensor_types: [mlp_out, residual_stream], combine: concat,
     position: "generated[*]", stride: 2, probe_type: trajectory_recorder,
     probe_kind: trajectory}
  - {name: sites, layers: [1, 3], tensor_type: mlp_out, position: "generated[*]", stride: 2,
     probe_type: trajectory_recorder, probe_kind: trajectory}
  - {name: resid, layers: [1, 3], tensor_type: residual_stream, position: "generated[*]",
     stride: 2, probe_type: trajectory_recorder, probe_kind: trajectory}
)",
                                      llm->engine().config());
  ASSERT_NE(session, nullptr);
  const ProbedRun run = testing::RunProbed(*llm, *session, testing::BatchingWorkload(16));
  const size_t hidden = static_cast<size_t>(llm->engine().config().hidden_size);
  // (request, pos, point, layer) -> values of the per-site points.
  std::map<std::tuple<std::string, int64_t, std::string, int>, std::vector<float>> single;
  for (const ActivationRecord& r : run.records) {
    if (r.point != "cat") single[{r.request_id, r.token_pos, r.point, r.layer}] = r.values;
  }
  int compared = 0;
  for (const ActivationRecord& r : run.records) {
    if (r.point != "cat") continue;
    EXPECT_EQ(r.layer, 3);
    EXPECT_EQ(r.tensor_type, probe::TensorType::kMlpOut);
    std::vector<float> want;
    for (int layer : {3, 1}) {
      for (const char* point : {"sites", "resid"}) {
        const auto it = single.find({r.request_id, r.token_pos, point, layer});
        ASSERT_NE(it, single.end()) << r.request_id << " " << r.token_pos;
        ASSERT_EQ(it->second.size(), hidden);
        want.insert(want.end(), it->second.begin(), it->second.end());
      }
    }
    EXPECT_EQ(r.values, want) << r.request_id << " pos " << r.token_pos;
    ++compared;
  }
  EXPECT_EQ(compared * 4, static_cast<int>(single.size()));
  EXPECT_GT(compared, 100);
}

// A linear probe reads the concatenation: its score is w · [layer 0 | layer 3] + b over the
// independent implementation's rows, and weights of one layer's size are refused.
TEST(ProbingTest, LinearProbeOnConcatenatedLayersScoresTheGoldenRows) {
  const nlohmann::json golden =
      testing::LoadJson(testing::TestData("golden/stories260K_activations.json"));
  auto llm = OpenLLM();
  ASSERT_NE(llm, nullptr);
  const int64_t hidden = llm->engine().config().hidden_size;
  const auto dir = testing::ScratchDir("probing_concat_linear");
  std::vector<double> w;
  for (int64_t i = 0; i < 2 * hidden; ++i) w.push_back(std::sin(0.37 * static_cast<double>(i)));
  std::ofstream(dir / "w128.json") << nlohmann::json{{"weight", w}, {"bias", 0.5}}.dump();
  std::ofstream(dir / "w64.json")
      << nlohmann::json{{"weight", std::vector<double>(w.begin(), w.begin() + hidden)}}.dump();
  const std::string spec = R"(version: "1"
extraction_points:
  - {name: lin, layers: [0, 3], tensor_type: residual_stream, combine: concat,
     position: "prompt[2]", probe_type: linear, probe_kind: single_shot,
     probe_args: {weights: ")" +
                           (dir / "w128.json").string() +
                           R"("}}
)";
  auto session = testing::MakeSession(spec, llm->engine().config());
  ASSERT_NE(session, nullptr);
  const ProbedRun run =
      testing::RunProbed(*llm, *session, {{"prefill", Prompt::Ids({1, 403, 407, 261}), Greedy(1)}});
  double want = 0.5;
  int k = 0;
  for (int layer : {0, 3}) {
    for (float x : GoldenRow(golden["layers"][layer]["resid_after_layer"], 2)) want += w[k++] * x;
  }
  const probe::ProbeResult& result = run.probing.at("prefill").results.at(0);
  ASSERT_TRUE(result.verdict["last_score"].is_number()) << result.verdict;
  EXPECT_NEAR(result.verdict["last_score"].get<double>(), want, 1e-3 * (1 + std::abs(want)));
  EXPECT_EQ(result.verdict["n"], 1);

  std::string one_layer = spec;
  one_layer.replace(one_layer.find("w128.json"), 9, "w64.json");
  probe::ProbeRegistry registry;
  auto parsed = probe::ParseSpecText(one_layer);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  auto refused = probe::ProbingSession::Create(*parsed, probe::ProbeRegistry::Global(),
                                               llm->engine().config());
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find(std::to_string(2 * hidden)), std::string::npos)
      << refused.status().message();
}

// Every record lands once, in (request, token_pos, layer) order, mapped to the right position,
// with the values of the same request run alone — through chunked prefill (chunks of 6),
// batches of 16 and, with a tiny KV cache, preemption and recomputation.
class RowMappingTest : public ::testing::TestWithParam<int> {};

TEST_P(RowMappingTest, BatchedRecordsEqualEachRequestAlone) {
  const std::string yaml = R"(version: "1"
extraction_points:
  - {name: last_prompt, layers: [1, 3], tensor_type: residual_stream, position: "prompt[-1]",
     probe_type: recorder, probe_kind: single_shot}
  - {name: first_prompt, layers: 4, tensor_type: attn_out, position: "prompt[0]",
     probe_type: recorder, probe_kind: single_shot}
  - {name: every_other, layers: [0, 2], tensor_type: mlp_out, position: "generated[*]",
     stride: 2, probe_type: trajectory_recorder, probe_kind: trajectory}
  - {name: window, layers: 2, tensor_type: residual_stream, position: "generated[3:7]",
     probe_type: trajectory_recorder, probe_kind: trajectory}
  - {name: norm, layers: 5, tensor_type: final_norm, position: "prompt[-1]+2",
     probe_type: recorder, probe_kind: single_shot}
  - {name: tail, layers: 0, tensor_type: residual_stream, position: "generated[-2]",
     probe_type: recorder, probe_kind: single_shot}
)";
  std::vector<GenerateRequest> requests = testing::BatchingWorkload(16);
  for (GenerateRequest& r : requests) {
    r.params.stop.clear();  // same lengths alone and batched, any neighbours
    r.params.ignore_eos = true;
  }
  engine::EngineOptions batched_options = Options();
  batched_options.num_kv_blocks = GetParam();
  auto llm = OpenLLM(batched_options);
  ASSERT_NE(llm, nullptr);
  auto session = testing::MakeSession(yaml, llm->engine().config());
  ASSERT_NE(session, nullptr);
  const ProbedRun batched = testing::RunProbed(*llm, *session, requests);
  if (GetParam() > 0) {
    EXPECT_GT(llm->engine().stats().num_preemptions, 0);
  }

  engine::EngineOptions alone_options = Options();
  alone_options.max_num_seqs = 1;
  auto alone_llm = OpenLLM(alone_options);
  ASSERT_NE(alone_llm, nullptr);
  size_t total = 0;
  for (const GenerateRequest& request : requests) {
    auto alone_session = testing::MakeSession(yaml, llm->engine().config());
    const ProbedRun alone = testing::RunProbed(*alone_llm, *alone_session, {request});
    const auto got = testing::RecordLog::Of(batched.records, request.id);
    const auto want = alone.records;
    ASSERT_EQ(got.size(), want.size()) << request.id;
    const int64_t prompt_len = static_cast<int64_t>(alone.results[0].output.prompt_ids.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].point, want[i].point) << request.id << " #" << i;
      EXPECT_EQ(got[i].layer, want[i].layer) << request.id << " #" << i;
      EXPECT_EQ(got[i].token_pos, want[i].token_pos) << request.id << " #" << i;
      EXPECT_EQ(got[i].is_generated, got[i].token_pos >= prompt_len);
      EXPECT_EQ(got[i].generated_index, got[i].is_generated ? got[i].token_pos - prompt_len : -1);
      EXPECT_LE(testing::RelativeDiff(got[i], want[i]), 1e-5) << request.id << " #" << i;
      // Forward-pass order within a request (generated[-k] comes when the request ends).
      if (i > 0 && got[i].point != "tail") {
        EXPECT_TRUE(std::tie(got[i - 1].token_pos, got[i - 1].layer) <=
                    std::tie(got[i].token_pos, got[i].layer))
            << request.id << " #" << i;
      }
    }
    total += got.size();
  }
  EXPECT_EQ(total, batched.records.size());
  // Requests are delivered in batch order within each step, so all of one request's records of
  // a step are contiguous; and no (request, point, layer, position) appears twice.
  std::set<std::tuple<std::string, std::string, int, int64_t>> seen;
  for (const ActivationRecord& r : batched.records) {
    EXPECT_TRUE(seen.insert({r.request_id, r.point, r.layer, r.token_pos}).second)
        << "delivered twice: " << r.request_id << " " << r.point << " pos " << r.token_pos;
  }
}

INSTANTIATE_TEST_SUITE_P(KvCache, RowMappingTest, ::testing::Values(0, 24), [](const auto& info) {
  return info.param == 0 ? std::string("Roomy") : std::string("TinyWithPreemption");
});

// generated[-k] fires once the request ends, for the right token, including the last one
// (run through the model once more); generated[*] sees every generated token.
TEST(ProbingTest, NegativeGeneratedIndicesFireAtTheEnd) {
  auto llm = OpenLLM();
  ASSERT_NE(llm, nullptr);
  auto session = testing::MakeSession(R"(version: "1"
extraction_points:
  - {name: last, layers: 1, tensor_type: residual_stream, position: "generated[-1]",
     probe_type: recorder, probe_kind: single_shot}
  - {name: third_last, layers: 1, tensor_type: residual_stream, position: "generated[-3]",
     probe_type: recorder, probe_kind: single_shot}
  - {name: all, layers: 1, tensor_type: residual_stream, position: "generated[*]",
     probe_type: trajectory_recorder, probe_kind: trajectory}
)",
                                      llm->engine().config());
  ASSERT_NE(session, nullptr);
  const ProbedRun run =
      testing::RunProbed(*llm, *session, {{"r", Prompt::Ids({1, 403, 407}), Greedy(7)}});
  ASSERT_EQ(run.results[0].output.output_ids.size(), 7u);
  std::map<std::string, std::vector<int64_t>> positions;
  std::map<int64_t, std::vector<float>> all;
  for (const ActivationRecord& r : run.records) {
    positions[r.point].push_back(r.token_pos);
    if (r.point == "all") all[r.token_pos] = r.values;
  }
  EXPECT_EQ(positions["last"], std::vector<int64_t>{3 + 6});
  EXPECT_EQ(positions["third_last"], std::vector<int64_t>{3 + 4});
  EXPECT_EQ(positions["all"], (std::vector<int64_t>{3, 4, 5, 6, 7, 8, 9}));
  for (const ActivationRecord& r : run.records) {
    if (r.point != "all") {
      EXPECT_EQ(r.values, all[r.token_pos]) << r.point;
    }
  }
}

TEST(ProbingTest, UntilFixedCountAndOffsetsOnContinuousSelectors) {
  auto llm = OpenLLM();
  ASSERT_NE(llm, nullptr);
  auto session = testing::MakeSession(R"(version: "1"
extraction_points:
  - {name: three, layers: 0, tensor_type: residual_stream, position: "generated[*]",
     until: fixed_count, count: 3, probe_type: trajectory_recorder, probe_kind: trajectory}
  - {name: shifted, layers: 0, tensor_type: residual_stream, position: "generated[2:4]+1",
     probe_type: trajectory_recorder, probe_kind: trajectory}
  - {name: past_prompt, layers: 0, tensor_type: residual_stream, position: "prompt[5]",
     probe_type: recorder, probe_kind: single_shot}
)",
                                      llm->engine().config());
  ASSERT_NE(session, nullptr);
  const ProbedRun run =
      testing::RunProbed(*llm, *session, {{"r", Prompt::Ids({1, 403, 407}), Greedy(10)}});
  std::map<std::string, std::vector<int64_t>> positions;
  for (const ActivationRecord& r : run.records) positions[r.point].push_back(r.token_pos);
  EXPECT_EQ(positions["three"], (std::vector<int64_t>{3, 4, 5}));
  EXPECT_EQ(positions["shifted"], (std::vector<int64_t>{3 + 3, 3 + 4}));
  EXPECT_TRUE(positions["past_prompt"].empty()) << "prompt[5] of a 3-token prompt never matches";
}

// Token-exact abort: the activation of token p triggers it; no token after p is returned.
TEST(ProbingTest, AbortIsTokenExactAndLeavesNeighboursAlone) {
  const std::vector<GenerateRequest> neighbours = testing::BatchingWorkload(6);
  auto solo =
      engine::Generator::Open({.model_path = ModelPath(), .tokenizer_path = {}, .num_threads = 2});
  ASSERT_TRUE(solo.ok());
  const auto alone = testing::RunAlone(**solo, neighbours);
  struct Case {
    std::string position;
    size_t expected_tokens;
  };
  for (const Case& c : {Case{"prompt[-1]", 0}, Case{"generated[3]", 4}, Case{"generated[0]", 1},
                        Case{"prompt[-1]+2", 2}}) {
    auto llm = OpenLLM();
    ASSERT_NE(llm, nullptr);
    auto session = testing::MakeSession(R"(version: "1"
extraction_points:
  - {name: gate, layers: [2, 3], tensor_type: residual_stream, position: ")" +
                                            c.position +
                                            R"(",
     probe_type: always_abort, probe_kind: single_shot, probe_args: {layer: 3, request: gated}}
)",
                                        llm->engine().config());
    ASSERT_NE(session, nullptr);
    std::vector<GenerateRequest> requests = neighbours;
    requests.push_back({"gated", Prompt::Text("Once upon a time there was a little"), Greedy(20)});
    // Every request has the point; the probe only aborts "gated".
    ProbedRun run = testing::RunProbed(*llm, *session, requests);
    const engine::RequestOutput& gated = run.results.back().output;
    EXPECT_EQ(gated.output_ids.size(), c.expected_tokens) << c.position;
    EXPECT_EQ(gated.finish_reason, engine::FinishReason::kAbort);
    ASSERT_TRUE(gated.abort.has_value());
    EXPECT_EQ(gated.abort->by, "probe");
    EXPECT_EQ(gated.abort->point, "gate");
    EXPECT_EQ(gated.abort->confidence, 1.0);
    EXPECT_EQ(gated.abort->token_pos,
              static_cast<int64_t>(gated.prompt_ids.size() + c.expected_tokens) - 1);
    EXPECT_NE(gated.abort->reason.find("extraction point 'gate' aborted generation"),
              std::string::npos)
        << gated.abort->reason;
    ASSERT_TRUE(run.probing["gated"].abort.has_value());
    // The gate saw layer 2 and layer 3 of the triggering token, and nothing after it.
    for (const ActivationRecord& r : testing::RecordLog::Of(run.records, "gated")) {
      EXPECT_LE(r.token_pos, gated.abort->token_pos);
    }
    // Co-batched requests are unaffected: exactly what each makes alone.
    for (size_t i = 0; i + 1 < run.results.size(); ++i) {
      const engine::RequestOutput& out = run.results[i].output;
      EXPECT_EQ(out.output_ids, alone.at(out.request_id).output_ids) << out.request_id;
      EXPECT_NE(out.finish_reason, engine::FinishReason::kAbort) << out.request_id;
    }
  }
}

// Inventory scenario 9, adapted: an inline generated[2:] gate at layer 1 and an async
// generated[*] observer at layers 0 and 1; 3-token prompt, 12 new tokens at most.
TEST(ProbingTest, GateAndObserverEndToEnd) {
  auto llm = OpenLLM();
  ASSERT_NE(llm, nullptr);
  const std::string observer = R"(
  - {name: observer, layers: [0, 1], tensor_type: residual_stream, position: "generated[*]",
     probe_type: trajectory_recorder, probe_kind: trajectory, execution_mode: async})";
  auto session = testing::MakeSession(R"(version: "1"
extraction_points:
  - {name: gate, layers: 1, tensor_type: residual_stream, position: "generated[2:]",
     probe_type: always_abort, probe_kind: single_shot})" +
                                          observer,
                                      llm->engine().config());
  ASSERT_NE(session, nullptr);
  ProbedRun run =
      testing::RunProbed(*llm, *session, {{"a", Prompt::Ids({1, 403, 407}), Greedy(12)}});
  std::vector<std::pair<int64_t, int>> gate, seen;
  for (const ActivationRecord& r : run.records) {
    (r.point == "gate" ? gate : seen).push_back({r.token_pos, r.layer});
  }
  EXPECT_EQ(gate, (std::vector<std::pair<int64_t, int>>{{5, 1}}));
  EXPECT_EQ(seen,
            (std::vector<std::pair<int64_t, int>>{{3, 0}, {3, 1}, {4, 0}, {4, 1}, {5, 0}, {5, 1}}));
  EXPECT_EQ(run.results[0].output.output_ids.size(), 3u);  // tokens 0, 1, 2; none after
  ASSERT_EQ(run.probing["a"].results.size(), 2u);
  EXPECT_EQ(run.probing["a"].results[1].verdict["n"], 6);

  auto quiet = testing::MakeSession(std::string(R"(version: "1"
extraction_points:)") + observer,
                                    llm->engine().config());
  ProbedRun second =
      testing::RunProbed(*llm, *quiet, {{"b", Prompt::Ids({1, 403, 407}), Greedy(12)}});
  // Every generated token, the last one included: 2 layers x 12.
  EXPECT_EQ(second.records.size(), 24u);
  EXPECT_EQ(second.results[0].output.output_ids.size(), 12u);
}

// Inventory scenario 5: a point that never matched still gets exactly one result.
TEST(ProbingTest, EveryPointGetsOneResultEvenWithoutActivations) {
  auto llm = OpenLLM();
  ASSERT_NE(llm, nullptr);
  auto session = testing::MakeSession(R"(version: "1"
extraction_points:
  - {name: never, layers: 0, tensor_type: residual_stream, position: "generated[50]",
     probe_type: linear, probe_kind: single_shot,
     probe_args: {weights: )" + std::string(UC_SOURCE_DIR) +
                                          R"(/tests/testdata/probes/zero64.json, threshold: 1}}
  - {name: once, layers: 0, tensor_type: residual_stream, position: "prompt[0]",
     probe_type: recorder, probe_kind: single_shot}
)",
                                      llm->engine().config());
  ASSERT_NE(session, nullptr);
  ProbedRun run = testing::RunProbed(
      *llm, *session,
      {{"a", Prompt::Ids({1}), Greedy(4)}, {"b", Prompt::Ids({1, 403}), Greedy(4)}});
  for (const char* id : {"a", "b"}) {
    ASSERT_EQ(run.probing[id].results.size(), 2u) << id;
    EXPECT_EQ(run.probing[id].results[0].point, "never");
    EXPECT_EQ(run.probing[id].results[0].verdict["n"], 0);
    EXPECT_EQ(run.probing[id].results[0].verdict["flagged"], false);
    EXPECT_EQ(run.probing[id].results[1].verdict["n"], 1);
  }
}

// Inventory scenario 4: block_until_signal with a budget, fallbacks, and the circuit breaker
// (opens after N consecutive failures across requests, half-open after the cool-down).
TEST(ProbingTest, InterventionTimeoutsFallBackAndTripTheBreaker) {
  auto llm = OpenLLM();
  ASSERT_NE(llm, nullptr);
  probe::ProbingOptions options;
  options.circuit_breaker_threshold = 3;
  options.circuit_breaker_cooldown_seconds = 0.3;
  auto session = testing::MakeSession(R"(version: "1"
extraction_points:
  - {name: slow, layers: 0, tensor_type: residual_stream, position: "generated[*]",
     probe_type: sleepy, probe_kind: single_shot, probe_args: {ms: 600},
     intervention: {mode: block_until_signal, timeout_ms: 50, on_timeout: continue}}
)",
                                      llm->engine().config(), options);
  ASSERT_NE(session, nullptr);
  const auto start = std::chrono::steady_clock::now();
  ProbedRun run = testing::RunProbed(*llm, *session, {{"a", Prompt::Ids({1}), Greedy(8)}});
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // 8 records: the first times out (50 ms), the next two find it still running and fail fast,
  // then the breaker is open and the rest are skipped; nothing waits for the 0.6 s probe
  // except the end of the request (on_end never overlaps a running call).
  EXPECT_EQ(run.results[0].output.output_ids.size(), 8u);
  EXPECT_EQ(run.stats.timeouts, 3);
  EXPECT_EQ(run.stats.skipped_open_breaker, 8 - 3);
  EXPECT_LT(seconds, 1.5);

  auto failing = testing::MakeSession(R"(version: "1"
extraction_points:
  - {name: broken, layers: 0, tensor_type: residual_stream, position: "generated[*]",
     probe_type: sleepy, probe_kind: single_shot, probe_args: {ms: 0, throw: true},
     intervention: {mode: block_until_signal, timeout_ms: 500, on_timeout: abort}}
)",
                                      llm->engine().config(), options);
  ASSERT_NE(failing, nullptr);
  ProbedRun aborted = testing::RunProbed(*llm, *failing, {{"b", Prompt::Ids({1}), Greedy(8)}});
  const engine::RequestOutput& b = aborted.results[0].output;
  EXPECT_EQ(b.finish_reason, engine::FinishReason::kAbort);
  EXPECT_EQ(b.output_ids.size(), 1u);  // token 0's activation failed: on_timeout abort
  ASSERT_TRUE(b.abort.has_value());
  EXPECT_NE(b.abort->reason.find("intervention fallback after exception"), std::string::npos)
      << b.abort->reason;
  EXPECT_EQ(aborted.stats.errors, 1);
}

// The breaker opens after N consecutive failures and, after the cool-down, lets one call
// through (half-open); a success closes it again.
TEST(ProbingTest, CircuitBreakerIsHalfOpenAfterTheCoolDown) {
  auto llm = OpenLLM();
  ASSERT_NE(llm, nullptr);
  probe::ProbingOptions options;
  options.circuit_breaker_threshold = 2;
  options.circuit_breaker_cooldown_seconds = 0.2;
  auto session = testing::MakeSession(R"(version: "1"
extraction_points:
  - {name: flaky, layers: 0, tensor_type: residual_stream, position: "generated[*]",
     probe_type: sleepy, probe_kind: single_shot, probe_args: {ms: 0, fail_first: 2},
     intervention: {mode: block_until_signal, timeout_ms: 500}}
)",
                                      llm->engine().config(), options);
  ASSERT_NE(session, nullptr);
  ProbedRun first = testing::RunProbed(*llm, *session, {{"a", Prompt::Ids({1}), Greedy(6)}});
  EXPECT_EQ(first.stats.errors, 2);
  EXPECT_EQ(first.stats.skipped_open_breaker, 6 - 2);
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  ProbedRun second = testing::RunProbed(*llm, *session, {{"b", Prompt::Ids({1}), Greedy(6)}});
  EXPECT_EQ(second.stats.errors, 2) << "the half-open call succeeded";
  EXPECT_EQ(second.stats.skipped_open_breaker, 6 - 2) << "and closed the breaker";
  EXPECT_EQ(second.stats.inline_calls, 2 + 6);
}

TEST(ProbingTest, RegistrationRejectsPointsTheModelCannotServe) {
  const std::filesystem::path file = testing::ScratchDir("probing_registration") / "spec.yaml";
  std::ofstream(file) << R"(version: "1"
extraction_points:
  - {name: deep, layers: [2, 9], tensor_type: residual_stream, position: "prompt[-1]",
     probe_type: recorder, probe_kind: single_shot}
  - {name: norm, layers: 4, tensor_type: final_norm, position: "prompt[-1]",
     probe_type: recorder, probe_kind: single_shot}
  - {name: cache, layers: 1, tensor_type: kv, position: "generated[1:3]",
     probe_type: trajectory_recorder, probe_kind: trajectory}
  - {name: unknown, layers: 1, tensor_type: mlp_out, position: "prompt[0]",
     probe_type: linearr, probe_kind: single_shot}
  - {name: kind, layers: 1, tensor_type: mlp_out, position: "prompt[0]",
     probe_type: recorder, probe_kind: trajectory}
)";
  auto spec = probe::ParseSpecFile(file);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  probe::ProbeRegistry registry;
  testing::RegisterTestProbes(registry);
  auto llm = OpenLLM();
  ASSERT_NE(llm, nullptr);
  auto session = probe::ProbingSession::Create(*spec, registry, llm->engine().config());
  ASSERT_FALSE(session.ok());
  const std::string m = session.status().message();
  for (const std::string s :
       {"5 problems in the spec:",
        "spec.yaml:3: extraction_points[0] 'deep'.layers: layer 9 does not exist: the model has "
        "5 decoder layers (0-4)",
        "spec.yaml:5: extraction_points[1] 'norm'.layers: final_norm is addressed as layer 5",
        "spec.yaml:7: extraction_points[2] 'cache'.tensor_type: kv is not capturable",
        "spec.yaml:9: extraction_points[3] 'unknown'.probe_type:", "linear",
        "spec.yaml:11: extraction_points[4] 'kind'.probe_type:"}) {
    EXPECT_NE(m.find(s), std::string::npos) << "missing '" << s << "' in:\n" << m;
  }
}

// A probe type implemented "outside C++" as the Python bridge is: batched, one call per engine
// step with every request's records of the point. It aborts request {request} at generated
// index {at} (layer {layer}), and its probe "raises" on request {fail} (an error outcome). It
// counts its batch calls and the records of each.
struct BatchLog {
  std::mutex mu;
  std::vector<std::vector<std::pair<std::string, int64_t>>> calls;  // (request, token_pos)
  int64_t per_record_calls = 0;
};

BatchLog& TheBatchLog() {
  static BatchLog log;
  return log;
}

struct BatchArgs {
  std::string request;
  int64_t at = -1;
  int layer = -1;
  std::string fail;
};

std::optional<probe::ProbeSignal> BatchDecide(const BatchArgs& a, const ActivationRecord& r) {
  if (!a.fail.empty() && r.request_id == a.fail) throw std::runtime_error("probe raised");
  if (r.request_id != a.request || r.generated_index != a.at) return std::nullopt;
  if (a.layer >= 0 && r.layer != a.layer) return std::nullopt;
  probe::ProbeSignal s;
  s.action = probe::ProbeAction::kAbort;
  s.confidence = 0.5;
  return s;
}

class BatchedGateProbe : public probe::Probe {
 public:
  explicit BatchedGateProbe(BatchArgs a) : a_(std::move(a)) {}
  std::optional<probe::ProbeSignal> OnActivation(const ActivationRecord& record) override {
    {
      std::lock_guard<std::mutex> lock(TheBatchLog().mu);
      ++TheBatchLog().per_record_calls;
    }
    return BatchDecide(a_, record);
  }
  probe::ProbeResult OnEnd(const probe::RequestContext& ctx) override {
    probe::ProbeResult r;
    r.request_id = ctx.request_id;
    return r;
  }

 private:
  BatchArgs a_;
};

class BatchedGateType : public probe::ProbeType {
 public:
  explicit BatchedGateType(BatchArgs a) : a_(std::move(a)) {}
  probe::ProbeKind kind() const override { return probe::ProbeKind::kSingleShot; }
  std::unique_ptr<probe::Probe> Spawn() const override {
    return std::make_unique<BatchedGateProbe>(a_);
  }
  bool batched() const override { return true; }
  std::vector<probe::BatchedSignal> OnActivationBatch(
      std::span<probe::Probe* const> probes,
      std::span<const ActivationRecord> records) const override {
    EXPECT_EQ(probes.size(), records.size());
    std::vector<probe::BatchedSignal> out(records.size());
    std::vector<std::pair<std::string, int64_t>> seen;
    for (size_t i = 0; i < records.size(); ++i) {
      seen.push_back({records[i].request_id, records[i].token_pos});
      try {
        out[i].signal = BatchDecide(a_, records[i]);
      } catch (const std::exception& e) {
        out[i].error = e.what();
      }
    }
    std::lock_guard<std::mutex> lock(TheBatchLog().mu);
    TheBatchLog().calls.push_back(std::move(seen));
    return out;
  }

 private:
  BatchArgs a_;
};

std::unique_ptr<probe::ProbingSession> BatchedSession(const std::string& yaml,
                                                      const models::ModelConfig& config) {
  static probe::ProbeRegistry* registry = [] {
    auto* r = new probe::ProbeRegistry();
    // Registered at run time by name, as the Python package registers its probes.
    EXPECT_TRUE(r->Register("batched_gate", probe::ProbeKind::kSingleShot,
                            [](const nlohmann::json& args, const probe::ProbeEnv&)
                                -> StatusOr<std::unique_ptr<probe::ProbeType>> {
                              BatchArgs a;
                              a.request = args.value("request", std::string());
                              a.at = args.value("at", int64_t{-1});
                              a.layer = args.value("layer", -1);
                              a.fail = args.value("fail", std::string());
                              return std::unique_ptr<probe::ProbeType>(new BatchedGateType(a));
                            })
                    .ok());
    return r;
  }();
  auto spec = probe::ParseSpecText(yaml, "test.yaml");
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  if (!spec.ok()) return nullptr;
  auto session = probe::ProbingSession::Create(*spec, *registry, config);
  EXPECT_TRUE(session.ok()) << session.status().ToString();
  return session.ok() ? std::move(session).value() : nullptr;
}

// A batched probe type gets one call per step with every request's records (in canonical
// order), its ABORT at generated[3] is token-exact (4 tokens), the co-batched requests are
// untouched, and an error outcome fails only its own record, under the point's intervention
// policy (reject: counted, generation goes on).
TEST(ProbingTest, BatchedProbeTypeIsCalledOncePerStepAndAbortsTokenExactly) {
  const std::vector<GenerateRequest> neighbours = testing::BatchingWorkload(4);
  auto solo =
      engine::Generator::Open({.model_path = ModelPath(), .tokenizer_path = {}, .num_threads = 2});
  ASSERT_TRUE(solo.ok());
  const auto alone = testing::RunAlone(**solo, neighbours);
  auto llm = OpenLLM();
  ASSERT_NE(llm, nullptr);
  auto session = BatchedSession(R"(version: "1"
extraction_points:
  - {name: gate, layers: [1, 3], tensor_type: residual_stream, position: "generated[*]",
     probe_type: batched_gate, probe_kind: single_shot,
     probe_args: {request: gated, at: 3, layer: 3, fail: failing}}
)",
                                llm->engine().config());
  ASSERT_NE(session, nullptr);
  {
    std::lock_guard<std::mutex> lock(TheBatchLog().mu);
    TheBatchLog().calls.clear();
    TheBatchLog().per_record_calls = 0;
  }
  std::vector<GenerateRequest> requests = neighbours;
  requests.push_back({"gated", Prompt::Text("Once upon a time there was a little"), Greedy(20)});
  requests.push_back({"failing", Prompt::Text("Once upon a time"), Greedy(20)});
  ProbedRun run = testing::RunProbed(*llm, *session, requests);
  const engine::RequestOutput& gated = run.results[neighbours.size()].output;
  EXPECT_EQ(gated.output_ids.size(), 4u);
  ASSERT_TRUE(gated.abort.has_value());
  EXPECT_EQ(gated.abort->point, "gate");
  EXPECT_EQ(gated.abort->confidence, 0.5);
  EXPECT_EQ(gated.abort->token_pos, static_cast<int64_t>(gated.prompt_ids.size()) + 3);
  // The failing request's records all failed; under `reject` the fallback continues, so it
  // generates on, and only its records were counted as errors.
  const engine::RequestOutput& failing = run.results.back().output;
  EXPECT_NE(failing.finish_reason, engine::FinishReason::kAbort);
  EXPECT_EQ(failing.output_ids.size(), 20u);
  EXPECT_EQ(run.stats.errors, 2 * static_cast<int64_t>(failing.output_ids.size()));
  for (size_t i = 0; i < neighbours.size(); ++i) {
    const engine::RequestOutput& out = run.results[i].output;
    EXPECT_EQ(out.output_ids, alone.at(out.request_id).output_ids) << out.request_id;
  }
  std::lock_guard<std::mutex> lock(TheBatchLog().mu);
  EXPECT_EQ(TheBatchLog().per_record_calls, 0);  // never called one record at a time
  // Calls carry several requests' records (one call per step, not per record).
  size_t multi_request_calls = 0;
  int64_t records = 0;
  for (const auto& call : TheBatchLog().calls) {
    std::set<std::string> ids;
    for (const auto& [id, pos] : call) ids.insert(id);
    multi_request_calls += ids.size() > 1 ? 1 : 0;
    records += static_cast<int64_t>(call.size());
  }
  EXPECT_GT(multi_request_calls, 0u);
  EXPECT_EQ(run.stats.inline_calls, records);
  EXPECT_GT(records, static_cast<int64_t>(TheBatchLog().calls.size()) * 2);
}

}  // namespace
}  // namespace uc
