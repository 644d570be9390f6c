#include "tokenizer/models/bpe_model.h"

#include <algorithm>
#include <optional>

#include "tokenizer/models/bpe_merge.h"
#include "tokenizer/text/byte_level.h"
#include "tokenizer/text/utf8.h"

namespace uc::tokenizer {

RankedBpe::RankedBpe(const Vocab& vocab,
                     const std::vector<std::pair<std::string, std::string>>& merges,
                     RankedBpeOptions options)
    : vocab_(vocab), options_(std::move(options)) {
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    const int32_t left_id = vocab_.Find(left);
    const int32_t right_id = vocab_.Find(right);
    const int32_t merged_id = vocab_.Find(left + right);
    if (left_id < 0 || right_id < 0 || merged_id < 0) {
      ++num_skipped_merges_;
      continue;
    }
    // emplace keeps the first (best-ranked) rule for a repeated pair.
    merges_.emplace(PairKey(left_id, right_id), MergeRule{static_cast<int32_t>(rank), merged_id});
  }
  split_at_spaces_ =
      options_.pre_tokenizer.empty() && !options_.byte_level && CanSplitBeforeSpaceMarkers(vocab_);
}

void RankedBpe::Encode(std::string_view fragment, bool at_text_start,
                       std::vector<int32_t>* ids) const {
  const std::string text = Normalize(fragment, options_.normalizer, at_text_start);
  if (text.empty()) return;
  auto encode_word = [this](std::string_view word, std::vector<int32_t>* out) {
    EncodeWord(word, out);
  };
  if (split_at_spaces_) {
    for (const std::string_view word : SplitBeforeSpaceMarkers(text)) {
      cache_.Get(word, ids, encode_word);
    }
    return;
  }
  for (const std::string& word : options_.pre_tokenizer.Split(text)) {
    if (!word.empty()) cache_.Get(word, ids, encode_word);
  }
}

void RankedBpe::EncodeWord(std::string_view word, std::vector<int32_t>* ids) const {
  std::string mapped;
  if (options_.byte_level) {
    ByteLevelEncode(word, &mapped);
  } else {
    mapped = std::string(word);
  }
  if (options_.ignore_merges) {
    const int32_t id = vocab_.Find(mapped);
    if (id >= 0) {
      ids->push_back(id);
      return;
    }
  }
  std::vector<BpeSymbol> symbols;
  symbols.reserve(mapped.size());
  for (size_t pos = 0; pos < mapped.size();) {
    const size_t len = Utf8CharLength(std::string_view(mapped).substr(pos));
    const int32_t id = vocab_.Find(std::string_view(mapped).substr(pos, len));
    symbols.push_back({id, static_cast<uint32_t>(pos), static_cast<uint32_t>(len), 0, 0});
    pos += len;
  }
  LinkSymbols(&symbols);
  MergeSymbols(&symbols, [&](const BpeSymbol& l, const BpeSymbol& r) -> std::optional<BpeMerge> {
    if (l.id < 0 || r.id < 0) return std::nullopt;
    if (options_.merges_by_position) {
      const int32_t id = vocab_.Find(std::string_view(mapped).substr(l.begin, l.length + r.length));
      if (id < 0) return std::nullopt;
      // Lower ids first; for the same token, the split with the longer left part.
      constexpr uint32_t kMaxLength = 1 << 16;
      return BpeMerge{id,
                      -static_cast<double>(id) * kMaxLength + std::min(l.length, kMaxLength - 1)};
    }
    const auto it = merges_.find(PairKey(l.id, r.id));
    if (it == merges_.end()) return std::nullopt;
    return BpeMerge{it->second.id, -static_cast<double>(it->second.rank)};
  });
  for (int32_t i = 0; i >= 0; i = symbols[i].next) {
    const BpeSymbol& s = symbols[i];
    if (s.id >= 0) {
      ids->push_back(s.id);
      continue;
    }
    const std::string_view span = std::string_view(mapped).substr(s.begin, s.length);
    EmitUnknown(options_.byte_level ? ByteLevelDecode(span) : std::string(span), vocab_,
                options_.unknown, ids);
  }
}

}  // namespace uc::tokenizer
