// File: spec_util.h
// -----------------------------------------------------------------------------
// Text helpers for spec error messages (internal to probe/): quoting values the way
// Undercurrent v0.1 shows them, listing choices, and did-you-mean suggestions computed like
// Python's difflib.get_close_matches (Ratcliff/Obershelp similarity, cutoff 0.6), so that both
// implementations suggest the same key or value.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "probe/spec/spec.h"

namespace uc::probe::internal {

// 'text' in single quotes, or "text" in double quotes when it holds a ' but no " (Python's
// repr of a str); backslashes, newlines, tabs and the chosen quote are escaped.
std::string PyQuote(std::string_view text);

// "'a', 'b' or 'c'".
std::string OneOf(const std::vector<std::string_view>& choices);

// difflib.SequenceMatcher(None, a, b).ratio(): 2 * matched / (len(a) + len(b)), in [0, 1].
double SimilarityRatio(std::string_view a, std::string_view b);

// " Did you mean 'x'?" for the choice most similar to `value` (ratio >= 0.6; ties go to the
// lexicographically larger choice, as difflib's do), retrying with `value` lower-cased; "" when
// nothing is close. The leading space lets callers append it unconditionally.
std::string DidYouMean(std::string_view value, const std::vector<std::string_view>& choices);

// The spellings of an enum's values, in declaration order (the order messages and the schema
// list them); the enumerators are 0, 1, 2, ... Defined for the enums of spec.h.
template <typename E>
std::span<const std::string_view> EnumNames();
template <>
std::span<const std::string_view> EnumNames<TensorType>();
template <>
std::span<const std::string_view> EnumNames<ProbeKind>();
template <>
std::span<const std::string_view> EnumNames<ExecutionMode>();
template <>
std::span<const std::string_view> EnumNames<Until>();
template <>
std::span<const std::string_view> EnumNames<InterventionMode>();
template <>
std::span<const std::string_view> EnumNames<OnTimeout>();
template <>
std::span<const std::string_view> EnumNames<OverflowPolicy>();
template <>
std::span<const std::string_view> EnumNames<Combine>();

template <typename E>
std::vector<std::string_view> EnumNameList() {
  const std::span<const std::string_view> names = EnumNames<E>();
  return {names.begin(), names.end()};
}

template <typename E>
std::optional<E> EnumFromName(std::string_view name) {
  const std::span<const std::string_view> names = EnumNames<E>();
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == name) return static_cast<E>(i);
  }
  return std::nullopt;
}

}  // namespace uc::probe::internal
