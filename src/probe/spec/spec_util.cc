#include "probe/spec/spec_util.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>

namespace uc::probe::internal {
namespace {

struct Match {
  size_t a = 0;
  size_t b = 0;
  size_t size = 0;
};

// difflib's find_longest_match without junk: the longest common block of a[alo, ahi) and
// b[blo, bhi), the earliest in a, then the earliest in b.
Match LongestMatch(std::string_view a, std::string_view b, size_t alo, size_t ahi, size_t blo,
                   size_t bhi) {
  Match best{alo, blo, 0};
  std::map<size_t, size_t> j2len;
  for (size_t i = alo; i < ahi; ++i) {
    std::map<size_t, size_t> next;
    for (size_t j = blo; j < bhi; ++j) {
      if (a[i] != b[j]) continue;
      const auto prev = j > 0 ? j2len.find(j - 1) : j2len.end();
      const size_t k = (prev != j2len.end() ? prev->second : 0) + 1;
      next[j] = k;
      if (k > best.size) best = {i + 1 - k, j + 1 - k, k};
    }
    j2len = std::move(next);
  }
  return best;
}

size_t MatchedChars(std::string_view a, std::string_view b, size_t alo, size_t ahi, size_t blo,
                    size_t bhi) {
  const Match m = LongestMatch(a, b, alo, ahi, blo, bhi);
  if (m.size == 0) return 0;
  size_t total = m.size;
  if (alo < m.a && blo < m.b) total += MatchedChars(a, b, alo, m.a, blo, m.b);
  if (m.a + m.size < ahi && m.b + m.size < bhi) {
    total += MatchedChars(a, b, m.a + m.size, ahi, m.b + m.size, bhi);
  }
  return total;
}

std::optional<std::string_view> CloseMatch(std::string_view value,
                                           const std::vector<std::string_view>& choices) {
  std::optional<std::string_view> best;
  double best_score = 0.0;
  for (const std::string_view choice : choices) {
    // get_close_matches scores SequenceMatcher(a=choice, b=value).
    const double score = SimilarityRatio(choice, value);
    if (score < 0.6) continue;
    if (!best.has_value() || score > best_score || (score == best_score && choice > *best)) {
      best = choice;
      best_score = score;
    }
  }
  return best;
}

}  // namespace

std::string PyQuote(std::string_view text) {
  const bool has_single = text.find('\'') != std::string_view::npos;
  const bool has_double = text.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (const char c : text) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c == quote) out += '\\';
        out += c;
    }
  }
  out += quote;
  return out;
}

std::string OneOf(const std::vector<std::string_view>& choices) {
  std::string out;
  for (size_t i = 0; i < choices.size(); ++i) {
    if (i > 0) out += i + 1 == choices.size() ? " or " : ", ";
    out += PyQuote(choices[i]);
  }
  return out;
}

double SimilarityRatio(std::string_view a, std::string_view b) {
  if (a.empty() && b.empty()) return 1.0;
  const size_t matched = MatchedChars(a, b, 0, a.size(), 0, b.size());
  return 2.0 * static_cast<double>(matched) / static_cast<double>(a.size() + b.size());
}

std::string DidYouMean(std::string_view value, const std::vector<std::string_view>& choices) {
  std::optional<std::string_view> match = CloseMatch(value, choices);
  if (!match.has_value()) {
    std::string lower(value);
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    match = CloseMatch(lower, choices);
  }
  return match.has_value() ? " Did you mean " + PyQuote(*match) + "?" : "";
}

}  // namespace uc::probe::internal
