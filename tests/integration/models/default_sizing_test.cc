// Every command runs a long-context model with no sizing flags (engine/scheduling/kv_cache_plan.h):
// Gemma 3 270M (UC_GEMMA3_GGUF, scripts/fetch-gemma3.sh; a 32768-token context, 1152 MiB of KV
// cache per full sequence) through the real binary — `generate --prompts`, `generate --prompt`,
// `serve` answering a real HTTP request, `capture` and `bench`. Under the old fixed 1 GiB budget
// the batched commands stopped before running anything. Also: --kv-cache-memory 1GiB alone fits the
// context to what it holds (29120 tokens) with one log line, the same for --prompt and
// --prompts; and a --max-model-len the cache cannot hold is still a clear error.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdlib>
#include <fstream>
#include <regex>

#include "common/capture_util.h"
#include "common/server_util.h"
#include "common/test_util.h"

namespace uc {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string Quote(const fs::path& p) { return "'" + p.string() + "'"; }

class DefaultSizingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* path = std::getenv("UC_GEMMA3_GGUF");
    if (path == nullptr || *path == '\0') {
      GTEST_SKIP() << "UC_GEMMA3_GGUF is not set: run scripts/fetch-gemma3.sh and export its "
                      "output";
    }
    model_ = path;
    prompts_ = testing::ScratchDir(
                   "default_sizing/" +
                   std::string(::testing::UnitTest::GetInstance()->current_test_info()->name())) /
               "prompts.jsonl";
    std::ofstream(prompts_) << "{\"id\": \"a\", \"prompt\": \"The capital of France is\"}\n"
                               "{\"id\": \"b\", \"prompt\": \"Once upon a time\"}\n";
  }

  // `undercurrent ARGS` (after the command name), stdout and stderr together.
  testing::CliRun Run(const std::string& command, const std::string& args) const {
    testing::CliRun run;
    run.exit_code = testing::RunCommand(Quote(testing::CliBinary()) + " " + command + " --model " +
                                            Quote(model_) + " --threads 2 " + args,
                                        &run.output);
    return run;
  }

  // The context the start-up log line reports ("maximum concurrency C requests of L tokens").
  static int LoggedContext(const std::string& output) {
    std::smatch m;
    if (!std::regex_search(output, m, std::regex("requests of ([0-9]+) tokens"))) return -1;
    return std::stoi(m[1]);
  }

  // Without flags: the model's whole context, or — on a machine where a quarter of the memory
  // holds less than one 32k sequence — the fitted one, said in one line.
  static void ExpectDefaultContext(const std::string& output) {
    const int context = LoggedContext(output);
    if (output.find("less than the model's 32768") == std::string::npos) {
      EXPECT_EQ(context, 32768) << output;
      EXPECT_NE(output.find("sized automatically"), std::string::npos) << output;
    } else {
      EXPECT_GE(context, 4096) << output;
    }
  }

  fs::path model_;
  fs::path prompts_;
};

TEST_F(DefaultSizingTest, GeneratePromptsRuns) {
  const testing::CliRun run =
      Run("generate", "--prompts " + Quote(prompts_) + " --max-tokens 4 --temperature 0 --json");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  ExpectDefaultContext(run.output);
  int lines = 0;
  std::istringstream out(run.output);
  for (std::string line; std::getline(out, line);) {
    const json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.contains("ids")) continue;
    EXPECT_EQ(j["ids"].size(), 4u) << line;
    ++lines;
  }
  EXPECT_EQ(lines, 2) << run.output;
}

// The command line with the old default written out: the context is fitted, not
// refused, and --prompt decides exactly as --prompts.
TEST_F(DefaultSizingTest, OneGibFitsTheContextForPromptAndPrompts) {
  const std::string note =
      "max_model_len 29120, less than the model's 32768: that is what the KV cache budget of "
      "1024.0 MiB per rank holds";
  const testing::CliRun batch =
      Run("generate", "--prompts " + Quote(prompts_) + " --max-tokens 2 --kv-cache-memory 1GiB");
  ASSERT_EQ(batch.exit_code, 0) << batch.output;
  EXPECT_NE(batch.output.find(note), std::string::npos) << batch.output;
  EXPECT_NE(batch.output.find("--kv-cache-memory raises it"), std::string::npos) << batch.output;
  EXPECT_EQ(LoggedContext(batch.output), 29120) << batch.output;
  const testing::CliRun one =
      Run("generate", "--prompt 'Hello' --max-tokens 2 --kv-cache-memory 1GiB");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  EXPECT_NE(one.output.find(note), std::string::npos) << one.output;
}

