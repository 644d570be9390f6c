// `undercurrent serve --tp 2` (and --pp 2, --tp 2 --pp 2): the CLI starts itself under mpirun, rank
// 0 serves HTTP and drives the engine, rank 1 follows; greedy completions equal those of a
// one-process server, concurrent requests included; SIGTERM drains a stream in flight and the whole
// job exits 0. Structured output at PP 2 equals one process.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "common/server_util.h"
#include "common/test_util.h"

namespace uc {
namespace {

using json = nlohmann::json;

const std::string kModel = std::string(UC_SOURCE_DIR) + "/models/stories260K";

std::vector<std::string> Completions(int port) {
  const char* prompts[] = {"Once upon a time", "The little dog", "Lily and Tom went",
                           "One day, a big cat"};
  std::vector<std::string> texts(std::size(prompts));
  std::vector<std::thread> clients;
  for (size_t i = 0; i < std::size(prompts); ++i) {
    clients.emplace_back([&, i] {
      const json body = {{"prompt", prompts[i]}, {"max_tokens", 40}, {"temperature", 0}};
      const testing::HttpResult r = testing::HttpPost(port, "/v1/completions", body.dump());
      texts[i] = r.status == 200 ? r.Json()["choices"][0]["text"].get<std::string>()
                                 : "HTTP " + std::to_string(r.status) + ": " + r.body;
    });
  }
  for (std::thread& t : clients) t.join();
  return texts;
}

TEST(ServeTpTest, TensorParallelServerAnswersLikeOneProcess) {
  std::vector<std::string> single;
  {
    testing::ServeProcess server({"--model", kModel, "--threads", "1"});
    ASSERT_TRUE(server.ok()) << server.log();
    single = Completions(server.port());
    server.Signal(SIGTERM);
    EXPECT_EQ(server.Wait(), 0) << server.log();
  }
  testing::ServeProcess server({"--model", kModel, "--threads", "1", "--tp", "2"});
  ASSERT_TRUE(server.ok()) << server.log();
  const std::vector<std::string> tp2 = Completions(server.port());
  for (size_t i = 0; i < single.size(); ++i) {
    EXPECT_FALSE(single[i].empty());
    EXPECT_EQ(tp2[i], single[i]) << "prompt " << i;
  }
  // SIGTERM mid-stream: the request still gets every token, then the whole job exits 0.
  const json body = {{"prompt", "Once upon a time"},
                     {"max_tokens", 300},
                     {"temperature", 0},
                     {"ignore_eos", true},
                     {"stream", true}};
  int events = 0;
  bool done = false;
  const testing::StreamResult stream = testing::HttpStream(
      server.port(), "/v1/completions", body.dump(), [&](const testing::SseEvent& e) {
        if (++events == 1) server.Signal(SIGTERM);
        done = done || e.data == "[DONE]";
        return true;
      });
  EXPECT_EQ(stream.status, 200);
  EXPECT_TRUE(done);
  EXPECT_GE(events, 300 + 2);  // 300 tokens, the finish chunk and [DONE]
  EXPECT_EQ(server.Wait(120), 0) << server.log();
}

// PP 2 and TP×PP 2×2 with a spec: the same greedy text as one process, and the async probe's
// verdict counts every generated token.
TEST(ServeTpTest, PipelineAndTpTimesPpServersAnswerLikeOneProcessWithProbes) {
  const std::filesystem::path dir = testing::ScratchDir("serve_pp");
  const std::filesystem::path spec = dir / "spec.yaml";
  std::ofstream(spec) << R"(version: "1"
extraction_points:
  - {name: drift, layers: [3], tensor_type: residual_stream, position: "generated[*]",
     probe_type: running_mean, probe_kind: trajectory, execution_mode: async}
)";
  std::vector<std::string> single;
  {
    testing::ServeProcess server({"--model", kModel, "--threads", "1"});
    ASSERT_TRUE(server.ok()) << server.log();
    single = Completions(server.port());
    server.Signal(SIGTERM);
    EXPECT_EQ(server.Wait(), 0) << server.log();
  }
  for (const std::vector<std::string>& topology :
       {std::vector<std::string>{"--pp", "2"},
        std::vector<std::string>{"--tp", "2", "--pp", "2"}}) {
    SCOPED_TRACE(topology.size() == 2 ? "PP 2" : "TP 2 x PP 2");
    std::vector<std::string> args = {"--model", kModel, "--threads", "1", "--spec", spec.string()};
    args.insert(args.end(), topology.begin(), topology.end());
    testing::ServeProcess server(args);
    ASSERT_TRUE(server.ok()) << server.log();
    const std::vector<std::string> texts = Completions(server.port());
    for (size_t i = 0; i < single.size(); ++i) EXPECT_EQ(texts[i], single[i]) << "prompt " << i;
    const json body = {{"prompt", "Once upon a time"},
                       {"max_tokens", 12},
                       {"temperature", 0},
                       {"ignore_eos", true}};
    const testing::HttpResult r = testing::HttpPost(server.port(), "/v1/completions", body.dump());
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.Json()["probing"]["drift"]["verdict"]["count"], 12) << r.body;
    server.Signal(SIGTERM);
    EXPECT_EQ(server.Wait(120), 0) << server.log();
  }
}

