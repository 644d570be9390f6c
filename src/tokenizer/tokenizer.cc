#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <unordered_map>

#include "base/logging.h"
#include "tokenizer/incremental_decoder.h"
#include "tokenizer/models/bpe_model.h"
#include "tokenizer/models/spm_model.h"
#include "tokenizer/text/byte_level.h"

namespace uc::tokenizer {
namespace {

// Control tokens that end a turn in common chat formats; generation stops at them as at EOS.
constexpr std::string_view kEndOfTurnTexts[] = {
    "<|eot_id|>",    "<|eom_id|>",      "<|im_end|>", "<|end|>",         "<end_of_turn>",
    "<|endoftext|>", "<|end_of_text|>", "<EOT>",      "<|end_of_turn|>",
};

std::string ReplaceSpaceMarkers(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    if (text.compare(pos, kSpaceMarker.size(), kSpaceMarker) == 0) {
      out.push_back(' ');
      pos += kSpaceMarker.size();
    } else {
      out.push_back(text[pos++]);
    }
  }
  return out;
}

}  // namespace

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Create(TokenizerSpec spec) {
  std::unique_ptr<Tokenizer> tokenizer(new Tokenizer());
  UC_RETURN_IF_ERROR(tokenizer->Init(std::move(spec)));
  return tokenizer;
}

Status Tokenizer::ValidateIds(const TokenizerSpec& spec) const {
  const auto n = static_cast<int32_t>(spec.tokens.size());
  if (n == 0) return InvalidArgumentError(spec.source + ": the vocabulary is empty");
  auto check = [&](int32_t id, const char* what) -> Status {
    if (id >= -1 && id < n) return OkStatus();
    return InvalidArgumentError(spec.source + ": " + what + " " + std::to_string(id) +
                                " is outside the vocabulary of " + std::to_string(n) + " tokens");
  };
  UC_RETURN_IF_ERROR(check(spec.bos_id, "BOS id"));
  UC_RETURN_IF_ERROR(check(spec.eos_id, "EOS id"));
  UC_RETURN_IF_ERROR(check(spec.pad_id, "padding id"));
  UC_RETURN_IF_ERROR(check(spec.unknown.unk_id, "unknown-token id"));
  for (const int32_t id : spec.extra_stop_ids) UC_RETURN_IF_ERROR(check(id, "stop id"));
  for (const AddedTokenFlags& f : spec.added_token_flags) {
    UC_RETURN_IF_ERROR(check(f.id, "added-token id"));
  }
  return OkStatus();
}

Status Tokenizer::Init(TokenizerSpec spec) {
  UC_RETURN_IF_ERROR(ValidateIds(spec));
  source_ = spec.source;
  algorithm_ = spec.algorithm;
  unknown_ = spec.unknown;
  byte_level_ = spec.algorithm == Algorithm::kRankedBpe && spec.byte_level;
  leading_space_ = spec.leading_space;
  bos_id_ = spec.bos_id;
  eos_id_ = spec.eos_id;
  pad_id_ = spec.pad_id;
  add_bos_token_ = spec.add_bos_token;
  add_eos_token_ = spec.add_eos_token;
  vocab_ = Vocab(std::move(spec.tokens));
  if (algorithm_ == Algorithm::kSentencePieceBpe) {
    model_ = std::make_unique<SentencePieceBpe>(vocab_, spec.normalizer, spec.unknown);
  } else {
    RankedBpeOptions options{.normalizer = spec.normalizer,
                             .pre_tokenizer = std::move(spec.pre_tokenizer),
                             .byte_level = spec.byte_level,
                             .ignore_merges = spec.ignore_merges,
                             .merges_by_position = spec.merges_by_position,
                             .unknown = spec.unknown};
    auto bpe = std::make_unique<RankedBpe>(vocab_, spec.merges, std::move(options));
    if (bpe->num_skipped_merges() > 0) {
      UC_LOG(WARNING) << source_ << ": " << bpe->num_skipped_merges() << " of "
                      << spec.merges.size() << " merges name strings missing from the "
                      << "vocabulary; they are ignored";
    }
    model_ = std::move(bpe);
  }
  decoded_.resize(static_cast<size_t>(vocab_.size()));
  for (int32_t id = 0; id < vocab_.size(); ++id) decoded_[id] = DecodeTokenBytes(id);
  BuildSpecialTokens(spec);
  BuildStopIds(spec);
  return OkStatus();
}

