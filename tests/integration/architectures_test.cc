// Architectures and weight dtypes beyond the golden models, against Hugging Face transformers
// (float32) on tiny random checkpoints made by tools/reference/: Llama-3 rope_scaling, MQA with
// an explicit head_dim, Mistral, Qwen2 (q/k/v biases, tied embeddings), BF16 sharded and F16
// safetensors, Gemma 3 and Gemma 2 (sandwich norms, sliding/global layers, soft-capping),
// Qwen3 (q/k norms), Llama 3.2 (tied, llama3 RoPE), Phi-3 (fused q/k/v and gate/up), Mistral
// with a sliding window — prompts and continuations longer than the windows — each also as
// GGUF, and tiny-gqa2 as GGUF Q8_0 / Q4_0 / Q4_1 / F16 / BF16 (dequantized on the fly).
#include <gtest/gtest.h>

#include <cmath>

#include "common/test_util.h"
#include "models/checkpoint.h"
#include "models/llama_model.h"
#include "worker/sampler.h"

namespace uc {
namespace {

using testing::JsonFloats;
using testing::JsonInts;
using testing::TestData;

struct FixtureCase {
  std::string name;
  std::string model;      // under tests/testdata
  std::string reference;  // reference.json under tests/testdata
};

std::ostream& operator<<(std::ostream& os, const FixtureCase& c) { return os << c.name; }

class FixtureTest : public ::testing::TestWithParam<FixtureCase> {
 protected:
  void SetUp() override {
    reference_ = testing::LoadJson(TestData(GetParam().reference));
    ASSERT_FALSE(reference_.is_null());
    auto ckpt = models::OpenCheckpoint(TestData(GetParam().model));
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
    checkpoint_ = *ckpt;
    auto model = models::CausalLM::Load(checkpoint_);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    model_ = std::move(model).value();
  }

