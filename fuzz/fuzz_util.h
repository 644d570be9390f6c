// File: fuzz_util.h
// -----------------------------------------------------------------------------
// Helpers shared by the fuzz targets: a scratch file per process for the readers that take a
// path (the checkpoint readers map files; they have no in-memory entry point), and the check
// that turns a broken invariant into a crash libFuzzer reports.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>

namespace uc::fuzz {

// Aborts (a finding) when `cond` is false: for properties the parsers promise beyond "no crash".
#define UC_FUZZ_ASSERT(cond, what)                                           \
  do {                                                                       \
    if (!(cond)) {                                                           \
      std::fprintf(stderr, "fuzz invariant broken: %s (%s)\n", what, #cond); \
      std::abort();                                                          \
    }                                                                        \
  } while (0)

// A directory of this process's own under /dev/shm (memory-backed) when it exists, else
// $TMPDIR or /tmp; removed at exit. Fuzzers run in parallel (ctest -j, libFuzzer -jobs), so
// the name carries the process id.
class ScratchDir {
 public:
  explicit ScratchDir(std::string_view tag) {
    std::filesystem::path base = "/dev/shm";
    std::error_code ec;
    if (!std::filesystem::is_directory(base, ec) || access(base.c_str(), W_OK) != 0) {
      const char* tmp = std::getenv("TMPDIR");
      base = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
    }
    dir_ = base / ("uc-fuzz-" + std::string(tag) + "-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_, ec);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  // Writes `size` bytes to the file `name` in the directory (replacing it) and returns its path.
  std::filesystem::path Write(const std::string& name, const uint8_t* data, size_t size) const {
    const std::filesystem::path path = dir_ / name;
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    out.close();
    UC_FUZZ_ASSERT(out.good(), "writing the scratch file");
    return path;
  }

  const std::filesystem::path& path() const { return dir_; }

 private:
  std::filesystem::path dir_;
};

}  // namespace uc::fuzz
