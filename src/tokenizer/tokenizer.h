// File: tokenizer.h
// -----------------------------------------------------------------------------
// Tokenizer: text <-> token ids for the engine, for SentencePiece-BPE models (Llama 1/2,
// llama2.c, Phi-3) and byte-level / ranked BPE models (GPT-2, Llama 3, Qwen2/3, SmolLM2, and
// Gemma, whose BPE is ranked but not byte-level).
//
//   UC_ASSIGN_OR_RETURN(auto tok, LoadTokenizer(model_dir));       // loaders.h
//   std::vector<int32_t> ids = tok->Encode("Hello", tok->add_bos_token(), /*parse_special=*/true);
//   std::string text = tok->Decode(ids);
//
// A Tokenizer is built from a TokenizerSpec, which the loaders (loaders.h) fill from
// tokenizer.model, llama2.c tok*.bin, GGUF metadata or tokenizer.json. Encoding first cuts the
// text at special tokens (control tokens only when `parse_special`; user-defined tokens
// always), then hands each plain fragment to the EncodingModel.
//
// Decoding maps each token to bytes (▁ -> space, <0xHH> -> the byte, byte-level characters
// back to bytes), drops control tokens, strips the dummy-prefix space where the model adds
// one, and repairs invalid UTF-8 with U+FFFD; IncrementalDecoder (incremental_decoder.h) does
// the same one token at a time. Ids outside [0, vocab_size()) decode to nothing: a model's
// embedding table may have more rows than the tokenizer has tokens.
//
// Immutable after Create(); all methods are thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "tokenizer/models/encoding_model.h"
#include "tokenizer/special_tokens.h"
#include "tokenizer/text/normalizer.h"
#include "tokenizer/text/pre_tokenizer.h"
#include "tokenizer/vocab.h"

namespace uc::tokenizer {

enum class Algorithm {
  kSentencePieceBpe,  // score-driven merges over characters (spm_model.h)
  kRankedBpe,         // rank-driven merges inside pre-tokenized words (bpe_model.h)
};

// What decoding does with the space that the dummy prefix put in front of the text.
enum class LeadingSpace {
  kKeep,             // byte-level models: nothing to undo
  kStripOnce,        // drop one leading space of the first token, and of the token right after
                     // BOS (llama2.c, llama.cpp)
  kStripWhileEmpty,  // drop the leading space of every token while nothing has been output yet
                     // (SentencePiece's DecodeIds)
};

// Per-token extras for added tokens (Hugging Face `added_tokens`).
struct AddedTokenFlags {
  int32_t id;
  bool lstrip = false;
  bool rstrip = false;
};

// Everything a Tokenizer is made of. Loaders fill it; Create() validates it.
struct TokenizerSpec {
  std::string source;  // file the data came from; prefixes every error message
  Algorithm algorithm = Algorithm::kSentencePieceBpe;
  std::vector<TokenInfo> tokens;  // index = id
  // kRankedBpe: (left, right) vocabulary strings, best first.
  std::vector<std::pair<std::string, std::string>> merges;
  NormalizerOptions normalizer;
  PreTokenizer pre_tokenizer;  // kRankedBpe only
  bool byte_level = false;     // kRankedBpe: GPT-2 byte-to-unicode mapping
  bool ignore_merges = false;  // kRankedBpe: whole-word vocabulary hits skip merging
  // kRankedBpe without `merges`: pairs merge by the merged token's id (RankedBpeOptions).
  bool merges_by_position = false;
  UnknownPolicy unknown;
  LeadingSpace leading_space = LeadingSpace::kKeep;
  std::vector<AddedTokenFlags> added_token_flags;
  // -1 = none.
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t pad_id = -1;
  // Further end-of-generation ids (end-of-turn tokens, generation_config.json eos ids).
  std::vector<int32_t> extra_stop_ids;
  bool add_bos_token = false;
  bool add_eos_token = false;
};

class Tokenizer {
 public:
  // InvalidArgument (prefixed with spec.source) if the spec is inconsistent: no tokens, or a
  // special or added-token id out of range.
  static StatusOr<std::unique_ptr<Tokenizer>> Create(TokenizerSpec spec);
  // The encoding model refers to the vocabulary inside, so a Tokenizer stays where it is.
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Encodes `text`. `add_bos`: prepend bos_id() (ignored if there is none). `parse_special`:
  // control tokens written in the text ("<|im_start|>", "<s>") become their ids; otherwise
  // they are encoded as ordinary text.
  std::vector<int32_t> Encode(std::string_view text, bool add_bos, bool parse_special) const;

