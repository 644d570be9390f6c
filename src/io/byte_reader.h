// File: byte_reader.h
// -----------------------------------------------------------------------------
// ByteReader: a bounds-checked little-endian cursor over a byte span, for the binary readers
// of this module (GGUF, llama2.c, safetensors' length prefix). Every read checks the bytes
// left first and fails with OutOfRange naming the source, the current context ("tensor info
// #3"), what was being read and the offset; no read ever touches memory past the span.
//
// Borrows the span (the caller keeps the mapping alive). Not thread-safe; one per parse.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "base/status.h"

namespace uc::io {

class ByteReader {
 public:
  ByteReader(std::span<const std::byte> bytes, std::string source)
      : bytes_(bytes), source_(std::move(source)) {}

  size_t offset() const { return offset_; }
  size_t remaining() const { return bytes_.size() - offset_; }
  const std::byte* current() const { return bytes_.data() + offset_; }
  const std::string& source() const { return source_; }
  // Part of every later error message, e.g. "metadata key #2 'general.name'".
  void set_context(std::string context) { context_ = std::move(context); }

  // Reads a trivially copyable little-endian value.
  template <typename T>
  Status Read(T* out, const char* what) {
    static_assert(std::is_trivially_copyable_v<T>);
    UC_RETURN_IF_ERROR(Require(sizeof(T), what));
    std::memcpy(out, current(), sizeof(T));
    offset_ += sizeof(T);
    return OkStatus();
  }
  // Advances by `n` bytes.
  Status Skip(uint64_t n, const char* what);
  // A GGUF string: uint64 length, then that many bytes (not NUL-terminated). The view points
  // into the span.
  Status ReadString(std::string_view* out, const char* what);

  // OutOfRange unless `n` more bytes are available.
  Status Require(uint64_t n, const char* what) const;
  // "SOURCE: CONTEXT: message" with the code given.
  Status Error(StatusCode code, const std::string& message) const;

 private:
  std::span<const std::byte> bytes_;
  size_t offset_ = 0;
  std::string source_;
  std::string context_;
};

}  // namespace uc::io