// A context the user asks for is kept or refused, never shortened: 32768 tokens need 1152 MiB.
TEST_F(DefaultSizingTest, ExplicitMaxModelLenLargerThanTheCacheIsAClearError) {
  const testing::CliRun run = Run(
      "generate", "--prompts " + Quote(prompts_) + " --kv-cache-memory 1GiB --max-model-len 32768");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("error: the KV cache budget of 1024.0 MiB per rank holds 29120 "
                            "tokens, less than one sequence of max_model_len 32768"),
            std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("raise --kv-cache-memory or lower --max-model-len"), std::string::npos)
      << run.output;
  // serve refuses at start-up, before listening.
  const testing::CliRun serve =
      Run("serve", "--port 0 --kv-cache-memory 1GiB --max-model-len 32768");
  EXPECT_EQ(serve.exit_code, 1) << serve.output;
  EXPECT_NE(serve.output.find("lower --max-model-len"), std::string::npos) << serve.output;
  EXPECT_EQ(serve.output.find("listening on"), std::string::npos) << serve.output;
}

TEST_F(DefaultSizingTest, ServeAnswersOverHttp) {
  testing::ServeProcess server({"--model", model_.string(), "--threads", "2"}, 300);
  ASSERT_TRUE(server.ok()) << server.log();
  const testing::HttpResult models = testing::HttpGet(server.port(), "/v1/models");
  ASSERT_EQ(models.status, 200) << models.body;
  const json card = models.Json()["data"][0];
  EXPECT_GE(card["max_model_len"].get<int>(), 4096) << models.body;
  const testing::HttpResult r = testing::HttpPost(
      server.port(), "/v1/completions",
      json{{"prompt", "The capital of France is"}, {"max_tokens", 4}, {"temperature", 0}}.dump(),
      {{"Content-Type", "application/json"}});
  ASSERT_EQ(r.status, 200) << r.body << "\n" << server.log();
  const json body = r.Json();
  EXPECT_EQ(body["usage"]["completion_tokens"], 4) << r.body;
  EXPECT_FALSE(body["choices"][0]["text"].get<std::string>().empty()) << r.body;
  server.Signal(SIGTERM);
  EXPECT_EQ(server.Wait(), 0) << server.log();
  ExpectDefaultContext(server.log());
}

TEST_F(DefaultSizingTest, CaptureRuns) {
  const fs::path dir = prompts_.parent_path();
  const fs::path spec = dir / "spec.yaml";
  std::ofstream(spec) << "version: \"1\"\n"
                         "extraction_points:\n"
                         "  - name: resid\n"
                         "    layers: [3]\n"
                         "    tensor_type: residual_stream\n"
                         "    position: \"generated[*]\"\n"
                         "    probe_type: recorder\n"
                         "    probe_kind: single_shot\n";
  const fs::path out = dir / "dataset";
  const testing::CliRun run =
      testing::RunCapture("--model " + Quote(model_) + " --threads 2 --spec " + Quote(spec) +
                          " --prompts " + Quote(prompts_) + " --out " + Quote(out) +
                          " --temperature 0 --max-tokens 3 --ignore-eos --progress lines");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  ExpectDefaultContext(run.output);
  const testing::LoadedDataset dataset = testing::LoadDataset(out);
  EXPECT_EQ(dataset.values.size(), 6u) << "2 prompts x 3 generated tokens";
  ASSERT_FALSE(dataset.values.empty());
  EXPECT_EQ(dataset.values[0].size(), 640u) << "Gemma 3 270M's hidden_size";
}

TEST_F(DefaultSizingTest, BenchRuns) {
  const testing::CliRun run =
      Run("bench", "--batch 2 --prompt-len 16 --max-tokens 4 --repetitions 1 --format json");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const size_t brace = run.output.find("{\n");
  ASSERT_NE(brace, std::string::npos) << run.output;
  const json j =
      json::parse(run.output.substr(brace, run.output.rfind('}') - brace + 1), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << run.output;
  EXPECT_GT(j["decode_tokens_per_second"].get<double>(), 0.0) << run.output;
  EXPECT_NE(run.output.find("sized automatically"), std::string::npos) << run.output;
}

}  // namespace
}  // namespace uc
