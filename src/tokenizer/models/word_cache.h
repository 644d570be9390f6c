// File: word_cache.h
// -----------------------------------------------------------------------------
// WordCache: memoizes the ids of words (pre-tokenized pieces, or "▁"-led segments), which
// repeat a lot in real text, so each distinct word goes through BPE merging once. Bounded:
// words longer than kMaxWordBytes are not cached, and the cache is cleared when it holds
// kMaxEntries words.
//
// Thread-safe (one mutex).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/vocab.h"

namespace uc::tokenizer {

class WordCache {
 public:
  static constexpr size_t kMaxWordBytes = 128;
  static constexpr size_t kMaxEntries = size_t{1} << 16;

  // Appends the ids of `word` to `ids`, computing them with `encode(word, &word_ids)` on a
  // miss.
  template <typename Encode>
  void Get(std::string_view word, std::vector<int32_t>* ids, Encode&& encode) const {
    if (word.size() > kMaxWordBytes) {
      encode(word, ids);
      return;
    }
    if (Lookup(word, ids)) return;
    std::vector<int32_t> word_ids;
    encode(word, &word_ids);
    ids->insert(ids->end(), word_ids.begin(), word_ids.end());
    Insert(word, std::move(word_ids));
  }

 private:
  bool Lookup(std::string_view word, std::vector<int32_t>* ids) const;
  void Insert(std::string_view word, std::vector<int32_t> word_ids) const;

  mutable std::mutex mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>>
      entries_;  // guarded by mu_
};

}  // namespace uc::tokenizer
