// The same model in three layouts (llama2.c .bin, Hugging Face safetensors, GGUF) must yield
// identical tensors. Hugging Face q/k rows are permuted to the rotate-half RoPE order (within
// each head, llama2.c row 2i becomes row i and row 2i+1 becomes row i + head_dim/2); GGUF keeps
// the llama2.c order.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "io/gguf/gguf.h"
#include "io/io_test_util.h"
#include "io/llama2c.h"
#include "io/safetensors/safetensors.h"

namespace uc::io {
namespace {

struct Model {
  const char* bin;
  const char* gguf;
  const char* hf_dir;
};

// GGUF name of a Hugging Face tensor name as used by llama.cpp's converters.
std::string GgufName(const std::string& hf) {
  static const std::pair<const char*, const char*> kSuffixes[] = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"}};
  if (hf == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf == "model.norm.weight") return "output_norm.weight";
  const std::string prefix = "model.layers.";
  const size_t dot = hf.find('.', prefix.size());
  const std::string layer = hf.substr(prefix.size(), dot - prefix.size());
  const std::string suffix = hf.substr(dot + 1);
  for (const auto& [from, to] : kSuffixes) {
    if (suffix == from) return "blk." + layer + "." + to;
  }
  ADD_FAILURE() << "no GGUF name for " << hf;
  return hf;
}

bool IsQueryOrKey(const std::string& name) {
  return name.find("q_proj") != std::string::npos || name.find("k_proj") != std::string::npos;
}

bool SameBytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw(), b.raw(), static_cast<size_t>(a.nbytes())) == 0;
}

// Undoes the Hugging Face rotate-half permutation of a q/k matrix [heads * head_dim, dim].
std::vector<float> UnpermuteRows(const Tensor& hf, int64_t head_dim) {
  const int64_t rows = hf.dim(0);
  const int64_t cols = hf.dim(1);
  const float* src = hf.data<float>();
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t head = 0; head < rows / head_dim; ++head) {
    for (int64_t i = 0; i < head_dim / 2; ++i) {
      const int64_t base = head * head_dim;
      std::memcpy(&out[(base + 2 * i) * cols], src + (base + i) * cols, cols * sizeof(float));
      std::memcpy(&out[(base + 2 * i + 1) * cols], src + (base + i + head_dim / 2) * cols,
                  cols * sizeof(float));
    }
  }
  return out;
}

class CrossFormatTest : public ::testing::TestWithParam<Model> {
 protected:
  void SetUp() override {
    auto bin = Llama2cCheckpoint::Open(testing::TestData(GetParam().bin));
    auto gguf = GgufFile::Open(testing::TestData(GetParam().gguf));
    auto hf = SafetensorsCheckpoint::Open(testing::TestData(GetParam().hf_dir));
    ASSERT_TRUE(bin.ok()) << bin.status().ToString();
    ASSERT_TRUE(gguf.ok()) << gguf.status().ToString();
    ASSERT_TRUE(hf.ok()) << hf.status().ToString();
    bin_ = *bin;
    gguf_ = *gguf;
    hf_ = *hf;
  }

  std::shared_ptr<const Llama2cCheckpoint> bin_;
  std::shared_ptr<const GgufFile> gguf_;
  std::shared_ptr<const SafetensorsCheckpoint> hf_;
};

TEST_P(CrossFormatTest, SameTensorNamesInBinAndSafetensors) {
  EXPECT_EQ(bin_->TensorNames(), hf_->TensorNames());
  EXPECT_EQ(gguf_->TensorNames().size(), bin_->TensorNames().size() + 1);  // + output.weight
}

TEST_P(CrossFormatTest, BinAndGgufAreBitIdentical) {
  for (const std::string& name : bin_->TensorNames()) {
    StatusOr<Tensor> from_gguf = gguf_->Get(GgufName(name));
    ASSERT_TRUE(from_gguf.ok()) << from_gguf.status().ToString();
    EXPECT_TRUE(SameBytes(*bin_->Get(name), *from_gguf)) << name;
  }
  // The converter stores the tied classifier explicitly.
  EXPECT_TRUE(SameBytes(*bin_->Get("model.embed_tokens.weight"), *gguf_->Get("output.weight")));
}

TEST_P(CrossFormatTest, BinAndSafetensorsAgreeUpToTheQkPermutation) {
  const int64_t head_dim = bin_->header().head_dim();
  for (const std::string& name : bin_->TensorNames()) {
    const Tensor bin = *bin_->Get(name);
    const Tensor hf = *hf_->Get(name);
    if (!IsQueryOrKey(name)) {
      EXPECT_TRUE(SameBytes(bin, hf)) << name;
      continue;
    }
    ASSERT_EQ(bin.shape(), hf.shape()) << name;
    EXPECT_FALSE(SameBytes(bin, hf)) << name << " should be permuted";
    EXPECT_EQ(UnpermuteRows(hf, head_dim), bin.ToFloatVector()) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, CrossFormatTest,
                         ::testing::Values(Model{"stories260K/stories260K.bin",
                                                 "stories260K/stories260K.gguf", "stories260K-hf"},
                                           Model{"tiny-gqa2/tiny-gqa2.bin",
                                                 "tiny-gqa2/tiny-gqa2.gguf", "tiny-gqa2/hf"}));

// Spot checks of named tensors across all three layouts of stories260K.
TEST(CrossFormatSpotTest, Stories260KNamedTensors) {
  auto bin = Llama2cCheckpoint::Open(testing::TestData("stories260K/stories260K.bin"));
  auto gguf = GgufFile::Open(testing::TestData("stories260K/stories260K.gguf"));
  auto hf = SafetensorsFile::Open(testing::TestData("stories260K-hf/model.safetensors"));
  ASSERT_TRUE(bin.ok() && gguf.ok() && hf.ok());
  const std::pair<const char*, const char*> kNames[] = {
      {"model.layers.2.mlp.up_proj.weight", "blk.2.ffn_up.weight"},
      {"model.embed_tokens.weight", "token_embd.weight"},
      {"model.layers.0.input_layernorm.weight", "blk.0.attn_norm.weight"},
      {"model.layers.4.post_attention_layernorm.weight", "blk.4.ffn_norm.weight"},
      {"model.norm.weight", "output_norm.weight"}};
  for (const auto& [hf_name, gguf_name] : kNames) {
    const std::vector<float> a = (*bin)->Get(hf_name)->ToFloatVector();
    EXPECT_EQ(a, (*hf)->Get(hf_name)->ToFloatVector()) << hf_name;
    EXPECT_EQ(a, (*gguf)->Get(gguf_name)->ToFloatVector()) << gguf_name;
    EXPECT_NE(a[0], 0.0f) << hf_name;
  }
}

}  // namespace
}  // namespace uc::io