// Structured output at PP 2: the last stage samples and holds the grammar matchers (serve gives
// the follower ranks the grammar backend), so a constrained greedy completion equals one
// process's token for token, and it parses and validates.
TEST(ServeTpTest, StructuredOutputUnderPipelineParallelismAnswersLikeOneProcess) {
  const json schema = {{"type", "object"},
                       {"properties",
                        {{"name", {{"type", "string"}, {"maxLength", 8}}},
                         {"age", {{"type", "integer"}, {"minimum", 0}, {"maximum", 99}}}}},
                       {"required", {"name", "age"}},
                       {"additionalProperties", false}};
  const json bodies[] = {
      {{"prompt", "Once upon a time"},
       {"max_tokens", 40},
       {"temperature", 0},
       {"response_format",
        {{"type", "json_schema"}, {"json_schema", {{"name", "p"}, {"schema", schema}}}}}},
      {{"prompt", "The little dog"},
       {"max_tokens", 40},
       {"temperature", 0},
       {"structured_outputs", {{"regex", "(yes|no), [a-z]{2,6}\\."}}}}};
  auto run = [&](const std::vector<std::string>& topology) {
    std::vector<std::string> args = {"--model", kModel, "--threads", "1"};
    args.insert(args.end(), topology.begin(), topology.end());
    testing::ServeProcess server(args);
    EXPECT_TRUE(server.ok()) << server.log();
    std::vector<json> choices;
    for (const json& body : bodies) {
      const testing::HttpResult r =
          testing::HttpPost(server.port(), "/v1/completions", body.dump());
      EXPECT_EQ(r.status, 200) << r.body;
      choices.push_back(r.status == 200 ? r.Json()["choices"][0] : json());
    }
    server.Signal(SIGTERM);
    EXPECT_EQ(server.Wait(120), 0) << server.log();
    return choices;
  };
  const std::vector<json> single = run({});
  const std::vector<json> pp2 = run({"--pp", "2"});
  ASSERT_EQ(single.size(), pp2.size());
  for (size_t i = 0; i < single.size(); ++i) {
    EXPECT_EQ(pp2[i]["text"], single[i]["text"]) << "request " << i;
    EXPECT_EQ(pp2[i]["finish_reason"], "stop") << pp2[i].dump();
  }
  // The one-process output obeys the grammar (the oracle is what xgrammar allows).
  const json object = json::parse(pp2[0]["text"].get<std::string>(), nullptr, false);
  ASSERT_TRUE(object.is_object()) << pp2[0].dump();
  EXPECT_TRUE(object["name"].is_string() && object["age"].is_number_integer()) << object.dump();
  EXPECT_EQ(object.size(), 2u);
}

}  // namespace
}  // namespace uc
