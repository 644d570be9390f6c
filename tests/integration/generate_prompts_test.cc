// `undercurrent generate --prompts FILE.jsonl` through the real binary: one JSON line per
// prompt as each finishes, equal to running each prompt on its own with --prompt; a malformed
// file is refused before anything runs, with every problem named by line and field; a request
// the engine rejects gets its own error line while the others complete (exit 1).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "common/test_util.h"

namespace uc {
namespace {

namespace fs = std::filesystem;

struct CliResult {
  int exit_code;
  std::string output;
};

fs::path WriteFile(const std::string& name, const std::string& text) {
  // One directory per test: ctest runs the tests of this file in parallel processes.
  const fs::path path =
      testing::ScratchDir(std::string("generate_prompts_") +
                          ::testing::UnitTest::GetInstance()->current_test_info()->name()) /
      name;
  std::ofstream(path) << text;
  return path;
}

CliResult RunCli(const std::string& args) {
  CliResult r;
  r.exit_code =
      testing::RunCommand(testing::CliBinary().string() + " generate --model '" +
                              std::string(UC_SOURCE_DIR) + "/models/stories260K' " + args + " 2>&1",
                          &r.output);
  return r;
}

// The JSON lines of the output, by id (log lines skipped).
std::map<std::string, nlohmann::json> JsonLines(const std::string& output) {
  std::map<std::string, nlohmann::json> lines;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] != '{') continue;
    const nlohmann::json j = nlohmann::json::parse(line);
    lines[j["id"].get<std::string>()] = j;
  }
  return lines;
}

