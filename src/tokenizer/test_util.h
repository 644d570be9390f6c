// File: test_util.h
// -----------------------------------------------------------------------------
// Helpers shared by the tokenizer tests: test-data paths, whole-file reads and the llama.cpp
// vocab test-vector format (tests/testdata/vocab/*.inp and *.out). Test-only.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace uc::tokenizer::testing {

inline std::string TestData(const std::string& relative) {
  return std::string(UC_SOURCE_DIR) + "/tests/testdata/" + relative;
}

inline std::string ReadFileOrDie(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// .inp: the strings joined by "\n__ggml_vocab_test__\n", with one more separator at the end.
inline std::vector<std::string> ReadVocabInputs(const std::string& path) {
  const std::string text = ReadFileOrDie(path);
  const std::string separator = "\n__ggml_vocab_test__\n";
  std::vector<std::string> out;
  size_t pos = 0;
  for (size_t next; (next = text.find(separator, pos)) != std::string::npos;) {
    out.push_back(text.substr(pos, next - pos));
    pos = next + separator.size();
  }
  return out;
}

// .out: one line of space-separated ids per input string.
inline std::vector<std::vector<int32_t>> ReadVocabOutputs(const std::string& path) {
  std::istringstream in(ReadFileOrDie(path));
  std::vector<std::vector<int32_t>> out;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ids(line);
    out.emplace_back();
    for (int32_t id; ids >> id;) out.back().push_back(id);
  }
  return out;
}

}  // namespace uc::tokenizer::testing
