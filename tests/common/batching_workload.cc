#include "common/batching_workload.h"

#include <gtest/gtest.h>

#include <sstream>

namespace uc::testing {
namespace {

constexpr const char* kStory =
    "Once upon a time there was a little girl named Lily who lived in a small house near the "
    "woods with her mother and her dog Max and every morning she went out to play in the garden "
    "where the flowers were red and yellow and the birds sang in the big old tree by the fence "
    "until one day a strange box appeared on the path and Lily wanted to know what was inside";

std::vector<std::string> Words() {
  std::istringstream in(kStory);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

}  // namespace

std::vector<engine::GenerateRequest> BatchingWorkload(int n) {
  const std::vector<std::string> words = Words();
  std::vector<engine::GenerateRequest> requests;
  for (int i = 0; i < n; ++i) {
    // Prompt lengths from 1 word to the whole story (about 1 to 90 tokens), shuffled by i.
    const int count = (i * 37) % static_cast<int>(words.size());
    const int first = (i * 11) % 7;
    std::string prompt;
    for (int w = 0; w < count; ++w) {
      prompt += (w == 0 ? "" : " ") + words[(first + w) % words.size()];
    }
    worker::SamplingParams p;
    p.temperature = 0.0f;
    p.max_tokens = 8 + (i * 13) % 48;
    if (i % 5 == 3) {  // seeded sampling: the same tokens whatever the batch
      p.temperature = 0.9f;
      p.top_p = 0.95f;
      p.seed = 1000 + static_cast<uint64_t>(i);
    }
    if (i % 7 == 2) p.stop = {" the"};
    if (i % 3 == 0) p.ignore_eos = true;
    requests.push_back({"req-" + std::to_string(i), engine::Prompt::Text(prompt), p});
  }
  return requests;
}

std::map<std::string, engine::GenerationResult> RunAlone(
    engine::Generator& solo, const std::vector<engine::GenerateRequest>& requests) {
  std::map<std::string, engine::GenerationResult> results;
  for (const engine::GenerateRequest& r : requests) {
    auto result = solo.Generate(std::get<std::string>(r.prompt.value), r.params);
    EXPECT_TRUE(result.ok()) << r.id << ": " << result.status().ToString();
    if (result.ok()) results[r.id] = std::move(result).value();
  }
  return results;
}

void ExpectSameAsAlone(const std::vector<engine::GenerateResult>& batched,
                       const std::map<std::string, engine::GenerationResult>& alone) {
  ASSERT_EQ(batched.size(), alone.size());
  for (const engine::GenerateResult& b : batched) {
    ASSERT_TRUE(b.status.ok()) << b.id << ": " << b.status.ToString();
    const engine::GenerationResult& a = alone.at(b.id);
    EXPECT_TRUE(b.output.finished) << b.id;
    EXPECT_EQ(b.output.prompt_ids, a.prompt_ids) << b.id;
    EXPECT_EQ(b.output.output_ids, a.output_ids) << b.id;
    EXPECT_EQ(b.output.text, a.text) << b.id;
    EXPECT_EQ(b.output.finish_reason, a.finish_reason) << b.id;
    EXPECT_EQ(b.output.stop_reason, a.stop_reason) << b.id;
  }
}

}  // namespace uc::testing
