#include "tokenizer/text/utf8.h"

#include "base/check.h"

namespace uc::tokenizer {
namespace {

bool IsContinuation(unsigned char c) { return (c & 0xC0) == 0x80; }

// Total length announced by a lead byte, or 0 for a byte that cannot start a character.
size_t LeadLength(unsigned char c) {
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return 2;
  if (c >= 0xE0 && c <= 0xEF) return 3;
  if (c >= 0xF0 && c <= 0xF4) return 4;
  return 0;
}

// The second byte has a narrower range after some lead bytes (overlong forms, surrogates,
// code points above U+10FFFF).
bool ValidSecondByte(unsigned char lead, unsigned char c) {
  switch (lead) {
    case 0xE0:
      return c >= 0xA0 && c <= 0xBF;
    case 0xED:
      return c >= 0x80 && c <= 0x9F;
    case 0xF0:
      return c >= 0x90 && c <= 0xBF;
    case 0xF4:
      return c >= 0x80 && c <= 0x8F;
    default:
      return IsContinuation(c);
  }
}

}  // namespace

size_t Utf8CharLength(std::string_view text) {
  UC_DCHECK(!text.empty(), "Utf8CharLength of empty text");
  const size_t n = LeadLength(static_cast<unsigned char>(text[0]));
  if (n == 0) return 1;
  return n < text.size() ? n : text.size();
}

Utf8Sequence ExamineUtf8(std::string_view bytes) {
  UC_DCHECK(!bytes.empty(), "ExamineUtf8 of empty bytes");
  const auto lead = static_cast<unsigned char>(bytes[0]);
  const size_t need = LeadLength(lead);
  if (need == 0) return {Utf8Sequence::Kind::kInvalid, 1};
  for (size_t i = 1; i < need; ++i) {
    if (i >= bytes.size()) return {Utf8Sequence::Kind::kIncomplete, i};
    const auto c = static_cast<unsigned char>(bytes[i]);
    const bool ok = i == 1 ? ValidSecondByte(lead, c) : IsContinuation(c);
    if (!ok) return {Utf8Sequence::Kind::kInvalid, i};
  }
  return {Utf8Sequence::Kind::kValid, need};
}

size_t AppendValidUtf8(std::string_view bytes, bool final, std::string* out) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    const Utf8Sequence seq = ExamineUtf8(bytes.substr(pos));
    switch (seq.kind) {
      case Utf8Sequence::Kind::kValid:
        out->append(bytes.substr(pos, seq.length));
        break;
      case Utf8Sequence::Kind::kInvalid:
        out->append(kReplacementChar);
        break;
      case Utf8Sequence::Kind::kIncomplete:
        if (!final) return pos;
        out->append(kReplacementChar);
        break;
    }
    pos += seq.length;
  }
  return pos;
}

void AppendCodepoint(uint32_t cp, std::string* out) {
  UC_DCHECK(cp <= 0x10FFFF, "code point %u out of range", cp);
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

uint32_t DecodeCodepoint(std::string_view text) {
  const auto c0 = static_cast<unsigned char>(text[0]);
  const size_t n = LeadLength(c0);
  UC_DCHECK(n >= 1 && n <= text.size(), "DecodeCodepoint of an invalid sequence");
  static constexpr unsigned char kLeadMask[5] = {0, 0x7F, 0x1F, 0x0F, 0x07};
  uint32_t cp = c0 & kLeadMask[n];
  for (size_t i = 1; i < n; ++i) cp = (cp << 6) | (static_cast<unsigned char>(text[i]) & 0x3F);
  return cp;
}

}  // namespace uc::tokenizer
