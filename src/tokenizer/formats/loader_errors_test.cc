// Loaders fail with a Status that names the file and the field, never crash: truncated
// tokenizer.model, malformed tokenizer.json, GGUF without (or with unusable) tokenizer keys,
// llama2.c files with the wrong vocab size, unknown formats.
#include <gtest/gtest.h>

#include <random>

#include "io/gguf/gguf_writer.h"
#include "tokenizer/loaders.h"
#include "tokenizer/temp_dir.h"
#include "tokenizer/test_util.h"

namespace uc::tokenizer {
namespace {

using testing::ReadFileOrDie;
using testing::TempDir;
using testing::TestData;
using testing::WriteFile;
using testing::WriteJson;

bool Contains(const Status& status, std::string_view text) {
  return status.message().find(text) != std::string::npos;
}

// --- tokenizer.model --------------------------------------------------------------------

TEST(LoaderErrorsTest, TruncatedSentencePieceModel) {
  const std::string bytes = ReadFileOrDie(TestData("stories260K/tok512.model"));
  ASSERT_GT(bytes.size(), 1000u);
  for (const size_t size : {size_t{1}, size_t{2}, size_t{7}, size_t{100}, bytes.size() / 2,
                            bytes.size() - 40, bytes.size() - 1}) {
    const auto spec = ParseSentencePieceModel(std::string_view(bytes).substr(0, size), "tok.model");
    ASSERT_FALSE(spec.ok()) << "truncated to " << size;
    EXPECT_TRUE(Contains(spec.status(), "tok.model: ")) << spec.status().ToString();
    EXPECT_TRUE(Contains(spec.status(), "truncated")) << spec.status().ToString();
  }
  TempDir dir;
  WriteFile(dir.path() / "tokenizer.model", std::string_view(bytes).substr(0, 3000));
  const auto loaded = LoadSentencePieceModel(dir.path() / "tokenizer.model");
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), StatusCode::kOutOfRange);
  EXPECT_TRUE(Contains(loaded.status(), (dir.path() / "tokenizer.model").string()))
      << loaded.status().ToString();
  EXPECT_TRUE(Contains(loaded.status(), "pieces #")) << loaded.status().ToString();
}

TEST(LoaderErrorsTest, CorruptedSentencePieceModelNeverCrashes) {
  const std::string original = ReadFileOrDie(TestData("stories260K/tok512.model"));
  std::mt19937 rng(1);
  std::uniform_int_distribution<size_t> where(0, original.size() - 1);
  std::uniform_int_distribution<int> value(0, 255);
  for (int i = 0; i < 300; ++i) {
    std::string bytes = original;
    for (int j = 0; j < 3; ++j) bytes[where(rng)] = static_cast<char>(value(rng));
    auto spec = ParseSentencePieceModel(bytes, "corrupt.model");
    if (!spec.ok()) {
      EXPECT_TRUE(Contains(spec.status(), "corrupt.model")) << spec.status().ToString();
      continue;
    }
    auto tok = Tokenizer::Create(std::move(spec).value());
    if (tok.ok()) (*tok)->Encode("Once upon a time ☕", true, true);
  }
}

std::string Varint(uint64_t v) {
  std::string out;
  do {
    out.push_back(static_cast<char>((v & 0x7F) | (v >= 0x80 ? 0x80 : 0)));
    v >>= 7;
  } while (v != 0);
  return out;
}
std::string Field(uint32_t field, std::string_view payload) {
  return Varint(field << 3 | 2) + Varint(payload.size()) + std::string(payload);
}
std::string VarintField(uint32_t field, uint64_t value) {
  return Varint(field << 3) + Varint(value);
}