TEST(GeneratePromptsTest, EachLineEqualsTheSamePromptAlone) {
  const fs::path file = WriteFile("ok.jsonl",
                                  R"({"id": "a", "prompt": "Once upon a time", "max_tokens": 30}
{"id": 7, "prompt": "The little dog", "max_tokens": 20, "temperature": 0.8, "seed": 5}

{"id": "c", "prompt_ids": [1, 403, 407], "max_tokens": 12, "stop": ["park"], "label": 1}
)");
  const CliResult r = RunCli("--prompts '" + file.string() + "' --temperature 0 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto lines = JsonLines(r.output);
  ASSERT_EQ(lines.size(), 3u) << r.output;
  EXPECT_EQ(lines.at("c")["prompt_ids"], nlohmann::json({1, 403, 407}));
  EXPECT_EQ(lines.at("c")["usage"]["completion_tokens"], lines.at("c")["ids"].size());
  const std::map<std::string, std::string> alone = {
      {"a", "--prompt 'Once upon a time' --max-tokens 30 --temperature 0"},
      {"7", "--prompt 'The little dog' --max-tokens 20 --temperature 0.8 --seed 5"}};
  for (const auto& [id, args] : alone) {
    const CliResult one = RunCli(args + " --json");
    ASSERT_EQ(one.exit_code, 0) << one.output;
    const nlohmann::json j = nlohmann::json::parse(one.output.substr(one.output.find('{')));
    EXPECT_EQ(lines.at(id)["ids"], j["ids"]) << id;
    EXPECT_EQ(lines.at(id)["text"], j["text"]) << id;
    EXPECT_EQ(lines.at(id)["finish_reason"], j["finish_reason"]) << id;
  }
}

TEST(GeneratePromptsTest, MalformedFileIsRefusedWithEveryProblemNamed) {
  const fs::path file = WriteFile("bad.jsonl", R"({"id": "a", "prompt": "x"}
{"id": "b", "promt": "x"}
not json
{"id": "c", "prompt": "x", "max_tokens": "ten"}
{"id": "a", "prompt": "y"}
[1, 2]
)");
  const CliResult r = RunCli("--prompts '" + file.string() + "' --json");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  const std::string name = file.string();
  for (const std::string& s :
       {name + ":2: unknown field 'promt' (did you mean 'prompt'?)",
        name + ":2: give exactly one of 'prompt'", name + ":3: not valid JSON",
        name + ":4: field 'max_tokens': must be an integer",
        name + ":5: id 'a' appears more than once", name + ":6: expected a JSON object"}) {
    EXPECT_NE(r.output.find(s), std::string::npos) << "missing '" << s << "' in:\n" << r.output;
  }
  EXPECT_EQ(r.output.find("{\"finish_reason\""), std::string::npos) << "nothing should run";
}

TEST(GeneratePromptsTest, RejectedRequestGetsAnErrorLineAndTheOthersRun) {
  std::string long_ids = "1";
  for (int i = 0; i < 600; ++i) long_ids += ", 42";
  const fs::path file =
      WriteFile("mixed.jsonl",
                "{\"id\": \"ok\", \"prompt\": \"Once\", \"max_tokens\": 8}\n"
                "{\"id\": \"long\", \"prompt_ids\": [" +
                    long_ids +
                    "]}\n"
                    "{\"id\": \"cold\", \"prompt\": \"x\", \"temperature\": -2}\n");
  const CliResult r = RunCli("--prompts '" + file.string() + "' --json");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  const auto lines = JsonLines(r.output);
  ASSERT_EQ(lines.size(), 3u) << r.output;
  EXPECT_EQ(lines.at("ok")["ids"].size(), 8u);
  EXPECT_NE(lines.at("long")["error"].get<std::string>().find("max_model_len"), std::string::npos);
  EXPECT_NE(lines.at("cold")["error"].get<std::string>().find("temperature"), std::string::npos);
}

TEST(GeneratePromptsTest, BadEngineFlagsAreUsageErrors) {
  const fs::path file = WriteFile("one.jsonl", "{\"id\": 1, \"prompt\": \"a\"}\n");
  EXPECT_EQ(RunCli("--prompts '" + file.string() + "' --kv-cache-memory lots").exit_code, 2);
  const CliResult tiny = RunCli("--prompts '" + file.string() + "' --kv-cache-memory 64KiB");
  EXPECT_EQ(tiny.exit_code, 1) << tiny.output;
  EXPECT_NE(tiny.output.find("--kv-cache-memory"), std::string::npos) << tiny.output;
  // A context longer than the cache holds is refused, naming both flags; never shortened.
  const CliResult too_long =
      RunCli("--prompts '" + file.string() + "' --kv-cache-memory 1MiB --max-model-len 100000");
  EXPECT_EQ(too_long.exit_code, 1) << too_long.output;
  EXPECT_NE(too_long.output.find("raise --kv-cache-memory or lower --max-model-len"),
            std::string::npos)
      << too_long.output;
  EXPECT_EQ(RunCli("--prompts '" + file.string() + "' --max-model-len -3").exit_code, 2);
  const CliResult automatic =
      RunCli("--prompts '" + file.string() + "' --kv-cache-memory auto --max-tokens 2");
  EXPECT_EQ(automatic.exit_code, 0) << automatic.output;
  EXPECT_NE(automatic.output.find("sized automatically"), std::string::npos) << automatic.output;
  EXPECT_EQ(RunCli("--prompts missing.jsonl").exit_code, 2);
  EXPECT_EQ(RunCli("--max-tokens 2").exit_code, 2) << "neither --prompt nor --prompts";
}

// Async probes from the command line: every request's line carries its async verdict (printed
// once the queue drained), the sink file gets every signal and result, and --metrics-file
// holds valid Prometheus text (promtool) with the engine's and the points' series.
TEST(GeneratePromptsTest, AsyncProbesSinkFileAndMetricsFile) {
  const fs::path dir = testing::ScratchDir("generate_async");
  const fs::path spec = dir / "spec.yaml";
  std::ofstream(spec) << R"(version: "1"
extraction_points:
  - name: drift
    layers: [2]
    tensor_type: residual_stream
    position: "generated[*]"
    probe_type: running_mean
    probe_kind: trajectory
    execution_mode: async
    queue_depth: 64
  - name: gate
    layers: [3]
    tensor_type: residual_stream
    position: "generated[*]"
    probe_type: norm_gate
    probe_kind: single_shot
    probe_args: {threshold: 1000.0}
)";
  const fs::path prompts = dir / "prompts.jsonl";
  std::ofstream(prompts)
      << R"({"id": "a", "prompt": "Once upon a time", "max_tokens": 12, "ignore_eos": true}
{"id": "b", "prompt": "The cat", "max_tokens": 9, "ignore_eos": true}
)";
  const CliResult r =
      RunCli("--prompts '" + prompts.string() + "' --spec '" + spec.string() +
             "' --temperature 0 --json --sink-file '" + (dir / "sink.ndjson").string() +
             "' --metrics-file '" + (dir / "metrics.prom").string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto lines = JsonLines(r.output);
  ASSERT_EQ(lines.size(), 2u) << r.output;
  for (const auto& [id, line] : lines) {
    const nlohmann::json& drift = line["probing"]["drift"];
    const int64_t tokens = line["ids"].size();
    EXPECT_EQ(drift["metadata"]["queue"]["accepted"], tokens) << id;
    EXPECT_EQ(drift["metadata"]["queue"]["processed"], tokens) << id;
    EXPECT_TRUE(line["probing"].contains("gate")) << id;
  }
  int results = 0;
  std::ifstream in(dir / "sink.ndjson");
  for (std::string text; std::getline(in, text);) {
    const nlohmann::json rec = nlohmann::json::parse(text);
    results += rec["kind"] == "result";
  }
  EXPECT_EQ(results, 4) << "one result per (request, point)";
  std::string check;
  EXPECT_EQ(testing::RunCommand(
                "promtool check metrics < '" + (dir / "metrics.prom").string() + "' 2>&1", &check),
            0)
      << check;
  std::ifstream metrics_in(dir / "metrics.prom");
  const std::string metrics((std::istreambuf_iterator<char>(metrics_in)),
                            std::istreambuf_iterator<char>());
  EXPECT_NE(metrics.find("undercurrent_generation_tokens_total 21"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("undercurrent_probe_activations_total{execution_mode=\"async\","
                         "extraction_point=\"drift\"} 21"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("undercurrent_requests_finished_total{finish_reason=\"length\"} 2"),
            std::string::npos);
}

std::string ReadText(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The value of one series in Prometheus text ("NAME{LABELS} VALUE"), or -1 when absent.
double Series(const std::string& metrics, const std::string& series) {
  const size_t at = metrics.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::stod(metrics.substr(at + series.size() + 2));
}

// --metrics-file is written a last time after the async queues drained: in every one of 20
// runs (the refresh interval far shorter than the run, one fast and one slow async point at two
// layers) the file holds the run's totals, equal to what the request's results say the queues
// processed.
TEST(GeneratePromptsTest, FinalMetricsFileCountsEveryAsyncActivation) {
  const fs::path dir = testing::ScratchDir("generate_final_metrics");
  const fs::path spec = dir / "spec.yaml";
  std::ofstream(spec) << R"(version: "1"
extraction_points:
  - name: drift
    layers: [1, 2]
    tensor_type: residual_stream
    position: "generated[*]"
    probe_type: running_mean
    probe_kind: trajectory
    execution_mode: async
    queue_depth: 64
  - name: slow
    layers: [1, 2]
    tensor_type: residual_stream
    position: "generated[*]"
    probe_type: plugin_slow_count
    probe_kind: trajectory
    execution_mode: async
    queue_depth: 64
    probe_args: {sleep_ms: 8}
)";
  const fs::path metrics_file = dir / "metrics.prom";
  for (int run = 0; run < 20; ++run) {
    SCOPED_TRACE("run " + std::to_string(run));
    const CliResult r = RunCli(
        "--prompt 'Once upon a time' --max-tokens 20 --ignore-eos "
        "--temperature 0 --json --spec '" +
        spec.string() + "' --probe-plugin '" + UC_TEST_PROBE_PLUGIN +
        "' --metrics-interval 0.02 --metrics-file '" + metrics_file.string() + "'");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const nlohmann::json line = nlohmann::json::parse(r.output.substr(r.output.find('{')));
    ASSERT_EQ(line["ids"].size(), 20u);
    const std::string metrics = ReadText(metrics_file);
    EXPECT_EQ(Series(metrics, "undercurrent_generation_tokens_total"), 20) << metrics;
    EXPECT_EQ(Series(metrics, "undercurrent_requests_finished_total{finish_reason=\"length\"}"), 1);
    for (const char* point : {"drift", "slow"}) {
      const nlohmann::json& queue = line["probing"][point]["metadata"]["queue"];
      EXPECT_EQ(queue["accepted"], 40) << point;  // 20 tokens x 2 layers
      EXPECT_EQ(queue["processed"], 40) << point;
      EXPECT_EQ(Series(metrics, std::string("undercurrent_probe_activations_total{execution_mode="
                                            "\"async\",extraction_point=\"") +
                                    point + "\"}"),
                40)
          << point << "\n"
          << metrics;
    }
    EXPECT_EQ(line["probing"]["drift"]["verdict"]["count"], 40);
    EXPECT_EQ(line["probing"]["slow"]["verdict"]["count"], 40);
  }
}

// An async point named `observer` at layers 0 and 4 of every generated token (issue 56).
std::string ObserverSpec(const std::string& probe, int queue_depth, const std::string& args) {
  return R"(version: "1"
extraction_points:
  - name: observer
    layers: [0, 4]
    tensor_type: residual_stream
    position: "generated[*]"
    probe_type: )" +
         probe + R"(
    probe_kind: trajectory
    execution_mode: async
    queue_depth: )" +
         std::to_string(queue_depth) + (args.empty() ? "" : "\n    probe_args: " + args) + "\n";
}

