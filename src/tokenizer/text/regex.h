// File: regex.h
// -----------------------------------------------------------------------------
// Regex: a compiled PCRE2 pattern in UTF + UCP mode (\s, \p{L}, \d and friends follow
// Unicode), JIT-compiled when PCRE2 supports it. It is what the byte-level pre-tokenizers
// split with; their patterns use Unicode classes, lookahead and (?i:...), which std::regex
// cannot express.
//
// Invalid UTF-8 in the subject is allowed (PCRE2_MATCH_INVALID_UTF): such bytes never match.
//
// Immutable after Compile(); FindAll() may be called from many threads at once.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace uc::tokenizer {

class Regex {
 public:
  // InvalidArgument naming the pattern and PCRE2's message and offset on a syntax error.
  static StatusOr<std::shared_ptr<const Regex>> Compile(std::string_view pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  const std::string& pattern() const { return pattern_; }

  // Appends the byte spans [begin, end) of successive non-overlapping, non-empty matches in
  // `text`, left to right. If PCRE2 gives up on a match (resource limits), the rest of the
  // text is left unmatched.
  void FindAll(std::string_view text, std::vector<std::pair<size_t, size_t>>* spans) const;

 private:
  Regex(std::string pattern, void* code) : pattern_(std::move(pattern)), code_(code) {}

  std::string pattern_;
  void* code_;  // pcre2_code_8*, kept opaque so this header does not pull in pcre2.h
};

}  // namespace uc::tokenizer
