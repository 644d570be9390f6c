#include "engine/stop_matcher.h"

#include <gtest/gtest.h>

namespace uc::engine {
namespace {

TEST(StopMatcherTest, NoStopsPassesEverythingThrough) {
  StopMatcher m({});
  EXPECT_EQ(m.Push("hello "), "hello ");
  EXPECT_EQ(m.Push("world"), "world");
  EXPECT_EQ(m.Flush(), "");
  EXPECT_FALSE(m.stopped());
}

TEST(StopMatcherTest, HoldsBackPossiblePrefixAndCutsAtStop) {
  StopMatcher m({"\nUser:"});
  EXPECT_EQ(m.Push("Hi there"), "Hi there");
  EXPECT_EQ(m.Push("\nUs"), "");  // could be the start of the stop string
  EXPECT_EQ(m.Push("er: more"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.matched(), "\nUser:");
  EXPECT_EQ(m.released(), "Hi there");
  EXPECT_EQ(m.Push("ignored"), "");
}

TEST(StopMatcherTest, ReleasesHeldTextWhenItStopsMatching) {
  StopMatcher m({"END"});
  EXPECT_EQ(m.Push("abcE"), "abc");
  EXPECT_EQ(m.Push("N"), "");
  EXPECT_EQ(m.Push("x"), "ENx");
  EXPECT_EQ(m.Push("EN"), "");
  EXPECT_EQ(m.Flush(), "EN");
  EXPECT_EQ(m.released(), "abcENxEN");
}

TEST(StopMatcherTest, EarliestOfSeveralStopsWins) {
  StopMatcher m({"cd", "b"});
  EXPECT_EQ(m.Push("abcd"), "a");
  EXPECT_EQ(m.matched(), "b");
}

TEST(StopMatcherTest, NeverSplitsUtf8Characters) {
  // The stop string starts with the first byte of "é" (0xC3 0xA9); holding back one byte
  // must not release half a character.
  StopMatcher m({"\xC3\xA9t\xC3\xA9"});
  const std::string out = m.Push("caf\xC3\xA9");
  EXPECT_EQ(out, "caf");
  EXPECT_EQ(m.Flush(), "\xC3\xA9");
}

}  // namespace
}  // namespace uc::engine
