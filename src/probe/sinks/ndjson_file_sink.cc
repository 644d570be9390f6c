#include "probe/sinks/ndjson_file_sink.h"

#include <fcntl.h>
#include <prometheus/counter.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "base/logging.h"

namespace uc::probe {
namespace {

std::string Errno(const std::string& what, const std::filesystem::path& path) {
  return what + " " + path.string() + ": " + std::strerror(errno);
}

// Closes the descriptor (and so releases its flock) on every path.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

Status WriteFully(int fd, const char* data, size_t n, const std::filesystem::path& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return UnavailableError(Errno("cannot append to", path));
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
  return OkStatus();
}

}  // namespace

StatusOr<std::shared_ptr<NdjsonFileSink>> NdjsonFileSink::Open(const std::filesystem::path& path,
                                                               NdjsonFileOptions options,
                                                               Metrics* metrics,
                                                               const std::string& metrics_name) {
  const std::filesystem::path parent =
      path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  if (!std::filesystem::is_directory(parent)) {
    return NotFoundError("sink file " + path.string() + ": directory " + parent.string() +
                         " does not exist; create it first");
  }
  if (options.max_bytes < 0 || options.max_files < 1) {
    return InvalidArgumentError("sink file " + path.string() +
                                ": max_bytes must be >= 0 and max_files >= 1");
  }
  Fd fd;
  fd.fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd.fd < 0) return UnavailableError(Errno("cannot open sink file", path));
  SinkMetrics* m = metrics != nullptr ? &metrics->Sink(metrics_name) : nullptr;
  return std::shared_ptr<NdjsonFileSink>(new NdjsonFileSink(path, std::move(options), m));
}

Status NdjsonFileSink::Rotate() {
  std::error_code ec;
  const std::string base = path_.string();
  std::filesystem::remove(base + "." + std::to_string(options_.max_files), ec);
  for (int i = options_.max_files - 1; i >= 1; --i) {
    const std::string from = base + "." + std::to_string(i);
    if (std::filesystem::exists(from)) {
      std::filesystem::rename(from, base + "." + std::to_string(i + 1), ec);
      if (ec) return UnavailableError("cannot rotate " + from + ": " + ec.message());
    }
  }
  std::filesystem::rename(path_, base + ".1", ec);
  if (ec) return UnavailableError("cannot rotate " + base + ": " + ec.message());
  return OkStatus();
}

void NdjsonFileSink::RollBack(int fd, int64_t size) {
  // Still under the flock: no other writer appended after `size`. A partial line (a full disk
  // stops a write midway) is cut off, so the next append starts a line of its own and every
  // line parses.
  while (::ftruncate(fd, static_cast<off_t>(size)) != 0) {
    if (errno == EINTR) continue;
    // Cannot shrink it: end the fragment with a newline so it stays one broken line of its
    // own instead of swallowing the next record.
    (void)!::write(fd, "\n", 1);
    UC_LOG(ERROR) << Errno("cannot roll back a partial line in", path_);
    return;
  }
}

Status NdjsonFileSink::AppendLine(const std::string& line) {
  std::lock_guard<std::mutex> lock(mu_);
  for (int attempt = 0; attempt < 8; ++attempt) {
    Fd fd;
    fd.fd = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd.fd < 0) return UnavailableError(Errno("cannot open", path_));
    if (::flock(fd.fd, LOCK_EX) != 0) return UnavailableError(Errno("cannot lock", path_));
    struct stat open_st {};
    struct stat path_st {};
    if (::fstat(fd.fd, &open_st) != 0) return UnavailableError(Errno("cannot stat", path_));
    if (::stat(path_.c_str(), &path_st) != 0 || path_st.st_ino != open_st.st_ino ||
        path_st.st_dev != open_st.st_dev) {
      continue;  // another writer rotated the file while we waited for the lock
    }
    const int64_t size = static_cast<int64_t>(open_st.st_size);
    if (options_.max_bytes > 0 && size > 0 &&
        size + static_cast<int64_t>(line.size()) + 1 > options_.max_bytes) {
      UC_RETURN_IF_ERROR(Rotate());
      continue;  // write into the fresh file
    }
    std::string out = line;
    out += '\n';
    Status written = WriteFully(fd.fd, out.data(), out.size(), path_);
    if (!written.ok()) RollBack(fd.fd, size);
    return written;
  }
  return UnavailableError("cannot append to " + path_.string() +
                          ": the file kept being rotated by other writers");
}

void NdjsonFileSink::Write(const nlohmann::json& record) {
  std::string line;
  try {
    line = options_.redactor.Apply(record).dump(-1, ' ', false,
                                                nlohmann::json::error_handler_t::replace);
  } catch (const std::exception& e) {
    line.clear();
  }
  const Status status =
      line.empty() ? InternalError("record could not be serialized") : AppendLine(line);
  if (status.ok()) {
    written_.fetch_add(1);
    if (metrics_ != nullptr) metrics_->delivered->Increment();
    return;
  }
  errors_.fetch_add(1);
  if (metrics_ != nullptr) metrics_->write_errors->Increment();
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  int64_t last = last_error_log_.load();
  if (now - last >= 10 && last_error_log_.compare_exchange_strong(last, now)) {
    UC_LOG(ERROR) << "file sink: " << status.message() << " (" << errors_.load()
                  << " record(s) lost so far)";
  }
}

}  // namespace uc::probe
