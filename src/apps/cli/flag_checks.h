// File: flag_checks.h
// -----------------------------------------------------------------------------
// Validators the commands share for their numeric flags.
#pragma once

#include <CLI/CLI.hpp>

namespace uc::cli {

// The longest time a flag may give, in seconds (about 11.6 days). Deadlines are clock time
// points in integer nanoseconds: a much larger value would overflow them into the past and
// mean "at once".
inline constexpr double kMaxFlagSeconds = 1e6;

// A duration flag in seconds: within [min_seconds, kMaxFlagSeconds].
inline CLI::Range Seconds(double min_seconds = 0.0) {
  return CLI::Range(min_seconds, kMaxFlagSeconds);
}

// Worker threads per process: 0 (all cores) up to kMaxFlagThreads.
inline constexpr int kMaxFlagThreads = 1024;
inline CLI::Range Threads() { return CLI::Range(0, kMaxFlagThreads); }

}  // namespace uc::cli
