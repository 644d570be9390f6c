// Gemma 3's tokenizer, loaded from the metadata of the Gemma 3 270M GGUF, against the ids and
// texts of Hugging Face transformers (tests/testdata/gemma3/tokenizer_ids.json, written by
// tools/reference/make_gemma3_tokenizer_ids.py): the 46 llama.cpp vocab test strings, texts
// rendered by Gemma 3's chat template and hard cases (emoji, CJK, combining marks, long
// whitespace runs, control and user-defined tokens in the text). Encoding, decoding and the
// incremental detokenizer are all checked. The GGUF is under Gemma's terms and not in the
// repository: UC_GEMMA3_GGUF must point to gemma-3-270m-q4_k_m.gguf (scripts/fetch-gemma3.sh);
// without it the tests are skipped. Label `model`.
#include <gtest/gtest.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "tokenizer/incremental_decoder.h"
#include "tokenizer/loaders.h"
#include "tokenizer/test_util.h"
#include "tokenizer/text/utf8.h"

namespace uc::tokenizer {
namespace {

using testing::ReadFileOrDie;
using testing::TestData;

class Gemma3TokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* path = std::getenv("UC_GEMMA3_GGUF");
    if (path == nullptr || *path == '\0') return;
    auto loaded = LoadGgufTokenizer(path);
    if (!loaded.ok()) {
      error_ = new std::string(loaded.status().ToString());
      return;
    }
    tokenizer_ = std::move(loaded).value().release();
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete error_;
    tokenizer_ = nullptr;
    error_ = nullptr;
  }
  void SetUp() override {
    if (tokenizer_ == nullptr && error_ == nullptr) {
      GTEST_SKIP() << "UC_GEMMA3_GGUF is not set; run scripts/fetch-gemma3.sh and point it to "
                      "build/models/gemma3/gemma-3-270m-q4_k_m.gguf";
    }
    ASSERT_EQ(error_, nullptr) << *error_;
  }

  static const Tokenizer* tokenizer_;
  static std::string* error_;
};

const Tokenizer* Gemma3TokenizerTest::tokenizer_ = nullptr;
std::string* Gemma3TokenizerTest::error_ = nullptr;

TEST_F(Gemma3TokenizerTest, SpecialTokensAndDefaults) {
  const Tokenizer& tok = *tokenizer_;
  EXPECT_EQ(tok.vocab_size(), 262144);
  EXPECT_EQ(tok.bos_id(), 2);  // <bos>
  EXPECT_EQ(tok.eos_id(), 1);  // <eos>
  EXPECT_EQ(tok.pad_id(), 0);
  EXPECT_EQ(tok.unk_id(), 3);
  EXPECT_TRUE(tok.add_bos_token());
  EXPECT_FALSE(tok.add_eos_token());
  EXPECT_EQ(tok.leading_space(), LeadingSpace::kKeep);
  const int32_t end_of_turn = tok.FindToken("<end_of_turn>");
  EXPECT_EQ(end_of_turn, 106);
  EXPECT_TRUE(tok.IsStop(end_of_turn));
  EXPECT_TRUE(tok.IsStop(1));
  EXPECT_FALSE(tok.IsStop(tok.FindToken("<start_of_turn>")));
  // Space runs are pieces spelled with "▁" (stored as real spaces in the file).
  EXPECT_EQ(tok.TokenText(138), "\xE2\x96\x81\xE2\x96\x81");
  EXPECT_EQ(tok.TokenToPiece(138), "  ");
  EXPECT_EQ(tok.token_type(138), TokenType::kNormal);
  EXPECT_EQ(tok.token_type(107), TokenType::kUserDefined);  // "\n"
}

TEST_F(Gemma3TokenizerTest, MatchesTransformers) {
  const Tokenizer& tok = *tokenizer_;
  const auto doc = nlohmann::json::parse(ReadFileOrDie(TestData("gemma3/tokenizer_ids.json")));
  int vocab_cases = 0;
  for (const auto& c : doc["cases"]) {
    const std::string text = c["text"];
    const std::string kind = c["kind"];
    SCOPED_TRACE(kind + ": '" + text + "'");
    vocab_cases += kind == "vocab";
    const auto expected = c["ids"].get<std::vector<int32_t>>();
    const std::vector<int32_t> ids = tok.Encode(text, c["add_bos"].get<bool>(), true);
    EXPECT_EQ(ids, expected);
    const std::string decoded = c["decoded"];
    EXPECT_EQ(tok.Decode(expected), decoded);
    // Streaming gives the same text, one complete character at a time.
    IncrementalDecoder decoder(tok);
    std::string streamed;
    for (const int32_t id : expected) {
      const std::string piece = decoder.Add(id);
      std::string repaired;
      EXPECT_EQ(AppendValidUtf8(piece, /*final=*/true, &repaired), piece.size());
      EXPECT_EQ(repaired, piece) << "id " << id << " streamed an incomplete character";
      streamed += piece;
    }
    streamed += decoder.Flush();
    EXPECT_EQ(streamed, decoded);
  }
  EXPECT_EQ(vocab_cases, 46);
}

TEST_F(Gemma3TokenizerTest, SpecialTokensAsTextWithoutParsing) {
  const Tokenizer& tok = *tokenizer_;
  // Control tokens are plain text unless parsing is asked for; user-defined ones ("\n",
  // "<table>") are always matched. (transformers with split_special_tokens=True agrees.)
  const std::vector<int32_t> parsed = tok.Encode("<start_of_turn>\n<table>", false, true);
  EXPECT_EQ(parsed, (std::vector<int32_t>{105, 107, 168}));
  const std::vector<int32_t> plain = tok.Encode("<start_of_turn>\n<table>", false, false);
  EXPECT_EQ(plain,
            (std::vector<int32_t>{236820, 3041, 236779, 1340, 236779, 887, 236813, 107, 168}));
  EXPECT_EQ(tok.Decode(plain), "<start_of_turn>\n<table>");
}

}  // namespace
}  // namespace uc::tokenizer