// Issue 56: steps microseconds apart, step threads on every core (default --threads) and a busy
// machine kept the async workers off the CPU until the request ended, so a depth-4 drop_oldest
// queue kept 4 of 40 records. A full queue no worker has reached is now served by the engine
// thread while its probe is fast: all 40 processed, none dropped, in each of 20 runs.
TEST(GeneratePromptsTest, AsyncObserverSeesEveryActivationWithDefaultThreads) {
  const fs::path spec = WriteFile("spec.yaml", ObserverSpec("running_mean", 4, ""));
  const fs::path metrics_file = spec.parent_path() / "metrics.prom";
  for (int run = 0; run < 20; ++run) {
    SCOPED_TRACE("run " + std::to_string(run));
    const CliResult r = RunCli(
        "--prompt 'Once upon a time' --max-tokens 20 --ignore-eos --json "
        "--spec '" +
        spec.string() + "' --metrics-file '" + metrics_file.string() + "'");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const nlohmann::json line = nlohmann::json::parse(r.output.substr(r.output.find('{')));
    const nlohmann::json& queue = line["probing"]["observer"]["metadata"]["queue"];
    EXPECT_EQ(queue["accepted"], 40) << queue;
    EXPECT_EQ(queue["processed"], 40) << queue;
    EXPECT_EQ(queue["dropped"]["overflow"], 0) << queue;
    const std::string metrics = ReadText(metrics_file);
    EXPECT_EQ(Series(metrics,
                     "undercurrent_probe_activations_total{execution_mode=\"async\","
                     "extraction_point=\"observer\"}"),
              40)
        << metrics;
    EXPECT_EQ(Series(metrics,
                     "undercurrent_queue_drops_total{extraction_point=\"observer\","
                     "reason=\"overflow\"}"),
              0)
        << metrics;
  }
}

