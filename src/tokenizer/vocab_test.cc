// The llama.cpp tokenizer test vectors (46 strings, ids produced by the reference Hugging Face
// tokenizers) for the Llama SentencePiece, Phi-3 and GPT-2 vocabularies, loaded from GGUF, plus
// the same vocabularies re-expressed as tokenizer.json to cover that loader on real data.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include <unordered_map>

#include "io/gguf/gguf.h"
#include "tokenizer/loaders.h"
#include "tokenizer/temp_dir.h"
#include "tokenizer/test_util.h"
#include "tokenizer/text/byte_level.h"

namespace uc::tokenizer {
namespace {

using testing::ReadVocabInputs;
using testing::ReadVocabOutputs;
using testing::TempDir;
using testing::TestData;
using testing::WriteJson;

std::unique_ptr<Tokenizer> LoadOrDie(StatusOr<std::unique_ptr<Tokenizer>> loaded) {
  EXPECT_TRUE(loaded.ok()) << loaded.status().ToString();
  return loaded.ok() ? std::move(loaded).value() : nullptr;
}

// Checks all test vectors of `name` (e.g. "llama-spm") in testdata/vocab; `lossless`:
// Decode(Encode(s)) == s.
void ExpectVectors(const Tokenizer& tok, const std::string& name, bool lossless) {
  const std::string prefix = "vocab/ggml-vocab-" + name + ".gguf";
  const auto inputs = ReadVocabInputs(TestData(prefix + ".inp"));
  const auto expected = ReadVocabOutputs(TestData(prefix + ".out"));
  ASSERT_EQ(inputs.size(), 46u);
  ASSERT_EQ(expected.size(), inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::vector<int32_t> ids = tok.Encode(inputs[i], /*add_bos=*/false,
                                                /*parse_special=*/false);
    EXPECT_EQ(ids, expected[i]) << name << " case " << i << ": '" << inputs[i] << "'";
    if (lossless) {
      EXPECT_EQ(tok.Decode(ids), inputs[i]) << name << " case " << i;
    }
  }
}

TEST(VocabTest, LlamaSpmGguf) {
  auto tok = LoadOrDie(LoadGgufTokenizer(TestData("vocab/ggml-vocab-llama-spm.gguf")));
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->vocab_size(), 32000);
  EXPECT_EQ(tok->algorithm(), Algorithm::kSentencePieceBpe);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_EQ(tok->unk_id(), 0);
  EXPECT_TRUE(tok->add_bos_token());
  EXPECT_EQ(tok->stop_ids(), std::vector<int32_t>{2});
  // The dummy prefix makes "Hello" and " Hello" differ; decoding strips it again.
  ExpectVectors(*tok, "llama-spm", /*lossless=*/true);
}

// Phi-3 (tests/testdata/vocab/: llama.cpp's vocab-only GGUF of Phi-3-mini with its test vectors,
// MIT): SentencePiece BPE with a dummy prefix on every fragment and the chat-turn control
// tokens. transformers' AutoTokenizer(gguf_file=...) gives the same ids as llama.cpp on the 46
// strings and on the chat turn below (checked when the data was added).
TEST(VocabTest, Phi3Gguf) {
  auto tok = LoadOrDie(LoadGgufTokenizer(TestData("vocab/ggml-vocab-phi-3.gguf")));
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->vocab_size(), 32064);
  EXPECT_EQ(tok->algorithm(), Algorithm::kSentencePieceBpe);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 32000);  // <|endoftext|>
  EXPECT_TRUE(tok->add_bos_token());
  EXPECT_EQ(tok->stop_ids(), (std::vector<int32_t>{32000, 32007}));  // and <|end|>
  ExpectVectors(*tok, "phi-3", /*lossless=*/true);
  const std::vector<int32_t> turn =
      tok->Encode("<|user|>\nHi<|end|>\n<|assistant|>\n", /*add_bos=*/true, true);
  EXPECT_EQ(turn,
            (std::vector<int32_t>{1, 32010, 29871, 13, 18567, 32007, 29871, 13, 32001, 29871, 13}));
  EXPECT_EQ(tok->Decode(turn), "\nHi \n \n");  // as transformers' decode(skip_special_tokens)
}

TEST(VocabTest, Gpt2Gguf) {
  auto tok = LoadOrDie(LoadGgufTokenizer(TestData("vocab/ggml-vocab-gpt-2.gguf")));
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->vocab_size(), 50257);
  EXPECT_TRUE(tok->byte_level());
  EXPECT_EQ(tok->eos_id(), 50256);
  EXPECT_FALSE(tok->add_bos_token());
  ExpectVectors(*tok, "gpt-2", /*lossless=*/true);
}