  // Text of `ids`: control tokens are skipped, invalid UTF-8 becomes U+FFFD. Equals the
  // concatenated output of an IncrementalDecoder fed the same ids, then flushed.
  std::string Decode(std::span<const int32_t> ids) const;

  // Bytes of one token on its own: "▁Hello" -> " Hello", "<0x0A>" -> "\n", "Ġworld" ->
  // " world"; control tokens give their text ("<|im_end|>"). May be part of a UTF-8 character.
  // Empty for ids out of range.
  std::string TokenToPiece(int32_t id) const;
  // The vocabulary string as stored ("▁Hello", "Ġworld", "<0x0A>"). Empty if out of range.
  std::string_view TokenText(int32_t id) const;
  // REQUIRES: 0 <= id < vocab_size().
  TokenType token_type(int32_t id) const { return vocab_.token(id).type; }
  float token_score(int32_t id) const { return vocab_.token(id).score; }
  // Id of the token whose vocabulary string is `text`, or -1.
  int32_t FindToken(std::string_view text) const { return vocab_.Find(text); }

  int32_t vocab_size() const { return vocab_.size(); }
  int32_t bos_id() const { return bos_id_; }          // -1 if none
  int32_t eos_id() const { return eos_id_; }          // -1 if none
  int32_t pad_id() const { return pad_id_; }          // -1 if none
  int32_t unk_id() const { return unknown_.unk_id; }  // -1 if none
  // Ids that end generation: eos_id() plus end-of-turn tokens (<|im_end|>, <|eot_id|>, ...),
  // sorted, no duplicates.
  const std::vector<int32_t>& stop_ids() const { return stop_ids_; }
  bool IsStop(int32_t id) const;
  // Whether callers should prepend BOS by default (model/tokenizer config).
  bool add_bos_token() const { return add_bos_token_; }
  bool add_eos_token() const { return add_eos_token_; }
  Algorithm algorithm() const { return algorithm_; }
  bool byte_level() const { return byte_level_; }
  LeadingSpace leading_space() const { return leading_space_; }
  const std::string& source() const { return source_; }

  // Decoded bytes of `id` as used inside a sequence: empty for control tokens. REQUIRES: id in
  // range. (IncrementalDecoder's building block.)
  const std::string& DecodedBytes(int32_t id) const { return decoded_[static_cast<size_t>(id)]; }

 private:
  Tokenizer() = default;
  Status Init(TokenizerSpec spec);
  Status ValidateIds(const TokenizerSpec& spec) const;
  void BuildSpecialTokens(const TokenizerSpec& spec);
  void BuildStopIds(const TokenizerSpec& spec);
  std::string DecodeTokenBytes(int32_t id) const;

  std::string source_;
  Algorithm algorithm_ = Algorithm::kSentencePieceBpe;
  Vocab vocab_;
  std::unique_ptr<EncodingModel> model_;  // borrows vocab_
  SpecialTokenMatcher specials_;
  std::vector<std::string> decoded_;  // per id
  UnknownPolicy unknown_;
  bool byte_level_ = false;
  LeadingSpace leading_space_ = LeadingSpace::kKeep;
  int32_t bos_id_ = -1;
  int32_t eos_id_ = -1;
  int32_t pad_id_ = -1;
  std::vector<int32_t> stop_ids_;
  bool add_bos_token_ = false;
  bool add_eos_token_ = false;
};

}  // namespace uc::tokenizer
