// File: check.h
// -----------------------------------------------------------------------------
// Invariant checks. UC_CHECK(cond, fmt, ...) aborts the process with file:line, the rank (when
// one is registered) and a printf-style message; UC_DCHECK compiles out in NDEBUG builds and is
// for hot loops. Use Status, not these, for anything that depends on input.
//
// Under MPI the distributed layer installs an abort hook (SetFatalHook) that calls MPI_Abort so
// the other ranks do not hang in a collective.
#pragma once

namespace uc {

// Called once on a failed check, after the message is printed and before abort().
using FatalHook = void (*)();
void SetFatalHook(FatalHook hook);
// Rank printed in check messages; -1 (the default) prints none.
void SetCheckRank(int rank);

[[noreturn]] void CheckFailed(const char* file, int line, const char* cond, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));

}  // namespace uc

#define UC_CHECK(cond, ...)                                         \
  do {                                                              \
    if (__builtin_expect(!(cond), 0)) {                             \
      ::uc::CheckFailed(__FILE__, __LINE__, #cond, "" __VA_ARGS__); \
    }                                                               \
  } while (0)

#ifdef NDEBUG
#define UC_DCHECK(cond, ...) \
  do {                       \
  } while (0)
#else
#define UC_DCHECK(cond, ...) UC_CHECK(cond, __VA_ARGS__)
#endif
