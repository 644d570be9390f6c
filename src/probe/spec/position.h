// File: position.h
// -----------------------------------------------------------------------------
// Position selectors of the extraction-point spec (Undercurrent v0.1 grammar, fixed where
// DESIGN.md says): which token positions of a request an extraction point captures.
//
// Grammar (surrounding whitespace stripped, none inside; indices 0-based):
//   5, "7", -1            absolute index into prompt + generated (negative parses, never matches)
//   prompt[i]             i-th prompt token; i < 0 counts from the end (-1 = last)
//   generated[i]          i-th generated token; i < 0 counts from the end of the generation
//   generated[*]          every generated token                          (continuous)
//   generated[a:]         generated index >= a                           (continuous)
//   generated[a:b]        a <= generated index < b; a >= 0, b > a        (continuous)
//   any bracket form + signed offset directly after ']': prompt[-1]+1, generated[3]-2,
//   generated[2:]+1 (an offset on a continuous form shifts its window: fixed here)
// Rejected: bools, floats, empty strings, prompt[*], prompt[a:b], generated[:5],
// generated[-3:], generated[3:3], offsets on a bare int ("5+1"), numbers outside int64,
// anything else; the error says what is wrong, and lists the grammar when the text matches no
// form at all.
//
// Matching (fixed relative to v0.1): a point selector resolves to one absolute index and
// matches that token, whether prompt or generated, so prompt[-1]+1 is generated[0].
// prompt[i] with i >= prompt_len (or -i > prompt_len) never matches. generated[-k] resolves
// only once the total number of generated tokens with activations is known (the engine
// delivers it when the request ends). Stride (continuous only) keeps every N-th match from the
// window start. Value type, thread-compatible.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"

namespace uc::probe {

class PositionSelector {
 public:
  enum class Kind {
    kAbsolute,        // index
    kPrompt,          // prompt[index]
    kGenerated,       // generated[index]
    kGeneratedAll,    // generated[*]
    kGeneratedSlice,  // generated[start:stop), stop absent = open
  };

  // Parses the string form (YAML strings, or YAML ints converted with std::to_string).
  // InvalidArgument with a message that shows the grammar.
  static StatusOr<PositionSelector> Parse(std::string_view text);
  static PositionSelector Absolute(int64_t index);

  Kind kind() const { return kind_; }
  int64_t index() const { return index_; }  // kAbsolute, kPrompt, kGenerated
  int64_t start() const { return start_; }  // kGeneratedSlice
  std::optional<int64_t> stop() const { return stop_; }
  int64_t offset() const { return offset_; }
  bool continuous() const { return kind_ == Kind::kGeneratedAll || kind_ == Kind::kGeneratedSlice; }
  // True when matching needs the final number of generated tokens (generated[-k], possibly
  // with an offset).
  bool needs_total() const { return kind_ == Kind::kGenerated && index_ < 0; }

  // Does the token at absolute position `token_pos` (prompt has `prompt_len` tokens; the token
  // is generated token number token_pos - prompt_len when token_pos >= prompt_len) match?
  // `stride` (>= 1, continuous only) keeps every stride-th position of the window.
  // `num_generated_total`: the final count of generated tokens with activations, when known;
  // generated[-k] never matches without it.
  bool Matches(int64_t token_pos, int64_t prompt_len, int stride = 1,
               std::optional<int64_t> num_generated_total = std::nullopt) const;

  // The one absolute position a point selector names, or nullopt: continuous selectors, a
  // negative absolute index, prompt[i] past the prompt, generated[-k] without (or beyond)
  // the total, a result before position 0.
  std::optional<int64_t> Resolve(int64_t prompt_len,
                                 std::optional<int64_t> num_generated_total = std::nullopt) const;

  // The canonical string form ("prompt[-1]+1", "generated[2:8]", "5"); Parse(ToString()) is
  // the same selector.
  std::string ToString() const;
  bool operator==(const PositionSelector&) const = default;

 private:
  static StatusOr<PositionSelector> ParsePrompt(std::string_view text, std::string_view inner,
                                                int64_t offset);
  static StatusOr<PositionSelector> ParseGenerated(std::string_view text, std::string_view inner,
                                                   int64_t offset);
  static StatusOr<PositionSelector> ParseSlice(std::string_view text, std::string_view start_text,
                                               std::string_view stop_text, int64_t offset);

  Kind kind_ = Kind::kAbsolute;
  int64_t index_ = 0;
  int64_t start_ = 0;
  std::optional<int64_t> stop_;
  int64_t offset_ = 0;
};

}  // namespace uc::probe
