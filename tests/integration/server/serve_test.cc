// `undercurrent serve` through the real binary on loopback, with the bundled stories260K:
// 64 concurrent streaming clients each get exactly what the engine gives that request alone
// (text, usage counts, finish reason); a client that goes away mid-stream is aborted and its KV
// blocks come back (seen in /metrics); malformed, mistyped, unknown, oversized, too-long and
// unauthorized requests get OpenAI-style 4xx bodies while another client streams undisturbed;
// SIGTERM lets in-flight requests finish and exits 0; an inline probe that aborts shows up as
// finish_reason content_flagged with the probing fields.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <thread>

#include "common/server_util.h"
#include "common/test_util.h"
#include "engine/llm.h"

namespace uc {
namespace {

using json = nlohmann::json;
using testing::HttpGet;
using testing::HttpPost;
using testing::HttpStream;
using testing::ServeProcess;

const std::string kModel = std::string(UC_SOURCE_DIR) + "/models/stories260K";

struct Expected {
  std::string text;
  size_t prompt_tokens = 0;
  size_t completion_tokens = 0;
  std::string finish_reason;
};

// What the engine alone gives each request (greedy, so batching cannot change it).
std::vector<Expected> Reference(const std::vector<std::pair<std::string, int>>& prompts,
                                bool ignore_eos = false) {
  engine::EngineOptions options;
  options.model_path = kModel;
  options.num_threads = 1;
  auto llm = engine::LLM::Open(options);
  EXPECT_TRUE(llm.ok()) << llm.status().ToString();
  std::vector<engine::GenerateRequest> requests;
  for (size_t i = 0; i < prompts.size(); ++i) {
    worker::SamplingParams params;
    params.temperature = 0;
    params.max_tokens = prompts[i].second;
    params.ignore_eos = ignore_eos;
    requests.push_back({std::to_string(i), engine::Prompt::Text(prompts[i].first), params});
  }
  std::vector<Expected> expected;
  for (const engine::GenerateResult& r : (*llm)->Generate(requests)) {
    EXPECT_TRUE(r.status.ok()) << r.status.ToString();
    expected.push_back({r.output.text, r.output.prompt_ids.size(), r.output.output_ids.size(),
                        std::string(engine::FinishReasonName(r.output.finish_reason))});
  }
  return expected;
}

json CompletionBody(const std::string& prompt, int max_tokens, bool stream) {
  json body = {{"model", "stories260K"},
               {"prompt", prompt},
               {"max_tokens", max_tokens},
               {"temperature", 0},
               {"stream", stream}};
  if (stream) body["stream_options"] = {{"include_usage", true}};
  return body;
}

// A streamed completion, reassembled.
struct Streamed {
  int status = -1;
  std::string text;
  std::string finish_reason;
  json usage;
  bool done = false;  // saw data: [DONE]
  std::string error;
  int64_t Usage(const char* field) const {
    return usage.is_object() ? usage.value(field, int64_t{-1}) : -1;
  }
};

Streamed ReadStream(const testing::StreamResult& r) {
  Streamed s;
  s.status = r.status;
  s.error = r.error;
  for (const testing::SseEvent& e : r.events) {
    if (e.data == "[DONE]") {
      s.done = true;
      continue;
    }
    const json chunk = json::parse(e.data, nullptr, false);
    if (chunk.is_discarded() || !e.event.empty()) continue;
    if (chunk.contains("usage") && chunk["usage"].is_object()) s.usage = chunk["usage"];
    for (const json& c : chunk.value("choices", json::array())) {
      if (c.contains("text")) s.text += c["text"].get<std::string>();
      if (c.contains("delta") && c["delta"].contains("content")) {
        s.text += c["delta"]["content"].get<std::string>();
      }
      if (!c["finish_reason"].is_null()) s.finish_reason = c["finish_reason"];
    }
  }
  return s;
}

std::string MetricsText(int port) { return HttpGet(port, "/metrics").body; }

TEST(ServeTest, SixtyFourConcurrentStreamsGetTheirOwnTextAndUsage) {
  std::vector<std::pair<std::string, int>> prompts;
  const char* subjects[] = {"a little dog", "a big cat", "the sun", "a girl named Lily",
                            "a tall tree",  "the ocean", "a bird",  "a red ball"};
  for (int i = 0; i < 64; ++i) {
    prompts.push_back({std::string(i % 2 ? "Once upon a time, " : "One day, ") + subjects[i % 8] +
                           (i % 4 < 2 ? " was happy" : " went to the park"),
                       8 + (i * 7) % 56});
  }
  const std::vector<Expected> expected = Reference(prompts);
  ServeProcess server({"--model", kModel, "--threads", "2"});
  ASSERT_TRUE(server.ok()) << server.log();

  std::vector<Streamed> got(prompts.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < prompts.size(); ++i) {
    clients.emplace_back([&, i] {
      got[i] = ReadStream(
          HttpStream(server.port(), "/v1/completions",
                     CompletionBody(prompts[i].first, prompts[i].second, /*stream=*/true).dump()));
    });
  }
  for (std::thread& t : clients) t.join();
  for (size_t i = 0; i < prompts.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i) + ": " + prompts[i].first);
    EXPECT_EQ(got[i].status, 200) << got[i].error;
    EXPECT_TRUE(got[i].done);
    EXPECT_EQ(got[i].text, expected[i].text);
    EXPECT_EQ(got[i].finish_reason, expected[i].finish_reason);
    EXPECT_EQ(got[i].Usage("prompt_tokens"), expected[i].prompt_tokens);
    EXPECT_EQ(got[i].Usage("completion_tokens"), expected[i].completion_tokens);
    EXPECT_EQ(got[i].Usage("total_tokens"),
              expected[i].prompt_tokens + expected[i].completion_tokens);
  }
  // Everything finished: no KV block is left in use.
  EXPECT_EQ(testing::MetricValue(MetricsText(server.port()), "undercurrent_kv_blocks_in_use"), 0);

