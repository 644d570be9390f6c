// File: spm_model.h
// -----------------------------------------------------------------------------
// SentencePieceBpe: SentencePiece's BPE encoder (and llama2.c's, which is the same algorithm).
// The fragment is normalized (dummy prefix, optional whitespace cleanup, ' ' -> "▁"), split
// into UTF-8 characters, and the adjacent pair whose concatenation is a vocabulary piece with
// the highest score is merged repeatedly (leftmost on ties). Characters that never become a
// piece are emitted as <0xHH> byte tokens (byte fallback) or <unk>.
//
// Only normal, user-defined and unused pieces take part in merges; control, unknown and byte
// tokens are never produced from text here. Unused pieces are emitted as they are, without
// SentencePiece's re-segmentation (no supported model has them).
//
// Thread-safe; borrows the Vocab. Segments are memoized (word_cache.h).
#pragma once

#include "tokenizer/models/encoding_model.h"
#include "tokenizer/models/word_cache.h"
#include "tokenizer/text/normalizer.h"

namespace uc::tokenizer {

class SentencePieceBpe : public EncodingModel {
 public:
  SentencePieceBpe(const Vocab& vocab, NormalizerOptions normalizer, UnknownPolicy unknown)
      : vocab_(vocab),
        normalizer_(normalizer),
        unknown_(unknown),
        split_at_spaces_(CanSplitBeforeSpaceMarkers(vocab)) {}

  void Encode(std::string_view fragment, bool at_text_start,
              std::vector<int32_t>* ids) const override;

 private:
  // Id of `piece` if it may be produced by merging, else -1.
  int32_t FindMergeable(std::string_view piece) const;
  // Merges one normalized segment.
  void EncodeSegment(std::string_view text, std::vector<int32_t>* ids) const;

  const Vocab& vocab_;
  NormalizerOptions normalizer_;
  UnknownPolicy unknown_;
  bool split_at_spaces_;  // see CanSplitBeforeSpaceMarkers()
  WordCache cache_;       // segments, when split_at_spaces_
};

}  // namespace uc::tokenizer