// The same with 16 concurrent requests (16 queues of depth 16 filled every step, 4 workers).
TEST(GeneratePromptsTest, AsyncObserverSeesEveryActivationOf16Requests) {
  std::string jsonl;
  for (int i = 0; i < 16; ++i) {
    jsonl += "{\"id\": \"r" + std::to_string(i) +
             "\", \"prompt\": \"Once upon a time\", \"max_tokens\": 20, \"ignore_eos\": true, "
             "\"seed\": " +
             std::to_string(i) + "}\n";
  }
  const fs::path prompts = WriteFile("prompts.jsonl", jsonl);  // a fresh directory
  const fs::path spec = prompts.parent_path() / "spec.yaml";
  std::ofstream(spec) << ObserverSpec("running_mean", 16, "");
  const fs::path metrics_file = prompts.parent_path() / "metrics.prom";
  for (int run = 0; run < 20; ++run) {
    SCOPED_TRACE("run " + std::to_string(run));
    const CliResult r = RunCli("--prompts '" + prompts.string() + "' --json --spec '" +
                               spec.string() + "' --metrics-file '" + metrics_file.string() + "'");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto lines = JsonLines(r.output);
    ASSERT_EQ(lines.size(), 16u) << r.output;
    for (const auto& [id, line] : lines) {
      const nlohmann::json& queue = line["probing"]["observer"]["metadata"]["queue"];
      EXPECT_EQ(queue["accepted"], 40) << id << " " << queue;
      EXPECT_EQ(queue["processed"], 40) << id << " " << queue;
    }
    const std::string metrics = ReadText(metrics_file);
    EXPECT_EQ(Series(metrics,
                     "undercurrent_probe_activations_total{execution_mode=\"async\","
                     "extraction_point=\"observer\"}"),
              640)
        << metrics;
    EXPECT_EQ(Series(metrics,
                     "undercurrent_queue_drops_total{extraction_point=\"observer\","
                     "reason=\"overflow\"}"),
              0)
        << metrics;
  }
}

