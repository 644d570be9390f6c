#include "tokenizer/models/encoding_model.h"

#include "tokenizer/text/normalizer.h"

namespace uc::tokenizer {

void EmitUnknown(std::string_view bytes, const Vocab& vocab, const UnknownPolicy& policy,
                 std::vector<int32_t>* ids) {
  if (policy.byte_fallback) {
    bool all_present = true;
    for (const char c : bytes)
      all_present = all_present && vocab.byte_token(static_cast<uint8_t>(c)) >= 0;
    if (all_present) {
      for (const char c : bytes) ids->push_back(vocab.byte_token(static_cast<uint8_t>(c)));
      return;
    }
  }
  if (policy.unk_id < 0) return;
  if (policy.fuse_unk && !ids->empty() && ids->back() == policy.unk_id) return;
  ids->push_back(policy.unk_id);
}

bool CanSplitBeforeSpaceMarkers(const Vocab& vocab) {
  const size_t m = kSpaceMarker.size();
  for (int32_t id = 0; id < vocab.size(); ++id) {
    const TokenInfo& t = vocab.token(id);
    if (t.type == TokenType::kControl || t.type == TokenType::kByte) continue;
    for (size_t p = t.text.find(kSpaceMarker, 1); p != std::string::npos;
         p = t.text.find(kSpaceMarker, p + 1)) {
      if (p < m || t.text.compare(p - m, m, kSpaceMarker) != 0) return false;
    }
  }
  return true;
}

std::vector<std::string_view> SplitBeforeSpaceMarkers(std::string_view text) {
  const size_t m = kSpaceMarker.size();
  std::vector<std::string_view> pieces;
  size_t begin = 0;
  for (size_t p = text.find(kSpaceMarker, 1); p != std::string_view::npos;
       p = text.find(kSpaceMarker, p + m)) {
    if (p >= m && text.compare(p - m, m, kSpaceMarker) == 0) continue;
    pieces.push_back(text.substr(begin, p - begin));
    begin = p;
  }
  pieces.push_back(text.substr(begin));
  return pieces;
}

}  // namespace uc::tokenizer
