// `undercurrent perplexity` on the real models (label `model`: UC_SMOLLM2_GGUF and
// UC_GEMMA3_GGUF, from scripts/fetch-*.sh) against llama.cpp's perplexity of the same files
// (tools/reference/make_perplexity_reference.py): the same tokenization, and PPL within 0.5%.
//
// llama.cpp's number depends on its build: the PyPI package's repacks Q4_0 / Q4_K weights and
// multiplies them with other kernels, and on Gemma 3 its perplexity is 1.1% above that of the
// llama-perplexity tool built from the same sources. The exact path (float activations) is held
// to the tool's number; the int8 path (8-bit activations, llama.cpp's arithmetic) to the
// package's, whose kernels it shares.
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
  testing::ExpectPerplexityNear(testing::RunPerplexity(model, 128), theirs, 0.005, "SmolLM2 exact",
                                "tool_ppl");
}

TEST(PerplexityModelTest, Gemma3EqualsLlamaCpp) {
  const std::string model = ModelFromEnv("UC_GEMMA3_GGUF");
  ASSERT_FALSE(model.empty());
  const nlohmann::json theirs = testing::LlamaCppPerplexity("gemma3", 128);
  testing::ExpectPerplexityNear(testing::RunPerplexity(model, 128, "--matmul int8"), theirs, 0.005,
                                "Gemma 3 int8");
  testing::ExpectPerplexityNear(testing::RunPerplexity(model, 128), theirs, 0.005, "Gemma 3 exact",
                                "tool_ppl");
}

}  // namespace
}  // namespace uc
