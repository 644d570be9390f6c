#include "io/file_sink.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

namespace uc::io {

StatusOr<Tensor> PendingTensor::Materialize() const {
  if (!producer) return tensor;
  UC_ASSIGN_OR_RETURN(Tensor produced, producer());
  if (produced.dtype() != dtype || produced.shape() != shape) {
    return InvalidArgumentError("tensor '" + name + "': producer returned " +
                                std::string(DTypeName(produced.dtype())) + " " +
                                ShapeToString(produced.shape()) + ", registered as " +
                                std::string(DTypeName(dtype)) + " " + ShapeToString(shape));
  }
  return produced;
}

StatusOr<std::unique_ptr<FileSink>> FileSink::Create(const std::filesystem::path& path) {
  std::filesystem::path tmp = path;
  tmp += ".tmp";
  std::FILE* file = std::fopen(tmp.c_str(), "wb");
  if (file == nullptr) {
    return FailedPreconditionError(tmp.string() + ": cannot create: " + std::strerror(errno));
  }
  return std::unique_ptr<FileSink>(new FileSink(path, std::move(tmp), file));
}

FileSink::~FileSink() {
  if (file_ == nullptr) return;
  std::fclose(file_);
  std::error_code ignored;
  std::filesystem::remove(tmp_, ignored);
}

Status FileSink::Error(const char* what, int err) const {
  return FailedPreconditionError(tmp_.string() + ": " + what + ": " + std::strerror(err));
}

Status FileSink::Write(const void* data, size_t size) {
  if (size != 0 && std::fwrite(data, 1, size, file_) != size) return Error("write failed", errno);
  position_ += size;
  return OkStatus();
}

Status FileSink::WriteZeros(size_t size) {
  static const std::vector<char> kZeros(4096, 0);
  while (size > 0) {
    const size_t n = std::min(size, kZeros.size());
    UC_RETURN_IF_ERROR(Write(kZeros.data(), n));
    size -= n;
  }
  return OkStatus();
}

Status FileSink::Commit(bool durable) {
  std::FILE* file = file_;
  file_ = nullptr;
  bool flushed = std::fflush(file) == 0;
  if (flushed && durable) flushed = ::fsync(::fileno(file)) == 0;
  const int flush_errno = errno;
  const bool closed = std::fclose(file) == 0;
  if (!flushed || !closed) {
    const int err = flushed ? errno : flush_errno;
    std::error_code ignored;
    std::filesystem::remove(tmp_, ignored);
    return Error("close failed", err);
  }
  std::error_code ec;
  std::filesystem::rename(tmp_, path_, ec);
  if (ec) {
    std::error_code ignored;
    std::filesystem::remove(tmp_, ignored);
    return FailedPreconditionError(path_.string() +
                                   ": cannot rename the temporary file into "
                                   "place: " +
                                   ec.message());
  }
  if (durable) {
    // The rename itself is durable only once the directory entry is.
    const std::filesystem::path dir = path_.has_parent_path() ? path_.parent_path() : ".";
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
    const bool synced = fd >= 0 && ::fsync(fd) == 0;
    const int err = errno;
    if (fd >= 0) ::close(fd);
    if (!synced) {
      return FailedPreconditionError(dir.string() +
                                     ": cannot sync the directory: " + std::strerror(err));
    }
  }
  return OkStatus();
}

Status WriteFileAtomically(const std::filesystem::path& path, std::string_view contents,
                           bool durable) {
  UC_ASSIGN_OR_RETURN(std::unique_ptr<FileSink> sink, FileSink::Create(path));
  UC_RETURN_IF_ERROR(sink->Write(contents.data(), contents.size()));
  return sink->Commit(durable);
}

}  // namespace uc::io