TEST(LoaderErrorsTest, SentencePieceModelContents) {
  const std::string piece = Field(1, Field(1, "a"));
  const std::string normalizer = Field(3, "");
  // A unigram model.
  auto spec = ParseSentencePieceModel(piece + Field(2, VarintField(3, 1)) + normalizer, "u.model");
  EXPECT_EQ(spec.status().code(), StatusCode::kUnimplemented);
  EXPECT_TRUE(Contains(spec.status(), "UNIGRAM")) << spec.status().ToString();
  // No trainer_spec at all (a cut exactly after the pieces).
  spec = ParseSentencePieceModel(piece, "p.model");
  EXPECT_TRUE(Contains(spec.status(), "trainer_spec")) << spec.status().ToString();
  // A BPE model whose bos_id points past the vocabulary; negative pad_id is "none".
  const std::string trainer =
      Field(2, VarintField(3, 2) + VarintField(41, 5) + VarintField(43, static_cast<uint64_t>(-1)));
  spec = ParseSentencePieceModel(piece + trainer + normalizer, "b.model");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->pad_id, -1);
  const auto tok = Tokenizer::Create(std::move(spec).value());
  EXPECT_TRUE(Contains(tok.status(), "b.model: BOS id 5")) << tok.status().ToString();
  // Wrong wire type for a piece's score.
  spec = ParseSentencePieceModel(Field(1, Field(1, "a") + VarintField(2, 7)) + trainer, "w.model");
  EXPECT_TRUE(Contains(spec.status(), "pieces #0")) << spec.status().ToString();
  EXPECT_TRUE(Contains(spec.status(), "wire type")) << spec.status().ToString();
}

// --- tokenizer.json ---------------------------------------------------------------------

Status LoadJsonText(std::string_view text) {
  TempDir dir;
  WriteFile(dir.path() / "tokenizer.json", text);
  return LoadHfTokenizer(dir.path()).status();
}

TEST(LoaderErrorsTest, MalformedTokenizerJson) {
  Status s = LoadJsonText(R"({"model": {"type": "BPE", "vocab": {"a": 0}, )");
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s, "tokenizer.json")) << s.ToString();
  EXPECT_TRUE(Contains(s, "line 1")) << s.ToString();

  s = LoadJsonText(R"({"model": {"type": "BPE", "vocab": ["a"], "merges": []}})");
  EXPECT_TRUE(Contains(s, "field 'model.vocab' must be an object (got array)")) << s.ToString();

  s = LoadJsonText(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [7]}})");
  EXPECT_TRUE(Contains(s, "field 'model.merges[0]'")) << s.ToString();

  s = LoadJsonText(R"({"model": {"type": "BPE", "vocab": {"a": "zero"}}})");
  EXPECT_TRUE(Contains(s, "field 'model.vocab.a' must be an integer")) << s.ToString();

  s = LoadJsonText(R"({"model": {"type": "WordPiece", "vocab": {"a": 0}}})");
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_TRUE(Contains(s, "'model.type' is 'WordPiece'")) << s.ToString();

  s = LoadJsonText(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                       "pre_tokenizer": {"type": "BertPreTokenizer"}})");
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_TRUE(Contains(s, "'pre_tokenizer' has pre-tokenizer type 'BertPreTokenizer'"))
      << s.ToString();

  s = LoadJsonText(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                       "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(a"},
                                         "behavior": "Isolated"}})");
  EXPECT_TRUE(Contains(s, "field 'pre_tokenizer'")) << s.ToString();
  EXPECT_TRUE(Contains(s, "(a")) << s.ToString();

  s = LoadJsonText(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                       "added_tokens": [{"id": 1, "special": true}]})");
  EXPECT_TRUE(Contains(s, "field 'added_tokens[0].content'")) << s.ToString();
}

// --- GGUF -------------------------------------------------------------------------------

StatusOr<std::unique_ptr<Tokenizer>> WriteAndLoad(const io::GgufWriter& writer) {
  TempDir dir;
  const auto path = dir.path() / "model.gguf";
  const Status written = writer.WriteFile(path);
  if (!written.ok()) return written;
  return LoadGgufTokenizer(path);
}

TEST(LoaderErrorsTest, GgufWithoutTokenizer) {
  io::GgufWriter writer;
  writer.SetString("general.architecture", "llama");
  const auto loaded = WriteAndLoad(writer);
  EXPECT_EQ(loaded.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(loaded.status(), "model.gguf: no tokenizer"));
  EXPECT_TRUE(Contains(loaded.status(), "tokenizer.ggml.model")) << loaded.status().ToString();

  writer.SetString("tokenizer.ggml.model", "llama");
  const auto no_tokens = WriteAndLoad(writer);
  EXPECT_TRUE(Contains(no_tokens.status(), "tokenizer.ggml.tokens"))
      << no_tokens.status().ToString();
}

