// File: exit_codes.h
// -----------------------------------------------------------------------------
// Process exit codes shared by every subcommand, and the one way a command reports the error
// that stopped it.
#pragma once

#include <cstdio>
#include <string>

#include "base/status.h"

namespace uc::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // the command ran and reported a failure
inline constexpr int kExitUsage = 2;    // bad command line
inline constexpr int kExitInterrupted = 130;

// Prints "error: MESSAGE" on stderr and returns `code`, for `return Fail(...)` in a handler.
inline int Fail(const std::string& message, int code = kExitFailure) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  return code;
}
inline int Fail(const Status& status) { return Fail(status.message()); }

}  // namespace uc::cli