void Tokenizer::BuildSpecialTokens(const TokenizerSpec& spec) {
  std::unordered_map<int32_t, AddedTokenFlags> flags;
  for (const AddedTokenFlags& f : spec.added_token_flags) flags[f.id] = f;
  for (int32_t id = 0; id < vocab_.size(); ++id) {
    const TokenInfo& info = vocab_.token(id);
    const bool user = info.type == TokenType::kUserDefined;
    const bool special = info.type == TokenType::kControl || info.type == TokenType::kUnknown;
    if (info.text.empty() || (!user && !special)) continue;
    const auto it = flags.find(id);
    const bool lstrip = it != flags.end() && it->second.lstrip;
    const bool rstrip = it != flags.end() && it->second.rstrip;
    specials_.Add(id, info.text, /*always=*/user, lstrip, rstrip);
  }
}

void Tokenizer::BuildStopIds(const TokenizerSpec& spec) {
  stop_ids_ = spec.extra_stop_ids;
  if (eos_id_ >= 0) stop_ids_.push_back(eos_id_);
  for (const std::string_view text : kEndOfTurnTexts) {
    const int32_t id = vocab_.Find(text);
    if (id >= 0 && vocab_.token(id).type == TokenType::kControl) stop_ids_.push_back(id);
  }
  std::sort(stop_ids_.begin(), stop_ids_.end());
  stop_ids_.erase(std::unique(stop_ids_.begin(), stop_ids_.end()), stop_ids_.end());
}

std::string Tokenizer::DecodeTokenBytes(int32_t id) const {
  const TokenInfo& info = vocab_.token(id);
  switch (info.type) {
    case TokenType::kControl:
      return {};
    case TokenType::kByte: {
      const std::optional<uint8_t> byte = ParseByteToken(info.text);
      return byte ? std::string(1, static_cast<char>(*byte)) : info.text;
    }
    case TokenType::kUnknown:
      return info.text;
    case TokenType::kUserDefined:
      return byte_level_ ? info.text : ReplaceSpaceMarkers(info.text);
    case TokenType::kNormal:
    case TokenType::kUnused:
      break;
  }
  return byte_level_ ? ByteLevelDecode(info.text) : ReplaceSpaceMarkers(info.text);
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool add_bos,
                                       bool parse_special) const {
  std::vector<int32_t> ids;
  if (add_bos && bos_id_ >= 0) ids.push_back(bos_id_);
  if (specials_.empty()) {
    model_->Encode(text, /*at_text_start=*/true, &ids);
    return ids;
  }
  for (const Fragment& fragment : specials_.Split(text, parse_special)) {
    if (fragment.id >= 0) {
      ids.push_back(fragment.id);
    } else {
      model_->Encode(fragment.text, fragment.text.data() == text.data(), &ids);
    }
  }
  return ids;
}

std::string Tokenizer::Decode(std::span<const int32_t> ids) const {
  IncrementalDecoder decoder(*this);
  std::string out;
  for (const int32_t id : ids) out += decoder.Add(id);
  out += decoder.Flush();
  return out;
}

std::string Tokenizer::TokenToPiece(int32_t id) const {
  if (!vocab_.Contains(id)) return {};
  if (vocab_.token(id).type == TokenType::kControl) return vocab_.token(id).text;
  return decoded_[static_cast<size_t>(id)];
}

std::string_view Tokenizer::TokenText(int32_t id) const {
  return vocab_.Contains(id) ? std::string_view(vocab_.token(id).text) : std::string_view();
}

bool Tokenizer::IsStop(int32_t id) const {
  return std::binary_search(stop_ids_.begin(), stop_ids_.end(), id);
}

}  // namespace uc::tokenizer
