// File: perplexity_util.h
// -----------------------------------------------------------------------------
// For the perplexity tests: runs `undercurrent perplexity --json` on the committed text and
// finds llama.cpp's run of the same model and context in tests/testdata/perplexity/
// reference.json (tools/reference/make_perplexity_reference.py).
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "common/test_util.h"

namespace uc::testing {

inline std::filesystem::path PerplexityText() { return TestData("perplexity/stories.txt"); }

// llama.cpp's run for `model` ("stories260K", "smollm2", "gemma3") at `context`; null (and a
// test failure) when the reference has none.
inline nlohmann::json LlamaCppPerplexity(const std::string& model, int context) {
  const nlohmann::json ref = LoadJson(TestData("perplexity/reference.json"));
  if (ref.is_null() || !ref["models"].contains(model)) {
    ADD_FAILURE() << "reference.json has no model " << model;
    return nullptr;
  }
  for (const nlohmann::json& run : ref["models"][model]["runs"]) {
    if (run["context"].get<int>() == context) return run;
  }
  ADD_FAILURE() << "reference.json has no run of " << model << " at context " << context;
  return nullptr;
}

// `undercurrent perplexity --json` of `model_path` on the committed text; the parsed JSON line,
// or null (and a test failure naming the output) when it fails.
inline nlohmann::json RunPerplexity(const std::string& model_path, int context,
                                    const std::string& flags = "") {
  std::string output;
  const std::string command = CliBinary().string() + " perplexity --json --threads 2 -m '" +
                              model_path + "' -f '" + PerplexityText().string() + "' --ctx " +
                              std::to_string(context) + " " + flags;
  const int code = RunCommand(command, &output);
  EXPECT_EQ(code, 0) << command << "\n" << output;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line[0] == '{') return nlohmann::json::parse(line, nullptr, false);
  }
  ADD_FAILURE() << "no JSON line from " << command << "\n" << output;
  return nullptr;
}

// Ours against llama.cpp: the same tokenization (token, chunk and scored-token counts) and a
// perplexity within `relative` of llama.cpp's `key`: "ppl" (llama-cpp-python's build, through its
// API) or "tool_ppl" (the llama-perplexity tool). Prints both.
inline void ExpectPerplexityNear(const nlohmann::json& ours, const nlohmann::json& theirs,
                                 double relative, const std::string& what,
                                 const std::string& key = "ppl") {
  ASSERT_FALSE(ours.is_null()) << what;
  ASSERT_FALSE(theirs.is_null()) << what;
  ASSERT_TRUE(theirs.contains(key)) << what << ": the reference has no " << key;
  EXPECT_EQ(ours["tokens"], theirs["tokens"]) << what;
  EXPECT_EQ(ours["chunks"], theirs["chunks"]) << what;
  EXPECT_EQ(ours["scored_tokens"], theirs["scored_tokens"]) << what;
  const double a = ours["ppl"].get<double>(), b = theirs[key].get<double>();
  std::cout << what << ": PPL " << a << " (llama.cpp " << key << " " << b << ", ratio " << a / b
            << ")\n";
  EXPECT_NEAR(a / b, 1.0, relative) << what;
  EXPECT_NEAR(ours["ppl_stderr"].get<double>() / theirs[key + "_stderr"].get<double>(), 1.0,
              2 * relative)
      << what;
}

}  // namespace uc::testing
