// Hugging Face tokenizer.json (BPE models), with tokenizer_config.json and
// generation_config.json from the same directory when present:
//   tokenizer.json         model {type BPE, vocab, merges, unk_token, byte_fallback, fuse_unk,
//                          ignore_merges}, added_tokens, normalizer, pre_tokenizer, decoder,
//                          post_processor (hf_components.h)
//   tokenizer_config.json  add_bos_token, add_eos_token, bos/eos/pad/unk_token,
//                          added_tokens_decoder
//   generation_config.json eos_token_id (int or list): more stop ids; bos_token_id
#include <cstdlib>

#include "io/json_file.h"
#include "tokenizer/formats/hf_components.h"
#include "tokenizer/formats/json_field.h"
#include "tokenizer/loaders.h"

namespace uc::tokenizer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

int32_t FindTokenId(const TokenizerSpec& spec, std::string_view text) {
  for (size_t id = 0; id < spec.tokens.size(); ++id) {
    if (spec.tokens[id].text == text) return static_cast<int32_t>(id);
  }
  return -1;
}

// Grows the token table so that `id` exists; new slots are unused placeholders.
void EnsureToken(TokenizerSpec* spec, int64_t id) {
  if (id >= static_cast<int64_t>(spec->tokens.size())) {
    spec->tokens.resize(static_cast<size_t>(id) + 1, TokenInfo{"", 0.0f, TokenType::kUnused});
  }
}

StatusOr<int32_t> ReadId(const JsonField& field) {
  UC_ASSIGN_OR_RETURN(int64_t id, field.Int());
  if (id < 0 || id >= (int64_t{1} << 24)) return field.Error("is not a plausible token id");
  return static_cast<int32_t>(id);
}

Status ParseVocab(const JsonField& vocab, TokenizerSpec* spec) {
  UC_RETURN_IF_ERROR(vocab.ExpectObject());
  for (const auto& [text, value] : vocab.json().items()) {
    UC_ASSIGN_OR_RETURN(int32_t id, ReadId(vocab[text]));
    EnsureToken(spec, id);
    spec->tokens[id] = TokenInfo{text, 0.0f, TokenType::kNormal};
  }
  return OkStatus();
}

