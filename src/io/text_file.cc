#include "io/text_file.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

namespace uc::io {
namespace {

std::string Kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// Closes the descriptor on every path.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

StatusOr<std::string> ReadTextFile(const std::filesystem::path& path, int64_t max_bytes,
                                   const std::string& what) {
  const std::string where = what + " " + path.string();
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) {
      return NotFoundError(where + ": file not found; check the path");
    }
    return UnavailableError(where + ": " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) {
    return InvalidArgumentError(where + ": is " + Kind(st.st_mode) + ", not a regular file");
  }
  if (st.st_size > max_bytes) {
    return InvalidArgumentError(where + ": is " + std::to_string(st.st_size) +
                                " bytes, more than the " + std::to_string(max_bytes) + " a " +
                                what + " may have");
  }
  Fd fd;
  // O_NONBLOCK: if the path was swapped for a FIFO since the stat, opening cannot hang.
  fd.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd.fd < 0) return UnavailableError(where + ": cannot open: " + std::strerror(errno));
  if (::fstat(fd.fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    return InvalidArgumentError(where + ": is not a regular file");
  }
  std::string text;
  char buf[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd.fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      return UnavailableError(where + ": cannot read: " + std::strerror(errno));
    }
    if (n == 0) break;
    if (static_cast<int64_t>(text.size()) + n > max_bytes) {
      return InvalidArgumentError(where + ": grew past the " + std::to_string(max_bytes) +
                                  " bytes a " + what + " may have");
    }
    text.append(buf, static_cast<size_t>(n));
  }
  return text;
}

}  // namespace uc::io
