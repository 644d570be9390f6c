#include "io/byte_reader.h"

namespace uc::io {

Status ByteReader::Require(uint64_t n, const char* what) const {
  if (n <= remaining()) return OkStatus();
  return Error(StatusCode::kOutOfRange,
               std::string("truncated reading ") + what + " at offset " + std::to_string(offset_) +
                   ": needs " + std::to_string(n) + " bytes, " + std::to_string(remaining()) +
                   " left (file size " + std::to_string(bytes_.size()) + ")");
}

Status ByteReader::Skip(uint64_t n, const char* what) {
  UC_RETURN_IF_ERROR(Require(n, what));
  offset_ += static_cast<size_t>(n);
  return OkStatus();
}

Status ByteReader::ReadString(std::string_view* out, const char* what) {
  uint64_t length = 0;
  UC_RETURN_IF_ERROR(Read(&length, what));
  UC_RETURN_IF_ERROR(Require(length, what));
  *out = std::string_view(reinterpret_cast<const char*>(current()), static_cast<size_t>(length));
  offset_ += static_cast<size_t>(length);
  return OkStatus();
}

Status ByteReader::Error(StatusCode code, const std::string& message) const {
  std::string full = source_ + ": ";
  if (!context_.empty()) full += context_ + ": ";
  return Status(code, full + message);
}

}  // namespace uc::io