Status ParseMerges(const JsonField& merges, TokenizerSpec* spec) {
  if (merges.is_null()) return OkStatus();
  UC_RETURN_IF_ERROR(merges.ExpectArray());
  spec->merges.reserve(merges.json().size());
  for (size_t i = 0; i < merges.json().size(); ++i) {
    const json& m = merges.json()[i];
    if (m.is_string()) {
      const std::string& line = m.get_ref<const std::string&>();
      const size_t space = line.find(' ', 1);
      if (space == std::string::npos) return merges.at(i).Error("is not \"left right\"");
      spec->merges.emplace_back(line.substr(0, space), line.substr(space + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      spec->merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      return merges.at(i).Error("must be a string or a [left, right] pair");
    }
  }
  return OkStatus();
}

// One added token (tokenizer.json added_tokens[i], or tokenizer_config added_tokens_decoder).
Status AddToken(const JsonField& field, int32_t id, TokenizerSpec* spec) {
  UC_ASSIGN_OR_RETURN(std::string content, field["content"].String());
  if (content.empty()) return field["content"].Error("is empty");
  UC_ASSIGN_OR_RETURN(bool special, field["special"].BoolOr(false));
  UC_ASSIGN_OR_RETURN(bool lstrip, field["lstrip"].BoolOr(false));
  UC_ASSIGN_OR_RETURN(bool rstrip, field["rstrip"].BoolOr(false));
  EnsureToken(spec, id);
  spec->tokens[id] =
      TokenInfo{content, 0.0f, special ? TokenType::kControl : TokenType::kUserDefined};
  if (lstrip || rstrip) spec->added_token_flags.push_back({id, lstrip, rstrip});
  return OkStatus();
}

Status ParseAddedTokens(const JsonField& added, TokenizerSpec* spec) {
  if (added.is_null()) return OkStatus();
  UC_RETURN_IF_ERROR(added.ExpectArray());
  for (size_t i = 0; i < added.json().size(); ++i) {
    UC_ASSIGN_OR_RETURN(int32_t id, ReadId(added.at(i)["id"]));
    UC_RETURN_IF_ERROR(AddToken(added.at(i), id, spec));
  }
  return OkStatus();
}

Status CheckBpeOptions(const JsonField& model) {
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    UC_ASSIGN_OR_RETURN(std::string value, model[key].StringOr(""));
    if (!value.empty()) {
      return UnimplementedError(model[key].Error("is set; not supported").message());
    }
  }
  return OkStatus();
}

Status ParseModel(const JsonField& model, TokenizerSpec* spec) {
  UC_RETURN_IF_ERROR(model.ExpectObject());
  UC_ASSIGN_OR_RETURN(std::string type, model["type"].StringOr("BPE"));
  if (type != "BPE") {
    return UnimplementedError(
        model["type"].Error("is '" + type + "'; only BPE is supported").message());
  }
  UC_RETURN_IF_ERROR(CheckBpeOptions(model));
  UC_RETURN_IF_ERROR(ParseVocab(model["vocab"], spec));
  UC_RETURN_IF_ERROR(ParseMerges(model["merges"], spec));
  spec->algorithm = Algorithm::kRankedBpe;
  UC_ASSIGN_OR_RETURN(spec->unknown.byte_fallback, model["byte_fallback"].BoolOr(false));
  UC_ASSIGN_OR_RETURN(spec->unknown.fuse_unk, model["fuse_unk"].BoolOr(false));
  UC_ASSIGN_OR_RETURN(spec->ignore_merges, model["ignore_merges"].BoolOr(false));
  return OkStatus();
}

// Token types that only follow from the model options.
void MarkModelTokenTypes(const std::string& unk_text, TokenizerSpec* spec) {
  for (TokenInfo& t : spec->tokens) {
    if (!unk_text.empty() && t.text == unk_text) {
      t.type = TokenType::kUnknown;
    } else if (t.type == TokenType::kNormal && spec->unknown.byte_fallback &&
               ParseByteToken(t.text)) {
      t.type = TokenType::kByte;
    }
  }
}

// A token named by text: a string or {"content": string}; empty when null.
StatusOr<std::string> TokenTextOf(const JsonField& field) {
  if (field.is_null()) return std::string();
  if (field.json().is_object()) return field["content"].String();
  return field.String();
}

// Resolves a token text to an id; -1 for an empty text.
StatusOr<int32_t> ResolveToken(const JsonField& field, const std::string& text,
                               const TokenizerSpec& spec) {
  if (text.empty()) return -1;
  const int32_t id = FindTokenId(spec, text);
  if (id < 0) return field.Error("names '" + text + "', which is not in the vocabulary");
  return id;
}

// Defaults for tokenizer.json alone: the template's tokens, else well-known names.
void GuessSpecialIds(const HfTemplate& tmpl, TokenizerSpec* spec) {
  auto first_found = [&](std::initializer_list<std::string_view> names) {
    for (const std::string_view name : names) {
      const int32_t id = FindTokenId(*spec, name);
      if (id >= 0) return id;
    }
    return -1;
  };
  if (!tmpl.bos_text.empty()) spec->bos_id = FindTokenId(*spec, tmpl.bos_text);
  if (!tmpl.eos_text.empty()) spec->eos_id = FindTokenId(*spec, tmpl.eos_text);
  if (spec->bos_id < 0) spec->bos_id = first_found({"<s>", "<|begin_of_text|>", "<bos>"});
  if (spec->eos_id < 0) {
    spec->eos_id = first_found({"</s>", "<|end_of_text|>", "<|endoftext|>", "<eos>"});
  }
  spec->add_bos_token = !tmpl.bos_text.empty() && spec->bos_id >= 0;
  spec->add_eos_token = !tmpl.eos_text.empty() && spec->eos_id >= 0;
}

StatusOr<TokenizerSpec> ParseTokenizerJson(const json& doc, const std::string& source) {
  const JsonField root(doc, "", source);
  UC_RETURN_IF_ERROR(root.ExpectObject());
  TokenizerSpec spec;
  spec.source = source;
  UC_RETURN_IF_ERROR(ParseModel(root["model"], &spec));
  UC_RETURN_IF_ERROR(ParseAddedTokens(root["added_tokens"], &spec));
  UC_ASSIGN_OR_RETURN(std::string unk_text, root["model"]["unk_token"].StringOr(""));
  MarkModelTokenTypes(unk_text, &spec);
  UC_ASSIGN_OR_RETURN(spec.unknown.unk_id,
                      ResolveToken(root["model"]["unk_token"], unk_text, spec));
  UC_RETURN_IF_ERROR(ParseHfNormalizer(root["normalizer"], &spec));
  UC_RETURN_IF_ERROR(ParseHfPreTokenizer(root["pre_tokenizer"], &spec));
  UC_RETURN_IF_ERROR(ParseHfDecoder(root["decoder"], &spec));
  UC_ASSIGN_OR_RETURN(HfTemplate tmpl, ParseHfPostProcessor(root["post_processor"]));
  GuessSpecialIds(tmpl, &spec);
  return spec;
}

// added_tokens_decoder: {"128000": {"content": "<|begin_of_text|>", "special": true}, ...}
Status ApplyAddedTokensDecoder(const JsonField& decoder, TokenizerSpec* spec) {
  if (decoder.is_null()) return OkStatus();
  UC_RETURN_IF_ERROR(decoder.ExpectObject());
  for (const auto& [key, value] : decoder.json().items()) {
    const JsonField entry = decoder[key];
    char* end = nullptr;
    const long id = std::strtol(key.c_str(), &end, 10);
    if (key.empty() || *end != '\0' || id < 0 || id >= (1L << 24)) {
      return entry.Error("has a key that is not a token id");
    }
    UC_RETURN_IF_ERROR(AddToken(entry, static_cast<int32_t>(id), spec));
  }
  return OkStatus();
}

Status ApplyTokenizerConfig(const json& doc, const std::string& source, TokenizerSpec* spec) {
  const JsonField root(doc, "", source);
  UC_RETURN_IF_ERROR(root.ExpectObject());
  UC_RETURN_IF_ERROR(ApplyAddedTokensDecoder(root["added_tokens_decoder"], spec));
  struct Named {
    const char* key;
    int32_t* id;
  };
  for (const Named& named : {Named{"bos_token", &spec->bos_id}, Named{"eos_token", &spec->eos_id},
                             Named{"unk_token", &spec->unknown.unk_id}}) {
    UC_ASSIGN_OR_RETURN(std::string text, TokenTextOf(root[named.key]));
    UC_ASSIGN_OR_RETURN(int32_t id, ResolveToken(root[named.key], text, *spec));
    if (id >= 0) *named.id = id;
  }
  // Padding is never used for generation: an unknown pad token is not worth failing over.
  UC_ASSIGN_OR_RETURN(std::string pad_text, TokenTextOf(root["pad_token"]));
  if (!pad_text.empty()) spec->pad_id = FindTokenId(*spec, pad_text);
  UC_ASSIGN_OR_RETURN(spec->add_bos_token, root["add_bos_token"].BoolOr(spec->add_bos_token));
  UC_ASSIGN_OR_RETURN(spec->add_eos_token, root["add_eos_token"].BoolOr(spec->add_eos_token));
  return OkStatus();
}

Status ApplyGenerationConfig(const json& doc, const std::string& source, TokenizerSpec* spec) {
  const JsonField root(doc, "", source);
  const JsonField eos = root["eos_token_id"];
  if (eos.json().is_array()) {
    for (size_t i = 0; i < eos.json().size(); ++i) {
      UC_ASSIGN_OR_RETURN(int32_t id, ReadId(eos.at(i)));
      spec->extra_stop_ids.push_back(id);
    }
  } else if (!eos.is_null()) {
    UC_ASSIGN_OR_RETURN(int32_t id, ReadId(eos));
    spec->extra_stop_ids.push_back(id);
  }
  if (spec->bos_id < 0 && !root["bos_token_id"].is_null()) {
    UC_ASSIGN_OR_RETURN(spec->bos_id, ReadId(root["bos_token_id"]));
  }
  return OkStatus();
}

// Applies `apply` to the JSON file `path` if it exists.
template <typename Apply>
Status ApplyIfPresent(const fs::path& path, TokenizerSpec* spec, Apply&& apply) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return OkStatus();
  UC_ASSIGN_OR_RETURN(json doc, io::ReadJsonFile(path));
  return apply(doc, path.string(), spec);
}

}  // namespace

Status ApplyHfConfigFiles(const fs::path& dir, TokenizerSpec* spec) {
  UC_RETURN_IF_ERROR(ApplyIfPresent(dir / "tokenizer_config.json", spec, ApplyTokenizerConfig));
  return ApplyIfPresent(dir / "generation_config.json", spec, ApplyGenerationConfig);
}

StatusOr<std::unique_ptr<Tokenizer>> LoadHfTokenizer(const fs::path& path) {
  std::error_code ec;
  const bool is_dir = fs::is_directory(path, ec);
  const fs::path file = is_dir ? path / "tokenizer.json" : path;
  UC_ASSIGN_OR_RETURN(json doc, io::ReadJsonFile(file));
  UC_ASSIGN_OR_RETURN(TokenizerSpec spec, ParseTokenizerJson(doc, file.string()));
  UC_RETURN_IF_ERROR(ApplyHfConfigFiles(file.parent_path(), &spec));
  return Tokenizer::Create(std::move(spec));
}

}  // namespace uc::tokenizer
