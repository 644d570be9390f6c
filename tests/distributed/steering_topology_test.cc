// Control vectors across processes: `undercurrent generate` with llama.cpp's control-vector
// flags at TP 2 (every rank adds the vector after the all-reduce), PP 2 (each stage adds its own
// blocks' vectors) and TP×PP 2×2 gives the token ids of one process; and conditional steering
// from a spec (an inline probe on stage 0's layer 1 flags generated[3], the vector on block 2
// switches on from generated[4]) gives transformers' masked-hook ids in every topology. Drives
// the real CLI, which re-executes itself under mpirun.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
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

// `generate --prompts` with the spec, one request per line; the ids of each.
std::vector<std::vector<int32_t>> SpecGenerated(const std::string& topology) {
  const std::filesystem::path dir = testing::ScratchDir("steering_topology_spec");
  std::filesystem::copy_file(testing::TestData("steering/p_layer2.gguf"), dir / "p_layer2.gguf",
                             std::filesystem::copy_options::overwrite_existing);
  std::ofstream(dir / "spec.yaml") << R"(version: "1"
extraction_points:
  - name: gate
    layers: [1]
    tensor_type: residual_stream
    position: "generated[3]"
    probe_type: norm_gate
    probe_kind: single_shot
    probe_args: {threshold: 0.001, action: flag}
steering:
  - name: p
    vector: p_layer2.gguf
    when: {point: gate, action: start}
)";
  const nlohmann::json reference = testing::LoadJson(testing::TestData("steering/requests.json"));
  {
    std::ofstream prompts(dir / "prompts.jsonl");
    for (int i = 0; i < 3; ++i) {
      prompts << nlohmann::json(
                     {{"id", "r" + std::to_string(i)}, {"prompt_ids", reference["input_ids"]}})
                     .dump()
              << "\n";
    }
  }
  const std::string command =
      "{ " + testing::CliBinary().string() + " generate --model " + std::string(UC_SOURCE_DIR) +
      "/models/stories260K --prompts " + (dir / "prompts.jsonl").string() + " --spec " +
      (dir / "spec.yaml").string() + " --temperature 0 --max-tokens 16 --ignore-eos --json " +
      topology + " 2>/dev/null; }";
  std::string output;
  const int code = testing::RunCommand(command, &output);
  EXPECT_EQ(code, 0) << topology << ": " << output;
  std::vector<std::vector<int32_t>> ids;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("ids")) ids.push_back(j["ids"].get<std::vector<int32_t>>());
  }
  return ids;
}

TEST(SteeringTopologyTest, ConditionalSteeringFromASpecIsTokenExactInEveryTopology) {
  const nlohmann::json reference = testing::LoadJson(testing::TestData("steering/requests.json"));
  std::vector<int32_t> want;
  for (const auto& c : reference["cases"]) {
    if (c["name"] == "from_generated_4") want = c["greedy"].get<std::vector<int32_t>>();
  }
  ASSERT_EQ(want.size(), 16u);
  for (const std::string topology : {"", "--pp 2", "--tp 2 --pp 2"}) {
    const std::vector<std::vector<int32_t>> ids = SpecGenerated(topology);
    ASSERT_EQ(ids.size(), 3u) << topology;
    for (const auto& one : ids) EXPECT_EQ(one, want) << topology;
  }
}

}  // namespace
}  // namespace uc
