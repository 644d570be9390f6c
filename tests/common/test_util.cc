#include "common/test_util.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>

namespace uc::testing {

std::filesystem::path TestData(const std::string& relative) {
  return std::filesystem::path(UC_SOURCE_DIR) / "tests" / "testdata" / relative;
}

std::filesystem::path CliBinary() {
  return std::filesystem::path(UC_BINARY_DIR) / "bin" / "undercurrent";
}

nlohmann::json LoadJson(const std::filesystem::path& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  if (!in.good()) return nullptr;
  try {
    return nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    ADD_FAILURE() << path << ": " << e.what();
    return nullptr;
  }
}

std::vector<float> JsonFloats(const nlohmann::json& array) {
  std::vector<float> out;
  out.reserve(array.size());
  for (const auto& v : array) out.push_back(v.get<float>());
  return out;
}

std::vector<int32_t> JsonInts(const nlohmann::json& array) {
  std::vector<int32_t> out;
  out.reserve(array.size());
  for (const auto& v : array) out.push_back(v.get<int32_t>());
  return out;
}

Diff MaxAbsDiff(std::span<const float> a, std::span<const float> b) {
  Diff d;
  EXPECT_EQ(a.size(), b.size());
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const double diff = std::fabs(static_cast<double>(a[i]) - b[i]);
    if (diff > d.max_abs || std::isnan(diff)) {
      d.max_abs = std::isnan(diff) ? INFINITY : diff;
      d.worst_index = i;
    }
  }
  return d;
}

std::filesystem::path ScratchDir(const std::string& name) {
  const std::filesystem::path dir = std::filesystem::path(UC_BINARY_DIR) / "test-scratch" / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

int RunCommand(const std::string& command, std::string* output) {
  const std::string full = command + " 2>&1";
  FILE* pipe = popen(full.c_str(), "r");
  if (pipe == nullptr) return -1;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) {
    if (output != nullptr) output->append(buf.data(), n);
  }
  const int status = pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace uc::testing
