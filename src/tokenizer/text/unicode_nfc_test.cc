// NfcNormalize against Python's unicodedata.normalize("NFC", ...) on the committed cases of
// tests/testdata/nfc/nfc_cases.json (tools/reference/make_nfc_tables.py: Hangul, reordering and
// blocked combining marks, singletons, exclusions, every decomposable code point composed and
// decomposed, every combining mark, random mark sequences), then invalid UTF-8 and the
// tokenizer.json "NFC" normalizer.
#include "tokenizer/text/unicode_nfc.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tokenizer/loaders.h"
#include "tokenizer/temp_dir.h"
#include "tokenizer/test_util.h"

namespace uc::tokenizer {
namespace {

using nlohmann::json;
using testing::ReadFileOrDie;
using testing::TestData;

TEST(UnicodeNfcTest, MatchesPythonUnicodedata) {
  const json doc = json::parse(ReadFileOrDie(TestData("nfc/nfc_cases.json")));
  EXPECT_EQ(doc["meta"]["unicode"].get<std::string>(), NfcUnicodeVersion());
  ASSERT_GT(doc["cases"].size(), 100u);
  for (const auto& c : doc["cases"]) {
    const std::string input = c["input"];
    const std::string expected = c["nfc"];
    SCOPED_TRACE(c["name"].get<std::string>());
    EXPECT_EQ(NfcNormalize(input), expected);
    EXPECT_EQ(NfcNormalize(expected), expected);  // NFC is idempotent
  }
}

TEST(UnicodeNfcTest, SmallCases) {
  EXPECT_EQ(NfcNormalize(""), "");
  EXPECT_EQ(NfcNormalize("plain ascii"), "plain ascii");
  EXPECT_EQ(NfcNormalize("e\u0301"), "\u00e9");
  EXPECT_EQ(NfcNormalize("\u1112\u1161\u11ab"), "\ud55c");  // jamo LVT -> syllable
  EXPECT_EQ(NfcNormalize("\u212b"), "\u00c5");              // singleton
  EXPECT_EQ(NfcNormalize("a\u0323\u0302"), "\u1ead");       // two marks, one letter
  EXPECT_EQ(NfcNormalize("a\u0302\u0323"), "\u1ead");       // reordered first
  EXPECT_EQ(NfcNormalize("\u0301e"), "\u0301e");            // leading mark stays
  EXPECT_EQ(CanonicalCombiningClass(0x0301), 230);
  EXPECT_EQ(CanonicalCombiningClass(0x0323), 220);
  EXPECT_EQ(CanonicalCombiningClass('a'), 0);
  EXPECT_EQ(CanonicalCombiningClass(0x110000), 0);
}

TEST(UnicodeNfcTest, InvalidBytesPassThroughAndBlock) {
  EXPECT_EQ(NfcNormalize("\xff"), "\xff");
  EXPECT_EQ(NfcNormalize("e\xff\xcc\x81"), "e\xff\xcc\x81");  // the byte sits between e and U+0301
  EXPECT_EQ(NfcNormalize("e\xcc\x81\xc3"), "\xc3\xa9\xc3");   // truncated character at the end
  EXPECT_EQ(NfcNormalize("\xed\xa0\x80"), "\xed\xa0\x80");    // a surrogate is not valid UTF-8
}

// A tokenizer.json whose normalizer is "NFC" (as Qwen2/2.5/3 have) encodes both spellings of a
// character alike.
TEST(UnicodeNfcTest, TokenizerJsonNfcNormalizer) {
  json doc;
  doc["model"] = {{"type", "BPE"},
                  {"vocab", {{"<unk>", 0}, {"\u00e9", 1}, {"e", 2}, {"\u0301", 3}, {"\ud55c", 4}}},
                  {"merges", json::array()},
                  {"unk_token", "<unk>"}};
  testing::TempDir dir;
  testing::WriteJson(dir.path() / "tokenizer.json", doc);
  auto plain = LoadHfTokenizer(dir.path());
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ((*plain)->Encode("e\u0301", false, false), (std::vector<int32_t>{2, 3}));

  doc["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}}}};
  testing::WriteJson(dir.path() / "tokenizer.json", doc);
  auto nfc = LoadHfTokenizer(dir.path());
  ASSERT_TRUE(nfc.ok()) << nfc.status().ToString();
  EXPECT_EQ((*nfc)->Encode("e\u0301", false, false), (std::vector<int32_t>{1}));
  EXPECT_EQ((*nfc)->Encode("\u00e9", false, false), (std::vector<int32_t>{1}));
  EXPECT_EQ((*nfc)->Encode("\u1112\u1161\u11ab", false, false), (std::vector<int32_t>{4}));
}

}  // namespace
}  // namespace uc::tokenizer
