// SentencePiece ModelProto (sentencepiece_model.proto) fields read here:
//   ModelProto:      1 pieces (repeated SentencePiece), 2 trainer_spec, 3 normalizer_spec
//   SentencePiece:   1 piece (string), 2 score (float), 3 type (enum, default NORMAL = 1)
//   TrainerSpec:     3 model_type (UNIGRAM 1, BPE 2, WORD 3, CHAR 4; default UNIGRAM),
//                    24 treat_whitespace_as_suffix, 35 byte_fallback,
//                    40 unk_id (default 0), 41 bos_id (1), 42 eos_id (2), 43 pad_id (-1)
//   NormalizerSpec:  1 name, 2 precompiled_charsmap, 3 add_dummy_prefix (default true),
//                    4 remove_extra_whitespaces (true), 5 escape_whitespaces (true)
#include <cstring>

#include "base/logging.h"
#include "io/mapped_file.h"
#include "tokenizer/formats/protobuf_reader.h"
#include "tokenizer/loaders.h"

namespace uc::tokenizer {
namespace {

struct TrainerSpec {
  uint64_t model_type = 1;
  bool treat_whitespace_as_suffix = false;
  bool byte_fallback = false;
  int32_t unk_id = 0;
  int32_t bos_id = 1;
  int32_t eos_id = 2;
  int32_t pad_id = -1;
};

struct NormalizerSpec {
  std::string name;
  bool has_charsmap = false;
  bool add_dummy_prefix = true;
  bool remove_extra_whitespaces = true;
  bool escape_whitespaces = true;
};

// Reads a varint field into an int32/bool/enum, checking the wire type.
template <typename T>
Status ReadVarintField(ProtobufReader& reader, uint32_t field, WireType type, T* out) {
  if (type != WireType::kVarint) return reader.WrongWireType(field, type, WireType::kVarint);
  uint64_t value = 0;
  UC_RETURN_IF_ERROR(reader.ReadVarint(&value));
  if constexpr (std::is_same_v<T, bool>) {
    *out = value != 0;
  } else {
    *out = static_cast<T>(value);  // negative int32 values arrive sign-extended to 64 bits
  }
  return OkStatus();
}

Status ParsePiece(ProtobufReader reader, TokenInfo* piece) {
  bool has_text = false;
  while (!reader.done()) {
    uint32_t field = 0;
    WireType type{};
    UC_RETURN_IF_ERROR(reader.ReadTag(&field, &type));
    if (field == 1) {
      if (type != WireType::kLengthDelimited) {
        return reader.WrongWireType(field, type, WireType::kLengthDelimited);
      }
      std::string_view text;
      size_t offset = 0;
      UC_RETURN_IF_ERROR(reader.ReadLengthDelimited(&text, &offset));
      piece->text = std::string(text);
      has_text = true;
    } else if (field == 2) {
      if (type != WireType::kFixed32) return reader.WrongWireType(field, type, WireType::kFixed32);
      uint32_t bits = 0;
      UC_RETURN_IF_ERROR(reader.ReadFixed32(&bits));
      std::memcpy(&piece->score, &bits, sizeof(float));
    } else if (field == 3) {
      uint64_t value = 0;
      UC_RETURN_IF_ERROR(ReadVarintField(reader, field, type, &value));
      if (value < 1 || value > 6) {
        return reader.Malformed("piece type " + std::to_string(value) +
                                " is not a SentencePiece type (1..6)");
      }
      piece->type = static_cast<TokenType>(value);
    } else {
      UC_RETURN_IF_ERROR(reader.Skip(type));
    }
  }
  if (!has_text) return reader.Malformed("the piece has no string (field 1)");
  return OkStatus();
}

Status ParseTrainerSpec(ProtobufReader reader, TrainerSpec* spec) {
  while (!reader.done()) {
    uint32_t field = 0;
    WireType type{};
    UC_RETURN_IF_ERROR(reader.ReadTag(&field, &type));
    switch (field) {
      case 3:
        UC_RETURN_IF_ERROR(ReadVarintField(reader, field, type, &spec->model_type));
        break;
      case 24:
        UC_RETURN_IF_ERROR(ReadVarintField(reader, field, type, &spec->treat_whitespace_as_suffix));
        break;
      case 35:
        UC_RETURN_IF_ERROR(ReadVarintField(reader, field, type, &spec->byte_fallback));
        break;
      case 40:
        UC_RETURN_IF_ERROR(ReadVarintField(reader, field, type, &spec->unk_id));
        break;
      case 41:
        UC_RETURN_IF_ERROR(ReadVarintField(reader, field, type, &spec->bos_id));
        break;
      case 42:
        UC_RETURN_IF_ERROR(ReadVarintField(reader, field, type, &spec->eos_id));
        break;
      case 43:
        UC_RETURN_IF_ERROR(ReadVarintField(reader, field, type, &spec->pad_id));
        break;
      default:
        UC_RETURN_IF_ERROR(reader.Skip(type));
    }
  }
  return OkStatus();
}

Status ParseNormalizerSpec(ProtobufReader reader, NormalizerSpec* spec) {
  while (!reader.done()) {
    uint32_t field = 0;
    WireType type{};
    UC_RETURN_IF_ERROR(reader.ReadTag(&field, &type));
    if (field == 1 || field == 2) {
      if (type != WireType::kLengthDelimited) {
        return reader.WrongWireType(field, type, WireType::kLengthDelimited);
      }
      std::string_view bytes;
      size_t offset = 0;
      UC_RETURN_IF_ERROR(reader.ReadLengthDelimited(&bytes, &offset));
      if (field == 1) spec->name = std::string(bytes);
      if (field == 2) spec->has_charsmap = !bytes.empty();
    } else if (field == 3) {
      UC_RETURN_IF_ERROR(ReadVarintField(reader, field, type, &spec->add_dummy_prefix));
    } else if (field == 4) {
      UC_RETURN_IF_ERROR(ReadVarintField(reader, field, type, &spec->remove_extra_whitespaces));
    } else if (field == 5) {
      UC_RETURN_IF_ERROR(ReadVarintField(reader, field, type, &spec->escape_whitespaces));
    } else {
      UC_RETURN_IF_ERROR(reader.Skip(type));
    }
  }
  return OkStatus();
}

struct ModelProto {
  std::vector<TokenInfo> pieces;
  TrainerSpec trainer;
  NormalizerSpec normalizer;
  bool has_trainer = false;
  bool has_normalizer = false;
};

// Reads the payload of a message field and hands a reader over it to `parse`.
template <typename Parse>
Status ParseSubmessage(ProtobufReader& reader, uint32_t field, WireType type,
                       const std::string& source, std::string context, Parse&& parse) {
  if (type != WireType::kLengthDelimited) {
    return reader.WrongWireType(field, type, WireType::kLengthDelimited);
  }
  std::string_view payload;
  size_t offset = 0;
  const std::string outer = reader.context();
  reader.set_context(outer + " field " + context);
  UC_RETURN_IF_ERROR(reader.ReadLengthDelimited(&payload, &offset));
  reader.set_context(outer);
  return parse(ProtobufReader(payload, source, std::move(context), offset));
}

StatusOr<ModelProto> ParseModelProto(std::string_view bytes, const std::string& source) {
  ModelProto model;
  ProtobufReader reader(bytes, source, "ModelProto");
  while (!reader.done()) {
    uint32_t field = 0;
    WireType type{};
    UC_RETURN_IF_ERROR(reader.ReadTag(&field, &type));
    if (field == 1) {
      const std::string context = "pieces #" + std::to_string(model.pieces.size());
      TokenInfo piece;
      UC_RETURN_IF_ERROR(ParseSubmessage(reader, field, type, source, context,
                                         [&](ProtobufReader r) { return ParsePiece(r, &piece); }));
      model.pieces.push_back(std::move(piece));
    } else if (field == 2) {
      model.has_trainer = true;
      UC_RETURN_IF_ERROR(
          ParseSubmessage(reader, field, type, source, "trainer_spec",
                          [&](ProtobufReader r) { return ParseTrainerSpec(r, &model.trainer); }));
    } else if (field == 3) {
      model.has_normalizer = true;
      UC_RETURN_IF_ERROR(ParseSubmessage(
          reader, field, type, source, "normalizer_spec",
          [&](ProtobufReader r) { return ParseNormalizerSpec(r, &model.normalizer); }));
    } else {
      UC_RETURN_IF_ERROR(reader.Skip(type));
    }
  }
  return model;
}

std::string_view ModelTypeName(uint64_t type) {
  switch (type) {
    case 1:
      return "UNIGRAM";
    case 2:
      return "BPE";
    case 3:
      return "WORD";
    case 4:
      return "CHAR";
  }
  return "unknown";
}

Status CheckSupported(const ModelProto& model, const std::string& source) {
  const char* kHint = " (is the file truncated, or not a SentencePiece model?)";
  if (model.pieces.empty()) return InvalidArgumentError(source + ": no pieces" + kHint);
  if (!model.has_trainer) {
    return InvalidArgumentError(source + ": trainer_spec (field 2) missing" + kHint);
  }
  if (!model.has_normalizer) {
    return InvalidArgumentError(source + ": normalizer_spec (field 3) missing" + kHint);
  }
  if (model.trainer.model_type != 2) {
    return UnimplementedError(source + ": trainer_spec.model_type is " +
                              std::string(ModelTypeName(model.trainer.model_type)) + " (" +
                              std::to_string(model.trainer.model_type) +
                              "); only BPE (2) models are supported");
  }
  if (model.trainer.treat_whitespace_as_suffix) {
    return UnimplementedError(source +
                              ": trainer_spec.treat_whitespace_as_suffix is not supported");
  }
  return OkStatus();
}

}  // namespace

StatusOr<TokenizerSpec> ParseSentencePieceModel(std::string_view bytes, std::string source) {
  UC_ASSIGN_OR_RETURN(ModelProto model, ParseModelProto(bytes, source));
  UC_RETURN_IF_ERROR(CheckSupported(model, source));
  const NormalizerSpec& norm = model.normalizer;
  if (norm.has_charsmap) {
    UC_LOG(WARNING) << source << ": normalizer '" << norm.name
                    << "' has a precompiled character map, which is not applied";
  }
  TokenizerSpec spec;
  spec.source = std::move(source);
  spec.algorithm = Algorithm::kSentencePieceBpe;
  spec.tokens = std::move(model.pieces);
  spec.normalizer.add_dummy_prefix = norm.add_dummy_prefix;
  spec.normalizer.remove_extra_whitespaces = norm.remove_extra_whitespaces;
  spec.normalizer.escape_whitespaces = norm.escape_whitespaces;
  spec.unknown = {model.trainer.byte_fallback, /*fuse_unk=*/false, model.trainer.unk_id};
  spec.leading_space = norm.add_dummy_prefix || norm.remove_extra_whitespaces
                           ? LeadingSpace::kStripWhileEmpty
                           : LeadingSpace::kKeep;
  spec.bos_id = model.trainer.bos_id;
  spec.eos_id = model.trainer.eos_id;
  spec.pad_id = model.trainer.pad_id;
  spec.add_bos_token = spec.bos_id >= 0;
  return spec;
}

StatusOr<std::unique_ptr<Tokenizer>> LoadSentencePieceModel(const std::filesystem::path& path) {
  UC_ASSIGN_OR_RETURN(std::shared_ptr<const io::MappedFile> file, io::MappedFile::Open(path));
  const std::string_view bytes(reinterpret_cast<const char*>(file->data()), file->size());
  UC_ASSIGN_OR_RETURN(TokenizerSpec spec, ParseSentencePieceModel(bytes, path.string()));
  return Tokenizer::Create(std::move(spec));
}

}  // namespace uc::tokenizer
