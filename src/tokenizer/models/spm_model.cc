#include "tokenizer/models/spm_model.h"

#include <optional>
#include <string>

#include "tokenizer/models/bpe_merge.h"
#include "tokenizer/text/utf8.h"

namespace uc::tokenizer {

int32_t SentencePieceBpe::FindMergeable(std::string_view piece) const {
  const int32_t id = vocab_.Find(piece);
  if (id < 0) return -1;
  const TokenType type = vocab_.token(id).type;
  const bool mergeable =
      type == TokenType::kNormal || type == TokenType::kUserDefined || type == TokenType::kUnused;
  return mergeable ? id : -1;
}

void SentencePieceBpe::Encode(std::string_view fragment, bool at_text_start,
                              std::vector<int32_t>* ids) const {
  const std::string text = Normalize(fragment, normalizer_, at_text_start);
  if (text.empty()) return;
  if (!split_at_spaces_) {
    EncodeSegment(text, ids);
    return;
  }
  auto encode_segment = [this](std::string_view segment, std::vector<int32_t>* out) {
    EncodeSegment(segment, out);
  };
  for (const std::string_view segment : SplitBeforeSpaceMarkers(text)) {
    cache_.Get(segment, ids, encode_segment);
  }
}

void SentencePieceBpe::EncodeSegment(std::string_view text, std::vector<int32_t>* ids) const {
  std::vector<BpeSymbol> symbols;
  symbols.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const size_t len = Utf8CharLength(text.substr(pos));
    const int32_t id = FindMergeable(text.substr(pos, len));
    symbols.push_back({id, static_cast<uint32_t>(pos), static_cast<uint32_t>(len), 0, 0});
    pos += len;
  }
  LinkSymbols(&symbols);
  MergeSymbols(&symbols, [&](const BpeSymbol& l, const BpeSymbol& r) -> std::optional<BpeMerge> {
    const int32_t id = FindMergeable(text.substr(l.begin, l.length + r.length));
    if (id < 0) return std::nullopt;
    return BpeMerge{id, vocab_.token(id).score};
  });
  for (int32_t i = 0; i >= 0; i = symbols[i].next) {
    const BpeSymbol& s = symbols[i];
    if (s.id >= 0) {
      ids->push_back(s.id);
    } else {
      EmitUnknown(text.substr(s.begin, s.length), vocab_, unknown_, ids);
    }
  }
}

}  // namespace uc::tokenizer
