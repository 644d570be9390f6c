#include "base/check.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>

namespace uc {
namespace {
std::atomic<FatalHook> g_fatal_hook{nullptr};
std::atomic<int> g_check_rank{-1};
}  // namespace

void SetFatalHook(FatalHook hook) { g_fatal_hook.store(hook); }
void SetCheckRank(int rank) { g_check_rank.store(rank); }

void CheckFailed(const char* file, int line, const char* cond, const char* fmt, ...) {
  const int rank = g_check_rank.load();
  if (rank >= 0) {
    std::fprintf(stderr, "[rank %d] %s:%d: check failed: %s", rank, file, line, cond);
  } else {
    std::fprintf(stderr, "%s:%d: check failed: %s", file, line, cond);
  }
  if (fmt != nullptr && fmt[0] != '\0') {
    std::fputs(": ", stderr);
    va_list args;
    va_start(args, fmt);
    std::vfprintf(stderr, fmt, args);
    va_end(args);
  }
  std::fputc('\n', stderr);
  std::fflush(stderr);
  if (FatalHook hook = g_fatal_hook.load()) hook();
  std::abort();
}

}  // namespace uc
