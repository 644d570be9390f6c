// Unit tests of the building blocks: UTF-8 helpers, byte-level mapping, normalization,
// pre-tokenizer regexes and split behaviors, special-token matching and the merge loop.
#include <gtest/gtest.h>

#include "tokenizer/models/bpe_merge.h"
#include "tokenizer/special_tokens.h"
#include "tokenizer/text/byte_level.h"
#include "tokenizer/text/normalizer.h"
#include "tokenizer/text/pre_tokenizer.h"
#include "tokenizer/text/utf8.h"

namespace uc::tokenizer {
namespace {

using Words = std::vector<std::string>;

TEST(Utf8Test, ExamineAndRepair) {
  EXPECT_EQ(ExamineUtf8("a").length, 1u);
  EXPECT_EQ(ExamineUtf8("\xE2\x98\x95").kind, Utf8Sequence::Kind::kValid);
  EXPECT_EQ(ExamineUtf8("\xE2\x98").kind, Utf8Sequence::Kind::kIncomplete);
  EXPECT_EQ(ExamineUtf8("\xC0\x80").kind, Utf8Sequence::Kind::kInvalid);          // overlong
  EXPECT_EQ(ExamineUtf8("\xED\xA0\x80").kind, Utf8Sequence::Kind::kInvalid);      // surrogate
  EXPECT_EQ(ExamineUtf8("\xF4\x90\x80\x80").kind, Utf8Sequence::Kind::kInvalid);  // > U+10FFFF
  std::string out;
  EXPECT_EQ(AppendValidUtf8("ok\xE2\x98", false, &out), 2u);
  EXPECT_EQ(out, "ok");
  out.clear();
  EXPECT_EQ(AppendValidUtf8("ok\xE2\x98", true, &out), 4u);
  EXPECT_EQ(out, "ok\uFFFD");
  std::string cp;
  AppendCodepoint(0x1F642, &cp);
  EXPECT_EQ(cp, "🙂");
  EXPECT_EQ(DecodeCodepoint(cp), 0x1F642u);
}

TEST(ByteLevelTest, RoundTripsEveryByte) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  std::string mapped;
  ByteLevelEncode(all, &mapped);
  EXPECT_EQ(ByteLevelDecode(mapped), all);
  std::string space;
  ByteLevelEncode(" \n", &space);
  EXPECT_EQ(space, "ĠĊ");
}

TEST(NormalizerTest, SentencePieceRules) {
  const NormalizerOptions spm{
      .add_dummy_prefix = true, .remove_extra_whitespaces = true, .escape_whitespaces = true};
  EXPECT_EQ(Normalize("  two  spaces ", spm, true), "▁two▁spaces");
  EXPECT_EQ(Normalize("   ", spm, true), "");
  EXPECT_EQ(Normalize("", spm, true), "");
  const NormalizerOptions llama{.add_dummy_prefix = true, .escape_whitespaces = true};
  EXPECT_EQ(Normalize(" a", llama, true), "▁▁a");
  NormalizerOptions first = llama;
  first.prefix_scheme = PrefixScheme::kFirst;
  first.prefix_unless_leading_space = true;
  EXPECT_EQ(Normalize("a b", first, true), "▁a▁b");
  EXPECT_EQ(Normalize("a b", first, false), "a▁b");
  EXPECT_EQ(Normalize(" a", first, true), "▁a");
}

Words SplitWith(std::string_view pattern, std::string_view text,
                SplitBehavior behavior = SplitBehavior::kIsolated, bool invert = false) {
  PreTokenizer pre;
  const Status status = pre.AddSplit(pattern, behavior, invert);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return pre.Split(text);
}

TEST(PreTokenizerTest, NamedPatterns) {
  EXPECT_EQ(SplitWith(kGpt2Pattern, "Hello world's  123!!\n"),
            (Words{"Hello", " world", "'s", " ", " 123", "!!", "\n"}));
  EXPECT_EQ(SplitWith(kLlama3Pattern, "I'M 12345 ok\n\n"),
            (Words{"I", "'M", " ", "123", "45", " ok", "\n\n"}));
  EXPECT_EQ(SplitWith(kQwen2Pattern, "x 123"), (Words{"x", " ", "1", "2", "3"}));
  // Unicode classes: Cyrillic letters are \p{L}, '½' is \p{N}.
  EXPECT_EQ(SplitWith(kGpt2Pattern, "на ½"), (Words{"на", " ½"}));
  bool ignore_merges = false;
  auto smollm = PreTokenizerForGgufPre("smollm", &ignore_merges);
  ASSERT_TRUE(smollm.ok());
  EXPECT_EQ(smollm->Split("ab 42"), (Words{"ab", " ", "4", "2"}));
  EXPECT_FALSE(ignore_merges);
  ASSERT_TRUE(PreTokenizerForGgufPre("llama-bpe", &ignore_merges).ok());
  EXPECT_TRUE(ignore_merges);
  EXPECT_EQ(PreTokenizerForGgufPre("no-such-pre", &ignore_merges).status().code(),
            StatusCode::kUnimplemented);
}

TEST(PreTokenizerTest, SplitBehaviors) {
  EXPECT_EQ(SplitWith("-", "a-b--c", SplitBehavior::kRemoved), (Words{"a", "b", "c"}));
  EXPECT_EQ(SplitWith("-", "a-b--c", SplitBehavior::kIsolated),
            (Words{"a", "-", "b", "-", "-", "c"}));
  EXPECT_EQ(SplitWith("-", "a-b--c", SplitBehavior::kMergedWithPrevious),
            (Words{"a-", "b-", "-", "c"}));
  EXPECT_EQ(SplitWith("-", "a-b--c", SplitBehavior::kMergedWithNext),
            (Words{"a", "-b", "-", "-c"}));
  EXPECT_EQ(SplitWith("-", "a-b--c", SplitBehavior::kContiguous),
            (Words{"a", "-", "b", "--", "c"}));
  EXPECT_EQ(SplitWith("[a-c]", "a-b--c", SplitBehavior::kRemoved, /*invert=*/true),
            (Words{"a", "b", "c"}));
  PreTokenizer prefix;
  prefix.AddPrefixSpace();
  EXPECT_EQ(prefix.Split("hi"), (Words{" hi"}));
  EXPECT_EQ(prefix.Split(" hi"), (Words{" hi"}));
}

TEST(PreTokenizerTest, BadRegexAndInvalidUtf8) {
  PreTokenizer pre;
  const Status status = pre.AddSplit("(unclosed", SplitBehavior::kIsolated);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("(unclosed"), std::string::npos) << status.message();
  // Invalid UTF-8 never matches but is kept: no byte is lost.
  const Words words = SplitWith(kGpt2Pattern,
                                "ab\xFF\xFE"
                                "cd");
  std::string joined;
  for (const std::string& w : words) joined += w;
  EXPECT_EQ(joined,
            "ab\xFF\xFE"
            "cd");
}

