// Sink records, redaction, the NDJSON file sink (rotation, concurrent writers in threads and
// in processes) and the Prometheus rendering of the metrics.
#include <gtest/gtest.h>
#include <prometheus/counter.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "probe/sinks/metrics.h"
#include "probe/sinks/ndjson_file_sink.h"
#include "probe/sinks/redaction.h"
#include "probe/sinks/sink.h"

namespace uc::probe {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

fs::path TempDir(const std::string& name) {
  fs::path dir =
      fs::temp_directory_path() / ("uc_sinks_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::vector<json> ReadLines(const fs::path& path) {
  std::vector<json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    EXPECT_FALSE(j.is_discarded()) << path << ": not one JSON object per line: " << line;
    out.push_back(std::move(j));
  }
  return out;
}

TEST(SinkRecordTest, SignalAndResultRecordsUseTheV01Format) {
  ProbeSignal s;
  s.action = ProbeAction::kFlag;
  s.confidence = 0.75;
  s.metadata = {{"score", 3}};
  s.timestamp = 12.5;
  const json sig = SignalRecord("req", "gate", s);
  EXPECT_EQ(sig["kind"], "signal");
  EXPECT_EQ(sig["request_id"], "req");
  EXPECT_EQ(sig["extraction_point_name"], "gate");
  EXPECT_GT(sig["timestamp"].get<double>(), 1.6e9);
  EXPECT_EQ(sig["payload"], json({{"action", "flag"},
                                  {"confidence", 0.75},
                                  {"metadata", {{"score", 3}}},
                                  {"timestamp", 12.5}}));
  ProbeResult r;
  r.request_id = "req";
  r.point = "gate";
  r.verdict = {{"flagged", true}};
  r.signal_history = {s};
  const json res = ResultRecord(r);
  EXPECT_EQ(res["kind"], "result");
  EXPECT_EQ(res["payload"]["verdict"], json({{"flagged", true}}));
  EXPECT_EQ(res["payload"]["signal_history"].size(), 1u);
  EXPECT_EQ(res["payload"]["request_id"], "req");
}

TEST(MemorySinkTest, KeepsRecordsInOrderFromManyThreads) {
  MemorySink sink;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&sink, t] {
      for (int i = 0; i < 250; ++i) sink.Write({{"t", t}, {"i", i}});
    });
  }
  for (auto& t : threads) t.join();
  const std::vector<json> records = sink.records();
  ASSERT_EQ(records.size(), 1000u);
  std::vector<int> last(4, -1);
  for (const json& r : records) {
    const int t = r["t"], i = r["i"];
    EXPECT_EQ(i, last[t] + 1) << "one thread's records out of order";
    last[t] = i;
  }
}

TEST(RedactionTest, DefaultKeysAtAnyDepthAndInsideArrays) {
  StatusOr<Redactor> r = Redactor::Create({});
  ASSERT_TRUE(r.ok());
  const json in = {{"prompt", "secret"},
                   {"prompt_len", 7},
                   {"payload", {{"metadata", {{"text", "x"}, {"score", 1}}}}},
                   {"list", json::array({{{"messages", {1, 2}}}, {{"keep", 1}}})}};
  const json out = r->Apply(in);
  EXPECT_EQ(out["prompt"], "[REDACTED]");
  EXPECT_EQ(out["prompt_len"], 7) << "matching is exact: prompt != prompt_len";
  EXPECT_EQ(out["payload"]["metadata"]["text"], "[REDACTED]");
  EXPECT_EQ(out["payload"]["metadata"]["score"], 1);
  EXPECT_EQ(out["list"][0]["messages"], "[REDACTED]");
  EXPECT_EQ(out["list"][1]["keep"], 1);
  EXPECT_EQ(in["prompt"], "secret") << "the input is not modified";
}

TEST(RedactionTest, DottedKeysMatchAPathSuffixAndDropKeysRemove) {
  RedactionOptions o;
  o.redact_prompt_text = false;
  o.redact_keys = {"metadata.raw_scores"};
  o.drop_keys = {"debug", "payload.metadata.user"};
  StatusOr<Redactor> r = Redactor::Create(o);
  ASSERT_TRUE(r.ok());
  const json in = {
      {"payload",
       {{"metadata", {{"raw_scores", {1, 2}}, {"user", "u"}, {"debug", 1}}}, {"raw_scores", 5}}},
      {"prompt", "kept: default keys are off"}};
  const json out = r->Apply(in);
  EXPECT_EQ(out["payload"]["metadata"]["raw_scores"], "[REDACTED]");
  EXPECT_EQ(out["payload"]["raw_scores"], 5) << "a dotted key needs its parent";
  EXPECT_FALSE(out["payload"]["metadata"].contains("user"));
  EXPECT_FALSE(out["payload"]["metadata"].contains("debug"));
  EXPECT_EQ(out["prompt"], "kept: default keys are off");
}

