#include "io/llama2c.h"

#include <gtest/gtest.h>

#include <array>
#include <cstring>

#include "io/io_test_util.h"

namespace uc::io {
namespace {

using testing::IsError;
using testing::TempDir;

using Header = std::array<int32_t, 7>;

// Float count of a version-0 file with header `h` (vocab sign = shared classifier flag).
int64_t FloatCount(const Header& h) {
  const int64_t dim = h[0], hidden = h[1], layers = h[2], heads = h[3], kv_heads = h[4];
  const int64_t vocab = h[5] < 0 ? -int64_t{h[5]} : h[5];
  const int64_t kv_dim = kv_heads * (dim / heads);
  return vocab * dim * (h[5] < 0 ? 2 : 1) +
         layers * (2 * dim + 2 * dim * dim + 2 * kv_dim * dim + 3 * hidden * dim) + dim +
         2 * h[6] * (dim / heads / 2);
}

// A checkpoint whose float i holds the value i, so every view shows where it starts.
std::string Checkpoint(const Header& h, int64_t extra_floats = 0) {
  std::string bytes(28, '\0');
  std::memcpy(bytes.data(), h.data(), 28);
  const int64_t n = FloatCount(h) + extra_floats;
  for (int64_t i = 0; i < n; ++i) {
    const float value = static_cast<float>(i);
    bytes.append(reinterpret_cast<const char*>(&value), 4);
  }
  return bytes;
}

TEST(Llama2cTest, ReadsStories260K) {
  auto ckpt = Llama2cCheckpoint::Open(testing::TestData("stories260K/stories260K.bin"));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  const Llama2cHeader& h = (*ckpt)->header();
  EXPECT_EQ(h.hidden_size, 64);
  EXPECT_EQ(h.intermediate_size, 172);
  EXPECT_EQ(h.num_hidden_layers, 5);
  EXPECT_EQ(h.num_attention_heads, 8);
  EXPECT_EQ(h.num_key_value_heads, 4);
  EXPECT_EQ(h.vocab_size, 512);
  EXPECT_EQ(h.max_position_embeddings, 512);
  EXPECT_TRUE(h.tie_word_embeddings);
  EXPECT_EQ(h.head_dim(), 8);
  EXPECT_EQ((*ckpt)->TensorNames().size(), 1u + 5 * 9 + 1);
  EXPECT_FALSE((*ckpt)->Has("lm_head.weight"));
  EXPECT_EQ((*ckpt)->Get("model.layers.4.self_attn.k_proj.weight")->shape(), (Shape{32, 64}));
  EXPECT_EQ((*ckpt)->Get("model.layers.0.mlp.down_proj.weight")->shape(), (Shape{64, 172}));
  EXPECT_EQ((*ckpt)->Get("model.norm.weight")->shape(), (Shape{64}));
  EXPECT_TRUE(IsError((*ckpt)->Get("lm_head.weight").status(), StatusCode::kNotFound,
                      {"stories260K.bin: tensor 'lm_head.weight' not found"}));
}

TEST(Llama2cTest, ReadsTinyGqa2) {
  auto ckpt = Llama2cCheckpoint::Open(testing::TestData("tiny-gqa2/tiny-gqa2.bin"));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  const Llama2cHeader& h = (*ckpt)->header();
  EXPECT_EQ(h.hidden_size, 96);
  EXPECT_EQ(h.num_key_value_heads, 2);
  EXPECT_EQ(h.max_position_embeddings, 256);
  EXPECT_EQ((*ckpt)->Get("model.layers.3.self_attn.v_proj.weight")->shape(), (Shape{24, 96}));
}

TEST(Llama2cTest, LayoutWithSeparateClassifier) {
  TempDir dir;
  // dim 8, hidden 16, 2 layers, 2 heads, 1 kv head, vocab 10 (separate), seq_len 4.
  const Header h = {8, 16, 2, 2, 1, -10, 4};
  testing::WriteBytes(dir.File("m.bin"), Checkpoint(h));
  auto ckpt = Llama2cCheckpoint::Open(dir.File("m.bin"));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  EXPECT_FALSE((*ckpt)->header().tie_word_embeddings);
  EXPECT_EQ((*ckpt)->header().vocab_size, 10);
  // First float of each view = its float offset in the arrays.
  const int64_t emb = 80, norms = 8, wq = 64, wkv = 32, w13 = 128;
  const struct {
    const char* name;
    int64_t first;
    Shape shape;
  } kExpected[] = {
      {"model.embed_tokens.weight", 0, {10, 8}},
      {"model.layers.0.input_layernorm.weight", emb, {8}},
      {"model.layers.1.input_layernorm.weight", emb + norms, {8}},
      {"model.layers.0.self_attn.q_proj.weight", emb + 2 * norms, {8, 8}},
      {"model.layers.1.self_attn.q_proj.weight", emb + 2 * norms + wq, {8, 8}},
      {"model.layers.0.self_attn.k_proj.weight", emb + 2 * norms + 2 * wq, {4, 8}},
      {"model.layers.1.self_attn.v_proj.weight", emb + 2 * norms + 2 * wq + 3 * wkv, {4, 8}},
      {"model.layers.0.self_attn.o_proj.weight", emb + 2 * norms + 2 * wq + 4 * wkv, {8, 8}},
      {"model.layers.1.post_attention_layernorm.weight", emb + 3 * norms + 4 * wq + 4 * wkv, {8}},
      {"model.layers.0.mlp.gate_proj.weight", emb + 4 * norms + 4 * wq + 4 * wkv, {16, 8}},
      {"model.layers.1.mlp.down_proj.weight",
       emb + 4 * norms + 4 * wq + 4 * wkv + 3 * w13,
       {8, 16}},
      {"model.layers.1.mlp.up_proj.weight", emb + 4 * norms + 4 * wq + 4 * wkv + 5 * w13, {16, 8}},
      {"model.norm.weight", emb + 4 * norms + 4 * wq + 4 * wkv + 6 * w13, {8}},
      // After the final norm and the two RoPE tables of [4][2].
      {"lm_head.weight", emb + 5 * norms + 4 * wq + 4 * wkv + 6 * w13 + 16, {10, 8}},
  };
  for (const auto& e : kExpected) {
    StatusOr<Tensor> t = (*ckpt)->Get(e.name);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_EQ(t->shape(), e.shape) << e.name;
    EXPECT_EQ(t->data<float>()[0], static_cast<float>(e.first)) << e.name;
  }
  EXPECT_EQ((*ckpt)->TensorNames().size(), 1u + 2 * 9 + 1 + 1);
}

class Llama2cBadFileTest : public ::testing::Test {
 protected:
  Status Open(const std::string& bytes) {
    testing::WriteBytes(path_, bytes);
    return Llama2cCheckpoint::Open(path_).status();
  }

