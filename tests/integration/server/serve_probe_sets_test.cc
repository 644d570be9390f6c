// `undercurrent serve --spec NAME=FILE ...` through the real binary on loopback, stories260K:
//   - 32 streaming clients run requests on two probe sets while the specs are rewritten and
//     reloaded 10 times (POST /v1/probes/reload, once by SIGHUP, one reload a broken spec): no
//     request fails, every response's verdicts come from one version of its set (the points of
//     version v are named for v, and each saw every generated token), the broken reload answers
//     422 and changes nothing, and /metrics and GET /v1/probes count the reloads;
//   - reloading needs the API key (401 without it, 403 on a server that has none); an unknown
//     probe_set is a 400 naming the sets; a server without specs refuses probe_set.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>

#include "common/server_util.h"
#include "common/test_util.h"

namespace uc {
namespace {

using json = nlohmann::json;
using testing::HttpGetWithHeaders;
using testing::HttpPost;
using testing::HttpStream;
using testing::ServeProcess;

const std::string kModel = std::string(UC_SOURCE_DIR) + "/models/stories260K";
const std::vector<std::pair<std::string, std::string>> kAuth = {{"Authorization", "Bearer sekrit"}};

// Set `set`'s spec at version `version`: one point named SET_vVERSION on every generated token
// that never fires (its verdict's "n" counts the tokens it saw); `broken` names a layer the
// model does not have.
std::string SpecText(const std::string& set, int version, bool broken = false) {
  return R"(version: "1"
extraction_points:
  - name: )" +
         set + "_v" + std::to_string(version) + R"(
    layers: [)" +
         (broken ? "9" : "2") + R"(]
    tensor_type: residual_stream
    position: "generated[*]"
    probe_type: norm_gate
    probe_kind: single_shot
    probe_args: {threshold: 1000000000.0, action: flag}
)";
}

void WriteSpecs(const std::filesystem::path& dir, int version, bool broken = false) {
  // Written beside and renamed, as a deployment would: a reload never reads half a file.
  for (const std::string set : {"main", "strict"}) {
    const std::filesystem::path tmp = dir / (set + ".yaml.tmp");
    std::ofstream(tmp) << SpecText(set, version, broken && set == "strict");
    std::filesystem::rename(tmp, dir / (set + ".yaml"));
  }
}

json Body(const std::string& prompt, const std::string& probe_set) {
  json body = {{"model", "stories260K"},
               {"prompt", prompt},
               {"max_tokens", 16},
               {"temperature", 0},
               {"stream", true},
               {"ignore_eos", true},
               {"stream_options", {{"include_usage", true}}}};
  if (!probe_set.empty()) body["probe_set"] = probe_set;
  return body;
}

// What one streamed response said about its probes; `problem` is empty when it is consistent.
struct Checked {
  std::string set;
  int64_t version = 0;
  std::string problem;
};

Checked Check(const testing::StreamResult& r, const std::string& want_set) {
  Checked c;
  if (r.status != 200) {
    c.problem = "status " + std::to_string(r.status) + " " + r.error;
    return c;
  }
  bool done = false;
  int64_t completion_tokens = -1;
  json probing_event;
  for (const testing::SseEvent& e : r.events) {
    if (e.data == "[DONE]") {
      done = true;
      continue;
    }
    const json chunk = json::parse(e.data, nullptr, false);
    if (e.event == "probing_result") probing_event = chunk;
    if (chunk.contains("usage") && chunk["usage"].is_object()) {
      completion_tokens = chunk["usage"]["completion_tokens"];
    }
  }
  if (!done || !probing_event.is_object()) {
    c.problem = "no [DONE] or no probing_result";
    return c;
  }
  c.set = probing_event["probe_set"].value("name", "");
  c.version = probing_event["probe_set"].value("version", int64_t{0});
  const std::string point = want_set + "_v" + std::to_string(c.version);
  const json& probing = probing_event["probing"];
  if (c.set != want_set) {
    c.problem = "set " + c.set + ", wanted " + want_set;
  } else if (!probing.is_object() || probing.size() != 1 || !probing.contains(point)) {
    c.problem = "version " + std::to_string(c.version) + " but points " + probing.dump();
  } else if (probing[point]["verdict"].value("n", -1) != completion_tokens) {
    c.problem = point + " saw " + probing[point]["verdict"].dump() + " of " +
                std::to_string(completion_tokens) + " tokens";
  }
  return c;
}

