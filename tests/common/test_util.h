// File: test_util.h
// -----------------------------------------------------------------------------
// Helpers shared by the integration tests: paths of committed test data, JSON loading, float
// comparisons that report where and by how much two arrays differ, and greedy sampling params.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "worker/sampling_params.h"

namespace uc::testing {

// UC_SOURCE_DIR "/tests/testdata/" + relative.
std::filesystem::path TestData(const std::string& relative);
// The built `undercurrent` binary.
std::filesystem::path CliBinary();
// Parses a JSON file; fails the test (and returns null) if it cannot.
nlohmann::json LoadJson(const std::filesystem::path& path);
std::vector<float> JsonFloats(const nlohmann::json& array);
std::vector<int32_t> JsonInts(const nlohmann::json& array);

struct Diff {
  double max_abs = 0.0;
  size_t worst_index = 0;
};
Diff MaxAbsDiff(std::span<const float> a, std::span<const float> b);

// A fresh empty directory under the build tree for one test's files.
std::filesystem::path ScratchDir(const std::string& name);

// Runs a shell command, capturing stdout+stderr; returns the exit status.
int RunCommand(const std::string& command, std::string* output);

// Greedy decoding of exactly `max_tokens` tokens (EOS does not stop it): the runs tests compare.
inline worker::SamplingParams Greedy(int max_tokens) {
  worker::SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

}  // namespace uc::testing