TEST(SpecialTokenMatcherTest, LongestMatchAndModes) {
  SpecialTokenMatcher m;
  m.Add(1, "<|im", /*always=*/false);
  m.Add(2, "<|im_end|>", /*always=*/false);
  m.Add(3, "[USER]", /*always=*/true, /*lstrip=*/true, /*rstrip=*/true);
  const auto parts = m.Split("a<|im_end|>b  [USER]  c", /*parse_special=*/true);
  ASSERT_EQ(parts.size(), 5u);
  EXPECT_EQ(parts[0].text, "a");
  EXPECT_EQ(parts[1].id, 2);
  EXPECT_EQ(parts[2].text, "b");  // lstrip ate the spaces before [USER]
  EXPECT_EQ(parts[3].id, 3);
  EXPECT_EQ(parts[4].text, "c");  // rstrip ate the spaces after it
  const auto plain = m.Split("a<|im_end|>[USER]", /*parse_special=*/false);
  ASSERT_EQ(plain.size(), 2u);
  EXPECT_EQ(plain[0].text, "a<|im_end|>");
  EXPECT_EQ(plain[1].id, 3);
}

TEST(BpeMergeTest, HighestPriorityThenLeftmost) {
  // Word "aaa" with the single merge a+a -> id 10: the left pair merges first.
  std::vector<BpeSymbol> symbols = {{0, 0, 1, 0, 0}, {0, 1, 1, 0, 0}, {0, 2, 1, 0, 0}};
  LinkSymbols(&symbols);
  MergeSymbols(&symbols, [](const BpeSymbol& l, const BpeSymbol& r) -> std::optional<BpeMerge> {
    if (l.id == 0 && r.id == 0) return BpeMerge{10, 1.0f};
    return std::nullopt;
  });
  EXPECT_EQ(symbols[0].id, 10);
  EXPECT_EQ(symbols[0].length, 2u);
  EXPECT_EQ(symbols[0].next, 2);
  EXPECT_EQ(symbols[2].id, 0);
}

}  // namespace
}  // namespace uc::tokenizer
