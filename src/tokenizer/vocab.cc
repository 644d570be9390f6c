#include "tokenizer/vocab.h"

namespace uc::tokenizer {
namespace {

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

}  // namespace

std::string_view TokenTypeName(TokenType type) {
  switch (type) {
    case TokenType::kNormal:
      return "normal";
    case TokenType::kUnknown:
      return "unknown";
    case TokenType::kControl:
      return "control";
    case TokenType::kUserDefined:
      return "user-defined";
    case TokenType::kUnused:
      return "unused";
    case TokenType::kByte:
      return "byte";
  }
  return "invalid";
}

std::optional<uint8_t> ParseByteToken(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return std::nullopt;
  const int hi = HexDigit(text[3]);
  const int lo = HexDigit(text[4]);
  if (hi < 0 || lo < 0) return std::nullopt;
  return static_cast<uint8_t>(hi * 16 + lo);
}

Vocab::Vocab(std::vector<TokenInfo> tokens) : tokens_(std::move(tokens)) {
  byte_tokens_.fill(-1);
  index_.reserve(tokens_.size());
  for (int32_t id = 0; id < size(); ++id) {
    const TokenInfo& info = tokens_[static_cast<size_t>(id)];
    if (!info.text.empty()) index_.emplace(info.text, id);  // keeps the first (lowest) id
    if (info.type != TokenType::kByte) continue;
    const std::optional<uint8_t> byte = ParseByteToken(info.text);
    if (byte && byte_tokens_[*byte] < 0) {
      byte_tokens_[*byte] = id;
      ++num_byte_tokens_;
    }
  }
}

int32_t Vocab::Find(std::string_view text) const {
  const auto it = index_.find(text);
  return it == index_.end() ? -1 : it->second;
}

}  // namespace uc::tokenizer
