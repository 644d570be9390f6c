#include "probe/spec/position.h"

#include <charconv>

#include "probe/spec/spec_util.h"

namespace uc::probe {
namespace {

constexpr std::string_view kGrammar =
    "expected one of: an absolute index (e.g. 5), 'prompt[i]' / 'prompt[-1]', 'generated[i]' / "
    "'generated[-1]', 'generated[*]', 'generated[start:]' or 'generated[start:stop]'; a bracket "
    "form may end in an offset such as '+1' or '-2' (e.g. 'prompt[-1]+1')";

Status Invalid(std::string_view text, std::string_view reason) {
  return InvalidArgumentError("invalid position " + internal::PyQuote(text) + ": " +
                              std::string(reason));
}

bool IsDigits(std::string_view s) {
  if (s.empty()) return false;
  for (const char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// "123" or "-123" (ASCII digits only); nullopt when malformed or out of int64 range.
enum class NumberError { kNone, kMalformed, kRange };
std::optional<int64_t> ParseSigned(std::string_view s, bool allow_minus, bool allow_plus,
                                   NumberError* error) {
  *error = NumberError::kMalformed;
  bool negative = false;
  if (!s.empty() && ((s[0] == '-' && allow_minus) || (s[0] == '+' && allow_plus))) {
    negative = s[0] == '-';
    s.remove_prefix(1);
  }
  if (!IsDigits(s)) return std::nullopt;
  // Parse with the sign attached so that INT64_MIN is representable.
  const std::string digits = (negative ? "-" : "") + std::string(s);
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec == std::errc::result_out_of_range) {
    *error = NumberError::kRange;
    return std::nullopt;
  }
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  *error = NumberError::kNone;
  return value;
}

std::string_view StripWhitespace(std::string_view s) {
  constexpr std::string_view kSpace = " \t\n\r\v\f";
  const size_t begin = s.find_first_not_of(kSpace);
  if (begin == std::string_view::npos) return {};
  return s.substr(begin, s.find_last_not_of(kSpace) - begin + 1);
}

std::string Signed(int64_t v) { return (v >= 0 ? "+" : "") + std::to_string(v); }

// token_pos >= lo and (token_pos - lo) a multiple of stride; lo may be negative.
bool InWindowFrom(int64_t token_pos, int64_t lo, int stride) {
  if (token_pos < lo) return false;
  const uint64_t distance = static_cast<uint64_t>(token_pos) - static_cast<uint64_t>(lo);
  return stride <= 1 || distance % static_cast<uint64_t>(stride) == 0;
}

// A bare int; a bare int with an offset gets its own hint.
StatusOr<PositionSelector> ParseAbsolute(std::string_view text, std::string_view s) {
  NumberError error = NumberError::kNone;
  const std::optional<int64_t> index = ParseSigned(s, true, false, &error);
  if (index.has_value()) return PositionSelector::Absolute(*index);
  if (error == NumberError::kRange) return Invalid(text, "the index is out of range");
  const size_t sign = s.find_first_of("+-", 1);
  if (sign != std::string_view::npos && IsDigits(s.substr(0, sign)) &&
      ParseSigned(s.substr(sign), true, true, &error).has_value()) {
    return Invalid(text,
                   "an absolute index takes no offset; write the sum (e.g. 6 for 5+1), or use a "
                   "bracket form such as 'prompt[5]+1'");
  }
  return Invalid(text, kGrammar);
}

// The signed offset after ']' ("" is 0).
StatusOr<int64_t> ParseOffset(std::string_view text, std::string_view tail) {
  if (tail.empty()) return int64_t{0};
  NumberError error = NumberError::kNone;
  const std::optional<int64_t> offset = ParseSigned(tail, true, true, &error);
  if (offset.has_value() && (tail[0] == '+' || tail[0] == '-')) return *offset;
  return Invalid(text, error == NumberError::kRange ? "the offset is out of range" : kGrammar);
}

// The index inside prompt[...] / generated[...].
StatusOr<int64_t> ParseIndex(std::string_view text, std::string_view inner) {
  NumberError error = NumberError::kNone;
  const std::optional<int64_t> index = ParseSigned(inner, true, false, &error);
  if (index.has_value()) return *index;
  return Invalid(text, error == NumberError::kRange ? "the index is out of range" : kGrammar);
}

}  // namespace

PositionSelector PositionSelector::Absolute(int64_t index) {
  PositionSelector s;
  s.kind_ = Kind::kAbsolute;
  s.index_ = index;
  return s;
}

StatusOr<PositionSelector> PositionSelector::Parse(std::string_view text) {
  const std::string_view s = StripWhitespace(text);
  if (s.empty()) return Invalid(text, "the position is empty; " + std::string(kGrammar));
  const size_t open = s.find('[');
  if (open == std::string_view::npos) return ParseAbsolute(text, s);
  const std::string_view head = s.substr(0, open);
  const size_t close = s.find(']', open);
  if ((head != "prompt" && head != "generated") || close == std::string_view::npos) {
    return Invalid(text, kGrammar);
  }
  UC_ASSIGN_OR_RETURN(const int64_t offset, ParseOffset(text, s.substr(close + 1)));
  const std::string_view inner = s.substr(open + 1, close - open - 1);
  return head == "prompt" ? ParsePrompt(text, inner, offset) : ParseGenerated(text, inner, offset);
}

StatusOr<PositionSelector> PositionSelector::ParsePrompt(std::string_view text,
                                                         std::string_view inner, int64_t offset) {
  if (inner == "*" || inner.find(':') != std::string_view::npos) {
    return Invalid(text,
                   "there is no wildcard or slice over the prompt; capture prompt tokens with one "
                   "extraction point each (e.g. 'prompt[-1]', 'prompt[0]')");
  }
  UC_ASSIGN_OR_RETURN(const int64_t index, ParseIndex(text, inner));
  PositionSelector out;
  out.kind_ = Kind::kPrompt;
  out.index_ = index;
  out.offset_ = offset;
  return out;
}

StatusOr<PositionSelector> PositionSelector::ParseGenerated(std::string_view text,
                                                            std::string_view inner,
                                                            int64_t offset) {
  const size_t colon = inner.find(':');
  if (colon != std::string_view::npos) {
    return ParseSlice(text, inner.substr(0, colon), inner.substr(colon + 1), offset);
  }
  PositionSelector out;
  out.offset_ = offset;
  if (inner == "*") {
    out.kind_ = Kind::kGeneratedAll;
    return out;
  }
  UC_ASSIGN_OR_RETURN(out.index_, ParseIndex(text, inner));
  out.kind_ = Kind::kGenerated;
  return out;
}

StatusOr<PositionSelector> PositionSelector::ParseSlice(std::string_view text,
                                                        std::string_view start_text,
                                                        std::string_view stop_text,
                                                        int64_t offset) {
  NumberError error = NumberError::kNone;
  if (start_text.empty()) {
    return Invalid(text, "a slice needs an explicit start, e.g. 'generated[0:" +
                             std::string(stop_text) + "]'");
  }
  const std::optional<int64_t> start = ParseSigned(start_text, false, false, &error);
  if (!start.has_value()) {
    if (error == NumberError::kRange) return Invalid(text, "the slice start is out of range");
    if (ParseSigned(start_text, true, false, &error).has_value()) {
      return Invalid(text,
                     "a slice start must be >= 0 (a window counted from the end would need the "
                     "final length); use 'generated[-k]' for one token from the end");
    }
    return Invalid(text, kGrammar);
  }
  std::optional<int64_t> stop;
  if (!stop_text.empty()) {
    stop = ParseSigned(stop_text, false, false, &error);
    if (!stop.has_value()) {
      return Invalid(text,
                     error == NumberError::kRange ? "the slice stop is out of range" : kGrammar);
    }
    if (*stop <= *start) {
      return Invalid(text, "slice stop (" + std::to_string(*stop) +
                               ") must be greater than start (" + std::to_string(*start) +
                               "), e.g. 'generated[" + std::to_string(*start) + ":" +
                               std::to_string(*start + 1) + "]', or 'generated[" +
                               std::to_string(*start) + ":]' for no end");
    }
  }
  PositionSelector out;
  out.kind_ = Kind::kGeneratedSlice;
  out.start_ = *start;
  out.stop_ = stop;
  out.offset_ = offset;
  return out;
}

std::optional<int64_t> PositionSelector::Resolve(int64_t prompt_len,
                                                 std::optional<int64_t> num_generated_total) const {
  int64_t base = 0;
  switch (kind_) {
    case Kind::kAbsolute:
      return index_ >= 0 ? std::optional<int64_t>(index_) : std::nullopt;
    case Kind::kPrompt:
      if (index_ >= prompt_len || index_ < -prompt_len) return std::nullopt;
      base = index_ >= 0 ? index_ : prompt_len + index_;
      break;
    case Kind::kGenerated:
      if (index_ >= 0) {
        if (__builtin_add_overflow(prompt_len, index_, &base)) return std::nullopt;
      } else {
        if (!num_generated_total.has_value() || index_ < -*num_generated_total) {
          return std::nullopt;
        }
        base = prompt_len + *num_generated_total + index_;
      }
      break;
    case Kind::kGeneratedAll:
    case Kind::kGeneratedSlice:
      return std::nullopt;
  }
  int64_t resolved = 0;
  if (__builtin_add_overflow(base, offset_, &resolved) || resolved < 0) return std::nullopt;
  return resolved;
}

bool PositionSelector::Matches(int64_t token_pos, int64_t prompt_len, int stride,
                               std::optional<int64_t> num_generated_total) const {
  if (!continuous()) {
    const std::optional<int64_t> resolved = Resolve(prompt_len, num_generated_total);
    return resolved.has_value() && token_pos == *resolved;
  }
  // The window in absolute positions is [prompt_len + start, prompt_len + stop), shifted by
  // the offset; the stride counts from its (unclamped) start.
  const int64_t start = kind_ == Kind::kGeneratedSlice ? start_ : 0;
  int64_t lo = 0;
  if (__builtin_add_overflow(prompt_len, start, &lo) || __builtin_add_overflow(lo, offset_, &lo)) {
    return false;
  }
  if (kind_ == Kind::kGeneratedSlice && stop_.has_value()) {
    int64_t hi = 0;
    if (!__builtin_add_overflow(prompt_len, *stop_, &hi) &&
        !__builtin_add_overflow(hi, offset_, &hi) && token_pos >= hi) {
      return false;
    }
  }
  return InWindowFrom(token_pos, lo, stride);
}

std::string PositionSelector::ToString() const {
  const std::string suffix = offset_ != 0 ? Signed(offset_) : "";
  switch (kind_) {
    case Kind::kAbsolute:
      return std::to_string(index_) + suffix;
    case Kind::kPrompt:
      return "prompt[" + std::to_string(index_) + "]" + suffix;
    case Kind::kGenerated:
      return "generated[" + std::to_string(index_) + "]" + suffix;
    case Kind::kGeneratedAll:
      return "generated[*]" + suffix;
    case Kind::kGeneratedSlice:
      return "generated[" + std::to_string(start_) + ":" +
             (stop_.has_value() ? std::to_string(*stop_) : "") + "]" + suffix;
  }
  return "";
}

}  // namespace uc::probe