  // The same requests without streaming give the same bodies.
  const testing::HttpResult plain = HttpPost(server.port(), "/v1/completions",
                                             CompletionBody(prompts[5].first, 30, false).dump());
  ASSERT_EQ(plain.status, 200) << plain.body;
  const json body = plain.Json();
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["usage"]["prompt_tokens"], expected[5].prompt_tokens);
  EXPECT_EQ(body["choices"][0]["text"].get<std::string>(),
            Reference({{prompts[5].first, 30}})[0].text);
  server.Signal(SIGTERM);
  EXPECT_EQ(server.Wait(), 0) << server.log();
}

TEST(ServeTest, ClientThatDisconnectsMidStreamFreesItsKvBlocks) {
  ServeProcess server({"--model", kModel, "--threads", "1"});
  ASSERT_TRUE(server.ok()) << server.log();
  // stories260K decodes a token in well under a millisecond; sixteen other long streams keep
  // the batch busy so that the request is still running when its client hangs up.
  json body = CompletionBody("Once upon a time", 500, /*stream=*/true);
  body["ignore_eos"] = true;
  std::vector<Streamed> others(16);
  std::vector<std::thread> clients;
  std::atomic<int> started{0};
  for (Streamed& other : others) {
    clients.emplace_back([&] {
      other = ReadStream(HttpStream(server.port(), "/v1/completions", body.dump(), [&](auto&) {
        ++started;
        return true;
      }));
    });
  }
  while (started < 16) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  double in_use_while_streaming = -1;
  int events = 0;
  const testing::StreamResult r =
      HttpStream(server.port(), "/v1/completions", body.dump(), [&](const testing::SseEvent&) {
        if (++events == 3) {
          in_use_while_streaming =
              testing::MetricValue(MetricsText(server.port()), "undercurrent_kv_blocks_in_use");
          return false;  // hang up
        }
        return true;
      });
  EXPECT_TRUE(r.cancelled);
  EXPECT_GT(in_use_while_streaming, 0);
  for (std::thread& t : clients) t.join();
  for (const Streamed& other : others) {
    EXPECT_EQ(other.Usage("completion_tokens"), 500);
  }
  // The aborted request's blocks came back with everyone else's.
  double in_use = -1;
  std::string metrics;
  for (int i = 0; i < 100 && in_use != 0; ++i) {
    metrics = MetricsText(server.port());
    in_use = testing::MetricValue(metrics, "undercurrent_kv_blocks_in_use");
    if (in_use != 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(in_use, 0) << metrics;
  EXPECT_EQ(testing::MetricValue(metrics,
                                 "undercurrent_requests_finished_total{finish_reason=\"abort\"}"),
            1)
      << metrics;
  // It stopped early: fewer tokens than 17 full requests.
  EXPECT_LT(testing::MetricValue(metrics, "undercurrent_generation_tokens_total"), 17 * 500)
      << metrics;
  // What /metrics serves is valid Prometheus text (promtool, Debian package `prometheus`).
  const std::filesystem::path prom = testing::ScratchDir("serve_metrics") / "metrics.prom";
  std::ofstream(prom) << metrics;
  std::string check;
  EXPECT_EQ(testing::RunCommand("promtool check metrics < '" + prom.string() + "' 2>&1", &check), 0)
      << check;
  server.Signal(SIGTERM);
  EXPECT_EQ(server.Wait(), 0) << server.log();
}

// Sends `body` and checks the status, the error body's shape and (when given) param and code.
void ExpectError(int port, const std::string& path, const std::string& body, int status,
                 const std::string& param, const std::string& code,
                 const std::vector<std::pair<std::string, std::string>>& headers = {}) {
  SCOPED_TRACE(path + " " + body.substr(0, 120));
  const testing::HttpResult r = HttpPost(port, path, body, headers);
  EXPECT_EQ(r.status, status) << r.body;
  const json j = r.Json();
  ASSERT_TRUE(j.is_object() && j.contains("error")) << r.body;
  const json& e = j["error"];
  EXPECT_TRUE(e["message"].is_string() && !e["message"].get<std::string>().empty()) << r.body;
  EXPECT_TRUE(e["type"].is_string()) << r.body;
  EXPECT_TRUE(e.contains("param") && e.contains("code")) << r.body;
  if (!param.empty()) {
    EXPECT_EQ(e["param"], param) << r.body;
  }
  if (!code.empty()) {
    EXPECT_EQ(e["code"], code) << r.body;
  }
}

TEST(ServeTest, BadRequestsGetOpenAiErrorsAndDoNotDisturbOthers) {
  ServeProcess server({"--model", kModel, "--threads", "1", "--max-body-size", "64KiB"});
  ASSERT_TRUE(server.ok()) << server.log();
  const int port = server.port();
  json good = CompletionBody("Once upon a time", 300, /*stream=*/true);
  good["ignore_eos"] = true;
  const Expected expected = Reference({{"Once upon a time", 300}}, /*ignore_eos=*/true)[0];
  std::atomic<bool> streaming{false};
  Streamed got;
  std::thread client([&] {
    got = ReadStream(HttpStream(port, "/v1/completions", good.dump(), [&](const auto&) {
      streaming = true;
      return true;
    }));
  });
  while (!streaming) std::this_thread::sleep_for(std::chrono::milliseconds(1));

  const std::string c = "/v1/completions";
  ExpectError(port, c, "{\"prompt\": \"Once\", ", 400, "", "");
  ExpectError(port, c, "[1, 2]", 400, "", "");
  ExpectError(port, c, R"({"prompt": "Once", "max_tokens": "ten"})", 400, "max_tokens",
              "invalid_type");
  ExpectError(port, c, R"({"prompt": 12})", 400, "prompt", "invalid_type");
  ExpectError(port, c, R"({"prompt": "Once", "temperature": -1})", 400, "temperature",
              "invalid_value");
  ExpectError(port, c, R"({"prompt": "Once", "temprature": 0.5})", 400, "temprature",
              "unknown_parameter");
  ExpectError(port, c, R"({"prompt": "Once", "spec": "x.yaml"})", 400, "spec",
              "per_request_spec_not_allowed");
  ExpectError(port, c, R"({"prompt": "Once", "model": "gpt-4"})", 404, "model", "model_not_found");
  ExpectError(port, "/v1/nothing", "{}", 404, "", "not_found");
  ExpectError(port, c, json{{"prompt", std::string(100000, 'a')}}.dump(), 413, "",
              "request_too_large");
  std::vector<int> long_prompt(600, 42);
  long_prompt[0] = 1;
  ExpectError(port, c, json{{"prompt", long_prompt}}.dump(), 400, "prompt",
              "context_length_exceeded");
  ExpectError(port, c, json{{"prompt", "Once"}, {"max_tokens", 1000}}.dump(), 400, "max_tokens",
              "context_length_exceeded");
  // INT32_MAX + the prompt's length used to overflow past this check.
  ExpectError(port, c, json{{"prompt", "Once"}, {"max_tokens", 2147483647}}.dump(), 400,
              "max_tokens", "context_length_exceeded");
  ExpectError(port, c, json{{"prompt", "Once"}, {"max_tokens", 2147483648LL}}.dump(), 400,
              "max_tokens", "invalid_value");
  ExpectError(port, "/v1/chat/completions", R"({"messages": [{"role": "user"}]})", 400,
              "messages[0].content", "missing_required_parameter");
  // stories260K has no chat template.
  ExpectError(port, "/v1/chat/completions", R"({"messages": [{"role": "user", "content": "Hi"}]})",
              400, "messages", "");
  client.join();
  EXPECT_EQ(got.status, 200);
  EXPECT_EQ(got.text, expected.text);
  EXPECT_EQ(got.Usage("completion_tokens"), 300);

  EXPECT_EQ(HttpGet(port, "/health").Json()["status"], "ok");
  const json models = HttpGet(port, "/v1/models").Json();
  EXPECT_EQ(models["data"][0]["id"], "stories260K");
  const testing::HttpResult metrics = HttpGet(port, "/metrics");
  EXPECT_NE(metrics.content_type.find("text/plain; version=0.0.4"), std::string::npos);
  EXPECT_EQ(testing::MetricValue(metrics.body,
                                 "undercurrent_http_responses_total{code=\"400\","
                                 "route=\"/v1/completions\"}"),
            11)
      << metrics.body;
  server.Signal(SIGTERM);
  EXPECT_EQ(server.Wait(), 0) << server.log();
}

TEST(ServeTest, ApiKeyIsRequiredOnV1Routes) {
  ServeProcess server({"--model", kModel, "--threads", "1", "--api-key", "sekrit"});
  ASSERT_TRUE(server.ok()) << server.log();
  const std::string body = CompletionBody("Once", 4, false).dump();
  ExpectError(server.port(), "/v1/completions", body, 401, "", "invalid_api_key");
  ExpectError(server.port(), "/v1/completions", body, 401, "", "invalid_api_key",
              {{"Authorization", "Bearer wrong"}});
  const testing::HttpResult ok =
      HttpPost(server.port(), "/v1/completions", body, {{"Authorization", "Bearer sekrit"}});
  EXPECT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(HttpGet(server.port(), "/v1/models").status, 401);
  EXPECT_EQ(HttpGet(server.port(), "/health").status, 200);
  // /metrics is behind the key too, unless --metrics-without-key.
  const testing::HttpResult metrics = HttpGet(server.port(), "/metrics");
  EXPECT_EQ(metrics.status, 401);
  EXPECT_EQ(metrics.Json()["error"]["code"], "invalid_api_key");
  EXPECT_EQ(
      testing::HttpGetWithHeaders(server.port(), "/metrics", {{"Authorization", "Bearer sekrit"}})
          .status,
      200);
  server.Signal(SIGINT);
  EXPECT_EQ(server.Wait(), 0) << server.log();
  ServeProcess open(
      {"--model", kModel, "--threads", "1", "--api-key", "sekrit", "--metrics-without-key"});
  ASSERT_TRUE(open.ok()) << open.log();
  EXPECT_EQ(HttpGet(open.port(), "/metrics").status, 200);
  EXPECT_EQ(HttpGet(open.port(), "/v1/models").status, 401);
  open.Signal(SIGTERM);
  EXPECT_EQ(open.Wait(), 0) << open.log();
}

// Bytes that are not UTF-8 in a request's path or in the served model name are replaced in the
// JSON answers, never thrown past a handler: `GET /%ff` used to abort the whole server.
TEST(ServeTest, NonUtf8PathsAndModelNamesNeverKillTheServer) {
  ServeProcess server({"--model", kModel, "--threads", "1", "--served-model-name", "st\xff\xfe"});
  ASSERT_TRUE(server.ok()) << server.log();
  const int port = server.port();
  for (const char* path : {"/%ff", "/%c3%28", "/v1/%ed%a0%80"}) {
    SCOPED_TRACE(path);
    const std::string response = testing::RawHttp(
        port, std::string("GET ") + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    EXPECT_EQ(response.rfind("HTTP/1.1 404", 0), 0u) << response;
    const json body = json::parse(response.substr(response.find("\r\n\r\n") + 4), nullptr,
                                  /*allow_exceptions=*/false);
    EXPECT_EQ(body["error"]["code"], "not_found") << response;
  }
  const testing::HttpResult health = HttpGet(port, "/health");
  EXPECT_EQ(health.status, 200) << health.body;
  EXPECT_EQ(health.Json()["model"], "st\xef\xbf\xbd\xef\xbf\xbd");  // U+FFFD twice
  EXPECT_EQ(HttpGet(port, "/v1/models").status, 200);
  server.Signal(SIGTERM);
  EXPECT_EQ(server.Wait(), 0) << server.log();
}

TEST(ServeTest, SigtermDrainsInFlightRequestsAndExitsZero) {
  ServeProcess server({"--model", kModel, "--threads", "1"});
  ASSERT_TRUE(server.ok()) << server.log();
  json body = CompletionBody("Once upon a time", 400, /*stream=*/true);
  body["ignore_eos"] = true;
  int events = 0;
  int late_status = 0;
  const Streamed s = ReadStream(
      HttpStream(server.port(), "/v1/completions", body.dump(), [&](const testing::SseEvent&) {
        if (++events == 1) server.Signal(SIGTERM);
        if (events == 50) {
          // Shutting down: new work is refused (or the listener is already gone) once the
          // signal thread has run, which a loaded machine may delay past a few tokens; a request
          // that got in before that is served. Refusal must come within seconds.
          const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
          do {
            late_status =
                HttpPost(server.port(), "/v1/completions", CompletionBody("Once", 4, false).dump())
                    .status;
          } while (late_status == 200 && std::chrono::steady_clock::now() < deadline);
        }
        return true;
      }));
  EXPECT_EQ(s.status, 200);
  EXPECT_TRUE(s.done);
  EXPECT_EQ(s.finish_reason, "length");
  EXPECT_EQ(s.Usage("completion_tokens"), 400);
  EXPECT_TRUE(late_status == 503 || late_status == -1) << late_status;
  EXPECT_EQ(server.Wait(), 0) << server.log();
  EXPECT_NE(server.log().find("SIGTERM received"), std::string::npos) << server.log();
}

TEST(ServeTest, InlineProbeAbortIsContentFlagged) {
  const auto dir = testing::ScratchDir("serve_test");
  std::ofstream(dir / "gate.yaml") << R"(version: "1"
extraction_points:
  - name: gate
    layers: [3]
    tensor_type: residual_stream
    position: generated[*]
    probe_type: norm_gate
    probe_kind: single_shot
    probe_args: {threshold: 0.5}
)";
  ServeProcess server(
      {"--model", kModel, "--threads", "1", "--spec", (dir / "gate.yaml").string()});
  ASSERT_TRUE(server.ok()) << server.log();
  const testing::HttpResult r = HttpPost(server.port(), "/v1/completions",
                                         CompletionBody("Once upon a time", 20, false).dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = r.Json();
  EXPECT_EQ(j["choices"][0]["finish_reason"], "content_flagged") << j.dump(2);
  EXPECT_EQ(j["choices"][0]["flagged_by"], "gate");
  EXPECT_TRUE(j["choices"][0]["flagged_score"].is_number());
  EXPECT_EQ(j["flagged"], true);
  EXPECT_EQ(j["probing"]["gate"]["flagged"], true);
  EXPECT_EQ(j["probing"]["gate"]["execution_mode"], "inline");
  // The probe fires on the first generated token's activation: that token is the last one out.
  EXPECT_EQ(j["usage"]["completion_tokens"], 1);

  const testing::StreamResult stream = HttpStream(
      server.port(), "/v1/completions", CompletionBody("Once upon a time", 20, true).dump());
  ASSERT_EQ(stream.status, 200);
  const Streamed s = ReadStream(stream);
  EXPECT_EQ(s.finish_reason, "content_flagged");
  bool flagged_chunk = false, probing_event = false;
  for (const testing::SseEvent& e : stream.events) {
    if (e.data == "[DONE]") continue;
    const json chunk = json::parse(e.data);
    if (e.event == "probing_result") {
      probing_event = true;
      EXPECT_EQ(chunk["probing"]["gate"]["flagged"], true) << e.data;
    } else if (chunk.value("flagged", false)) {
      flagged_chunk = true;
      EXPECT_EQ(chunk["flagged_by"], "gate") << e.data;
      EXPECT_EQ(chunk["choices"][0]["finish_reason"], "content_flagged") << e.data;
    }
  }
  EXPECT_TRUE(flagged_chunk);
  EXPECT_TRUE(probing_event);
  server.Signal(SIGTERM);
  EXPECT_EQ(server.Wait(), 0) << server.log();
}

}  // namespace
}  // namespace uc