// The current version GET /v1/probes reports, or -1.
int64_t ServedVersion(int port) {
  const json j = HttpGetWithHeaders(port, "/v1/probes", kAuth).Json();
  return j.is_object() && j["reloads"].is_object() ? j["reloads"].value("version", int64_t{-1})
                                                   : -1;
}

TEST(ServeProbeSetsTest, ThirtyTwoStreamsWhileTheSpecsReloadTenTimes) {
  const auto dir = testing::ScratchDir("serve_probe_sets_load");
  WriteSpecs(dir, 1);
  ServeProcess server({"--model", kModel, "--threads", "2", "--api-key", "sekrit", "--spec",
                       "main=" + (dir / "main.yaml").string(), "--spec",
                       "strict=" + (dir / "strict.yaml").string()});
  ASSERT_TRUE(server.ok()) << server.log();
  const int port = server.port();
  ASSERT_EQ(ServedVersion(port), 1);

  std::atomic<bool> stop{false};
  std::atomic<int> completed{0};
  std::mutex mu;
  std::vector<std::string> problems;
  std::set<std::pair<std::string, int64_t>> seen;
  std::vector<std::thread> clients;
  for (int c = 0; c < 32; ++c) {
    clients.emplace_back([&, c] {
      const std::string set = c % 2 == 0 ? "main" : "strict";
      for (int i = 0; !stop.load() || i < 2; ++i) {
        const std::string prompt =
            "Once upon a time " + std::to_string(c) + " " + std::to_string(i);
        // The default set when none is named.
        const testing::StreamResult r = HttpStream(
            port, "/v1/completions", Body(prompt, c % 4 == 0 ? "" : set).dump(), nullptr, kAuth);
        const Checked checked = Check(r, set);
        std::lock_guard<std::mutex> lock(mu);
        if (!checked.problem.empty()) problems.push_back(checked.problem);
        seen.insert({checked.set, checked.version});
        ++completed;
      }
    });
  }
  while (completed.load() < 16) std::this_thread::sleep_for(std::chrono::milliseconds(10));

  // Ten reloads under load: the 4th by SIGHUP, the 6th of a broken spec.
  int version = 1;
  for (int reload = 1; reload <= 10; ++reload) {
    const bool broken = reload == 6;
    WriteSpecs(dir, version + 1, broken);
    if (reload == 4) {
      server.Signal(SIGHUP);
      for (int i = 0; i < 500 && ServedVersion(port) != version + 1; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      ASSERT_EQ(ServedVersion(port), version + 1) << server.log();
      ++version;
    } else {
      const testing::HttpResult r = HttpPost(port, "/v1/probes/reload", "", kAuth);
      if (broken) {
        EXPECT_EQ(r.status, 422) << r.body;
        const std::string message = r.Json()["error"].value("message", "");
        EXPECT_NE(message.find("nothing changed"), std::string::npos) << message;
        EXPECT_NE(message.find("probe set 'strict'"), std::string::npos) << message;
        EXPECT_NE(message.find("strict.yaml:"), std::string::npos) << message;
        EXPECT_EQ(ServedVersion(port), version);
      } else {
        ASSERT_EQ(r.status, 200) << r.body;
        EXPECT_EQ(r.Json()["version"], version + 1) << r.body;
        ++version;
      }
    }
    const int before = completed.load();
    while (completed.load() < before + 8) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  stop = true;
  for (std::thread& t : clients) t.join();

  EXPECT_EQ(version, 10);
  EXPECT_TRUE(problems.empty()) << problems.size() << " responses, e.g. " << problems.front();
  // Reloads happened while the clients streamed: they met many versions of both sets.
  std::set<int64_t> versions;
  for (const auto& [set, v] : seen) versions.insert(v);
  EXPECT_GE(versions.size(), 5u);

  const json probes = HttpGetWithHeaders(port, "/v1/probes", kAuth).Json();
  ASSERT_TRUE(probes.is_object()) << probes;
  EXPECT_EQ(probes["reloads"]["version"], 10);
  EXPECT_EQ(probes["reloads"]["reloads_ok"], 9);
  EXPECT_EQ(probes["reloads"]["reloads_failed"], 1);
  EXPECT_TRUE(probes["reloads"]["last_error"].is_null());
  ASSERT_EQ(probes["data"].size(), 2u);
  EXPECT_EQ(probes["data"][0]["name"], "main");
  EXPECT_EQ(probes["data"][0]["default"], true);
  EXPECT_EQ(probes["data"][1]["extraction_points"], json::array({"strict_v10"}));
  const std::string metrics = HttpGetWithHeaders(port, "/metrics", kAuth).body;
  EXPECT_EQ(testing::MetricValue(metrics, "undercurrent_probe_set_reloads_total{outcome=\"ok\"}"),
            9);
  EXPECT_EQ(
      testing::MetricValue(metrics, "undercurrent_probe_set_reloads_total{outcome=\"failed\"}"), 1);
  EXPECT_EQ(testing::MetricValue(metrics, "undercurrent_probe_set_version{probe_set=\"strict\"}"),
            10);
  EXPECT_GT(
      testing::MetricValue(metrics, "undercurrent_probe_set_requests_total{probe_set=\"main\"}"),
      0);

  // Reloading needs the key; an unknown set is named.
  EXPECT_EQ(HttpPost(port, "/v1/probes/reload", "").status, 401);
  const testing::HttpResult unknown =
      HttpPost(port, "/v1/completions", Body("Once", "strickt").dump(), kAuth);
  EXPECT_EQ(unknown.status, 400) << unknown.body;
  EXPECT_EQ(unknown.Json()["error"]["param"], "probe_set");
  EXPECT_NE(unknown.body.find("did you mean 'strict'"), std::string::npos) << unknown.body;
  server.Signal(SIGTERM);
  EXPECT_EQ(server.Wait(), 0) << server.log();
}

TEST(ServeProbeSetsTest, ReloadNeedsAnApiKeyAndProbeSetNeedsSpecs) {
  const auto dir = testing::ScratchDir("serve_probe_sets_keys");
  WriteSpecs(dir, 1);
  {
    ServeProcess server(
        {"--model", kModel, "--threads", "1", "--spec", (dir / "main.yaml").string()});
    ASSERT_TRUE(server.ok()) << server.log();
    const testing::HttpResult r = HttpPost(server.port(), "/v1/probes/reload", "");
    EXPECT_EQ(r.status, 403) << r.body;
    EXPECT_NE(r.body.find("--api-key"), std::string::npos) << r.body;
    // A lone --spec FILE is the set "default".
    const json probes = testing::HttpGet(server.port(), "/v1/probes").Json();
    EXPECT_EQ(probes["data"][0]["name"], "default") << probes;
    server.Signal(SIGTERM);
    EXPECT_EQ(server.Wait(), 0) << server.log();
  }
  ServeProcess plain({"--model", kModel, "--threads", "1"});
  ASSERT_TRUE(plain.ok()) << plain.log();
  const testing::HttpResult r =
      HttpPost(plain.port(), "/v1/completions", Body("Once", "main").dump());
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.Json()["error"]["param"], "probe_set");
  plain.Signal(SIGTERM);
  EXPECT_EQ(plain.Wait(), 0) << plain.log();
}

}  // namespace
}  // namespace uc
