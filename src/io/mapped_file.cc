#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/file_pages.h"

namespace uc::io {
namespace {

Status ErrnoError(const std::string& path, const char* what, int err) {
  std::string message = path + ": " + what + ": " + std::strerror(err);
  if (err == ENOENT) return NotFoundError(std::move(message));
  if (err == EISDIR) return InvalidArgumentError(std::move(message));
  return FailedPreconditionError(std::move(message));
}

// Closes the descriptor on every return path; the mapping stays valid after close().
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() { ::close(fd_); }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;

 private:
  int fd_;
};

}  // namespace

StatusOr<std::shared_ptr<const MappedFile>> MappedFile::Open(const std::filesystem::path& path) {
  const std::string name = path.string();
  const int fd = ::open(name.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError(name, "cannot open", errno);
  FdCloser closer(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0) return ErrnoError(name, "cannot stat", errno);
  if (!S_ISREG(st.st_mode)) return InvalidArgumentError(name + ": not a regular file");
  const size_t size = static_cast<size_t>(st.st_size);
  if (size == 0) return std::shared_ptr<const MappedFile>(new MappedFile(name, nullptr, 0));
  void* addr = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (addr == MAP_FAILED) return ErrnoError(name, "cannot mmap", errno);
  RegisterFileMapping(addr, size);
  return std::shared_ptr<const MappedFile>(
      new MappedFile(name, static_cast<const std::byte*>(addr), size));
}

MappedFile::~MappedFile() {
  if (data_ == nullptr) return;
  UnregisterFileMapping(data_);
  ::munmap(const_cast<std::byte*>(data_), size_);
}

}  // namespace uc::io
