// File: capture_util.h
// -----------------------------------------------------------------------------
// Helpers for the `undercurrent capture` tests: run the real binary, load a dataset the way a
// reader would (manifest, index lines, each row's activation), compare two datasets, and run
// the numpy reader on one.
#pragma once

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace uc::testing {

struct CliRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

// Runs `undercurrent capture ARGS` (ARGS already quoted for the shell), with `env` ("A=1 B=2")
// prepended when given.
CliRun RunCapture(const std::string& args, const std::string& env = "");

struct LoadedDataset {
  nlohmann::json manifest;
  std::vector<std::string> index_lines;    // index.ndjson, as written
  std::vector<nlohmann::json> index;       // parsed
  std::vector<std::vector<float>> values;  // [row][width of its tensor], index order
};

// Loads a complete dataset through io::SafetensorsFile; fails the test on any problem.
LoadedDataset LoadDataset(const std::filesystem::path& dir);

// Empty when `a` and `b` have the same index lines and every row's values agree within
// `tolerance` relative to the row's largest magnitude (DESIGN.md's record tolerance); else
// what differs first. Reports the largest relative and absolute differences in `*max_rel` and
// `*max_abs` when given.
std::string CompareDatasets(const LoadedDataset& a, const LoadedDataset& b, double tolerance,
                            double* max_rel = nullptr, double* max_abs = nullptr);

// Every regular file of `dir`: name -> bytes.
std::map<std::string, std::string> DirectoryFiles(const std::filesystem::path& dir);

// Runs tests/integration/compare_datasets.py (numpy only) on the two datasets; returns its exit
// code, its output in *output.
int RunPythonCompare(const std::filesystem::path& a, const std::filesystem::path& b,
                     double tolerance, std::string* output);

}  // namespace uc::testing
