// tok512 (stories260K's 512-token SentencePiece BPE) through the llama2.c loader and the
// tokenizer.model loader, against golden/tok512_encode.json: llama2.c's encoder ids
// (`ids_no_bos`), SentencePiece's ids (`ids_spm_no_bos`; it collapses runs of spaces) and
// SentencePiece's decoding of the llama2.c ids (`decoded_spm`).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tokenizer/loaders.h"
#include "tokenizer/test_util.h"

namespace uc::tokenizer {
namespace {

using testing::ReadFileOrDie;
using testing::TestData;

nlohmann::json GoldenCases() {
  return nlohmann::json::parse(ReadFileOrDie(TestData("golden/tok512_encode.json")))["cases"];
}

std::unique_ptr<Tokenizer> LoadLlama2cOrDie(StatusOr<std::unique_ptr<Tokenizer>> loaded) {
  EXPECT_TRUE(loaded.ok()) << loaded.status().ToString();
  return loaded.ok() ? std::move(loaded).value() : nullptr;
}

TEST(Llama2cTest, EncodesLikeLlama2c) {
  auto tok = LoadLlama2cOrDie(LoadLlama2cTokenizer(TestData("stories260K/tok512.bin"), 512));
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->vocab_size(), 512);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_TRUE(tok->add_bos_token());
  const nlohmann::json cases = GoldenCases();
  ASSERT_EQ(cases.size(), 18u);
  for (const auto& c : cases) {
    const std::string text = c["text"];
    EXPECT_EQ(tok->Encode(text, false, false), c["ids_no_bos"].get<std::vector<int32_t>>())
        << "'" << text << "'";
    // llama2.c's encoder loses nothing: decoding (after BOS) gives the text back.
    std::vector<int32_t> with_bos = tok->Encode(text, true, false);
    EXPECT_EQ(with_bos.front(), 1);
    EXPECT_EQ(tok->Decode(with_bos), text);
  }
}

TEST(Llama2cTest, PiecesMatchTheGolden) {
  auto tok = LoadLlama2cOrDie(LoadLlama2cTokenizer(TestData("stories260K/tok512.bin"), 512));
  ASSERT_NE(tok, nullptr);
  for (const auto& c : GoldenCases()) {
    const auto ids = c["ids_no_bos"].get<std::vector<int32_t>>();
    const auto pieces = c["pieces"].get<std::vector<std::string>>();
    ASSERT_EQ(ids.size(), pieces.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      if (tok->token_type(ids[i]) == TokenType::kByte) continue;  // stored as "<0xHH>"
      EXPECT_EQ(tok->TokenToPiece(ids[i]), pieces[i]) << "id " << ids[i];
    }
  }
}

TEST(Llama2cTest, SentencePieceModelEncodesLikeSentencePiece) {
  auto tok = LoadLlama2cOrDie(LoadSentencePieceModel(TestData("stories260K/tok512.model")));
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->vocab_size(), 512);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_EQ(tok->unk_id(), 0);
  EXPECT_EQ(tok->leading_space(), LeadingSpace::kStripWhileEmpty);
  int differing = 0;
  for (const auto& c : GoldenCases()) {
    const std::string text = c["text"];
    const auto expected = c["ids_spm_no_bos"].get<std::vector<int32_t>>();
    EXPECT_EQ(tok->Encode(text, false, false), expected) << "'" << text << "'";
    differing += c["spm_matches_llama2c"].get<bool>() ? 0 : 1;
    // SentencePiece decoding of llama2.c's ids: every leading "▁" is dropped until text appears.
    EXPECT_EQ(tok->Decode(c["ids_no_bos"].get<std::vector<int32_t>>()),
              c["decoded_spm"].get<std::string>())
        << "'" << text << "'";
  }
  EXPECT_EQ(differing, 4);
}

TEST(Llama2cTest, SameVocabularyFromAllThreeFiles) {
  auto bin = LoadLlama2cOrDie(LoadLlama2cTokenizer(TestData("stories260K/tok512.bin"), 512));
  auto model = LoadLlama2cOrDie(LoadTokenizer(TestData("stories260K-hf")));
  auto gguf = LoadLlama2cOrDie(LoadTokenizer(TestData("stories260K/stories260K.gguf")));
  ASSERT_TRUE(bin && model && gguf);
  for (int32_t id = 3; id < 512; ++id) {
    EXPECT_EQ(bin->TokenText(id), model->TokenText(id)) << id;
    EXPECT_EQ(bin->token_type(id), model->token_type(id)) << id;
  }
  // GGUF follows llama.cpp, which agrees with llama2.c (no whitespace collapsing).
  for (const auto& c : GoldenCases()) {
    const std::string text = c["text"];
    EXPECT_EQ(gguf->Encode(text, false, false), c["ids_no_bos"].get<std::vector<int32_t>>())
        << "'" << text << "'";
  }
}

TEST(Llama2cTest, SpecialTokensWhenParsing) {
  auto tok = LoadLlama2cOrDie(LoadLlama2cTokenizer(TestData("stories260K/tok512.bin"), 512));
  ASSERT_NE(tok, nullptr);
  // The golden README: with special parsing on, <s>, </s>, <unk> become ids 1, 2, 0.
  const std::vector<int32_t> ids = tok->Encode("<s> </s> <unk>", false, true);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 1), 1);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 2), 1);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 0), 1);
  EXPECT_EQ(ids.front(), 1);
}

}  // namespace
}  // namespace uc::tokenizer