TEST(RedactionTest, EmptySegmentsAreRejected) {
  RedactionOptions o;
  o.redact_keys = {"a..b"};
  StatusOr<Redactor> r = Redactor::Create(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'a..b' has an empty key segment"), std::string::npos);
  o.redact_keys = {};
  o.drop_keys = {""};
  EXPECT_FALSE(Redactor::Create(o).ok());
}

TEST(NdjsonFileSinkTest, AppendsOneRecordPerLine) {
  const fs::path dir = TempDir("append");
  auto sink = NdjsonFileSink::Open(dir / "probes.ndjson");
  ASSERT_TRUE(sink.ok()) << sink.status().ToString();
  for (int i = 0; i < 3; ++i) (*sink)->Write({{"i", i}, {"text", "é\n\"quoted\""}});
  const std::vector<json> lines = ReadLines(dir / "probes.ndjson");
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[2]["i"], 2);
  EXPECT_EQ(lines[0]["text"], "é\n\"quoted\"");
  EXPECT_EQ((*sink)->lines_written(), 3);
}

TEST(NdjsonFileSinkTest, MissingDirectoryIsAClearError) {
  auto sink = NdjsonFileSink::Open("/nonexistent-dir-for-uc/probes.ndjson");
  ASSERT_FALSE(sink.ok());
  EXPECT_NE(sink.status().message().find("does not exist"), std::string::npos);
}

TEST(NdjsonFileSinkTest, RotatesBySizeAndKeepsMaxFiles) {
  const fs::path dir = TempDir("rotate");
  NdjsonFileOptions o;
  o.max_bytes = 1000;
  o.max_files = 3;
  auto sink = NdjsonFileSink::Open(dir / "p.ndjson", o);
  ASSERT_TRUE(sink.ok());
  const std::string pad(80, 'x');
  for (int i = 0; i < 100; ++i) (*sink)->Write({{"i", i}, {"pad", pad}});
  std::set<int> seen;
  for (const std::string name : {"p.ndjson", "p.ndjson.1", "p.ndjson.2", "p.ndjson.3"}) {
    ASSERT_TRUE(fs::exists(dir / name)) << name;
    EXPECT_LE(fs::file_size(dir / name), 1000u) << name;
    for (const json& j : ReadLines(dir / name)) seen.insert(j["i"].get<int>());
  }
  EXPECT_FALSE(fs::exists(dir / "p.ndjson.4")) << "max_files = 3 rotated files";
  // The newest records survive, without gaps.
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(*seen.rbegin(), 99);
  EXPECT_EQ(static_cast<int>(seen.size()), 100 - *seen.begin());
  // The newest file holds the newest records.
  EXPECT_EQ(ReadLines(dir / "p.ndjson").back()["i"], 99);
}

TEST(NdjsonFileSinkTest, ConcurrentThreadsNeverInterleaveLines) {
  const fs::path dir = TempDir("threads");
  NdjsonFileOptions o;
  o.max_bytes = 64 * 1024;
  o.max_files = 100;
  auto sink = NdjsonFileSink::Open(dir / "p.ndjson", o);
  ASSERT_TRUE(sink.ok());
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 300; ++i)
        (*sink)->Write({{"t", t}, {"i", i}, {"pad", std::string(100, 'y')}});
    });
  }
  for (auto& t : threads) t.join();
  std::set<std::pair<int, int>> seen;
  for (const auto& entry : fs::directory_iterator(dir)) {
    for (const json& j : ReadLines(entry.path()))
      seen.insert({j["t"].get<int>(), j["i"].get<int>()});
  }
  EXPECT_EQ(seen.size(), 8u * 300u);
}

TEST(NdjsonFileSinkTest, ConcurrentProcessesNeverInterleaveLines) {
  const fs::path dir = TempDir("procs");
  const fs::path path = dir / "p.ndjson";
  std::vector<pid_t> children;
  for (int c = 0; c < 3; ++c) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      NdjsonFileOptions o;
      o.max_bytes = 32 * 1024;
      o.max_files = 1000;
      auto sink = NdjsonFileSink::Open(path, o);
      if (!sink.ok()) ::_exit(3);
      for (int i = 0; i < 400; ++i)
        (*sink)->Write({{"c", c}, {"i", i}, {"pad", std::string(200, 'z')}});
      ::_exit((*sink)->write_errors() == 0 ? 0 : 4);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  std::set<std::pair<int, int>> seen;
  size_t lines = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    EXPECT_LE(fs::file_size(entry.path()), 32u * 1024u) << entry.path();
    for (const json& j : ReadLines(entry.path())) {
      seen.insert({j["c"].get<int>(), j["i"].get<int>()});
      ++lines;
    }
  }
  EXPECT_EQ(lines, 3u * 400u) << "a line was lost or duplicated";
  EXPECT_EQ(seen.size(), 3u * 400u);
}

TEST(NdjsonFileSinkTest, AWriteFailureIsCountedNotThrown) {
  const fs::path dir = TempDir("fail");
  Metrics metrics;
  auto sink = NdjsonFileSink::Open(dir / "p.ndjson", {}, &metrics);
  ASSERT_TRUE(sink.ok());
  fs::remove_all(dir);  // the directory disappears under the sink
  (*sink)->Write({{"i", 1}});
  EXPECT_EQ((*sink)->write_errors(), 1);
  EXPECT_EQ(metrics.Sink("file").write_errors->Value(), 1);
}

