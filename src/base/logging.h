// File: logging.h
// -----------------------------------------------------------------------------
// Minimal leveled logging to stderr: UC_LOG(INFO) << "loaded " << n << " tensors";
// The level threshold comes from SetLogLevel() or the UC_LOG_LEVEL environment variable
// (debug|info|warning|error). Each statement is written with one fwrite, so lines from
// different threads do not interleave. Thread-safe.
#pragma once

#include <sstream>

namespace uc {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
bool LogEnabled(LogLevel level);

class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line);
  ~LogMessage();
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};

}  // namespace uc

#define UC_LOG_LEVEL_DEBUG ::uc::LogLevel::kDebug
#define UC_LOG_LEVEL_INFO ::uc::LogLevel::kInfo
#define UC_LOG_LEVEL_WARNING ::uc::LogLevel::kWarning
#define UC_LOG_LEVEL_ERROR ::uc::LogLevel::kError

#define UC_LOG(severity)                            \
  if (!::uc::LogEnabled(UC_LOG_LEVEL_##severity)) { \
  } else                                            \
    ::uc::LogMessage(UC_LOG_LEVEL_##severity, __FILE__, __LINE__).stream()