// Random text from a mix of scripts, spaces, tabs, newlines and emoji (no literal "▁":
// SentencePiece vocabularies cannot tell it from an escaped space).
std::string RandomText(std::mt19937& rng) {
  static const char* kPieces[] = {"a", "Z", " ",    "  ",   "\t", "\n", "7", "42", "é",
                                  "ß", "ж", "日本", "🙂", "☕",  "'s", "!", "<",  "\xC2\xA0"};
  std::uniform_int_distribution<size_t> pick(0, std::size(kPieces) - 1);
  std::uniform_int_distribution<int> length(0, 24);
  std::string text;
  for (int i = length(rng); i > 0; --i) text += kPieces[pick(rng)];
  return text;
}

TEST(VocabTest, RandomTextRoundTrips) {
  auto spm = LoadOrDie(LoadGgufTokenizer(TestData("vocab/ggml-vocab-llama-spm.gguf")));
  auto gpt2 = LoadOrDie(LoadGgufTokenizer(TestData("vocab/ggml-vocab-gpt-2.gguf")));
  ASSERT_TRUE(spm && gpt2);
  std::mt19937 rng(7);
  for (int i = 0; i < 300; ++i) {
    const std::string text = RandomText(rng);
    EXPECT_EQ(spm->Decode(spm->Encode(text, true, false)), text);
    EXPECT_EQ(gpt2->Decode(gpt2->Encode(text, false, false)), text);
  }
  // Byte-level BPE keeps arbitrary bytes, valid UTF-8 or not.
  std::uniform_int_distribution<int> byte(0, 255);
  for (int i = 0; i < 100; ++i) {
    std::string bytes(static_cast<size_t>(byte(rng) % 40), '\0');
    for (char& c : bytes) c = static_cast<char>(byte(rng));
    std::string pieces;
    for (const int32_t id : gpt2->Encode(bytes, false, false)) pieces += gpt2->TokenToPiece(id);
    EXPECT_EQ(pieces, bytes);
  }
}

