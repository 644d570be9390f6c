// File: hf_components.h
// -----------------------------------------------------------------------------
// Parsers for the pipeline sections of a Hugging Face tokenizer.json, each filling part of a
// TokenizerSpec. Supported (others fail with Unimplemented naming the type and field):
//
//   normalizer:      null, Sequence, Prepend("▁"), Replace(" " -> "▁"), NFC (applied first,
//                    whatever its place in a Sequence: it commutes with the others), and
//                    NFKC/NFD/NFKD (accepted but not applied: input is assumed to be normalized)
//   pre_tokenizer:   null, Sequence, ByteLevel, Split (String or Regex pattern, any behavior,
//                    invert), Digits, Metaspace
//   decoder:         only read for the leading-space rule (Strip, Metaspace); decoding itself
//                    follows the model type
//   post_processor:  TemplateProcessing (BOS/EOS around a single sequence); others add nothing
//
// (Implemented in hf_components.cc, except ApplyHfConfigFiles in hf_tokenizer_json.cc.)
//
// Stateless functions; thread-safe.
#pragma once

#include <filesystem>
#include <string>

#include "base/status.h"
#include "tokenizer/formats/json_field.h"
#include "tokenizer/tokenizer.h"

namespace uc::tokenizer {

Status ParseHfNormalizer(const JsonField& field, TokenizerSpec* spec);
// Sets spec->pre_tokenizer, spec->byte_level and, for Metaspace, spec->normalizer.
Status ParseHfPreTokenizer(const JsonField& field, TokenizerSpec* spec);
// Sets spec->leading_space.
Status ParseHfDecoder(const JsonField& field, TokenizerSpec* spec);

// Special tokens a TemplateProcessing post-processor puts around a single sequence; empty
// strings when there are none.
struct HfTemplate {
  std::string bos_text;
  std::string eos_text;
};
StatusOr<HfTemplate> ParseHfPostProcessor(const JsonField& field);

// Applies tokenizer_config.json (special tokens, add_bos_token, added_tokens_decoder) and
// generation_config.json (eos_token_id) from `dir` to `spec`, for those that exist.
Status ApplyHfConfigFiles(const std::filesystem::path& dir, TokenizerSpec* spec);

}  // namespace uc::tokenizer
