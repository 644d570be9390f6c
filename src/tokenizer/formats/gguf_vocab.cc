// Tokenizer from GGUF metadata (keys tokenizer.ggml.*), following llama.cpp's conventions:
// model "llama" is SentencePiece BPE with scores and token types, a dummy-prefix space
// (add_space_prefix, default true) and no whitespace collapsing; model "gpt2" is byte-level BPE
// with ranked merges ("left right" strings) and the pre-tokenizer named by tokenizer.ggml.pre.
// Special ids stored as 0xFFFFFFFF (or absent) mean "none".
//
// Gemma files (general.architecture gemma, gemma2, gemma3; model "llama") follow transformers
// instead (FillGemma below).
#include <string_view>

#include "base/logging.h"
#include "tokenizer/loaders.h"

namespace uc::tokenizer {
namespace {

constexpr std::string_view kModelKey = "tokenizer.ggml.model";

Status FieldError(const io::GgufFile& gguf, std::string_view key, const std::string& message) {
  return InvalidArgumentError(gguf.path() + ": metadata key '" + std::string(key) +
                              "': " + message);
}

// A special-token id; `fallback` when absent; -1 for the "none" sentinel.
StatusOr<int32_t> OptionalId(const io::GgufFile& gguf, std::string_view key, int32_t fallback) {
  if (gguf.Find(key) == nullptr) return fallback;
  UC_ASSIGN_OR_RETURN(int64_t value, gguf.GetInt(key));
  if (value == 0xFFFFFFFFLL || value == -1) return -1;
  if (value < 0 || value > INT32_MAX) {
    return FieldError(gguf, key, "token id " + std::to_string(value) + " is not valid");
  }
  return static_cast<int32_t>(value);
}

StatusOr<bool> OptionalBool(const io::GgufFile& gguf, std::string_view key, bool fallback) {
  if (gguf.Find(key) == nullptr) return fallback;
  return gguf.GetBool(key);
}

// Tokens with scores (0 if absent) and types (inferred if absent).
StatusOr<std::vector<TokenInfo>> ReadTokens(const io::GgufFile& gguf) {
  UC_ASSIGN_OR_RETURN(std::vector<std::string> texts, gguf.GetStringArray("tokenizer.ggml.tokens"));
  const size_t n = texts.size();
  std::vector<float> scores;
  std::vector<int32_t> types;
  if (gguf.Find("tokenizer.ggml.scores") != nullptr) {
    UC_ASSIGN_OR_RETURN(scores, gguf.GetFloatArray("tokenizer.ggml.scores"));
    if (scores.size() != n) {
      return FieldError(
          gguf, "tokenizer.ggml.scores",
          std::to_string(scores.size()) + " scores for " + std::to_string(n) + " tokens");
    }
  }
  if (gguf.Find("tokenizer.ggml.token_type") != nullptr) {
    UC_ASSIGN_OR_RETURN(types, gguf.GetInt32Array("tokenizer.ggml.token_type"));
    if (types.size() != n) {
      return FieldError(
          gguf, "tokenizer.ggml.token_type",
          std::to_string(types.size()) + " types for " + std::to_string(n) + " tokens");
    }
  }
  std::vector<TokenInfo> tokens(n);
  for (size_t i = 0; i < n; ++i) {
    TokenInfo& t = tokens[i];
    t.text = std::move(texts[i]);
    t.score = scores.empty() ? 0.0f : scores[i];
    if (!types.empty()) {
      // llama.cpp's UNDEFINED (0) and anything unknown count as normal text.
      t.type =
          types[i] >= 1 && types[i] <= 6 ? static_cast<TokenType>(types[i]) : TokenType::kNormal;
    } else if (ParseByteToken(t.text)) {
      t.type = TokenType::kByte;
    }
  }
  return tokens;
}

StatusOr<std::vector<std::pair<std::string, std::string>>> ReadMerges(const io::GgufFile& gguf) {
  constexpr std::string_view kKey = "tokenizer.ggml.merges";
  UC_ASSIGN_OR_RETURN(std::vector<std::string> lines, gguf.GetStringArray(kKey));
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(lines.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    const size_t space = lines[i].find(' ', 1);
    if (space == std::string::npos) {
      return FieldError(gguf, kKey,
                        "entry " + std::to_string(i) + " '" + lines[i] + "' is not 'left right'");
    }
    merges.emplace_back(lines[i].substr(0, space), lines[i].substr(space + 1));
  }
  return merges;
}

Status FillSentencePiece(const io::GgufFile& gguf, TokenizerSpec* spec) {
  spec->algorithm = Algorithm::kSentencePieceBpe;
  UC_ASSIGN_OR_RETURN(bool add_space_prefix,
                      OptionalBool(gguf, "tokenizer.ggml.add_space_prefix", true));
  UC_ASSIGN_OR_RETURN(bool remove_extra,
                      OptionalBool(gguf, "tokenizer.ggml.remove_extra_whitespaces", false));
  spec->normalizer = {.add_dummy_prefix = add_space_prefix,
                      .remove_extra_whitespaces = remove_extra,
                      .escape_whitespaces = true};
  spec->leading_space = add_space_prefix ? LeadingSpace::kStripOnce : LeadingSpace::kKeep;
  spec->unknown.byte_fallback = true;
  UC_ASSIGN_OR_RETURN(spec->unknown.unk_id, OptionalId(gguf, "tokenizer.ggml.unknown_token_id", 0));
  UC_ASSIGN_OR_RETURN(spec->bos_id, OptionalId(gguf, "tokenizer.ggml.bos_token_id", 1));
  UC_ASSIGN_OR_RETURN(spec->eos_id, OptionalId(gguf, "tokenizer.ggml.eos_token_id", 2));
  UC_ASSIGN_OR_RETURN(spec->add_bos_token,
                      OptionalBool(gguf, "tokenizer.ggml.add_bos_token", true));
  return OkStatus();
}

// Gemma as transformers (5.x) builds it from a GGUF (integrations/gguf/gguf_tokenizer_mapping.py,
// gemma_tokenizer), the reference tests/testdata/gemma3/tokenizer_ids.json was made with:
//   * whitespace tokens stored as real spaces ("  ", 2..31 spaces, user-defined) are spelled
//     "▁▁".. again and become ordinary pieces that merges produce;
//   * ranked BPE over the whole "▁"-escaped text, no dummy prefix (whatever add_space_prefix
//     says), byte fallback, <unk> fused; the merges are every split of every token into two
//     tokens, ranked by the position of the merged token in the vocabulary (then longer left
//     part first), since Gemma's scores do not follow its merge order (merges_by_position).
// llama.cpp differs on long space runs: it matches the user-defined "  " tokens greedily in
// the raw text (40 spaces: 31 + 9), where the merges give 16 + 24.
bool IsAsciiSpaceRun(std::string_view text) {
  return !text.empty() && text.find_first_not_of(' ') == std::string_view::npos;
}

Status FillGemma(const io::GgufFile& gguf, TokenizerSpec* spec) {
  spec->algorithm = Algorithm::kRankedBpe;
  for (TokenInfo& t : spec->tokens) {
    if (!IsAsciiSpaceRun(t.text)) continue;
    std::string respelled;
    for (size_t i = 0; i < t.text.size(); ++i) respelled.append(kSpaceMarker);
    t.text = std::move(respelled);
    t.type = TokenType::kNormal;
  }
  spec->merges_by_position = true;
  spec->normalizer = {.escape_whitespaces = true};
  spec->leading_space = LeadingSpace::kKeep;
  spec->unknown.byte_fallback = true;
  spec->unknown.fuse_unk = true;
  UC_ASSIGN_OR_RETURN(spec->unknown.unk_id, OptionalId(gguf, "tokenizer.ggml.unknown_token_id", 3));
  UC_ASSIGN_OR_RETURN(spec->bos_id, OptionalId(gguf, "tokenizer.ggml.bos_token_id", 2));
  UC_ASSIGN_OR_RETURN(spec->eos_id, OptionalId(gguf, "tokenizer.ggml.eos_token_id", 1));
  UC_ASSIGN_OR_RETURN(spec->add_bos_token,
                      OptionalBool(gguf, "tokenizer.ggml.add_bos_token", true));
  return OkStatus();
}

bool IsGemmaArchitecture(const io::GgufFile& gguf) {
  if (gguf.Find("general.architecture") == nullptr) return false;
  const StatusOr<std::string> arch = gguf.GetString("general.architecture");
  return arch.ok() && (*arch == "gemma" || *arch == "gemma2" || *arch == "gemma3");
}

Status FillByteLevel(const io::GgufFile& gguf, TokenizerSpec* spec) {
  spec->algorithm = Algorithm::kRankedBpe;
  spec->byte_level = true;
  UC_ASSIGN_OR_RETURN(spec->merges, ReadMerges(gguf));
  std::string pre = "default";
  if (gguf.Find("tokenizer.ggml.pre") != nullptr) {
    UC_ASSIGN_OR_RETURN(pre, gguf.GetString("tokenizer.ggml.pre"));
  }
  StatusOr<PreTokenizer> pre_tokenizer = PreTokenizerForGgufPre(pre, &spec->ignore_merges);
  if (!pre_tokenizer.ok()) {
    return pre_tokenizer.status().Annotate(gguf.path() + ": metadata key 'tokenizer.ggml.pre'");
  }
  spec->pre_tokenizer = std::move(pre_tokenizer).value();
  UC_ASSIGN_OR_RETURN(spec->unknown.unk_id,
                      OptionalId(gguf, "tokenizer.ggml.unknown_token_id", -1));
  UC_ASSIGN_OR_RETURN(spec->bos_id, OptionalId(gguf, "tokenizer.ggml.bos_token_id", -1));
  UC_ASSIGN_OR_RETURN(spec->eos_id, OptionalId(gguf, "tokenizer.ggml.eos_token_id", -1));
  // llama.cpp adds BOS by default only for the Llama 3 family.
  UC_ASSIGN_OR_RETURN(spec->add_bos_token,
                      OptionalBool(gguf, "tokenizer.ggml.add_bos_token", spec->ignore_merges));
  return OkStatus();
}

Status FillCommon(const io::GgufFile& gguf, TokenizerSpec* spec) {
  UC_ASSIGN_OR_RETURN(spec->pad_id, OptionalId(gguf, "tokenizer.ggml.padding_token_id", -1));
  UC_ASSIGN_OR_RETURN(spec->add_eos_token,
                      OptionalBool(gguf, "tokenizer.ggml.add_eos_token", false));
  for (const char* key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    UC_ASSIGN_OR_RETURN(int32_t id, OptionalId(gguf, key, -1));
    if (id >= 0) spec->extra_stop_ids.push_back(id);
  }
  const auto n = static_cast<int32_t>(spec->tokens.size());
  if (spec->pad_id >= n) {
    UC_LOG(WARNING) << gguf.path() << ": padding id " << spec->pad_id << " is outside the " << n
                    << "-token vocabulary; ignored";
    spec->pad_id = -1;
  }
  return OkStatus();
}

// Without tokenizer.ggml.token_type, the special ids are the only typed tokens we know of.
void MarkSpecialTypes(TokenizerSpec* spec) {
  auto mark = [&](int32_t id, TokenType type) {
    if (id >= 0 && id < static_cast<int32_t>(spec->tokens.size())) spec->tokens[id].type = type;
  };
  mark(spec->unknown.unk_id, TokenType::kUnknown);
  mark(spec->bos_id, TokenType::kControl);
  mark(spec->eos_id, TokenType::kControl);
}

}  // namespace

StatusOr<std::unique_ptr<Tokenizer>> LoadGgufTokenizer(const io::GgufFile& gguf) {
  if (gguf.Find(kModelKey) == nullptr) {
    return NotFoundError(gguf.path() + ": no tokenizer in this GGUF (metadata key '" +
                         std::string(kModelKey) + "' missing)");
  }
  UC_ASSIGN_OR_RETURN(std::string model, gguf.GetString(kModelKey));
  TokenizerSpec spec;
  spec.source = gguf.path();
  UC_ASSIGN_OR_RETURN(spec.tokens, ReadTokens(gguf));
  if (model == "llama" && IsGemmaArchitecture(gguf)) {
    UC_RETURN_IF_ERROR(FillGemma(gguf, &spec));
  } else if (model == "llama") {
    UC_RETURN_IF_ERROR(FillSentencePiece(gguf, &spec));
  } else if (model == "gpt2") {
    UC_RETURN_IF_ERROR(FillByteLevel(gguf, &spec));
  } else {
    return UnimplementedError(gguf.path() + ": metadata key '" + std::string(kModelKey) + "' is '" +
                              model +
                              "'; supported: 'llama' (SentencePiece BPE), "
                              "'gpt2' (byte-level BPE)");
  }
  UC_RETURN_IF_ERROR(FillCommon(gguf, &spec));
  if (gguf.Find("tokenizer.ggml.token_type") == nullptr) MarkSpecialTypes(&spec);
  return Tokenizer::Create(std::move(spec));
}

StatusOr<std::unique_ptr<Tokenizer>> LoadGgufTokenizer(const std::filesystem::path& path) {
  UC_ASSIGN_OR_RETURN(std::shared_ptr<const io::GgufFile> gguf, io::GgufFile::Open(path));
  return LoadGgufTokenizer(*gguf);
}

}  // namespace uc::tokenizer
