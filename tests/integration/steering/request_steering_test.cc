// Per-request steering on the bundled stories260K against Hugging Face transformers with masked
// forward hooks (tools/reference/make_request_steering_reference.py): prompt-only,
// generation-only and both; attn_out and mlp_out sites; norm matching; a switch-on position
// (conditional steering). Logits within 1e-4 through the model; greedy ids identical through
// the engine, alone and in a batch of 32 requests with 5 configurations, unsteered ones and
// conditional ones switched on and off,
// under preemption and a cap on configurations per step, where every request's final-norm
// activations (the LM head's input) have the bits of its run alone (batch-invariant matmuls).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "common/steering_util.h"
#include "common/test_util.h"
#include "engine/llm.h"
#include "models/checkpoint.h"
#include "models/llama_model.h"
#include "worker/steering_config.h"

namespace uc {
namespace {

using testing::JsonFloats;
using testing::JsonInts;
using testing::TestData;

std::string ModelPath() { return std::string(UC_SOURCE_DIR) + "/models/stories260K"; }

const nlohmann::json& Reference() { return testing::RequestSteeringReference(); }

// The rows of one sequence at positions [0, n) each vector of `config` applies to, as the
// worker builds them.
models::BatchSteering SteeringFor(const worker::SteeringConfig& config, int n, int num_prompt,
                                  int from, int until) {
  models::BatchSteering batch;
  for (const worker::SteeringVector& v : config.vectors) {
    double sum = 0.0;
    for (float x : v.values) sum += double{x} * x;
    models::SteeringAdd add{.layer = v.layer,
                            .site = v.site,
                            .vector = v.values.data(),
                            .scale = v.scale,
                            .norm_match = v.norm_match,
                            .inv_vector_norm = static_cast<float>(1.0 / std::sqrt(sum))};
    for (int p = from; p < std::min(n, until); ++p) {
      if (v.AppliesTo(p, num_prompt)) add.rows.push_back(p);
    }
    batch.adds.push_back(std::move(add));
  }
  return batch;
}

TEST(RequestSteeringTest, LogitsMatchTransformersWithMaskedHooks) {
  auto checkpoint = models::OpenCheckpoint(ModelPath());
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().ToString();
  auto model = models::CausalLM::Load(*checkpoint);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  ThreadPool pool(2);
  const std::vector<int32_t> prompt = JsonInts(Reference()["input_ids"]);
  const int64_t vocab = (*model)->config().vocab_size;
  std::set<std::vector<int32_t>> distinct;
  for (const auto& c : Reference()["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    std::vector<int32_t> ids = prompt;
    const std::vector<int32_t> greedy = JsonInts(c["greedy"]);
    distinct.insert(greedy);
    ids.insert(ids.end(), greedy.begin(), greedy.end());
    const int n = static_cast<int>(ids.size());
    const auto config = testing::SteeringConfigOf(c);
    const models::BatchSteering steering =
        SteeringFor(*config, n, static_cast<int>(prompt.size()), c["from_position"],
                    c["until_position"].is_null() ? n : c["until_position"].get<int>());
    std::vector<int32_t> positions(n), token_seq(n, 0);
    for (int i = 0; i < n; ++i) positions[i] = i;
    const std::vector<int32_t> rows = JsonInts(c["logit_rows"]);
    models::KvCache cache = (*model)->NewKvCache(n);
    static constexpr int32_t kOneBlock[1] = {0};
    const models::ForwardBatch batch{
        ids,       positions,
        positions, kernels::PagedKvLayout{cache.block_size, 1, kOneBlock, token_seq},
        rows,      &steering};
    Tensor logits = Tensor::Empty({static_cast<int64_t>(rows.size()), vocab}, DType::kF32);
    (*model)->Forward(batch, cache, nullptr, nullptr, &logits, &pool);
    double worst = 0.0;
    for (size_t r = 0; r < rows.size(); ++r) {
      const testing::Diff d =
          testing::MaxAbsDiff({logits.data<float>() + r * vocab, static_cast<size_t>(vocab)},
                              JsonFloats(c["logits"][r]));
      worst = std::max(worst, d.max_abs);
    }
    EXPECT_LE(worst, 1e-4);
  }
  EXPECT_EQ(distinct.size(), Reference()["cases"].size()) << "every case steers differently";
}

engine::EngineOptions Options() {
  engine::EngineOptions options;
  options.model_path = ModelPath();
  options.num_threads = 2;
  options.max_model_len = 64;
  options.max_prefill_chunk = 8;
  options.block_size = 4;
  options.load.batch_invariant = true;  // a row's bits alone = in any batch
  return options;
}

// Each case alone in its own engine: the ids transformers generates, and the activations the
// batched runs must reproduce.
class RequestSteeringEngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    alone_ = new std::map<std::pair<std::string, int>, std::vector<float>>();
    for (const auto& c : Reference()["cases"]) {
      auto llm = engine::LLM::Open(Options());
      ASSERT_TRUE(llm.ok()) << llm.status().ToString();
      testing::SteeringRecorder recorder(&(*llm)->engine());
      recorder.Follow(c["name"], c);
      (*llm)->engine().SetObserver(&recorder);
      const std::string name = c["name"];
      const auto results =
          (*llm)->Generate({{name, engine::Prompt::Ids(JsonInts(Reference()["input_ids"])),
                             testing::Greedy(16), testing::RequestSteeringOf(c)}});
      ASSERT_TRUE(results[0].status.ok()) << results[0].status.ToString();
      EXPECT_EQ(results[0].output.output_ids, JsonInts(c["greedy"])) << name;
      alone_->insert(recorder.rows.begin(), recorder.rows.end());
    }
  }
  static void TearDownTestSuite() { delete alone_; }
  static std::map<std::pair<std::string, int>, std::vector<float>>* alone_;
};
std::map<std::pair<std::string, int>, std::vector<float>>* RequestSteeringEngineTest::alone_ =
    nullptr;

TEST_F(RequestSteeringEngineTest, EachCaseAloneGeneratesWhatTransformersGenerates) {
  ASSERT_FALSE(HasFailure());
  // 18 prompt tokens and the first 15 generated (the last one never runs through the model).
  EXPECT_EQ(alone_->size(), Reference()["cases"].size() * 33);
}

// 32 requests: the 8 cases in turn (unsteered and conditional ones included; 5 distinct configs,
// since the conditional cases share "both"'s vectors), 2 configs per step at most, a KV cache
// too small for all of them (preemption by recompute).
TEST_F(RequestSteeringEngineTest, BatchOf32WithEveryCaseEqualsEachAlone) {
  engine::EngineOptions options = Options();
  options.max_steering_configs = 2;
  options.num_kv_blocks = 40;
  auto llm = engine::LLM::Open(options);
  ASSERT_TRUE(llm.ok()) << llm.status().ToString();
  engine::LLMEngine& engine = (*llm)->engine();
  testing::SteeringRecorder recorder(&engine);
  engine.SetObserver(&recorder);
  const auto& cases = Reference()["cases"];
  std::vector<engine::GenerateRequest> requests;
  std::vector<int> case_of;
  for (int i = 0; i < 32; ++i) {
    const int k = i % static_cast<int>(cases.size());
    requests.push_back({"r" + std::to_string(i) + "_" + cases[k]["name"].get<std::string>(),
                        engine::Prompt::Ids(JsonInts(Reference()["input_ids"])),
                        testing::Greedy(16), testing::RequestSteeringOf(cases[k])});
    case_of.push_back(k);
    recorder.Follow(requests.back().id, cases[k]);  // the conditional cases switch
  }
  const auto results = (*llm)->Generate(requests);
  EXPECT_GT(engine.stats().num_preemptions, 0);
  EXPECT_EQ(recorder.max_configs_per_step, 2);        // the cap held and was reached
  EXPECT_EQ(engine.stats().num_steering_configs, 0);  // every registration was dropped
  for (size_t i = 0; i < results.size(); ++i) {
    const nlohmann::json& c = cases[case_of[i]];
    ASSERT_TRUE(results[i].status.ok()) << results[i].status.ToString();
    EXPECT_EQ(results[i].output.output_ids, JsonInts(c["greedy"])) << requests[i].id;
    // Bit for bit: the final-norm row is the LM head's input, so the logits are equal too.
    int missing = 0;
    EXPECT_EQ(testing::MaxRelativeRowDiff(recorder.rows, requests[i].id, *alone_, c["name"], 33,
                                          &missing),
              0.0)
        << requests[i].id;
    EXPECT_EQ(missing, 0) << requests[i].id;
  }
}

const nlohmann::json& CaseNamed(const std::string& name) {
  for (const auto& c : Reference()["cases"]) {
    if (c["name"] == name) return c;
  }
  ADD_FAILURE() << "no reference case " << name;
  return Reference()["cases"][0];
}

// Deferred steering switched on by the observer after the activation of generated[3]: tokens
// 0-4 are the unsteered run's (token 4 comes from that very activation), the rest the run
// steered from generated[4]'s position on; steering switched off there gives the steered run's
// tokens 0-4 and then what transformers gives with the vector masked from that position on;
// next to requests that stay unsteered.
TEST_F(RequestSteeringEngineTest, ConditionalSteeringSwitchesOnAndOffTokenExactly) {
  const nlohmann::json& unsteered = CaseNamed("none");
  const nlohmann::json& conditional = CaseNamed("from_generated_4");
  const nlohmann::json& stopped = CaseNamed("until_generated_4");
  auto llm = engine::LLM::Open(Options());
  ASSERT_TRUE(llm.ok()) << llm.status().ToString();
  testing::SteeringRecorder recorder(&(*llm)->engine());
  recorder.Follow("cond", conditional);
  recorder.Follow("stop", stopped);
  (*llm)->engine().SetObserver(&recorder);
  const std::vector<int32_t> prompt = JsonInts(Reference()["input_ids"]);
  const auto results =
      (*llm)->Generate({{"plain", engine::Prompt::Ids(prompt), testing::Greedy(16), {}},
                        {"cond", engine::Prompt::Ids(prompt), testing::Greedy(16),
                         testing::RequestSteeringOf(conditional)},
                        {"plain2", engine::Prompt::Ids(prompt), testing::Greedy(16), {}},
                        {"stop", engine::Prompt::Ids(prompt), testing::Greedy(16),
                         testing::RequestSteeringOf(stopped)}});
  ASSERT_TRUE(results[1].status.ok()) << results[1].status.ToString();
  const std::vector<int32_t> plain = JsonInts(unsteered["greedy"]);
  const std::vector<int32_t> steered = JsonInts(conditional["greedy"]);
  EXPECT_EQ(results[0].output.output_ids, plain);
  EXPECT_EQ(results[2].output.output_ids, plain);
  EXPECT_EQ(results[1].output.output_ids, steered);
  ASSERT_EQ(std::vector<int32_t>(steered.begin(), steered.begin() + 5),
            std::vector<int32_t>(plain.begin(), plain.begin() + 5));
  EXPECT_NE(steered[5], plain[5]);
  ASSERT_TRUE(results[3].status.ok()) << results[3].status.ToString();
  const std::vector<int32_t> until = JsonInts(stopped["greedy"]);
  const std::vector<int32_t> both = JsonInts(CaseNamed("both")["greedy"]);
  EXPECT_EQ(results[3].output.output_ids, until);
  EXPECT_EQ(std::vector<int32_t>(until.begin(), until.begin() + 5),
            std::vector<int32_t>(both.begin(), both.begin() + 5));
  EXPECT_NE(until[5], both[5]);
}

TEST(RequestSteeringValidationTest, BadVectorsAreRejectedNamingTheField) {
  auto llm = engine::LLM::Open(Options());
  ASSERT_TRUE(llm.ok()) << llm.status().ToString();
  auto config = std::make_shared<worker::SteeringConfig>();
  config->vectors.push_back({.layer = 7, .values = std::vector<float>(64, 0.1f)});
  const Status status =
      (*llm)->engine().AddRequest("bad", engine::Prompt::Ids({1, 2}), testing::Greedy(2), {config});
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.ToString().find("steering[0] (layer 7): the model has layers 0 to 4"),
            std::string::npos)
      << status.ToString();
  EXPECT_FALSE((*llm)->engine().HasUnfinished());
}

}  // namespace
}  // namespace uc
