// Position selectors: the grammar (every form, every rejection) and matching — Undercurrent
// v0.1's conformance table (prompt_len 10) with DESIGN.md's fixes: prompt[i] past the prompt
// never matches, offsets shift continuous windows, generated[-k] resolves given the total.
#include "probe/spec/position.h"

#include <gtest/gtest.h>

#include <vector>

namespace uc::probe {
namespace {

constexpr int64_t kPromptLen = 10;

PositionSelector P(std::string_view text) {
  StatusOr<PositionSelector> s = PositionSelector::Parse(text);
  EXPECT_TRUE(s.ok()) << text << ": " << s.status().message();
  return s.ok() ? *s : PositionSelector();
}

// Generated indices in [0, n) a selector matches after a 10-token prompt.
std::vector<int64_t> GeneratedMatches(const PositionSelector& s, int n, int stride = 1,
                                      std::optional<int64_t> total = std::nullopt) {
  std::vector<int64_t> out;
  for (int64_t g = 0; g < n; ++g) {
    if (s.Matches(kPromptLen + g, kPromptLen, stride, total)) out.push_back(g);
  }
  return out;
}

TEST(PositionParseTest, EveryForm) {
  const PositionSelector abs = P("5");
  EXPECT_EQ(abs.kind(), PositionSelector::Kind::kAbsolute);
  EXPECT_EQ(abs.index(), 5);
  EXPECT_EQ(P("  7 ").index(), 7);
  EXPECT_EQ(P("-1").index(), -1);
  const PositionSelector prompt = P("prompt[-1]+1");
  EXPECT_EQ(prompt.kind(), PositionSelector::Kind::kPrompt);
  EXPECT_EQ(prompt.index(), -1);
  EXPECT_EQ(prompt.offset(), 1);
  const PositionSelector gen = P("generated[3]-2");
  EXPECT_EQ(gen.kind(), PositionSelector::Kind::kGenerated);
  EXPECT_EQ(gen.index(), 3);
  EXPECT_EQ(gen.offset(), -2);
  EXPECT_TRUE(P("generated[-1]").needs_total());
  EXPECT_FALSE(P("generated[1]").needs_total());
  EXPECT_EQ(P("generated[*]").kind(), PositionSelector::Kind::kGeneratedAll);
  const PositionSelector open = P("generated[5:]");
  EXPECT_EQ(open.kind(), PositionSelector::Kind::kGeneratedSlice);
  EXPECT_EQ(open.start(), 5);
  EXPECT_FALSE(open.stop().has_value());
  const PositionSelector bounded = P("generated[2:8]+1");
  EXPECT_EQ(bounded.start(), 2);
  EXPECT_EQ(bounded.stop(), 8);
  EXPECT_EQ(bounded.offset(), 1);
  EXPECT_TRUE(bounded.continuous());
  EXPECT_FALSE(P("prompt[0]").continuous());
  EXPECT_EQ(P("prompt[-0]").index(), 0);
}

TEST(PositionParseTest, RejectsEverythingElse) {
  for (const char* bad : {"prompt[]",
                          "generated[]",
                          "generated[*",
                          "generated[5:2]",
                          "generated[8:2]",
                          "generated[3:3]",
                          "foo[1]",
                          "prompt[1.5]",
                          "",
                          "   ",
                          "prompt[*]",
                          "prompt[0:4]",
                          "generated[:5]",
                          "generated[-3:]",
                          "5+1",
                          "+5",
                          "1.5",
                          "true",
                          "prompt[+1]",
                          "prompt[1]+",
                          "prompt[1]1",
                          "prompt [1]",
                          "prompt[ 1]",
                          "generated[1:2:3]",
                          "generated[*]+",
                          "generated[a]",
                          "PROMPT[1]",
                          "prompt[1]++1",
                          "prompt[1]]",
                          "99999999999999999999",
                          "prompt[99999999999999999999]",
                          "generated[0]+99999999999999999999",
                          "generated[0:99999999999999999999]",
                          "prompt[٣]"}) {
    const StatusOr<PositionSelector> s = PositionSelector::Parse(bad);
    EXPECT_FALSE(s.ok()) << "'" << bad << "' parsed as " << (s.ok() ? s->ToString() : "");
  }
}

TEST(PositionParseTest, MessagesSayWhatIsWrong) {
  auto message = [](std::string_view text) {
    return PositionSelector::Parse(text).status().message();
  };
  EXPECT_EQ(message("foo[1]"),
            "invalid position 'foo[1]': expected one of: an absolute index (e.g. 5), 'prompt[i]' "
            "/ 'prompt[-1]', 'generated[i]' / 'generated[-1]', 'generated[*]', "
            "'generated[start:]' or 'generated[start:stop]'; a bracket form may end in an offset "
            "such as '+1' or '-2' (e.g. 'prompt[-1]+1')");
  EXPECT_EQ(message("generated[5:2]"),
            "invalid position 'generated[5:2]': slice stop (2) must be greater than start (5), "
            "e.g. 'generated[5:6]', or 'generated[5:]' for no end");
  EXPECT_EQ(message("generated[:5]"),
            "invalid position 'generated[:5]': a slice needs an explicit start, e.g. "
            "'generated[0:5]'");
  EXPECT_EQ(message("prompt[*]"),
            "invalid position 'prompt[*]': there is no wildcard or slice over the prompt; capture "
            "prompt tokens with one extraction point each (e.g. 'prompt[-1]', 'prompt[0]')");
  EXPECT_EQ(message("5+1"),
            "invalid position '5+1': an absolute index takes no offset; write the sum (e.g. 6 "
            "for 5+1), or use a bracket form such as 'prompt[5]+1'");
  EXPECT_EQ(message("generated[-3:]"),
            "invalid position 'generated[-3:]': a slice start must be >= 0 (a window counted "
            "from the end would need the final length); use 'generated[-k]' for one token from "
            "the end");
  EXPECT_NE(message("").find("the position is empty"), std::string::npos);
  EXPECT_NE(message("prompt[99999999999999999999]").find("out of range"), std::string::npos);
}

TEST(PositionParseTest, ToStringRoundTrips) {
  for (const char* text :
       {"5", "-1", "0", "prompt[-1]", "prompt[0]", "prompt[3]+2", "generated[0]", "generated[-1]",
        "generated[5]-2", "generated[*]", "generated[*]-1", "generated[5:]", "generated[2:8]",
        "generated[2:]+1", "prompt[-1]+1", "generated[0:1]-3"}) {
    const PositionSelector s = P(text);
    EXPECT_EQ(s.ToString(), text);
    EXPECT_EQ(P(s.ToString()), s) << text;
  }
  EXPECT_EQ(P("  prompt[-1]+01 ").ToString(), "prompt[-1]+1");
  EXPECT_EQ(P("007").ToString(), "7");
  EXPECT_EQ(PositionSelector::Absolute(12).ToString(), "12");
}

// Inventory §10 scenario 1, prompt_len 10.
TEST(PositionMatchTest, ConformanceTable) {
  EXPECT_TRUE(P("prompt[-1]").Matches(9, kPromptLen));
  EXPECT_FALSE(P("prompt[-1]").Matches(8, kPromptLen));
  EXPECT_TRUE(P("prompt[0]").Matches(0, kPromptLen));
  EXPECT_TRUE(P("generated[0]").Matches(10, kPromptLen));
  EXPECT_FALSE(P("generated[0]").Matches(11, kPromptLen));
  EXPECT_TRUE(P("prompt[-1]+1").Matches(10, kPromptLen));
  EXPECT_FALSE(P("prompt[-1]+1").Matches(9, kPromptLen));
  EXPECT_TRUE(P("generated[5]-2").Matches(13, kPromptLen));
  EXPECT_TRUE(P("generated[0]-1").Matches(9, kPromptLen));  // crosses back into the prompt
  EXPECT_TRUE(P("5").Matches(5, kPromptLen));
  EXPECT_FALSE(P("5").Matches(4, kPromptLen));
  EXPECT_TRUE(P("12").Matches(12, kPromptLen));  // absolute indices reach generated tokens
  EXPECT_EQ(GeneratedMatches(P("generated[2:8]"), 12), (std::vector<int64_t>{2, 3, 4, 5, 6, 7}));
  const PositionSelector open = P("generated[5:]");
  EXPECT_FALSE(open.Matches(14, kPromptLen));  // generated 4
  EXPECT_TRUE(open.Matches(15, kPromptLen));   // generated 5
  EXPECT_TRUE(open.Matches(25, kPromptLen));   // generated 15
  EXPECT_EQ(GeneratedMatches(P("generated[*]"), 6, /*stride=*/2), (std::vector<int64_t>{0, 2, 4}));
  EXPECT_EQ(GeneratedMatches(P("generated[5:]"), 12, /*stride=*/2),
            (std::vector<int64_t>{5, 7, 9, 11}));
  EXPECT_FALSE(P("generated[*]").Matches(9, kPromptLen));  // prompt tokens are not generated
}

TEST(PositionMatchTest, NegativeGeneratedIndexNeedsTheTotal) {
  const PositionSelector last = P("generated[-1]");
  EXPECT_FALSE(last.Matches(15, kPromptLen));                 // total unknown
  EXPECT_TRUE(last.Matches(15, kPromptLen, 1, /*total=*/6));  // gen 5 of 6
  EXPECT_FALSE(last.Matches(14, kPromptLen, 1, /*total=*/6));
  EXPECT_FALSE(last.Matches(15, kPromptLen, 1, /*total=*/7));
  EXPECT_FALSE(P("generated[-7]").Matches(9, kPromptLen, 1, /*total=*/6));  // before gen 0
  EXPECT_TRUE(P("generated[-2]+1").Matches(15, kPromptLen, 1, /*total=*/6));
  EXPECT_EQ(last.Resolve(kPromptLen, 6), 15);
  EXPECT_FALSE(last.Resolve(kPromptLen).has_value());
}

// Our fix: v0.1 resolves prompt[50] to absolute 50 and matches generated token 40.
TEST(PositionMatchTest, PromptIndexPastThePromptNeverMatches) {
  for (int64_t pos = 0; pos < 100; ++pos) {
    EXPECT_FALSE(P("prompt[50]").Matches(pos, kPromptLen)) << pos;
    EXPECT_FALSE(P("prompt[-11]").Matches(pos, kPromptLen)) << pos;
    EXPECT_FALSE(P("prompt[10]-1").Matches(pos, kPromptLen)) << pos;
  }
  EXPECT_TRUE(P("prompt[-10]").Matches(0, kPromptLen));
  EXPECT_FALSE(P("prompt[-1]").Matches(0, /*prompt_len=*/0));
}

TEST(PositionMatchTest, NegativeAbsoluteNeverMatches) {
  for (int64_t pos = 0; pos < 20; ++pos) EXPECT_FALSE(P("-1").Matches(pos, kPromptLen));
  EXPECT_FALSE(P("prompt[0]-1").Matches(0, kPromptLen));
}

// Our fix: v0.1 parses offsets on continuous selectors and ignores them.
TEST(PositionMatchTest, OffsetShiftsAContinuousWindow) {
  EXPECT_EQ(GeneratedMatches(P("generated[2:]+1"), 8), (std::vector<int64_t>{3, 4, 5, 6, 7}));
  EXPECT_EQ(GeneratedMatches(P("generated[2:5]+1"), 8), (std::vector<int64_t>{3, 4, 5}));
  EXPECT_EQ(GeneratedMatches(P("generated[*]+2"), 5), (std::vector<int64_t>{2, 3, 4}));
  const PositionSelector back = P("generated[*]-1");  // the last prompt token and on
  EXPECT_TRUE(back.Matches(9, kPromptLen));
  EXPECT_FALSE(back.Matches(8, kPromptLen));
  EXPECT_TRUE(back.Matches(10, kPromptLen));
  // The stride counts from the shifted window start.
  EXPECT_EQ(GeneratedMatches(P("generated[2:]+1"), 10, /*stride=*/3),
            (std::vector<int64_t>{3, 6, 9}));
}

TEST(PositionMatchTest, StrideCountsFromTheWindowStart) {
  EXPECT_EQ(GeneratedMatches(P("generated[3:10]"), 12, /*stride=*/3),
            (std::vector<int64_t>{3, 6, 9}));
  EXPECT_EQ(GeneratedMatches(P("generated[*]"), 4, /*stride=*/1),
            (std::vector<int64_t>{0, 1, 2, 3}));
}

TEST(PositionMatchTest, HugeNumbersDoNotOverflow) {
  const PositionSelector far = P("generated[9223372036854775807]");
  EXPECT_FALSE(far.Matches(15, kPromptLen));
  const PositionSelector window = P("generated[9223372036854775800:]+100");
  EXPECT_FALSE(window.Matches(15, kPromptLen));
  EXPECT_FALSE(P("prompt[0]-9223372036854775807").Matches(0, kPromptLen));
}

}  // namespace
}  // namespace uc::probe