  TempDir dir_;
  std::string path_ = dir_.File("model.bin");
  Header good_ = {8, 16, 2, 2, 1, 10, 4};
};

TEST_F(Llama2cBadFileTest, WrongSizeSaysExpectedAndActual) {
  std::string bytes = testing::ReadBytes(testing::TestData("stories260K/stories260K.bin"));
  bytes.resize(bytes.size() - 4);
  EXPECT_TRUE(IsError(Open(bytes), StatusCode::kInvalidArgument,
                      {path_, "1056536 bytes", "implies 1056540 bytes", "4 missing", "dim 64"}));
  bytes.append(8, '\0');
  EXPECT_TRUE(IsError(Open(bytes), StatusCode::kInvalidArgument,
                      {path_, "1056544 bytes", "implies 1056540 bytes", "4 extra"}));
  EXPECT_TRUE(Open(Checkpoint(good_)).ok());
  EXPECT_TRUE(IsError(Open(Checkpoint(good_, 1)), StatusCode::kInvalidArgument, {"4 extra"}));
  EXPECT_TRUE(IsError(Open(Checkpoint(good_, -1)), StatusCode::kInvalidArgument, {"4 missing"}));
}

TEST_F(Llama2cBadFileTest, ShorterThanTheHeader) {
  EXPECT_TRUE(IsError(Open(std::string(27, '\1')), StatusCode::kInvalidArgument,
                      {path_, "27 bytes", "header"}));
  EXPECT_TRUE(IsError(Open(""), StatusCode::kInvalidArgument, {path_}));
}

TEST_F(Llama2cBadFileTest, NonPositiveFields) {
  const char* kNames[] = {"dim",        "hidden_dim", "n_layers", "n_heads",
                          "n_kv_heads", "vocab_size", "seq_len"};
  for (int field = 0; field < 7; ++field) {
    for (int32_t bad : {0, -3}) {
      if (field == 5 && bad < 0) continue;  // negative vocab_size is the classifier flag
      Header h = good_;
      h[field] = bad;
      std::string bytes(28, '\0');
      std::memcpy(bytes.data(), h.data(), 28);
      bytes.append(4096, '\0');
      EXPECT_TRUE(
          IsError(Open(bytes), StatusCode::kInvalidArgument,
                  {path_, std::string("field ") + kNames[field] + " is " + std::to_string(bad)}))
          << kNames[field];
    }
  }
}

TEST_F(Llama2cBadFileTest, HeadCountsMustDivide) {
  Header h = good_;
  h[3] = 3;  // dim 8 % 3
  EXPECT_TRUE(IsError(Open(Checkpoint(good_).replace(0, 28, reinterpret_cast<char*>(h.data()), 28)),
                      StatusCode::kInvalidArgument, {path_, "dim 8", "n_heads 3"}));
  h = good_;
  h[3] = 4;
  h[4] = 3;  // 4 % 3
  EXPECT_TRUE(IsError(Open(Checkpoint(good_).replace(0, 28, reinterpret_cast<char*>(h.data()), 28)),
                      StatusCode::kInvalidArgument, {path_, "n_heads 4", "n_kv_heads 3"}));
}

TEST_F(Llama2cBadFileTest, HugeFieldsFailFast) {
  const Header h = {1 << 30, 1 << 30, 0x7fffffff, 1, 1, -0x7fffffff, 0x7fffffff};
  std::string bytes(28, '\0');
  std::memcpy(bytes.data(), h.data(), 28);
  EXPECT_TRUE(IsError(Open(bytes), StatusCode::kInvalidArgument, {path_, "implies"}));
}

TEST_F(Llama2cBadFileTest, NewerExportIsUnimplemented) {
  std::string bytes = Checkpoint(good_);
  std::memcpy(bytes.data(), "24ka", 4);  // 0x616b3432 little endian
  EXPECT_TRUE(IsError(Open(bytes), StatusCode::kUnimplemented, {path_, "ak42"}));
}

}  // namespace
}  // namespace uc::io
