#include "tokenizer/models/word_cache.h"

namespace uc::tokenizer {

bool WordCache::Lookup(std::string_view word, std::vector<int32_t>* ids) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = entries_.find(word);
  if (it == entries_.end()) return false;
  ids->insert(ids->end(), it->second.begin(), it->second.end());
  return true;
}

void WordCache::Insert(std::string_view word, std::vector<int32_t> word_ids) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (entries_.size() >= kMaxEntries) entries_.clear();
  entries_.emplace(std::string(word), std::move(word_ids));
}

}  // namespace uc::tokenizer
