// File: special_tokens.h
// -----------------------------------------------------------------------------
// SpecialTokenMatcher: finds tokens that must be matched as whole units in raw text before
// normalization and BPE: control tokens such as "<|im_start|>" (only when the caller asks for
// special-token parsing) and user-defined / added tokens (always). At each position the
// longest candidate wins; text between matches becomes plain fragments.
//
// `lstrip` / `rstrip` (Hugging Face added-token flags) make a match swallow the whitespace to
// its left / right.
//
// Immutable after the Add() calls; Split() may be called from many threads at once.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace uc::tokenizer {

// A piece of the input: either plain text (id < 0) or one matched token (id >= 0, `text` is
// the matched span).
struct Fragment {
  std::string_view text;
  int32_t id;
};

class SpecialTokenMatcher {
 public:
  // `always`: matched even when special-token parsing is off (user-defined tokens).
  // REQUIRES: !text.empty().
  void Add(int32_t id, std::string text, bool always, bool lstrip = false, bool rstrip = false);

  bool empty() const { return entries_.empty(); }
  // Cuts `text` into fragments. Plain fragments are never empty.
  std::vector<Fragment> Split(std::string_view text, bool parse_special) const;

 private:
  struct Entry {
    std::string text;
    int32_t id;
    bool always;
    bool lstrip;
    bool rstrip;
  };
  // Index into entries_ of the longest candidate matching at text[pos], or -1.
  int FindAt(std::string_view text, size_t pos, bool parse_special) const;

  std::vector<Entry> entries_;
  // Entry indices by first byte, longest text first.
  std::array<std::vector<int>, 256> by_first_byte_;
};

}  // namespace uc::tokenizer
