#include "tokenizer/text/byte_level.h"

#include <array>

#include "tokenizer/text/utf8.h"

namespace uc::tokenizer {
namespace {

struct ByteLevelTables {
  std::array<std::string, 256> encoded;   // byte -> UTF-8 of its code point
  std::array<int16_t, 324> byte_of_cp{};  // code point (< 324) -> byte, or -1

  ByteLevelTables() {
    byte_of_cp.fill(-1);
    uint32_t next_extra = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const uint32_t cp = printable ? b : next_extra++;
      AppendCodepoint(cp, &encoded[b]);
      byte_of_cp[cp] = static_cast<int16_t>(b);
    }
  }
};

const ByteLevelTables& Tables() {
  static const ByteLevelTables tables;
  return tables;
}

}  // namespace

void ByteLevelEncode(std::string_view bytes, std::string* out) {
  const ByteLevelTables& t = Tables();
  for (const char c : bytes) out->append(t.encoded[static_cast<uint8_t>(c)]);
}

std::optional<uint8_t> ByteFromByteLevelCodepoint(uint32_t cp) {
  const ByteLevelTables& t = Tables();
  if (cp >= t.byte_of_cp.size() || t.byte_of_cp[cp] < 0) return std::nullopt;
  return static_cast<uint8_t>(t.byte_of_cp[cp]);
}

std::string ByteLevelDecode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const Utf8Sequence seq = ExamineUtf8(text.substr(pos));
    const size_t len = seq.kind == Utf8Sequence::Kind::kValid ? seq.length : 1;
    std::optional<uint8_t> byte;
    if (seq.kind == Utf8Sequence::Kind::kValid) {
      byte = ByteFromByteLevelCodepoint(DecodeCodepoint(text.substr(pos)));
    }
    if (byte) {
      out.push_back(static_cast<char>(*byte));
    } else {
      out.append(text.substr(pos, len));
    }
    pos += len;
  }
  return out;
}

}  // namespace uc::tokenizer
