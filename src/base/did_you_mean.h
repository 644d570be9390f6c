// File: did_you_mean.h
// -----------------------------------------------------------------------------
// Suggestions for misspelt names in error messages: edit distance and the nearest candidates.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace uc {

// Levenshtein distance (insertions, deletions, substitutions).
size_t EditDistance(std::string_view a, std::string_view b);

// Up to `max_matches` of the `candidates` nearest to `name` (all at the same, smallest edit
// distance, sorted by name), or none when that distance exceeds max(2, |name| / 3).
std::vector<std::string> ClosestMatches(std::string_view name,
                                        const std::vector<std::string>& candidates,
                                        size_t max_matches = 3);

// " (did you mean 'a' or 'b'?)" for the closest matches, or "" when none is close.
std::string DidYouMean(std::string_view name, const std::vector<std::string>& candidates);

// 'a', 'b' and 'c' — names quoted, the last two joined by `last_separator` (", " gives a plain
// list).
std::string JoinQuoted(const std::vector<std::string>& names, std::string_view last_separator);

}  // namespace uc
