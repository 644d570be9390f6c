// `undercurrent perplexity` against llama.cpp's method and logits on the bundled stories260K
// (tools/reference/make_perplexity_reference.py), and its errors. The real models' runs are in
// perplexity_model_test.cc.
#include <gtest/gtest.h>

#include <fstream>

#include "common/perplexity_util.h"
#include "common/test_util.h"

namespace uc {
namespace {

using testing::CliBinary;
using testing::RunCommand;
using testing::TestData;

std::string Stories260K() { return TestData("stories260K/stories260K.gguf").string(); }

TEST(PerplexityTest, EqualsLlamaCppOnStories260K) {
  for (int context : {64, 128}) {
    const nlohmann::json theirs = testing::LlamaCppPerplexity("stories260K", context);
    const nlohmann::json ours = testing::RunPerplexity(Stories260K(), context);
    for (const char* key : {"ppl", "tool_ppl"}) {
      testing::ExpectPerplexityNear(ours, theirs, 0.005,
                                    "stories260K ctx " + std::to_string(context), key);
    }
  }
}

// The Hugging Face layout of the same weights gives the same number.
TEST(PerplexityTest, HuggingFaceLayoutGivesTheSameNumber) {
  const nlohmann::json gguf = testing::RunPerplexity(Stories260K(), 64);
  const nlohmann::json hf = testing::RunPerplexity(TestData("stories260K-hf").string(), 64);
  ASSERT_FALSE(gguf.is_null());
  ASSERT_FALSE(hf.is_null());
  EXPECT_EQ(gguf["tokens"], hf["tokens"]);
  EXPECT_NEAR(gguf["ppl"].get<double>() / hf["ppl"].get<double>(), 1.0, 1e-4);
}

TEST(PerplexityTest, ChunksLimitsTheChunksScored) {
  const nlohmann::json two = testing::RunPerplexity(Stories260K(), 64, "--chunks 2");
  ASSERT_FALSE(two.is_null());
  EXPECT_EQ(two["chunks"], 2);
  EXPECT_EQ(two["scored_tokens"], 2 * (64 - 32 - 1));
  // The running estimate after two chunks of llama.cpp's run.
  const nlohmann::json theirs = testing::LlamaCppPerplexity("stories260K", 64);
  ASSERT_FALSE(theirs.is_null());
  EXPECT_NEAR(two["ppl"].get<double>() / theirs["running_ppl"][1].get<double>(), 1.0, 0.005);
}

TEST(PerplexityTest, ErrorsNameTheProblem) {
  const std::filesystem::path dir = testing::ScratchDir("perplexity_errors");
  std::ofstream(dir / "short.txt") << "Once upon a time there was a cat.";
  struct Case {
    std::string args;
    std::string expected;
  } cases[] = {
      {"-f " + (dir / "short.txt").string() + " --ctx 64", "needs at least 128"},
      {"-f " + (dir / "missing.txt").string(), "missing.txt"},
      {"-f " + testing::PerplexityText().string() + " --ctx 256 --max-model-len 128",
       "exceeds the model length 128"},
  };
  for (const Case& c : cases) {
    std::string output;
    const int code = RunCommand(
        CliBinary().string() + " perplexity -m " + Stories260K() + " " + c.args, &output);
    EXPECT_EQ(code, 1) << c.args << "\n" << output;
    EXPECT_NE(output.find(c.expected), std::string::npos) << c.args << "\n" << output;
  }
}

}  // namespace
}  // namespace uc
