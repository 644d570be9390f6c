// File: utf8.h
// -----------------------------------------------------------------------------
// Small UTF-8 helpers for the tokenizers: splitting text into characters, checking how much of
// a byte buffer is complete, valid UTF-8, and repairing invalid bytes with U+FFFD.
//
// Validity follows RFC 3629 (no overlong forms, no surrogates, nothing above U+10FFFF).
// Repair replaces each maximal invalid subpart with one U+FFFD, as Python's
// `bytes.decode(errors="replace")` and Rust's `String::from_utf8_lossy` do.
// Stateless functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace uc::tokenizer {

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

// Bytes of the character starting at text[0] judged by its lead byte alone (1..4), clamped to
// text.size(); invalid lead bytes count as 1. For splitting text into character symbols: every
// byte ends up in exactly one piece, valid or not. REQUIRES: !text.empty().
size_t Utf8CharLength(std::string_view text);

// Result of examining the bytes at the start of a buffer.
struct Utf8Sequence {
  enum class Kind { kValid, kIncomplete, kInvalid };
  Kind kind;
  // kValid: bytes of the character. kIncomplete: bytes present (a valid prefix that more bytes
  // could complete). kInvalid: bytes of the maximal invalid subpart to replace (>= 1).
  size_t length;
};
// REQUIRES: !bytes.empty().
Utf8Sequence ExamineUtf8(std::string_view bytes);

// Appends to `out` the longest prefix of `bytes` that ends on a character boundary, replacing
// invalid subparts with U+FFFD; returns the number of bytes consumed. The bytes left over are
// an incomplete (but so far valid) character. With `final` set, that remainder is replaced by
// U+FFFD too and everything is consumed.
size_t AppendValidUtf8(std::string_view bytes, bool final, std::string* out);

// Encodes code point `cp` (REQUIRES: cp <= 0x10FFFF) and appends it to `out`.
void AppendCodepoint(uint32_t cp, std::string* out);

// Decodes the character at text[0] (REQUIRES: ExamineUtf8(text) is kValid).
uint32_t DecodeCodepoint(std::string_view text);

}  // namespace uc::tokenizer
