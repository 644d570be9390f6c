// File: io_test_util.h
// -----------------------------------------------------------------------------
// Helpers for the io tests: paths into tests/testdata, a scratch directory removed on scope
// exit, whole-file read/write, and a gtest predicate checking an error's code and message.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <string>
#include <string_view>

#include "base/status.h"

namespace uc::io::testing {

inline std::string TestData(std::string_view relative) {
  return std::string(UC_SOURCE_DIR "/tests/testdata/") + std::string(relative);
}

// A fresh directory under the system temp dir, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "uc_io_test_XXXXXX").string();
    const char* made = ::mkdtemp(pattern.data());
    EXPECT_NE(made, nullptr);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string File(std::string_view name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// Replaces the file. Removing it first avoids ext4's flush-on-truncate, which made the
// thousands of rewrites in the truncation tests take seconds.
inline void WriteBytes(const std::filesystem::path& path, std::string_view bytes) {
  std::error_code ignored;
  std::filesystem::remove(path, ignored);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

inline std::string ReadBytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Success when `status` has `code` and its message contains every one of `parts`.
inline ::testing::AssertionResult IsError(const Status& status, StatusCode code,
                                          std::initializer_list<std::string_view> parts) {
  if (status.code() != code) {
    return ::testing::AssertionFailure()
           << "expected " << StatusCodeName(code) << ", got " << status.ToString();
  }
  for (std::string_view part : parts) {
    if (status.message().find(part) == std::string::npos) {
      return ::testing::AssertionFailure()
             << "message lacks \"" << part << "\": " << status.ToString();
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace uc::io::testing
