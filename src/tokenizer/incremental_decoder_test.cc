#include "tokenizer/incremental_decoder.h"

#include <gtest/gtest.h>

#include "tokenizer/loaders.h"
#include "tokenizer/test_util.h"
#include "tokenizer/text/utf8.h"

namespace uc::tokenizer {
namespace {

using testing::TestData;

bool IsValidUtf8(std::string_view s) {
  for (size_t pos = 0; pos < s.size();) {
    const Utf8Sequence seq = ExamineUtf8(s.substr(pos));
    if (seq.kind != Utf8Sequence::Kind::kValid) return false;
    pos += seq.length;
  }
  return true;
}

std::unique_ptr<Tokenizer> Load(StatusOr<std::unique_ptr<Tokenizer>> loaded) {
  EXPECT_TRUE(loaded.ok()) << loaded.status().ToString();
  return loaded.ok() ? std::move(loaded).value() : nullptr;
}

// Feeds `ids` one by one; every chunk must be valid UTF-8 and the total must equal Decode().
std::string Stream(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  IncrementalDecoder decoder(tok);
  std::string out;
  for (const int32_t id : ids) {
    const std::string chunk = decoder.Add(id);
    EXPECT_TRUE(IsValidUtf8(chunk)) << "after id " << id;
    out += chunk;
  }
  const std::string rest = decoder.Flush();
  EXPECT_TRUE(IsValidUtf8(rest));
  out += rest;
  EXPECT_EQ(out, tok.Decode(ids));
  return out;
}

TEST(IncrementalDecoderTest, ByteFallbackEmojiIsHeldUntilComplete) {
  auto tok = Load(LoadLlama2cTokenizer(TestData("stories260K/tok512.bin"), 512));
  ASSERT_NE(tok, nullptr);
  // "☕ 🙂" is [▁, E2 98 95, ▁, F0 9F 99 82] in byte tokens (id = byte + 3).
  const std::vector<int32_t> ids = tok->Encode("☕ 🙂", true, false);
  ASSERT_EQ(ids, (std::vector<int32_t>{1, 410, 229, 155, 152, 410, 243, 162, 156, 133}));
  IncrementalDecoder decoder(*tok);
  std::vector<std::string> chunks;
  for (const int32_t id : ids) chunks.push_back(decoder.Add(id));
  EXPECT_EQ(chunks, (std::vector<std::string>{"", "", "", "", "☕", " ", "", "", "", "🙂"}));
  EXPECT_FALSE(decoder.has_pending());
  EXPECT_EQ(decoder.Flush(), "");
  EXPECT_EQ(Stream(*tok, ids), "☕ 🙂");
}

TEST(IncrementalDecoderTest, ByteLevelPiecesSplittingACharacter) {
  auto tok = Load(LoadGgufTokenizer(TestData("vocab/ggml-vocab-gpt-2.gguf")));
  ASSERT_NE(tok, nullptr);
  const std::string text = "Hello 🙂🚀 日本語 ☕!";
  const std::vector<int32_t> ids = tok->Encode(text, false, false);
  bool some_partial = false;
  for (const int32_t id : ids) some_partial |= !IsValidUtf8(tok->TokenToPiece(id));
  EXPECT_TRUE(some_partial) << "the test needs tokens holding part of a character";
  EXPECT_EQ(Stream(*tok, ids), text);
}

TEST(IncrementalDecoderTest, InvalidBytesBecomeReplacementCharacters) {
  auto tok = Load(LoadLlama2cTokenizer(TestData("stories260K/tok512.bin"), 512));
  ASSERT_NE(tok, nullptr);
  const int32_t kByte = 3;  // <0x00> is id 3
  IncrementalDecoder decoder(*tok);
  EXPECT_EQ(decoder.Add(kByte + 0x80), "\uFFFD");  // a lone continuation byte
  EXPECT_EQ(decoder.Add(kByte + 0xF0), "");
  EXPECT_EQ(decoder.Add(kByte + 0x9F), "");
  EXPECT_EQ(decoder.Add(kByte + 'A'), "\uFFFDA");  // F0 9F cut short by 'A'
  EXPECT_EQ(decoder.Add(kByte + 0xE2), "");
  EXPECT_EQ(decoder.Flush(), "\uFFFD");      // dangling at the end
  EXPECT_EQ(decoder.Add(kByte + 'b'), "b");  // usable after Flush
  EXPECT_EQ(tok->Decode(std::vector<int32_t>{kByte + 0xC0, kByte + 0x80}), "\uFFFD\uFFFD");
}

TEST(IncrementalDecoderTest, LeadingSpaceRules) {
  auto tok = Load(LoadLlama2cTokenizer(TestData("stories260K/tok512.bin"), 512));
  ASSERT_NE(tok, nullptr);
  const std::vector<int32_t> once = tok->Encode("Once upon", true, false);
  EXPECT_EQ(Stream(*tok, once), "Once upon");
  // Continuing after a prompt the decoder did not see keeps the space.
  IncrementalDecoder continuing(*tok, /*at_sequence_start=*/false);
  EXPECT_EQ(continuing.Add(once[1]), " Once");
  // llama2.c strips again after every BOS.
  std::vector<int32_t> twice = once;
  twice.insert(twice.end(), once.begin(), once.end());
  EXPECT_EQ(tok->Decode(twice), "Once uponOnce upon");
  // Control tokens and out-of-range ids produce nothing.
  EXPECT_EQ(tok->Decode(std::vector<int32_t>{2, -1, 512, 100000}), "");
  EXPECT_EQ(tok->TokenToPiece(100000), "");
}

}  // namespace
}  // namespace uc::tokenizer
