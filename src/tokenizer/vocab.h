// File: vocab.h
// -----------------------------------------------------------------------------
// Vocab: the token table every tokenizer is built on. Each id has its vocabulary string (as
// the model file stores it: "▁Hello" for SentencePiece, "Ġworld" for byte-level BPE,
// "<0x0A>" for a byte token), a score (SentencePiece merge priority; 0 where unused) and a
// type. Lookup by string is exact and returns the lowest id holding that string.
//
// Immutable after construction; thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace uc::tokenizer {

// Token types, numbered as SentencePiece and GGUF (tokenizer.ggml.token_type) number them.
enum class TokenType : uint8_t {
  kNormal = 1,       // ordinary text piece
  kUnknown = 2,      // <unk>
  kControl = 3,      // <s>, </s>, <|im_end|>: never produced from text unless parse_special
  kUserDefined = 4,  // added token matched as a unit in any text
  kUnused = 5,       // reserved slot; never produced
  kByte = 6,         // <0xHH> byte-fallback token
};
std::string_view TokenTypeName(TokenType type);

struct TokenInfo {
  std::string text;
  float score = 0.0f;
  TokenType type = TokenType::kNormal;
};

// "<0x0A>" -> 0x0A; nullopt for anything else.
std::optional<uint8_t> ParseByteToken(std::string_view text);

// Transparent hash so maps keyed by std::string can be searched with a string_view.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

class Vocab {
 public:
  Vocab() = default;
  explicit Vocab(std::vector<TokenInfo> tokens);

  int32_t size() const { return static_cast<int32_t>(tokens_.size()); }
  bool Contains(int32_t id) const { return id >= 0 && id < size(); }
  // REQUIRES: Contains(id).
  const TokenInfo& token(int32_t id) const { return tokens_[static_cast<size_t>(id)]; }
  // Lowest id whose text is `text`, or -1.
  int32_t Find(std::string_view text) const;
  // Id of the byte token for `byte` (type kByte, text "<0xHH>"), or -1.
  int32_t byte_token(uint8_t byte) const { return byte_tokens_[byte]; }
  // True when all 256 byte tokens exist.
  bool has_all_byte_tokens() const { return num_byte_tokens_ == 256; }

 private:
  std::vector<TokenInfo> tokens_;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> index_;
  std::array<int32_t, 256> byte_tokens_{};
  int num_byte_tokens_ = 0;
};

}  // namespace uc::tokenizer
