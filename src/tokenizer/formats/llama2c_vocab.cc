// llama2.c tokenizer file (tok*.bin): int32 max_token_length, then for each of vocab_size
// tokens: float32 score, int32 byte length, the bytes. The token count is not stored.
// Pieces have SentencePiece's "▁" already replaced by ' '; ids 1 and 2 are stored as
// "\n<s>\n" and "\n</s>\n".
#include "io/byte_reader.h"
#include "io/mapped_file.h"
#include "tokenizer/loaders.h"

namespace uc::tokenizer {
namespace {

// Turns a stored llama2.c piece back into SentencePiece form with its type.
TokenInfo ConvertPiece(int32_t id, std::string_view text, float score) {
  TokenInfo info;
  info.score = score;
  if (id == 0 && text == "<unk>") {
    info.text = "<unk>";
    info.type = TokenType::kUnknown;
  } else if (id == 1 && text == "\n<s>\n") {
    info.text = "<s>";
    info.type = TokenType::kControl;
  } else if (id == 2 && text == "\n</s>\n") {
    info.text = "</s>";
    info.type = TokenType::kControl;
  } else if (ParseByteToken(text)) {
    info.text = std::string(text);
    info.type = TokenType::kByte;
  } else {
    // llama2.c matches ' ' in the text against ' ' in pieces; escaping both sides as "▁"
    // keeps every match the same.
    for (const char c : text) {
      if (c == ' ') {
        info.text.append(kSpaceMarker);
      } else {
        info.text.push_back(c);
      }
    }
  }
  return info;
}

StatusOr<std::vector<TokenInfo>> ReadLlama2cTokens(io::ByteReader& reader, int32_t vocab_size) {
  int32_t max_token_length = 0;
  UC_RETURN_IF_ERROR(reader.Read(&max_token_length, "max_token_length"));
  std::vector<TokenInfo> tokens;
  tokens.reserve(static_cast<size_t>(vocab_size));
  for (int32_t id = 0; id < vocab_size; ++id) {
    reader.set_context("token " + std::to_string(id));
    float score = 0.0f;
    int32_t length = 0;
    UC_RETURN_IF_ERROR(reader.Read(&score, "score"));
    UC_RETURN_IF_ERROR(reader.Read(&length, "length"));
    if (length < 0) {
      return reader.Error(StatusCode::kInvalidArgument,
                          "negative length " + std::to_string(length));
    }
    UC_RETURN_IF_ERROR(reader.Require(static_cast<uint64_t>(length), "token bytes"));
    const std::string_view text(reinterpret_cast<const char*>(reader.current()),
                                static_cast<size_t>(length));
    UC_RETURN_IF_ERROR(reader.Skip(static_cast<uint64_t>(length), "token bytes"));
    tokens.push_back(ConvertPiece(id, text, score));
  }
  return tokens;
}

}  // namespace

StatusOr<std::unique_ptr<Tokenizer>> LoadLlama2cTokenizer(const std::filesystem::path& path,
                                                          int32_t vocab_size) {
  if (vocab_size <= 0) {
    return InvalidArgumentError(path.string() + ": vocab_size must be positive, got " +
                                std::to_string(vocab_size));
  }
  UC_ASSIGN_OR_RETURN(std::shared_ptr<const io::MappedFile> file, io::MappedFile::Open(path));
  io::ByteReader reader(file->bytes(), path.string());
  UC_ASSIGN_OR_RETURN(std::vector<TokenInfo> tokens, ReadLlama2cTokens(reader, vocab_size));
  if (reader.remaining() != 0) {
    return InvalidArgumentError(path.string() + ": " + std::to_string(reader.remaining()) +
                                " bytes left after " + std::to_string(vocab_size) +
                                " tokens; is the vocab size right?");
  }
  TokenizerSpec spec;
  spec.source = path.string();
  spec.algorithm = Algorithm::kSentencePieceBpe;
  spec.tokens = std::move(tokens);
  spec.normalizer = {.add_dummy_prefix = true, .escape_whitespaces = true};
  spec.unknown = {.byte_fallback = true, .unk_id = 0};
  spec.leading_space = LeadingSpace::kStripOnce;
  spec.bos_id = vocab_size > 1 ? 1 : -1;
  spec.eos_id = vocab_size > 2 ? 2 : -1;
  spec.add_bos_token = true;
  return Tokenizer::Create(std::move(spec));
}

}  // namespace uc::tokenizer
