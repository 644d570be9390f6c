// File: protobuf_reader.h
// -----------------------------------------------------------------------------
// ProtobufReader: a minimal, bounds-checked reader of the protobuf wire format, enough to parse
// SentencePiece's ModelProto without libprotobuf. It walks (field number, wire type) tags and
// reads varints, fixed32/fixed64 values and length-delimited payloads; a nested message is read
// by constructing a reader over the payload (offsets stay absolute, so errors point into the
// file). Groups (wire types 3 and 4) are rejected.
//
// Errors are OutOfRange ("truncated") or InvalidArgument ("malformed") and read
// "SOURCE: truncated protobuf in CONTEXT at byte N: ...". Borrows the bytes. Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace uc::tokenizer {

enum class WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

class ProtobufReader {
 public:
  // `base_offset`: where `bytes` start in the file (for messages).
  ProtobufReader(std::string_view bytes, const std::string& source, std::string context,
                 size_t base_offset = 0)
      : bytes_(bytes), source_(source), context_(std::move(context)), base_(base_offset) {}

  bool done() const { return pos_ >= bytes_.size(); }
  size_t file_offset() const { return base_ + pos_; }
  const std::string& context() const { return context_; }
  // Names what is being read in later messages ("ModelProto", "pieces #3").
  void set_context(std::string context) { context_ = std::move(context); }

  Status ReadTag(uint32_t* field, WireType* wire_type);
  Status ReadVarint(uint64_t* value);
  Status ReadFixed32(uint32_t* value);
  // The payload of a length-delimited field; `payload_offset` receives its file offset.
  Status ReadLengthDelimited(std::string_view* payload, size_t* payload_offset);
  // Skips the value of a field with this wire type.
  Status Skip(WireType wire_type);
  // InvalidArgument "SOURCE: malformed protobuf in CONTEXT at byte N: WHAT".
  Status Malformed(std::string_view what) const;
  // Malformed("field F has wire type W, expected E").
  Status WrongWireType(uint32_t field, WireType got, WireType expected) const;

 private:
  Status Truncated(std::string_view what) const;

  std::string_view bytes_;
  const std::string& source_;
  std::string context_;
  size_t base_;
  size_t pos_ = 0;
};

}  // namespace uc::tokenizer
