// `undercurrent perplexity` on the real models (label `model`: UC_SMOLLM2_GGUF and
// UC_GEMMA3_GGUF, from scripts/fetch-*.sh) against llama.cpp's perplexity of the same files
// (tools/reference/make_perplexity_reference.py): the same tokenization, and PPL within 0.5%
// with 8-bit activations (--matmul int8, llama.cpp's arithmetic).
//
// The exact path (float activations, what transformers computes) is a different arithmetic from
// llama.cpp's: on SmolLM2 it lands within 0.05% of llama.cpp, on Gemma 3 1.0% below it (its
// quantized activations move Gemma 3's logits more: see gemma3_test's
// Int8PathDeviatesNoMoreThanLlamaCpp), so it is held to 1.5% there.
#include <gtest/gtest.h>

#include <cstdlib>

#include "common/perplexity_util.h"

namespace uc {
namespace {

std::string ModelFromEnv(const char* variable) {
  const char* path = std::getenv(variable);
  EXPECT_TRUE(path != nullptr && *path != '\0')
      << variable << " is not set: run scripts/fetch-*.sh and export its output";
  return path == nullptr ? std::string() : std::string(path);
}

TEST(PerplexityModelTest, SmolLm2EqualsLlamaCpp) {
  const std::string model = ModelFromEnv("UC_SMOLLM2_GGUF");
  ASSERT_FALSE(model.empty());
  const nlohmann::json theirs = testing::LlamaCppPerplexity("smollm2", 128);
  testing::ExpectPerplexityNear(testing::RunPerplexity(model, 128, "--matmul int8"), theirs, 0.005,
                                "SmolLM2 int8");
  testing::ExpectPerplexityNear(testing::RunPerplexity(model, 128), theirs, 0.005, "SmolLM2 exact");
}

TEST(PerplexityModelTest, Gemma3EqualsLlamaCpp) {
  const std::string model = ModelFromEnv("UC_GEMMA3_GGUF");
  ASSERT_FALSE(model.empty());
  const nlohmann::json theirs = testing::LlamaCppPerplexity("gemma3", 128);
  testing::ExpectPerplexityNear(testing::RunPerplexity(model, 128, "--matmul int8"), theirs, 0.005,
                                "Gemma 3 int8");
  testing::ExpectPerplexityNear(testing::RunPerplexity(model, 128), theirs, 0.015, "Gemma 3 exact");
}

}  // namespace
}  // namespace uc
