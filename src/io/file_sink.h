// File: file_sink.h
// -----------------------------------------------------------------------------
// Shared plumbing of the checkpoint writers (safetensors_writer.h, gguf_writer.h):
// PendingTensor, a tensor queued for writing, either already in memory or produced on demand
// by a TensorProducer so a large checkpoint streams out one tensor at a time; and FileSink,
// which writes to "PATH.tmp" and renames it over PATH only on Commit(), so a failed write never
// leaves a half-written checkpoint under the real name.
//
// Not thread-safe; one writer per FileSink.
#pragma once

#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"
#include "tensor/tensor.h"

namespace uc::io {

// Returns a tensor's data when the writer reaches it; must return exactly the dtype and shape
// it was registered with.
using TensorProducer = std::function<StatusOr<Tensor>()>;

struct PendingTensor {
  std::string name;
  DType dtype;
  Shape shape;
  Tensor tensor;            // set when the data is already in memory
  TensorProducer producer;  // otherwise

  int64_t nbytes() const { return Tensor::BytesFor(shape, dtype); }
  // The data, produced if needed. InvalidArgument if a producer returns another dtype or shape.
  StatusOr<Tensor> Materialize() const;
};

class FileSink {
 public:
  // Creates (truncates) "PATH.tmp".
  static StatusOr<std::unique_ptr<FileSink>> Create(const std::filesystem::path& path);
  // Closes and removes the temporary file unless Commit() succeeded.
  ~FileSink();
  FileSink(const FileSink&) = delete;
  FileSink& operator=(const FileSink&) = delete;

  Status Write(const void* data, size_t size);
  Status WriteZeros(size_t size);
  uint64_t position() const { return position_; }
  // Flushes, closes and renames the temporary file to PATH. `durable`: also fsyncs the file
  // before the rename and its directory after it, so PATH survives a power loss complete.
  Status Commit(bool durable = false);

 private:
  FileSink(std::filesystem::path path, std::filesystem::path tmp, std::FILE* file)
      : path_(std::move(path)), tmp_(std::move(tmp)), file_(file) {}
  Status Error(const char* what, int err) const;

  std::filesystem::path path_;
  std::filesystem::path tmp_;
  std::FILE* file_;
  uint64_t position_ = 0;
};

// Writes `contents` to PATH through a FileSink: PATH holds either its old contents or all of
// the new ones, never a part.
Status WriteFileAtomically(const std::filesystem::path& path, std::string_view contents,
                           bool durable = false);

}  // namespace uc::io
