// Reproduces the golden outputs of an independent implementation (llama2.c run.c, fp32) for
// stories260K and tiny-gqa2 from each of the three checkpoint layouts: greedy token ids exactly,
// logits within tolerance at every listed position, per-layer residual activations, and
// prompt tokenization.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "common/test_util.h"
#include "engine/generator.h"

namespace uc {
namespace {

using testing::JsonFloats;
using testing::JsonInts;
using testing::LoadJson;
using testing::MaxAbsDiff;
using testing::TestData;

struct ModelCase {
  std::string name;
  std::string path;    // under tests/testdata
  std::string golden;  // golden file prefix: stories260K or tiny-gqa2
  double logit_tol;    // max |Δlogit| allowed
};

std::ostream& operator<<(std::ostream& os, const ModelCase& c) { return os << c.name; }

const std::vector<ModelCase>& Cases() {
  static const std::vector<ModelCase> kCases = {
      {"stories260K_hf", "stories260K-hf", "stories260K", 1e-4},
      {"stories260K_gguf_f32", "stories260K/stories260K.gguf", "stories260K", 1e-4},
      {"stories260K_llama2c", "stories260K/stories260K.bin", "stories260K", 1e-4},
      {"stories260K_gguf_f16", "stories260K/stories260K-F16.gguf", "stories260K", 0.05},
      {"tiny_gqa2_hf", "tiny-gqa2/hf", "tiny-gqa2", 2e-4},
      {"tiny_gqa2_gguf", "tiny-gqa2/tiny-gqa2.gguf", "tiny-gqa2", 2e-4},
      {"tiny_gqa2_llama2c", "tiny-gqa2/tiny-gqa2.bin", "tiny-gqa2", 2e-4},
  };
  return kCases;
}

class GoldenTest : public ::testing::TestWithParam<ModelCase> {
 protected:
  static void SetUpTestSuite() {
    generators_ = new std::map<std::string, std::unique_ptr<engine::Generator>>();
  }
  static void TearDownTestSuite() {
    delete generators_;
    generators_ = nullptr;
  }

  // The generator for this layout, opened once per suite; null (with a failure) on error.
  engine::Generator* Gen() {
    auto& slot = (*generators_)[GetParam().name];
    if (slot == nullptr) {
      engine::GeneratorOptions options;
      options.model_path = TestData(GetParam().path);
      options.num_threads = 2;
      options.max_model_len = 1024;  // the GGUF converter wrote context_length 128
      options.prefill_chunk = 64;    // exercise chunked prefill
      auto gen = engine::Generator::Open(options);
      EXPECT_TRUE(gen.ok()) << gen.status().ToString();
      if (!gen.ok()) return nullptr;
      slot = std::move(gen).value();
    }
    return slot.get();
  }