// A full disk stops a write midway (simulated by RLIMIT_FSIZE in a child process: a write past
// the limit is cut short, then fails with EFBIG). The partial line is rolled back: the file
// holds whole records only, every failed record is counted, and once there is room again the
// next record starts a line of its own.
TEST(NdjsonFileSinkTest, AFullDiskLeavesOnlyWholeLines) {
  const fs::path dir = TempDir("full");
  const fs::path path = dir / "p.ndjson";
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    rlimit limit{};
    ::getrlimit(RLIMIT_FSIZE, &limit);
    rlimit small = limit;
    small.rlim_cur = 4000;
    if (::setrlimit(RLIMIT_FSIZE, &small) != 0) ::_exit(3);
    auto sink = NdjsonFileSink::Open(path);
    if (!sink.ok()) ::_exit(4);
    for (int i = 0; i < 30; ++i) (*sink)->Write({{"i", i}, {"pad", std::string(250, 'z')}});
    const bool failed =
        (*sink)->write_errors() == 30 - (*sink)->lines_written() && (*sink)->write_errors() > 0;
    ::setrlimit(RLIMIT_FSIZE, &limit);  // room again
    (*sink)->Write({{"i", 99}, {"pad", "after"}});
    ::_exit(failed && (*sink)->write_errors() == 30 - ((*sink)->lines_written() - 1) ? 0 : 5);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  ASSERT_EQ(WEXITSTATUS(status), 0);
  std::ifstream in(path);
  std::vector<int> ids;
  for (std::string line; std::getline(in, line);) {
    const json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(j.is_discarded()) << "a torn line: " << line;
    ids.push_back(j["i"].get<int>());
  }
  ASSERT_GE(ids.size(), 2u);
  EXPECT_LT(ids.size(), 30u);
  for (size_t k = 0; k + 1 < ids.size(); ++k) EXPECT_EQ(ids[k], static_cast<int>(k));
  EXPECT_EQ(ids.back(), 99);
}

TEST(MetricsTest, SeriesAreLabelledByPointNeverByRequest) {
  Metrics metrics;
  PointMetrics& gate = metrics.Point("gate", /*inline_point=*/true);
  gate.activations->Increment(3);
  gate.drops_overflow->Increment(2);
  metrics.Point("observer", false).queue_depth->Set(4);
  metrics.Sink("webhook").dead_lettered->Increment();
  engine::EngineStats stats;
  stats.num_running = 2;
  stats.num_kv_blocks = 10;
  stats.num_free_kv_blocks = 7;
  stats.generated_tokens = 5;
  metrics.RecordEngineStep(stats, 0.01);
  stats.generated_tokens = 9;
  metrics.RecordEngineStep(stats, 0.02);
  metrics.RecordFinished("stop");
  const std::string text = metrics.Serialize();
  EXPECT_NE(text.find("undercurrent_probe_activations_total{execution_mode=\"inline\","
                      "extraction_point=\"gate\"} 3"),
            std::string::npos)
      << text;
  EXPECT_NE(
      text.find("undercurrent_queue_drops_total{extraction_point=\"gate\",reason=\"overflow\"} 2"),
      std::string::npos);
  EXPECT_NE(text.find("undercurrent_queue_depth{extraction_point=\"observer\"} 4"),
            std::string::npos);
  EXPECT_NE(
      text.find("undercurrent_sink_records_total{outcome=\"dead_lettered\",sink=\"webhook\"} 1"),
      std::string::npos);
  EXPECT_NE(text.find("undercurrent_kv_blocks_in_use 3"), std::string::npos);
  EXPECT_NE(text.find("undercurrent_generation_tokens_total 9"), std::string::npos);
  EXPECT_NE(text.find("undercurrent_engine_step_seconds_count 2"), std::string::npos);
  EXPECT_NE(text.find("undercurrent_requests_finished_total{finish_reason=\"stop\"} 1"),
            std::string::npos);
  EXPECT_NE(text.find("undercurrent_probe_activation_seconds_bucket"), std::string::npos);
  EXPECT_EQ(text.find("request_id"), std::string::npos);
  // The same point twice gives the same series.
  EXPECT_EQ(&metrics.Point("gate", true), &gate);
}

TEST(MetricsTest, WriteFileReplacesAtomically) {
  const fs::path dir = TempDir("metrics");
  Metrics metrics;
  metrics.Point("p", false).activations->Increment();
  ASSERT_TRUE(metrics.WriteFile(dir / "m.prom").ok());
  std::ifstream in(dir / "m.prom");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, metrics.Serialize());
  EXPECT_FALSE(fs::exists(dir / "m.prom.tmp"));
  EXPECT_FALSE(metrics.WriteFile("/nonexistent-dir-for-uc/m.prom").ok());
}

}  // namespace
}  // namespace uc::probe
