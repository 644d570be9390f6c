// File: ndjson_file_sink.h
// -----------------------------------------------------------------------------
// NdjsonFileSink: appends each record as one JSON line to a file (Undercurrent v0.1's
// FileLogSink, with size-based rotation). Every write opens the file with O_APPEND, takes an
// exclusive flock, writes the whole line, and closes it: lines from several threads or several
// processes never interleave, and an external `logrotate` (move, no copytruncate) just works.
// With max_bytes > 0, a write that would take the file past max_bytes first renames
// PATH -> PATH.1 -> ... -> PATH.<max_files> (the oldest is removed) and starts a new PATH; the
// rotation happens under the lock and a writer that raced with it re-opens the new file.
// The redactor (none by default) runs on every record.
//
// Failures (disk full, permissions) are counted and logged (at most once per 10 s), never
// thrown. A write that stops midway (a full disk) is rolled back under the lock (the file is
// truncated to its size before the append), so the file always holds whole lines only.
//
// Thread-safety: thread-safe; safe with other processes appending to the same path.
#pragma once

#include <atomic>
#include <filesystem>
#include <mutex>
#include <string>

#include "probe/sinks/metrics.h"
#include "probe/sinks/redaction.h"
#include "probe/sinks/sink.h"

namespace uc::probe {

struct NdjsonFileOptions {
  int64_t max_bytes = 0;  // rotate before a file grows past this; 0: never rotate
  int max_files = 5;      // rotated files kept (PATH.1 .. PATH.<max_files>)
  Redactor redactor;      // nothing redacted by default
};

class NdjsonFileSink : public Sink {
 public:
  // Checks the parent directory exists and the file can be opened for appending (creating it).
  // `metrics` (may be null) gets this sink's series under `metrics_name`.
  static StatusOr<std::shared_ptr<NdjsonFileSink>> Open(const std::filesystem::path& path,
                                                        NdjsonFileOptions options = {},
                                                        Metrics* metrics = nullptr,
                                                        const std::string& metrics_name = "file");

  void Write(const nlohmann::json& record) override;
  std::string name() const override { return "file"; }
  // Appends one prebuilt line (no redaction; a newline is added). OK or the error.
  Status AppendLine(const std::string& line);

  const std::filesystem::path& path() const { return path_; }
  int64_t lines_written() const { return written_.load(); }
  int64_t write_errors() const { return errors_.load(); }

 private:
  NdjsonFileSink(std::filesystem::path path, NdjsonFileOptions options, SinkMetrics* metrics)
      : path_(std::move(path)), options_(std::move(options)), metrics_(metrics) {}
  Status Rotate();
  // Truncates the locked file `fd` back to `size` after a partial append.
  void RollBack(int fd, int64_t size);

  std::filesystem::path path_;
  NdjsonFileOptions options_;
  SinkMetrics* metrics_;
  std::mutex mu_;  // one writer of this process at a time (flock covers other processes)
  std::atomic<int64_t> written_{0};
  std::atomic<int64_t> errors_{0};
  std::atomic<int64_t> last_error_log_{0};
};

}  // namespace uc::probe
