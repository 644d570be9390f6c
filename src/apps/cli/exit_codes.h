// File: exit_codes.h
// -----------------------------------------------------------------------------
// Process exit codes shared by every subcommand.
#pragma once

namespace uc::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // the command ran and reported a failure
inline constexpr int kExitUsage = 2;    // bad command line
inline constexpr int kExitInterrupted = 130;

}  // namespace uc::cli
