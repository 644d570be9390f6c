// The per-tensor type choice of `undercurrent quantize` (llama.cpp's llama_tensor_get_type) on
// model shapes with known llama.cpp answers, and the --type parsing. The bytes and the mix on a
// real model are checked against llama.cpp itself in tests/integration/quantize_test.cc.
#include "convert/quantize.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace uc::convert {
namespace {

bool UseMoreBits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

// A 30-layer Llama with tied embeddings (no output.weight), as SmolLM2-135M.
ModelFacts SmolLm2Facts() {
  ModelFacts f;
  f.arch = "llama";
  f.has_output = false;
  f.num_layers = 30;
  f.num_attention_wv = 30;
  return f;
}

// Chooses for every tensor of a Llama-shaped model in llama.cpp's order; returns name -> type.
std::map<std::string, DType> ChooseAll(QuantizeType type, const ModelFacts& facts, int layers,
                                       int64_t hidden, int64_t inter, int64_t kv, int64_t vocab,
                                       int* fallbacks = nullptr) {
  std::vector<std::string> names;
  std::vector<Shape> shapes;
  auto add = [&](std::string name, Shape shape) {
    names.push_back(std::move(name));
    shapes.push_back(std::move(shape));
  };
  add("token_embd.weight", {vocab, hidden});
  for (int l = 0; l < layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", {hidden});
    add(p + "attn_q.weight", {hidden, hidden});
    add(p + "attn_k.weight", {kv, hidden});
    add(p + "attn_v.weight", {kv, hidden});
    add(p + "attn_output.weight", {hidden, hidden});
    add(p + "ffn_norm.weight", {hidden});
    add(p + "ffn_gate.weight", {inter, hidden});
    add(p + "ffn_up.weight", {inter, hidden});
    add(p + "ffn_down.weight", {hidden, inter});
  }
  add("output_norm.weight", {hidden});
  TensorTypeChooser chooser(type, facts);
  std::map<std::string, DType> out;
  for (size_t i : SortLikeLlamaCpp(names)) {
    out[names[i]] = chooser.Choose(names[i], shapes[i], DType::kF32);
  }
  if (fallbacks != nullptr) *fallbacks = chooser.fallbacks();
  return out;
}

// Rows of whole 256-blocks (hidden 1024, intermediate 2816): no fallbacks.
TEST(TensorTypeChooserTest, Q4KMOnWholeBlocks) {
  int fallbacks = -1;
  const auto t =
      ChooseAll(QuantizeType::kQ4_K_M, SmolLm2Facts(), 30, 1024, 2816, 256, 32000, &fallbacks);
  EXPECT_EQ(fallbacks, 0);
  EXPECT_EQ(t.at("token_embd.weight"), DType::kQ6_K);  // tied: the output rule
  EXPECT_EQ(t.at("output_norm.weight"), DType::kF32);
  int q6_v = 0;
  for (int l = 0; l < 30; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    const DType more = UseMoreBits(l, 30) ? DType::kQ6_K : DType::kQ4_K;
    EXPECT_EQ(t.at(p + "attn_v.weight"), more) << l;
    EXPECT_EQ(t.at(p + "ffn_down.weight"), more) << l;
    EXPECT_EQ(t.at(p + "attn_q.weight"), DType::kQ4_K) << l;
    EXPECT_EQ(t.at(p + "attn_k.weight"), DType::kQ4_K) << l;
    EXPECT_EQ(t.at(p + "attn_output.weight"), DType::kQ4_K) << l;
    EXPECT_EQ(t.at(p + "ffn_gate.weight"), DType::kQ4_K) << l;
    EXPECT_EQ(t.at(p + "ffn_norm.weight"), DType::kF32) << l;
    q6_v += t.at(p + "attn_v.weight") == DType::kQ6_K;
  }
  // n = 30: i < 3, i >= 26, and (i - 3) % 3 == 2 for 5, 8, ..., 23: 3 + 4 + 7.
  EXPECT_EQ(q6_v, 14);
}

// SmolLM2-135M's shapes: hidden 576 is not whole 256-blocks, intermediate 1536 is.
TEST(TensorTypeChooserTest, Q4KMOnSmolLm2Shapes) {
  int fallbacks = -1;
  const auto t =
      ChooseAll(QuantizeType::kQ4_K_M, SmolLm2Facts(), 30, 576, 1536, 192, 49152, &fallbacks);
  EXPECT_EQ(t.at("token_embd.weight"), DType::kQ8_0);  // 576 % 256: the output rule's Q8_0
  for (int l = 0; l < 30; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    const bool more = UseMoreBits(l, 30);
    EXPECT_EQ(t.at(p + "attn_v.weight"), more ? DType::kQ8_0 : DType::kQ5_0) << l;
    EXPECT_EQ(t.at(p + "ffn_down.weight"), more ? DType::kQ6_K : DType::kQ4_K) << l;
    EXPECT_EQ(t.at(p + "attn_q.weight"), DType::kQ5_0) << l;
    EXPECT_EQ(t.at(p + "ffn_up.weight"), DType::kQ5_0) << l;
  }
  EXPECT_EQ(fallbacks, 30 * 6);  // q, k, v, output, gate, up
}

TEST(TensorTypeChooserTest, OtherTypes) {
  auto t = ChooseAll(QuantizeType::kQ8_0, SmolLm2Facts(), 30, 1024, 2816, 256, 32000);
  EXPECT_EQ(t.at("token_embd.weight"), DType::kQ8_0);  // Q8_0 keeps Q8_0 for the output
  EXPECT_EQ(t.at("blk.0.attn_v.weight"), DType::kQ8_0);
  t = ChooseAll(QuantizeType::kQ4_0, SmolLm2Facts(), 30, 1024, 2816, 256, 32000);
  EXPECT_EQ(t.at("token_embd.weight"), DType::kQ6_K);
  EXPECT_EQ(t.at("blk.0.ffn_down.weight"), DType::kQ4_0);  // no imatrix: no Q4_1 guard
  t = ChooseAll(QuantizeType::kQ5_K_M, SmolLm2Facts(), 30, 1024, 2816, 256, 32000);
  EXPECT_EQ(t.at("blk.0.attn_v.weight"), DType::kQ6_K);
  EXPECT_EQ(t.at("blk.3.attn_v.weight"), DType::kQ5_K);
  EXPECT_EQ(t.at("blk.3.ffn_up.weight"), DType::kQ5_K);
  t = ChooseAll(QuantizeType::kQ6_K, SmolLm2Facts(), 30, 1024, 2816, 256, 32000);
  EXPECT_EQ(t.at("blk.0.attn_v.weight"), DType::kQ6_K);
  EXPECT_EQ(t.at("blk.4.ffn_down.weight"), DType::kQ6_K);
  t = ChooseAll(QuantizeType::kF16, SmolLm2Facts(), 30, 1024, 2816, 256, 32000);
  EXPECT_EQ(t.at("token_embd.weight"), DType::kF16);  // no mix for plain types
  EXPECT_EQ(t.at("blk.0.attn_norm.weight"), DType::kF32);
}

TEST(TensorTypeChooserTest, SeparateOutputAndLayerOrder) {
  ModelFacts f = SmolLm2Facts();
  f.has_output = true;
  TensorTypeChooser chooser(QuantizeType::kQ4_K_M, f);
  EXPECT_EQ(chooser.Choose("token_embd.weight", {32000, 1024}, DType::kF32), DType::kQ4_K);
  EXPECT_EQ(chooser.Choose("output.weight", {32000, 1024}, DType::kF32), DType::kQ6_K);
  // 1-D tensors keep a plain source type, a block-quantized one becomes F32.
  EXPECT_EQ(chooser.Choose("blk.0.attn_norm.weight", {1024}, DType::kF16), DType::kF16);
  EXPECT_EQ(chooser.Choose("blk.0.attn_norm.weight", {1024}, DType::kQ8_0), DType::kF32);
  // llama.cpp visits blk.2 before blk.10 (block number, then name).
  const std::vector<std::string> names = {"blk.10.x", "output.weight", "blk.2.y", "blk.2.a",
                                          "token_embd.weight"};
  std::vector<std::string> sorted;
  for (size_t i : SortLikeLlamaCpp(names)) sorted.push_back(names[i]);
  EXPECT_EQ(sorted, (std::vector<std::string>{"output.weight", "token_embd.weight", "blk.2.a",
                                              "blk.2.y", "blk.10.x"}));
}

TEST(TensorTypeChooserTest, FallbacksOnStories260K) {
  // hidden 64, intermediate 172: no row is whole 256-blocks; 172 is not whole 32-blocks either.
  ModelFacts f = SmolLm2Facts();
  f.num_layers = 5;
  f.num_attention_wv = 5;
  int fallbacks = 0;
  const auto t = ChooseAll(QuantizeType::kQ4_K_M, f, 5, 64, 172, 32, 512, &fallbacks);
  EXPECT_EQ(t.at("token_embd.weight"), DType::kQ8_0);  // output rule: 64 % 256 -> Q8_0
  EXPECT_EQ(t.at("blk.1.attn_q.weight"), DType::kQ5_0);
  EXPECT_EQ(t.at("blk.4.attn_v.weight"), DType::kQ8_0);   // use_more_bits(4, 5): Q6_K -> Q8_0
  EXPECT_EQ(t.at("blk.0.attn_v.weight"), DType::kQ5_0);   // Q4_K -> Q5_0
  EXPECT_EQ(t.at("blk.1.ffn_down.weight"), DType::kF16);  // Q4_K -> Q5_0 -> F16
  EXPECT_EQ(t.at("blk.4.ffn_down.weight"), DType::kF16);  // Q6_K -> Q8_0 -> F16
  EXPECT_EQ(fallbacks, 5 * 7);
  const auto q8 = ChooseAll(QuantizeType::kQ8_0, f, 5, 64, 172, 32, 512);
  EXPECT_EQ(q8.at("blk.1.ffn_down.weight"), DType::kF16);
  EXPECT_EQ(q8.at("blk.1.ffn_up.weight"), DType::kQ8_0);
}

TEST(QuantizeTypeTest, ParseAndFtype) {
  ASSERT_TRUE(ParseQuantizeType("Q4_K_M").ok());
  EXPECT_EQ(*ParseQuantizeType("Q4_K_M"), QuantizeType::kQ4_K_M);
  EXPECT_EQ(*ParseQuantizeType("bf16"), QuantizeType::kBF16);
  EXPECT_EQ(LlamaFtype(QuantizeType::kQ4_K_M), 15);
  EXPECT_EQ(LlamaFtype(QuantizeType::kQ5_K_M), 17);
  EXPECT_EQ(LlamaFtype(QuantizeType::kQ6_K), 18);
  EXPECT_EQ(LlamaFtype(QuantizeType::kQ8_0), 7);
  EXPECT_EQ(LlamaFtype(QuantizeType::kQ5_0), 8);
  EXPECT_EQ(LlamaFtype(QuantizeType::kQ5_1), 9);
  EXPECT_EQ(LlamaFtype(QuantizeType::kBF16), 32);
  EXPECT_EQ(LlamaFtype(QuantizeType::kF32), 0);
  const StatusOr<QuantizeType> bad = ParseQuantizeType("q4_km");
  ASSERT_FALSE(bad.ok());
  const std::string message = bad.status().message();
  EXPECT_NE(message.find("did you mean 'q4_k_m'"), std::string::npos) << message;
  EXPECT_NE(message.find("'q5_1'"), std::string::npos) << message;
}

}  // namespace
}  // namespace uc::convert
