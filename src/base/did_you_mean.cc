#include "base/did_you_mean.h"

#include <algorithm>
#include <utility>

namespace uc {

std::string JoinQuoted(const std::vector<std::string>& names, std::string_view last_separator) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += (i + 1 == names.size()) ? std::string(last_separator) : ", ";
    out += "'" + names[i] + "'";
  }
  return out;
}

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1] ? 1 : 0)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::vector<std::string> ClosestMatches(std::string_view name,
                                        const std::vector<std::string>& candidates,
                                        size_t max_matches) {
  const size_t limit = std::max<size_t>(2, name.size() / 3);
  std::vector<std::pair<size_t, std::string>> scored;
  for (const std::string& candidate : candidates) {
    const size_t d = EditDistance(name, candidate);
    if (d <= limit) scored.emplace_back(d, candidate);
  }
  std::sort(scored.begin(), scored.end());
  std::vector<std::string> out;
  for (size_t i = 0; i < scored.size() && i < max_matches; ++i) {
    if (scored[i].first != scored[0].first) break;  // only the nearest
    out.push_back(scored[i].second);
  }
  return out;
}

std::string DidYouMean(std::string_view name, const std::vector<std::string>& candidates) {
  const std::vector<std::string> matches = ClosestMatches(name, candidates);
  if (matches.empty()) return "";
  return " (did you mean " + JoinQuoted(matches, " or ") + "?)";
}

}  // namespace uc
