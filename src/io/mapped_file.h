// File: mapped_file.h
// -----------------------------------------------------------------------------
// MappedFile: a whole file memory-mapped read-only. Checkpoint readers hand out Tensor views
// that borrow the mapping and hold a shared_ptr to it, so the bytes stay mapped for as long as
// any tensor (or reader) refers to them; nothing is copied.
//
//   UC_ASSIGN_OR_RETURN(std::shared_ptr<const MappedFile> file, MappedFile::Open(path));
//   const std::byte* bytes = file->data();
//
// The mapping is registered with base/file_pages.h, so pages copied elsewhere (packed weights)
// can be released from the resident set. Immutable after Open; thread-safe. The file must not be
// truncated by another process while it is mapped (reads past the new end would fault), as with any
// mmap-based reader.
#pragma once

#include <cstddef>
#include <filesystem>
#include <memory>
#include <span>
#include <string>

#include "base/status.h"

namespace uc::io {

class MappedFile {
 public:
  // Maps `path` read-only. NotFound if it does not exist; InvalidArgument if it is not a
  // regular file; other failures carry the errno text. An empty file maps to size() == 0.
  static StatusOr<std::shared_ptr<const MappedFile>> Open(const std::filesystem::path& path);

  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  // First byte of the mapping (page aligned), or nullptr when size() == 0.
  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<const std::byte> bytes() const { return {data_, size_}; }
  // The path as given to Open, for messages.
  const std::string& path() const { return path_; }

 private:
  MappedFile(std::string path, const std::byte* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}

  std::string path_;
  const std::byte* data_;
  size_t size_;
};

}  // namespace uc::io