  models::Checkpoint checkpoint_;
  std::unique_ptr<models::CausalLM> model_;
  nlohmann::json reference_;
  ThreadPool pool_{2};
};

// Allowed |Δlogit|: float32 sums in another order, relative to the logits' scale.
double Tolerance(std::span<const float> expected) {
  float scale = 1.0f;
  for (float v : expected) scale = std::max(scale, std::fabs(v));
  return 1e-5 * scale + 2e-5;
}

TEST_P(FixtureTest, LogitsMatchTransformersAtEveryPosition) {
  const std::vector<int32_t> ids = JsonInts(reference_["input_ids"]);
  std::vector<int32_t> positions(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) positions[i] = static_cast<int32_t>(i);
  models::KvCache cache = model_->NewKvCache(static_cast<int>(ids.size()));
  const int64_t vocab = model_->config().vocab_size;
  Tensor logits = Tensor::Empty({static_cast<int64_t>(ids.size()), vocab}, DType::kF32);
  model_->Forward(ids, positions, cache, true, logits, &pool_);
  for (size_t p = 0; p < ids.size(); ++p) {
    const std::vector<float> expected = JsonFloats(reference_["logits"][p]);
    const std::span<const float> row(logits.data<float>() + p * vocab, vocab);
    const auto d = testing::MaxAbsDiff(row, expected);
    EXPECT_LE(d.max_abs, Tolerance(expected)) << "position " << p << " logit " << d.worst_index;
    EXPECT_EQ(worker::Sampler::Argmax(row), reference_["argmax"][p].get<int32_t>())
        << "position " << p;
  }
}

// The GGUF fixtures record logits only; greedy decoding of GGUF files is covered by golden_test.
class GreedyTest : public FixtureTest {};

TEST_P(GreedyTest, GreedyContinuationMatches) {
  const std::vector<int32_t> ids = JsonInts(reference_["input_ids"]);
  const std::vector<int32_t> expected = JsonInts(reference_["greedy"]["new_ids"]);
  std::vector<int32_t> positions(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) positions[i] = static_cast<int32_t>(i);
  models::KvCache cache = model_->NewKvCache(static_cast<int>(ids.size() + expected.size()));
  Tensor logits = Tensor::Empty({1, model_->config().vocab_size}, DType::kF32);
  model_->Forward(ids, positions, cache, false, logits, &pool_);
  std::vector<int32_t> generated;
  for (size_t step = 0; step < expected.size(); ++step) {
    const int32_t next =
        worker::Sampler::Argmax({logits.data<float>(), static_cast<size_t>(logits.numel())});
    generated.push_back(next);
    const int32_t pos = static_cast<int32_t>(ids.size() + step);
    model_->Forward({&next, 1}, {&pos, 1}, cache, false, logits, &pool_);
  }
  EXPECT_EQ(generated, expected);
}

const FixtureCase kArchCases[] = {
    FixtureCase{"llama3_rope_scaling", "arch/llama3_rope_scaling",
                "arch/llama3_rope_scaling/reference.json"},
    FixtureCase{"llama_mqa_head_dim", "arch/llama_mqa_head_dim",
                "arch/llama_mqa_head_dim/reference.json"},
    FixtureCase{"mistral", "arch/mistral", "arch/mistral/reference.json"},
    FixtureCase{"qwen2", "arch/qwen2", "arch/qwen2/reference.json"},
    FixtureCase{"llama_bf16_sharded", "arch/llama_bf16_sharded",
                "arch/llama_bf16_sharded/reference.json"},
    FixtureCase{"llama_f16", "arch/llama_f16", "arch/llama_f16/reference.json"},
    FixtureCase{"gemma3", "arch/gemma3", "arch/gemma3/reference.json"},
    FixtureCase{"gemma2", "arch/gemma2", "arch/gemma2/reference.json"},
    FixtureCase{"qwen3", "arch/qwen3", "arch/qwen3/reference.json"},
    FixtureCase{"llama32", "arch/llama32", "arch/llama32/reference.json"},
    FixtureCase{"phi3", "arch/phi3", "arch/phi3/reference.json"},
    FixtureCase{"mistral_window", "arch/mistral_window", "arch/mistral_window/reference.json"},
};

// The same checkpoints converted to GGUF the way llama.cpp's converter does (its tensor names,
// interleaved q/k rows for "llama", Gemma's 1 + w norms, Phi-3's fused tensors): same reference.
const FixtureCase kArchGgufCases[] = {
    FixtureCase{"gemma3_gguf", "arch/gemma3/model.gguf", "arch/gemma3/reference.json"},
    FixtureCase{"gemma2_gguf", "arch/gemma2/model.gguf", "arch/gemma2/reference.json"},
    FixtureCase{"qwen3_gguf", "arch/qwen3/model.gguf", "arch/qwen3/reference.json"},
    FixtureCase{"llama32_gguf", "arch/llama32/model.gguf", "arch/llama32/reference.json"},
    FixtureCase{"phi3_gguf", "arch/phi3/model.gguf", "arch/phi3/reference.json"},
};

const FixtureCase kGgufCases[] = {
    FixtureCase{"gguf_q8_0", "gguf/q8_0/tiny-gqa2-Q8_0.gguf", "gguf/q8_0/reference.json"},
    FixtureCase{"gguf_q4_0", "gguf/q4_0/tiny-gqa2-Q4_0.gguf", "gguf/q4_0/reference.json"},
    FixtureCase{"gguf_q4_1", "gguf/q4_1/tiny-gqa2-Q4_1.gguf", "gguf/q4_1/reference.json"},
    FixtureCase{"gguf_f16", "gguf/f16/tiny-gqa2-F16.gguf", "gguf/f16/reference.json"},
    FixtureCase{"gguf_bf16", "gguf/bf16/tiny-gqa2-BF16.gguf", "gguf/bf16/reference.json"},
};

INSTANTIATE_TEST_SUITE_P(Architectures, FixtureTest, ::testing::ValuesIn(kArchCases),
                         [](const auto& info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(GgufDtypes, FixtureTest, ::testing::ValuesIn(kGgufCases),
                         [](const auto& info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(Architectures, GreedyTest, ::testing::ValuesIn(kArchCases),
                         [](const auto& info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(ArchitecturesGguf, FixtureTest, ::testing::ValuesIn(kArchGgufCases),
                         [](const auto& info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(ArchitecturesGguf, GreedyTest, ::testing::ValuesIn(kArchGgufCases),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace uc
