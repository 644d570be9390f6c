#include "tokenizer/formats/protobuf_reader.h"

namespace uc::tokenizer {

Status ProtobufReader::Truncated(std::string_view what) const {
  return OutOfRangeError(source_ + ": truncated protobuf in " + context_ + " at byte " +
                         std::to_string(file_offset()) + ": " + std::string(what) +
                         " runs past the end of the data");
}

Status ProtobufReader::Malformed(std::string_view what) const {
  return InvalidArgumentError(source_ + ": malformed protobuf in " + context_ + " at byte " +
                              std::to_string(file_offset()) + ": " + std::string(what));
}

Status ProtobufReader::WrongWireType(uint32_t field, WireType got, WireType expected) const {
  return Malformed("field " + std::to_string(field) + " has wire type " +
                   std::to_string(static_cast<uint32_t>(got)) + ", expected " +
                   std::to_string(static_cast<uint32_t>(expected)));
}

Status ProtobufReader::ReadVarint(uint64_t* value) {
  uint64_t result = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (done()) return Truncated("a varint");
    const auto byte = static_cast<uint8_t>(bytes_[pos_++]);
    result |= static_cast<uint64_t>(byte & 0x7F) << shift;
    if ((byte & 0x80) == 0) {
      *value = result;
      return OkStatus();
    }
  }
  return Malformed("varint longer than 10 bytes");
}

Status ProtobufReader::ReadTag(uint32_t* field, WireType* wire_type) {
  uint64_t tag = 0;
  UC_RETURN_IF_ERROR(ReadVarint(&tag));
  const auto type = static_cast<uint32_t>(tag & 7);
  *field = static_cast<uint32_t>(tag >> 3);
  if (*field == 0) return Malformed("field number 0");
  if (type != 0 && type != 1 && type != 2 && type != 5) {
    return Malformed("unsupported wire type " + std::to_string(type) + " for field " +
                     std::to_string(*field));
  }
  *wire_type = static_cast<WireType>(type);
  return OkStatus();
}

Status ProtobufReader::ReadFixed32(uint32_t* value) {
  if (bytes_.size() - pos_ < 4) return Truncated("a 4-byte value");
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<uint32_t>(static_cast<uint8_t>(bytes_[pos_ + i])) << (8 * i);
  pos_ += 4;
  *value = v;
  return OkStatus();
}

Status ProtobufReader::ReadLengthDelimited(std::string_view* payload, size_t* payload_offset) {
  uint64_t length = 0;
  UC_RETURN_IF_ERROR(ReadVarint(&length));
  if (length > bytes_.size() - pos_) {
    return Truncated("a " + std::to_string(length) + "-byte field (only " +
                     std::to_string(bytes_.size() - pos_) + " bytes left)");
  }
  *payload_offset = file_offset();
  *payload = bytes_.substr(pos_, length);
  pos_ += length;
  return OkStatus();
}

Status ProtobufReader::Skip(WireType wire_type) {
  switch (wire_type) {
    case WireType::kVarint: {
      uint64_t ignored = 0;
      return ReadVarint(&ignored);
    }
    case WireType::kFixed64:
      if (bytes_.size() - pos_ < 8) return Truncated("an 8-byte value");
      pos_ += 8;
      return OkStatus();
    case WireType::kLengthDelimited: {
      std::string_view ignored;
      size_t offset = 0;
      return ReadLengthDelimited(&ignored, &offset);
    }
    case WireType::kFixed32: {
      uint32_t ignored = 0;
      return ReadFixed32(&ignored);
    }
  }
  return Malformed("unknown wire type");
}

}  // namespace uc::tokenizer