TEST(VocabTest, ConcurrentEncodingAgrees) {
  auto tok = LoadOrDie(LoadGgufTokenizer(TestData("vocab/ggml-vocab-gpt-2.gguf")));
  ASSERT_NE(tok, nullptr);
  const auto inputs = ReadVocabInputs(TestData("vocab/ggml-vocab-gpt-2.gguf.inp"));
  std::vector<std::vector<int32_t>> expected;
  for (const std::string& text : inputs) expected.push_back(tok->Encode(text, false, false));
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round) {
        for (size_t i = 0; i < inputs.size(); ++i) {
          mismatches[t] += tok->Encode(inputs[i], false, false) != expected[i];
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

TEST(VocabTest, SpecialTokensParsedOnlyWhenAsked) {
  auto tok = LoadOrDie(LoadGgufTokenizer(TestData("vocab/ggml-vocab-gpt-2.gguf")));
  ASSERT_NE(tok, nullptr);
  const std::string text = "Hi<|endoftext|>";
  EXPECT_EQ(tok->Encode(text, false, true), (std::vector<int32_t>{17250, 50256}));
  const std::vector<int32_t> plain = tok->Encode(text, false, false);
  EXPECT_GT(plain.size(), 2u);
  EXPECT_EQ(tok->Decode(plain), text);
  // Control tokens are not rendered by Decode, but TokenToPiece shows them.
  EXPECT_EQ(tok->Decode(std::vector<int32_t>{17250, 50256}), "Hi");
  EXPECT_EQ(tok->TokenToPiece(50256), "<|endoftext|>");
}

TEST(VocabTest, LlamaSpmSpecialTokensAndBos) {
  auto tok = LoadOrDie(LoadGgufTokenizer(TestData("vocab/ggml-vocab-llama-spm.gguf")));
  ASSERT_NE(tok, nullptr);
  // llama.cpp: "<s>" is matched as BOS, and the text after a special token gets the prefix.
  EXPECT_EQ(tok->Encode("<s>Hello</s>", false, true), (std::vector<int32_t>{1, 15043, 2}));
  EXPECT_EQ(tok->Encode("Hello", true, false), (std::vector<int32_t>{1, 15043}));
  EXPECT_EQ(tok->Decode(std::vector<int32_t>{1, 15043, 3186, 2}), "Hello world");
  EXPECT_EQ(tok->TokenToPiece(15043), " Hello");
  EXPECT_EQ(tok->TokenText(15043), "▁Hello");
  EXPECT_EQ(tok->TokenToPiece(13), "\n");  // <0x0A>
}

// --- The same vocabularies as tokenizer.json ---------------------------------------------

// A GPT-2 tokenizer.json in the layout Hugging Face ships (ByteLevel pre-tokenizer).
nlohmann::json Gpt2TokenizerJson(const io::GgufFile& gguf) {
  const auto tokens = gguf.GetStringArray("tokenizer.ggml.tokens").value();
  const auto merges = gguf.GetStringArray("tokenizer.ggml.merges").value();
  nlohmann::json vocab = nlohmann::json::object();
  for (size_t i = 0; i < tokens.size(); ++i) vocab[tokens[i]] = i;
  nlohmann::json doc;
  doc["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}, {"unk_token", nullptr}};
  doc["added_tokens"] = {{{"id", 50256}, {"content", "<|endoftext|>"}, {"special", true}}};
  doc["normalizer"] = nullptr;
  doc["pre_tokenizer"] = {{"type", "ByteLevel"},
                          {"add_prefix_space", false},
                          {"trim_offsets", true},
                          {"use_regex", true}};
  doc["decoder"] = {{"type", "ByteLevel"}};
  doc["post_processor"] = {{"type", "ByteLevel"}};
  return doc;
}

TEST(VocabTest, Gpt2TokenizerJson) {
  auto gguf = io::GgufFile::Open(TestData("vocab/ggml-vocab-gpt-2.gguf"));
  ASSERT_TRUE(gguf.ok()) << gguf.status().ToString();
  TempDir dir;
  WriteJson(dir.path() / "tokenizer.json", Gpt2TokenizerJson(**gguf));
  WriteJson(dir.path() / "tokenizer_config.json",
            {{"bos_token", "<|endoftext|>"}, {"eos_token", "<|endoftext|>"}});
  auto tok = LoadOrDie(LoadTokenizer(dir.path()));
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->eos_id(), 50256);
  EXPECT_FALSE(tok->add_bos_token());
  ExpectVectors(*tok, "gpt-2", /*lossless=*/true);
}

// Hugging Face's SentencePiece conversion: a merge for every way a piece splits into two
// pieces, ordered by the merged piece's score (ties: by the ids of the two halves).
std::vector<std::string> MergesFromScores(const std::vector<std::string>& tokens,
                                          const std::vector<float>& scores) {
  std::unordered_map<std::string, size_t> ids;
  for (size_t i = 0; i < tokens.size(); ++i) ids.emplace(tokens[i], i);
  struct Merge {
    float score;
    size_t left, right;
  };
  std::vector<Merge> merges;
  for (size_t i = 0; i < tokens.size(); ++i) {
    for (size_t cut = 1; cut < tokens[i].size(); ++cut) {
      auto l = ids.find(tokens[i].substr(0, cut));
      auto r = ids.find(tokens[i].substr(cut));
      if (l != ids.end() && r != ids.end()) merges.push_back({scores[i], l->second, r->second});
    }
  }
  std::stable_sort(merges.begin(), merges.end(), [](const Merge& a, const Merge& b) {
    if (a.score != b.score) return a.score > b.score;
    return std::make_pair(a.left, a.right) < std::make_pair(b.left, b.right);
  });
  std::vector<std::string> out;
  for (const Merge& m : merges) out.push_back(tokens[m.left] + " " + tokens[m.right]);
  return out;
}

// Llama 2's tokenizer.json: BPE with byte_fallback, Prepend + Replace normalizer, Strip decoder.
nlohmann::json LlamaTokenizerJson(const io::GgufFile& gguf) {
  const auto tokens = gguf.GetStringArray("tokenizer.ggml.tokens").value();
  const auto scores = gguf.GetFloatArray("tokenizer.ggml.scores").value();
  nlohmann::json vocab = nlohmann::json::object();
  for (size_t i = 0; i < tokens.size(); ++i) vocab[tokens[i]] = i;
  nlohmann::json doc;
  doc["model"] = {
      {"type", "BPE"},        {"vocab", vocab},        {"merges", MergesFromScores(tokens, scores)},
      {"unk_token", "<unk>"}, {"byte_fallback", true}, {"fuse_unk", true},
      {"dropout", nullptr}};
  doc["added_tokens"] = {{{"id", 0}, {"content", "<unk>"}, {"special", true}},
                         {{"id", 1}, {"content", "<s>"}, {"special", true}},
                         {{"id", 2}, {"content", "</s>"}, {"special", true}}};
  doc["normalizer"] = {{"type", "Sequence"},
                       {"normalizers",
                        {{{"type", "Prepend"}, {"prepend", "▁"}},
                         {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "▁"}}}}};
  doc["pre_tokenizer"] = nullptr;
  doc["decoder"] = {{"type", "Sequence"},
                    {"decoders",
                     {{{"type", "Replace"}, {"pattern", {{"String", "▁"}}}, {"content", " "}},
                      {{"type", "ByteFallback"}},
                      {{"type", "Fuse"}},
                      {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  doc["post_processor"] = {{"type", "TemplateProcessing"},
                           {"single",
                            {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                             {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}}};
  return doc;
}

TEST(VocabTest, LlamaTokenizerJson) {
  auto gguf = io::GgufFile::Open(TestData("vocab/ggml-vocab-llama-spm.gguf"));
  ASSERT_TRUE(gguf.ok()) << gguf.status().ToString();
  TempDir dir;
  WriteJson(dir.path() / "tokenizer.json", LlamaTokenizerJson(**gguf));
  auto tok = LoadOrDie(LoadHfTokenizer(dir.path() / "tokenizer.json"));
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->algorithm(), Algorithm::kRankedBpe);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_TRUE(tok->add_bos_token());
  ExpectVectors(*tok, "llama-spm", /*lossless=*/true);
}

}  // namespace
}  // namespace uc::tokenizer