// A slow async probe (1 ms an activation) is not run on the engine thread beyond the one call
// that measures it, so it still loses records, and only as many as its speed explains: while
// the request ran (its latency) the probe could handle at most one record a millisecond, plus
// that one call, plus the depth-4 backlog drained after the end.
TEST(GeneratePromptsTest, ASlowAsyncObserverLosesWhatItsSpeedExplains) {
  const fs::path spec =
      WriteFile("spec.yaml", ObserverSpec("plugin_slow_count", 4, "{sleep_ms: 1}"));
  for (int run = 0; run < 5; ++run) {
    SCOPED_TRACE("run " + std::to_string(run));
    const CliResult r = RunCli(
        "--prompt 'Once upon a time' --max-tokens 20 --ignore-eos --json "
        "--spec '" +
        spec.string() + "' --probe-plugin '" + UC_TEST_PROBE_PLUGIN + "'");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const nlohmann::json line = nlohmann::json::parse(r.output.substr(r.output.find('{')));
    const nlohmann::json& queue = line["probing"]["observer"]["metadata"]["queue"];
    const int64_t processed = queue["processed"];
    const int64_t dropped = queue["dropped"]["overflow"];
    EXPECT_EQ(queue["accepted"], 40) << queue;
    EXPECT_EQ(processed + dropped, 40) << queue;
    EXPECT_EQ(queue["dropped"]["drain_timeout"], 0) << queue;
    EXPECT_GE(processed, 4) << queue;
    const double latency_ms = line["metrics"]["latency_seconds"].get<double>() * 1000;
    EXPECT_LE(processed, 4 + 1 + static_cast<int64_t>(latency_ms) + 1)
        << queue << " latency " << latency_ms << " ms";
    std::printf("slow observer: %lld processed, %lld dropped, request latency %.1f ms\n",
                static_cast<long long>(processed), static_cast<long long>(dropped), latency_ms);
  }
}

// --prompt's request gets a fresh unique id each run (runs appending to one sink file never
// collide); --request-id names it.
TEST(GeneratePromptsTest, PromptRequestIdsAreUnique) {
  const fs::path dir = testing::ScratchDir("generate_request_ids");
  const fs::path spec = dir / "spec.yaml";
  std::ofstream(spec) << R"(version: "1"
extraction_points:
  - name: drift
    layers: [2]
    tensor_type: residual_stream
    position: "generated[*]"
    probe_type: running_mean
    probe_kind: trajectory
)";
  const fs::path sink = dir / "sink.ndjson";
  fs::remove(sink);
  const std::string common =
      "--prompt 'Once upon a time' --max-tokens 3 --temperature 0 "
      "--json --spec '" +
      spec.string() + "' --sink-file '" + sink.string() + "'";
  std::vector<std::string> ids;
  for (int run = 0; run < 3; ++run) {
    const CliResult r = RunCli(common);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    ids.push_back(JsonLines(r.output).begin()->first);
    EXPECT_TRUE(std::regex_match(ids.back(), std::regex("prompt-[0-9a-f]{16}"))) << ids.back();
  }
  EXPECT_NE(ids[0], ids[1]);
  EXPECT_NE(ids[1], ids[2]);
  const CliResult named = RunCli(common + " --request-id audit-7");
  ASSERT_EQ(named.exit_code, 0) << named.output;
  EXPECT_EQ(JsonLines(named.output).count("audit-7"), 1u) << named.output;
  std::map<std::string, int> results;
  std::ifstream in(sink);
  for (std::string text; std::getline(in, text);) {
    const nlohmann::json rec = nlohmann::json::parse(text);
    if (rec["kind"] == "result") ++results[rec["request_id"].get<std::string>()];
  }
  EXPECT_EQ(results.size(), 4u);
  for (const std::string& id : ids) EXPECT_EQ(results[id], 1) << id;
  EXPECT_EQ(results["audit-7"], 1);
  EXPECT_EQ(RunCli(common + " --request-id ''").exit_code, 2);
  EXPECT_EQ(RunCli("--prompts '" + spec.string() + "' --request-id x").exit_code, 2);
}

TEST(GeneratePromptsTest, BadSinkFlagsAreClearErrors) {
  const fs::path prompts = WriteFile("one.jsonl", R"({"id": "a", "prompt": "Hi", "max_tokens": 2}
)");
  CliResult r =
      RunCli("--prompts '" + prompts.string() + "' --sink-file /nonexistent-uc-dir/sink.ndjson");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--sink-file"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("does not exist"), std::string::npos) << r.output;
  r = RunCli("--prompts '" + prompts.string() + "' --webhook localhost:9/x");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--webhook"), std::string::npos) << r.output;
  r = RunCli("--prompts '" + prompts.string() + "' --overflow-policy drop_random");
  EXPECT_EQ(r.exit_code, 2) << r.output;
}

}  // namespace
}  // namespace uc
