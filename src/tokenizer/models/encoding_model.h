// File: encoding_model.h
// -----------------------------------------------------------------------------
// EncodingModel: turns one plain text fragment (special tokens already cut out) into token
// ids. The two implementations are the two algorithm families:
//
//   * SentencePieceBpe (spm_model.h): score-driven merges over the characters of the whole
//     normalized fragment, with <0xHH> byte fallback (Llama 1/2, llama2.c, tok512).
//   * RankedBpe (bpe_model.h): regex pre-tokenization into words, then merges by rank inside
//     each word; byte-level (GPT-2, Llama 3, Qwen2, SmolLM2) or over characters with byte
//     fallback (Llama 2 tokenizer.json).
//
// Implementations borrow the Vocab, which must outlive them, and are thread-safe.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace uc::tokenizer {

class EncodingModel {
 public:
  virtual ~EncodingModel() = default;
  // Appends the ids of `fragment` to `ids`. `at_text_start`: the fragment begins the whole
  // input (it decides the dummy prefix under PrefixScheme::kFirst).
  virtual void Encode(std::string_view fragment, bool at_text_start,
                      std::vector<int32_t>* ids) const = 0;
};

// How a span that is not a token is emitted: as its bytes' <0xHH> tokens when `byte_fallback`
// is set and all of them exist, otherwise as `unk_id` (nothing when unk_id < 0). With
// `fuse_unk`, an <unk> directly after another <unk> is not repeated.
struct UnknownPolicy {
  bool byte_fallback = false;
  bool fuse_unk = false;
  int32_t unk_id = -1;
};
void EmitUnknown(std::string_view bytes, const Vocab& vocab, const UnknownPolicy& policy,
                 std::vector<int32_t>* ids);

// Merging a whole text as one sequence is O(n log n) with a priority queue as large as the
// text, which is slow for long prompts. If no token that merging can produce has a "▁" right
// after some other character, no merge ever crosses the start of a "▁" run that follows other
// text, so the text can be cut there and each piece merged on its own, with identical
// results. True for the Llama and tok512 vocabularies.
bool CanSplitBeforeSpaceMarkers(const Vocab& vocab);
// Cuts `text` before every "▁" that follows a character other than "▁".
std::vector<std::string_view> SplitBeforeSpaceMarkers(std::string_view text);

}  // namespace uc::tokenizer
