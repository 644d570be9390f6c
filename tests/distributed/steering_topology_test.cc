// Control vectors across processes: `undercurrent generate` with llama.cpp's control-vector
// flags at TP 2 (every rank adds the vector after the all-reduce), PP 2 (each stage adds its own
// blocks' vectors) and TP×PP 2×2 gives the token ids of one process. Drives the real CLI, which
// re-executes itself under mpirun.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "common/test_util.h"

namespace uc {
namespace {

nlohmann::json GeneratedIds(const std::string& topology) {
  const std::string a = testing::TestData("steering/vectors_a.gguf").string();
  const std::string b = testing::TestData("steering/vectors_b.safetensors").string();
  const std::string command =
      "{ " + testing::CliBinary().string() + " generate --model " + std::string(UC_SOURCE_DIR) +
      "/models/stories260K --prompt 'Once upon a time' --temperature 0 "
      "--max-tokens 24 --json --control-vector " +
      a + " --control-vector-scaled " + b + " -2 --control-vector-layer-range 1 4 " + topology +
      " 2>/dev/null; }";
  std::string output;
  const int code = testing::RunCommand(command, &output);
  EXPECT_EQ(code, 0) << topology << ": " << output;
  return code == 0 ? nlohmann::json::parse(output)["ids"] : nlohmann::json();
}

TEST(SteeringTopologyTest, EveryTopologyGeneratesWhatOneProcessDoes) {
  const nlohmann::json alone = GeneratedIds("");
  ASSERT_EQ(alone.size(), 24u);
  for (const std::string topology : {"--tp 2", "--pp 2", "--tp 2 --pp 2"}) {
    EXPECT_EQ(GeneratedIds(topology), alone) << topology;
  }
}

}  // namespace
}  // namespace uc
