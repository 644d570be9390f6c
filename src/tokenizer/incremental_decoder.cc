#include "tokenizer/incremental_decoder.h"

#include "tokenizer/text/utf8.h"

namespace uc::tokenizer {

IncrementalDecoder::IncrementalDecoder(const Tokenizer& tokenizer, bool at_sequence_start)
    : tokenizer_(tokenizer),
      strip_armed_(at_sequence_start && tokenizer.leading_space() != LeadingSpace::kKeep) {}

std::string_view IncrementalDecoder::StripLeadingSpace(int32_t id, std::string_view bytes) {
  if (!strip_armed_) return bytes;
  if (tokenizer_.token_type(id) != TokenType::kByte && bytes[0] == ' ') bytes.remove_prefix(1);
  // SentencePiece keeps stripping until some text has been produced; llama2.c strips once.
  strip_armed_ = tokenizer_.leading_space() == LeadingSpace::kStripWhileEmpty && bytes.empty();
  return bytes;
}

std::string IncrementalDecoder::Add(int32_t id) {
  if (id < 0 || id >= tokenizer_.vocab_size()) return {};
  if (id == tokenizer_.bos_id() && tokenizer_.leading_space() == LeadingSpace::kStripOnce) {
    strip_armed_ = true;
  }
  const std::string& bytes = tokenizer_.DecodedBytes(id);
  if (bytes.empty()) return {};
  pending_.append(StripLeadingSpace(id, bytes));
  std::string out;
  const size_t consumed = AppendValidUtf8(pending_, /*final=*/false, &out);
  pending_.erase(0, consumed);
  return out;
}

std::string IncrementalDecoder::Flush() {
  std::string out;
  AppendValidUtf8(pending_, /*final=*/true, &out);
  pending_.clear();
  return out;
}

}  // namespace uc::tokenizer
