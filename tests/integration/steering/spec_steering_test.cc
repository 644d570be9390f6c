// Conditional steering from a spec (`steering:` with `when:`) through the probing session on
// stories260K: an inline norm_gate flags the activation of generated[3] at layer 1, and the
// entry's control vector (tests/testdata/steering/p_layer2.gguf, block 2) switches on — or off —
// from generated[4]'s position. Every request gives what transformers gives with the vector
// masked to those positions (tools/reference/make_request_steering_reference.py); a spec
// without `when` steers from the first token; bad vector files are named with the entry.
#include <gtest/gtest.h>

#include <fstream>

#include "common/steering_util.h"
#include "common/test_util.h"
#include "engine/llm.h"
#include "models/checkpoint.h"
#include "probe/probes/registry.h"
#include "probe/runtime/probing_session.h"
#include "probe/spec/spec.h"

namespace uc {
namespace {

using testing::JsonInts;

std::string SpecWith(const std::string& steering) {
  return R"(version: "1"
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
)" + steering;
}

const nlohmann::json& CaseNamed(const std::string& name) {
  for (const auto& c : testing::RequestSteeringReference()["cases"]) {
    if (c["name"] == name) return c;
  }
  ADD_FAILURE() << "no reference case " << name;
  return testing::RequestSteeringReference()["cases"][0];
}

// Generates three copies of the reference prompt under `spec_text` (the spec sits beside the
// vector file, so its relative `vector:` resolves); their ids.
std::vector<std::vector<int32_t>> Generated(const std::string& spec_text) {
  // One directory per test: ctest runs the cases in parallel.
  const std::filesystem::path dir =
      testing::ScratchDir(std::string("spec_steering/") +
                          ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::copy_file(testing::TestData("steering/p_layer2.gguf"), dir / "p_layer2.gguf",
                             std::filesystem::copy_options::overwrite_existing);
  std::ofstream(dir / "spec.yaml") << spec_text;
  auto spec = probe::ParseSpecFile(dir / "spec.yaml");
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  engine::EngineOptions options;
  options.model_path = std::string(UC_SOURCE_DIR) + "/models/stories260K";
  options.num_threads = 2;
  options.max_model_len = 64;
  options.max_prefill_chunk = 8;
  auto llm = engine::LLM::Open(options);
  EXPECT_TRUE(llm.ok()) << llm.status().ToString();
  auto session = probe::ProbingSession::Create(*spec, probe::ProbeRegistry::Global(),
                                               (*llm)->engine().config());
  EXPECT_TRUE(session.ok()) << session.status().ToString();
  EXPECT_TRUE((*session)->AttachTo((*llm)->engine()).ok());
  const std::vector<int32_t> prompt = JsonInts(testing::RequestSteeringReference()["input_ids"]);
  std::vector<engine::GenerateRequest> requests;
  for (int i = 0; i < 3; ++i) {
    requests.push_back({"r" + std::to_string(i), engine::Prompt::Ids(prompt), testing::Greedy(16)});
  }
  std::vector<std::vector<int32_t>> ids;
  for (const engine::GenerateResult& r : (*llm)->Generate(requests)) {
    EXPECT_TRUE(r.status.ok()) << r.status.ToString();
    ids.push_back(r.output.output_ids);
  }
  (*llm)->engine().SetObserver(nullptr);
  (*session)->Shutdown(/*wait=*/true);
  return ids;
}

TEST(SpecSteeringTest, FlagAtGenerated3StartsSteeringAtGenerated4) {
  const std::vector<int32_t> want = JsonInts(CaseNamed("from_generated_4")["greedy"]);
  for (const auto& ids :
       Generated(SpecWith("    when: {point: gate, signal: flag, action: start}\n"))) {
    EXPECT_EQ(ids, want);
  }
  // Tokens 0-4 are the unsteered run's, 5 on the steered one's.
  const std::vector<int32_t> plain = JsonInts(CaseNamed("none")["greedy"]);
  EXPECT_EQ(std::vector<int32_t>(want.begin(), want.begin() + 5),
            std::vector<int32_t>(plain.begin(), plain.begin() + 5));
  EXPECT_NE(want[5], plain[5]);
}

TEST(SpecSteeringTest, FlagAtGenerated3StopsSteeringAtGenerated4) {
  for (const auto& ids : Generated(SpecWith("    when: {point: gate, action: stop}\n"))) {
    EXPECT_EQ(ids, JsonInts(CaseNamed("until_generated_4")["greedy"]));
  }
}

// A position selector alone: generated[4:] steers exactly what the switch-on does.
TEST(SpecSteeringTest, PositionSelectorStartsSteeringAtGenerated4) {
  for (const auto& ids : Generated(SpecWith("    position: \"generated[4:]\"\n"))) {
    EXPECT_EQ(ids, JsonInts(CaseNamed("from_generated_4")["greedy"]));
  }
  // Combined with a trigger, the switch stays inside the window: generated[6:] and a flag at
  // generated[3] steer from generated[6] on, unlike from generated[4].
  const auto later = Generated(
      SpecWith("    position: \"generated[6:]\"\n    when: {point: gate, action: start}\n"));
  const std::vector<int32_t> from4 = JsonInts(CaseNamed("from_generated_4")["greedy"]);
  const std::vector<int32_t> plain = JsonInts(CaseNamed("none")["greedy"]);
  for (const auto& ids : later) {
    EXPECT_EQ(std::vector<int32_t>(ids.begin(), ids.begin() + 7),
              std::vector<int32_t>(plain.begin(), plain.begin() + 7));
    EXPECT_NE(ids, from4);
  }
}

TEST(SpecSteeringTest, UnconditionalEntrySteersEveryToken) {
  for (const auto& ids : Generated(SpecWith("")))
    EXPECT_EQ(ids, JsonInts(CaseNamed("both")["greedy"]));
}

TEST(SpecSteeringTest, BadVectorFilesAreNamedWithTheEntry) {
  auto spec = probe::ParseSpecText(SpecWith("    layers: [3]\n"), "s.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  spec->source = testing::TestData("steering/s.yaml");
  auto config = models::OpenCheckpoint(std::string(UC_SOURCE_DIR) + "/models/stories260K");
  ASSERT_TRUE(config.ok());
  auto session =
      probe::ProbingSession::Create(*spec, probe::ProbeRegistry::Global(), config->config);
  ASSERT_FALSE(session.ok());
  EXPECT_NE(session.status().message().find(
                "steering[0] 'p'.layers: " + testing::TestData("steering/p_layer2.gguf").string() +
                " has no direction for block 3"),
            std::string::npos)
      << session.status().message();
  spec->steering[0].layers.clear();
  spec->steering[0].vector = "bad_hidden.gguf";
  session = probe::ProbingSession::Create(*spec, probe::ProbeRegistry::Global(), config->config);
  ASSERT_FALSE(session.ok());
  EXPECT_NE(session.status().message().find("steering[0] 'p'.vector: "), std::string::npos)
      << session.status().message();
  EXPECT_NE(session.status().message().find("has 48 values; the model's hidden size is 64"),
            std::string::npos)
      << session.status().message();
}

}  // namespace
}  // namespace uc