TEST(LoaderErrorsTest, GgufWithUnusableTokenizer) {
  io::GgufWriter writer;
  writer.SetString("tokenizer.ggml.model", "gpt2");
  writer.SetStringArray("tokenizer.ggml.tokens", {"a", "b", "ab"});
  writer.SetStringArray("tokenizer.ggml.merges", {"a b"});
  writer.SetString("tokenizer.ggml.pre", "mystery");
  auto loaded = WriteAndLoad(writer);
  EXPECT_EQ(loaded.status().code(), StatusCode::kUnimplemented);
  EXPECT_TRUE(Contains(loaded.status(), "'tokenizer.ggml.pre'")) << loaded.status().ToString();
  EXPECT_TRUE(Contains(loaded.status(), "mystery")) << loaded.status().ToString();

  writer.SetString("tokenizer.ggml.pre", "gpt-2");
  writer.SetStringArray("tokenizer.ggml.merges", {"ab"});
  loaded = WriteAndLoad(writer);
  EXPECT_TRUE(Contains(loaded.status(), "tokenizer.ggml.merges")) << loaded.status().ToString();

  writer.SetStringArray("tokenizer.ggml.merges", {"a b"});
  writer.SetArray<int32_t>("tokenizer.ggml.token_type", {1, 1});
  loaded = WriteAndLoad(writer);
  EXPECT_TRUE(Contains(loaded.status(), "2 types for 3 tokens")) << loaded.status().ToString();

  writer.SetArray<int32_t>("tokenizer.ggml.token_type", {1, 1, 1});
  writer.Set<uint32_t>("tokenizer.ggml.eos_token_id", 7);
  loaded = WriteAndLoad(writer);
  EXPECT_TRUE(Contains(loaded.status(), "EOS id 7 is outside")) << loaded.status().ToString();

  writer.Set<uint32_t>("tokenizer.ggml.eos_token_id", 0xFFFFFFFFu);  // "none"
  loaded = WriteAndLoad(writer);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ((*loaded)->eos_id(), -1);
  EXPECT_EQ((*loaded)->Encode("ab", false, false), std::vector<int32_t>{2});

  writer.SetString("tokenizer.ggml.model", "bert");
  loaded = WriteAndLoad(writer);
  EXPECT_EQ(loaded.status().code(), StatusCode::kUnimplemented);
  EXPECT_TRUE(Contains(loaded.status(), "'bert'")) << loaded.status().ToString();
}

// --- llama2.c and format detection --------------------------------------------------------

TEST(LoaderErrorsTest, Llama2cWrongVocabSize) {
  const std::string path = TestData("stories260K/tok512.bin");
  auto loaded = LoadLlama2cTokenizer(path, 511);
  EXPECT_TRUE(Contains(loaded.status(), "bytes left after 511 tokens"))
      << loaded.status().ToString();
  loaded = LoadLlama2cTokenizer(path, 513);
  EXPECT_EQ(loaded.status().code(), StatusCode::kOutOfRange);
  EXPECT_TRUE(Contains(loaded.status(), "token 512")) << loaded.status().ToString();
  EXPECT_TRUE(Contains(loaded.status(), path)) << loaded.status().ToString();
}

TEST(LoaderErrorsTest, LoadTokenizerPicksAFormat) {
  TempDir dir;
  auto loaded = LoadTokenizer(dir.path());
  EXPECT_EQ(loaded.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(loaded.status(), "no tokenizer.json or tokenizer.model"));
  loaded = LoadTokenizer(TestData("stories260K/tok512.bin"));
  EXPECT_TRUE(Contains(loaded.status(), "LoadLlama2cTokenizer")) << loaded.status().ToString();
  loaded = LoadTokenizer(dir.path() / "missing.gguf");
  EXPECT_EQ(loaded.status().code(), StatusCode::kNotFound);
  // tokenizer.json wins over tokenizer.model.
  WriteFile(dir.path() / "tokenizer.model", "not a model");
  WriteJson(
      dir.path() / "tokenizer.json",
      {{"model", {{"type", "BPE"}, {"vocab", {{"a", 0}}}, {"merges", nlohmann::json::array()}}}});
  loaded = LoadTokenizer(dir.path());
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ((*loaded)->vocab_size(), 1);
}

}  // namespace
}  // namespace uc::tokenizer
