#include "tokenizer/special_tokens.h"

#include <algorithm>

#include "base/check.h"

namespace uc::tokenizer {
namespace {

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

}  // namespace

void SpecialTokenMatcher::Add(int32_t id, std::string text, bool always, bool lstrip, bool rstrip) {
  UC_CHECK(!text.empty(), "special token %d has empty text", id);
  const auto first = static_cast<uint8_t>(text[0]);
  const size_t length = text.size();
  entries_.push_back({std::move(text), id, always, lstrip, rstrip});
  // Longest first; after the entries of the same length added before (a sort per Add would be
  // quadratic for Gemma's 6000 "<...>" tokens).
  std::vector<int>& bucket = by_first_byte_[first];
  const auto at =
      std::upper_bound(bucket.begin(), bucket.end(), length,
                       [this](size_t len, int index) { return len > entries_[index].text.size(); });
  bucket.insert(at, static_cast<int>(entries_.size()) - 1);
}

int SpecialTokenMatcher::FindAt(std::string_view text, size_t pos, bool parse_special) const {
  for (const int index : by_first_byte_[static_cast<uint8_t>(text[pos])]) {
    const Entry& e = entries_[index];
    if (!e.always && !parse_special) continue;
    if (text.compare(pos, e.text.size(), e.text) == 0) return index;
  }
  return -1;
}

std::vector<Fragment> SpecialTokenMatcher::Split(std::string_view text, bool parse_special) const {
  std::vector<Fragment> out;
  size_t plain_begin = 0;
  size_t pos = 0;
  auto flush_plain = [&](size_t end) {
    if (end > plain_begin) out.push_back({text.substr(plain_begin, end - plain_begin), -1});
  };
  while (pos < text.size()) {
    const int index = entries_.empty() ? -1 : FindAt(text, pos, parse_special);
    if (index < 0) {
      ++pos;
      continue;
    }
    const Entry& e = entries_[index];
    size_t plain_end = pos;
    while (e.lstrip && plain_end > plain_begin && IsSpace(text[plain_end - 1])) --plain_end;
    flush_plain(plain_end);
    out.push_back({text.substr(pos, e.text.size()), e.id});
    pos += e.text.size();
    while (e.rstrip && pos < text.size() && IsSpace(text[pos])) ++pos;
    plain_begin = pos;
  }
  flush_plain(text.size());
  return out;
}

}  // namespace uc::tokenizer