  static std::map<std::string, std::unique_ptr<engine::Generator>>* generators_;
};

std::map<std::string, std::unique_ptr<engine::Generator>>* GoldenTest::generators_ = nullptr;

TEST_P(GoldenTest, GreedyIdsMatchExactly) {
  const nlohmann::json golden =
      LoadJson(TestData("golden/" + GetParam().golden + "_generate.json"));
  engine::Generator* gen_ptr = Gen();
  ASSERT_NE(gen_ptr, nullptr);
  engine::Generator& gen = *gen_ptr;
  for (const auto& c : golden["cases"]) {
    const std::vector<int32_t> prompt_ids = JsonInts(c["prompt_ids"]);
    const std::vector<int32_t> expected = JsonInts(c["ids"]);
    const int steps = c["steps"].get<int>();
    const int budget = steps + 1 - static_cast<int>(prompt_ids.size());
    SCOPED_TRACE("prompt '" + c["prompt"].get<std::string>() + "' steps " + std::to_string(steps));
    if (budget <= 0) {  // only forced prompt tokens: nothing generated
      EXPECT_EQ(std::vector<int32_t>(prompt_ids.begin(), prompt_ids.begin() + expected.size()),
                expected);
      continue;
    }
    worker::SamplingParams params;
    params.temperature = 0.0f;
    params.max_tokens = budget;
    params.ignore_eos = true;     // run.c does not stop at EOS ...
    params.stop_token_ids = {1};  // ... but at BOS
    auto result = gen.GenerateFromIds(prompt_ids, params);
    ASSERT_TRUE(result.ok()) << result.status().ToString();
    std::vector<int32_t> ids = result->prompt_ids;
    ids.insert(ids.end(), result->output_ids.begin(), result->output_ids.end());
    if (c["stop"] == "bos") {
      ASSERT_EQ(ids.back(), 1);
      ids.pop_back();
      EXPECT_EQ(result->finish_reason, engine::FinishReason::kStop);
    } else {
      EXPECT_EQ(result->finish_reason, engine::FinishReason::kLength);
    }
    EXPECT_EQ(ids, expected);
  }
}

TEST_P(GoldenTest, PromptTokenization) {
  const nlohmann::json golden =
      LoadJson(TestData("golden/" + GetParam().golden + "_generate.json"));
  engine::Generator* gen = Gen();
  ASSERT_NE(gen, nullptr);
  const tokenizer::Tokenizer& tok = gen->tokenizer();
  for (const auto& c : golden["cases"]) {
    const std::string prompt = c["prompt"].get<std::string>();
    EXPECT_EQ(tok.Encode(prompt, /*add_bos=*/true, /*parse_special=*/false),
              JsonInts(c["prompt_ids"]))
        << "prompt '" << prompt << "'";
  }
}

void CheckSequence(engine::Generator& gen, const nlohmann::json& seq, double tol, bool full) {
  const std::vector<int32_t> ids = JsonInts(seq["ids"]);
  auto logits = gen.ScoreAllPositions(ids);
  ASSERT_TRUE(logits.ok()) << logits.status().ToString();
  const int64_t vocab = logits->dim(1);
  double worst = 0.0;
  for (const auto& p : seq["positions"]) {
    const int pos = p["pos"].get<int>();
    const std::span<const float> row(logits->data<float>() + pos * vocab, vocab);
    if (p.contains("logits")) {
      const auto d = MaxAbsDiff(row, JsonFloats(p["logits"]));
      worst = std::max(worst, d.max_abs);
      EXPECT_LE(d.max_abs, tol) << "pos " << pos << " logit " << d.worst_index;
    }
    const auto d16 = MaxAbsDiff(row.subspan(0, 16), JsonFloats(p["first16"]));
    worst = std::max(worst, d16.max_abs);
    EXPECT_LE(d16.max_abs, tol) << "pos " << pos;
    if (tol < 1e-3) {
      int32_t argmax = 0;
      for (int64_t i = 1; i < vocab; ++i) argmax = row[i] > row[argmax] ? i : argmax;
      EXPECT_EQ(argmax, p["argmax"].get<int32_t>()) << "pos " << pos;
    }
  }
  ::testing::Test::RecordProperty(full ? "short_max_abs_diff" : "long_max_abs_diff",
                                  std::to_string(worst));
}

TEST_P(GoldenTest, LogitsMatchAtEveryPosition) {
  const nlohmann::json golden = LoadJson(TestData("golden/" + GetParam().golden + "_logits.json"));
  engine::Generator* gen = Gen();
  ASSERT_NE(gen, nullptr);
  CheckSequence(*gen, golden["short"], GetParam().logit_tol, true);
  CheckSequence(*gen, golden["long"], GetParam().logit_tol, false);
}

// Decoding one token at a time through the KV cache gives the same logits as one prefill.
TEST_P(GoldenTest, IncrementalDecodeMatchesPrefill) {
  engine::Generator* gen_ptr = Gen();
  ASSERT_NE(gen_ptr, nullptr);
  engine::Generator& gen = *gen_ptr;
  const nlohmann::json golden = LoadJson(TestData("golden/" + GetParam().golden + "_logits.json"));
  const std::vector<int32_t> ids = JsonInts(golden["short"]["ids"]);
  auto full = gen.ScoreAllPositions(ids);
  ASSERT_TRUE(full.ok());
  models::KvCache cache = gen.model().NewKvCache(static_cast<int>(ids.size()));
  const int64_t vocab = full->dim(1);
  Tensor logits = Tensor::Empty({1, vocab}, DType::kF32);
  for (int32_t pos = 0; pos < static_cast<int32_t>(ids.size()); ++pos) {
    gen.model().Forward({&ids[pos], 1}, {&pos, 1}, cache, false, logits, &gen.pool());
    const auto d = MaxAbsDiff({logits.data<float>(), static_cast<size_t>(vocab)},
                              {full->data<float>() + pos * vocab, static_cast<size_t>(vocab)});
    // Prefill (GEMM) and decode (GEMV) sum in different orders: allow a few float ulps of
    // the row's largest logit.
    float scale = 1.0f;
    for (int64_t i = 0; i < vocab; ++i) scale = std::max(scale, std::fabs(logits.data<float>()[i]));
    EXPECT_LE(d.max_abs, 2e-6 * scale) << "pos " << pos;
  }
}

// Residual stream after every layer, read through the forward hooks (the probing tap points).
class ResidualRecorder : public models::ForwardHooks {
 public:
  bool Wants(models::TapPoint point) const override {
    return point.site == models::Site::kResidPost || point.site == models::Site::kFinalNorm;
  }
  void Observe(models::TapPoint point, std::span<const int32_t> positions,
               const Tensor& activation) override {
    captured[point.layer] = activation.ToFloatVector();
  }
  std::map<int, std::vector<float>> captured;
};

TEST_P(GoldenTest, ResidualActivationsMatchPerLayer) {
  const nlohmann::json golden =
      LoadJson(TestData("golden/" + GetParam().golden + "_activations.json"));
  engine::Generator* gen_ptr = Gen();
  ASSERT_NE(gen_ptr, nullptr);
  engine::Generator& gen = *gen_ptr;
  const double tol = std::max(1e-4, GetParam().logit_tol);
  const std::vector<int32_t> ids = JsonInts(golden["ids"]);
  std::vector<int32_t> positions(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) positions[i] = static_cast<int32_t>(i);
  models::KvCache cache = gen.model().NewKvCache(static_cast<int>(ids.size()));
  Tensor logits =
      Tensor::Empty({static_cast<int64_t>(ids.size()), gen.config().vocab_size}, DType::kF32);
  ResidualRecorder recorder;
  gen.model().Forward(ids, positions, cache, true, logits, &gen.pool(), &recorder);
  for (const auto& layer : golden["layers"]) {
    const int l = layer["layer"].get<int>();
    std::vector<float> expected;
    for (const auto& row : layer["resid_after_layer"]) {
      for (float v : JsonFloats(row)) expected.push_back(v);
    }
    const auto d = MaxAbsDiff(recorder.captured[l], expected);
    EXPECT_LE(d.max_abs, tol) << "layer " << l << " element " << d.worst_index;
  }
  std::vector<float> final_expected;
  for (const auto& row : golden["final_norm_hidden"]) {
    for (float v : JsonFloats(row)) final_expected.push_back(v);
  }
  const int n = gen.config().num_hidden_layers;
  EXPECT_LE(MaxAbsDiff(recorder.captured[n], final_expected).max_abs, tol);
}

INSTANTIATE_TEST_SUITE_P(Layouts, GoldenTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace uc
