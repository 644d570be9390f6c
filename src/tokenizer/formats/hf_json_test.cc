// Small hand-written tokenizer.json files in the layouts of Llama 3, Qwen2 and Llama 2
// (Metaspace), with tokenizer_config.json / generation_config.json overrides.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tokenizer/loaders.h"
#include "tokenizer/temp_dir.h"
#include "tokenizer/text/pre_tokenizer.h"

namespace uc::tokenizer {
namespace {

using nlohmann::json;
using testing::TempDir;
using testing::WriteJson;
using Ids = std::vector<int32_t>;

std::unique_ptr<Tokenizer> Load(const std::filesystem::path& path) {
  auto loaded = LoadTokenizer(path);
  EXPECT_TRUE(loaded.ok()) << loaded.status().ToString();
  return loaded.ok() ? std::move(loaded).value() : nullptr;
}

json ByteLevelDoc(std::string_view split_regex, bool ignore_merges) {
  json doc;
  doc["model"] = {{"type", "BPE"},
                  {"vocab",
                   {{"a", 0},
                    {"b", 1},
                    {"Ġ", 2},
                    {"ab", 3},
                    {"Ġab", 4},
                    {"abb", 5},
                    {"Ċ", 6},
                    {"1", 7},
                    {"2", 8},
                    {"3", 9},
                    {"12", 10},
                    {"123", 11}}},
                  {"merges", {"a b", "Ġ ab", "1 2", "12 3"}},
                  {"ignore_merges", ignore_merges}};
  doc["added_tokens"] = {{{"id", 12}, {"content", "<|begin_of_text|>"}, {"special", true}},
                         {{"id", 13}, {"content", "<|eot_id|>"}, {"special", true}},
                         {{"id", 14}, {"content", "<|end_of_text|>"}, {"special", true}}};
  doc["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"},
         {"pattern", {{"Regex", split_regex}}},
         {"behavior", "Isolated"},
         {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  doc["decoder"] = {{"type", "ByteLevel"}};
  doc["post_processor"] = {{"type", "TemplateProcessing"},
                           {"single",
                            {{{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}},
                             {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}}};
  return doc;
}

TEST(HfJsonTest, Llama3Layout) {
  TempDir dir;
  WriteJson(dir.path() / "tokenizer.json", ByteLevelDoc(kLlama3Pattern, true));
  auto tok = Load(dir.path());
  ASSERT_NE(tok, nullptr);
  EXPECT_TRUE(tok->byte_level());
  EXPECT_EQ(tok->bos_id(), 12);
  EXPECT_TRUE(tok->add_bos_token());
  EXPECT_EQ(tok->eos_id(), 14);
  EXPECT_EQ(tok->stop_ids(), (Ids{13, 14}));
  EXPECT_EQ(tok->Encode("ab ab", true, false), (Ids{12, 3, 4}));
  EXPECT_EQ(tok->Encode("abb", false, false), (Ids{5}));         // ignore_merges: whole-word hit
  EXPECT_EQ(tok->Encode("12312", false, false), (Ids{11, 10}));  // \p{N}{1,3}
  EXPECT_EQ(tok->Encode("ab<|eot_id|>", false, true), (Ids{3, 13}));
  EXPECT_EQ(tok->Decode(Ids{12, 3, 4, 6, 13}), "ab ab\n");
}

TEST(HfJsonTest, ConfigFilesOverride) {
  TempDir dir;
  WriteJson(dir.path() / "tokenizer.json", ByteLevelDoc(kLlama3Pattern, false));
  WriteJson(dir.path() / "tokenizer_config.json",
            {{"add_bos_token", false},
             {"eos_token", {{"content", "<|eot_id|>"}, {"special", true}}},
             {"added_tokens_decoder", {{"15", {{"content", "<tool>"}, {"special", false}}}}}});
  WriteJson(dir.path() / "generation_config.json", {{"eos_token_id", {13, 14}}});
  auto tok = Load(dir.path());
  ASSERT_NE(tok, nullptr);
  EXPECT_FALSE(tok->add_bos_token());
  EXPECT_EQ(tok->eos_id(), 13);
  EXPECT_EQ(tok->vocab_size(), 16);
  EXPECT_EQ(tok->Encode("abb", false, false), (Ids{3, 1}));  // merges only
  // A non-special added token is matched even without special parsing.
  EXPECT_EQ(tok->Encode("ab<tool>", false, false), (Ids{3, 15}));
  EXPECT_EQ(tok->Decode(Ids{3, 15}), "ab<tool>");
}

TEST(HfJsonTest, Qwen2LayoutWithNfcNormalizer) {
  TempDir dir;
  json doc = ByteLevelDoc(kQwen2Pattern, false);
  doc["normalizer"] = {{"type", "NFC"}};
  doc["post_processor"] = nullptr;
  WriteJson(dir.path() / "tokenizer.json", doc);
  auto tok = Load(dir.path() / "tokenizer.json");
  ASSERT_NE(tok, nullptr);
  EXPECT_FALSE(tok->add_bos_token());
  EXPECT_EQ(tok->Encode("123 ab", false, false), (Ids{7, 8, 9, 4}));
}

TEST(HfJsonTest, MetaspaceWithByteFallback) {
  json doc;
  doc["model"] = {{"type", "BPE"},
                  {"vocab",
                   {{"<unk>", 0},
                    {"<s>", 1},
                    {"</s>", 2},
                    {"<0x0A>", 3},
                    {"▁", 4},
                    {"a", 5},
                    {"b", 6},
                    {"▁a", 7},
                    {"▁b", 8}}},
                  {"merges", json::array({json::array({"▁", "a"}), json::array({"▁", "b"})})},
                  {"unk_token", "<unk>"},
                  {"byte_fallback", true}};
  doc["added_tokens"] = {{{"id", 0}, {"content", "<unk>"}, {"special", true}},
                         {{"id", 1}, {"content", "<s>"}, {"special", true}},
                         {{"id", 2}, {"content", "</s>"}, {"special", true}}};
  doc["pre_tokenizer"] = {
      {"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "first"}, {"split", false}};
  doc["decoder"] = {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "first"}};
  TempDir dir;
  WriteJson(dir.path() / "tokenizer.json", doc);
  auto tok = Load(dir.path());
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->unk_id(), 0);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->token_type(3), TokenType::kByte);
  EXPECT_EQ(tok->Encode("a b\n", false, false), (Ids{7, 8, 3}));
  EXPECT_EQ(tok->Encode(" a", false, false), (Ids{7}));           // no second "▁"
  EXPECT_EQ(tok->Encode("a</s>b", false, true), (Ids{7, 2, 6}));  // "first": no prefix after </s>
  EXPECT_EQ(tok->Encode("c", false, false), (Ids{4, 0}));         // no <0x63>: <unk>
  EXPECT_EQ(tok->Decode(Ids{1, 7, 8, 3}), "a b\n");
}

}  // namespace
}  // namespace uc::tokenizer
