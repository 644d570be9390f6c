// File: bpe_model.h
// -----------------------------------------------------------------------------
// RankedBpe: the BPE encoder of GPT-2 and Hugging Face tokenizers. A fragment is normalized
// (only used by Llama-2-style tokenizer.json: dummy prefix and "▁" escaping), cut into words
// by the PreTokenizer, each word is mapped through GPT-2's byte-to-unicode table when
// `byte_level` is set, split into characters, and the adjacent pair with the lowest merge rank
// is merged repeatedly (leftmost first for equal pairs). With `ignore_merges` (Llama 3), a
// word that is itself a vocabulary entry is emitted directly.
//
// With `merges_by_position` there is no merge list: any two adjacent tokens whose concatenation
// is a token merge, the lowest merged id first, then the longer left part, then the leftmost.
// That is exactly the merge list transformers derives for a GGUF vocabulary that has none, with
// token positions as scores (Gemma: generate_merges in tokenization_utils_base.py), without
// building its half a million entries.
//
// Results are memoized per word (word_cache.h).
//
// Thread-safe; borrows the Vocab.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/status.h"
#include "tokenizer/models/encoding_model.h"
#include "tokenizer/models/word_cache.h"
#include "tokenizer/text/normalizer.h"
#include "tokenizer/text/pre_tokenizer.h"

namespace uc::tokenizer {

struct RankedBpeOptions {
  NormalizerOptions normalizer;
  PreTokenizer pre_tokenizer;
  bool byte_level = false;
  bool ignore_merges = false;
  bool merges_by_position = false;  // see above; `merges` is then ignored
  UnknownPolicy unknown;
};

class RankedBpe : public EncodingModel {
 public:
  // `merges` are (left, right) vocabulary strings, highest priority first. Merges naming a
  // string that is not in the vocabulary are skipped (counted in num_skipped_merges()).
  RankedBpe(const Vocab& vocab, const std::vector<std::pair<std::string, std::string>>& merges,
            RankedBpeOptions options);

  void Encode(std::string_view fragment, bool at_text_start,
              std::vector<int32_t>* ids) const override;

  int num_merges() const { return static_cast<int>(merges_.size()); }
  int num_skipped_merges() const { return num_skipped_merges_; }

 private:
  struct MergeRule {
    int32_t rank;
    int32_t id;
  };
  static uint64_t PairKey(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  // Encodes one pre-tokenized word (not yet byte-mapped).
  void EncodeWord(std::string_view word, std::vector<int32_t>* ids) const;

  const Vocab& vocab_;
  RankedBpeOptions options_;
  std::unordered_map<uint64_t, MergeRule> merges_;
  int num_skipped_merges_ = 0;
  // No pre-tokenizer (Llama-2-style): cut at "▁" runs instead; see CanSplitBeforeSpaceMarkers().
  bool split_at_spaces_ = false;
  WordCache cache_;
};

}  // namespace uc::tokenizer
