// Async probes through the real engine and model: bounded queues, fair workers, drain at the
// end of a request, shutdown with and without waiting, sinks and metrics (Undercurrent v0.1
// inventory §10 scenarios 5, 6 and 7). Every count is checked against what the selectors
// matched, so nothing can go missing without a counter saying so.
#include <gtest/gtest.h>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "common/probing_util.h"
#include "common/test_util.h"
#include "engine/llm.h"
#include "probe/sinks/ndjson_file_sink.h"
#include "probe/sinks/sink.h"

namespace uc {
namespace {

using engine::GenerateRequest;
using engine::Prompt;
using nlohmann::json;
using testing::ProbedRun;
namespace fs = std::filesystem;

engine::EngineOptions Options() {
  engine::EngineOptions o;
  o.model_path = std::string(UC_SOURCE_DIR) + "/models/stories260K";
  o.num_threads = 2;
  o.max_model_len = 256;
  o.max_num_seqs = 64;
  o.max_num_batched_tokens = 256;
  o.max_prefill_chunk = 32;
  return o;
}

std::unique_ptr<engine::LLM> OpenLLM() {
  auto llm = engine::LLM::Open(Options());
  EXPECT_TRUE(llm.ok()) << llm.status().ToString();
  return llm.ok() ? std::move(llm).value() : nullptr;
}

using testing::Greedy;

// n requests with prompts of 2..9 tokens and 20..50 generated tokens.
std::vector<GenerateRequest> Workload(int n) {
  std::vector<GenerateRequest> out;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> ids = {1};
    for (int k = 0; k < 1 + i % 8; ++k) ids.push_back(300 + (i * 7 + k * 13) % 200);
    out.push_back({"r" + std::to_string(i), Prompt::Ids(ids), Greedy(20 + (i * 11) % 31)});
  }
  return out;
}

std::string ObserverSpec(int ms, int depth, const std::string& policy = "") {
  return R"(version: "1"
extraction_points:
  - name: observer
    layers: [2]
    tensor_type: residual_stream
    position: "generated[*]"
    probe_type: slow_recorder
    probe_kind: trajectory
    execution_mode: async
    queue_depth: )" +
         std::to_string(depth) + (policy.empty() ? "" : "\n    overflow_policy: " + policy) +
         "\n    probe_args: {ms: " + std::to_string(ms) + "}\n";
}

const probe::ProbeResult& ResultOf(const ProbedRun& run, const std::string& id,
                                   const std::string& point) {
  static const probe::ProbeResult kMissing;
  auto it = run.probing.find(id);
  if (it == run.probing.end()) return kMissing;
  for (const probe::ProbeResult& r : it->second.results) {
    if (r.point == point) return r;
  }
  return kMissing;
}

// Inventory scenario 7: 50 concurrent requests, one 50 ms async probe. Generation is the same
// as without the probe, no record reaches another request's probe, each probe sees increasing
// positions, and every matched activation is processed or counted as dropped.
TEST(AsyncProbingTest, FiftyConcurrentRequestsWithASlowProbe) {
  auto llm = OpenLLM();
  ASSERT_NE(llm, nullptr);
  const std::vector<GenerateRequest> requests = Workload(50);
  const std::vector<engine::GenerateResult> plain = llm->Generate(requests);

  probe::Metrics metrics;
  auto memory = std::make_shared<probe::MemorySink>();
  probe::ProbingOptions options;
  options.async.workers = 8;
  options.metrics = &metrics;
  options.sinks = {memory};
  auto session = testing::MakeSession(ObserverSpec(50, 4), llm->engine().config(), options);
  ASSERT_NE(session, nullptr);
  ProbedRun run = testing::RunProbed(*llm, *session, requests);
  ASSERT_EQ(run.results.size(), requests.size());
  int64_t processed = 0, dropped = 0, signals_expected = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const std::string& id = requests[i].id;
    EXPECT_EQ(run.results[i].output.output_ids, plain[i].output.output_ids) << id;
    const probe::ProbeResult& r = ResultOf(run, id, "observer");
    ASSERT_EQ(r.request_id, id);
    EXPECT_EQ(r.verdict["foreign"], 0) << id << ": a record of another request";
    const std::vector<int64_t> positions = r.verdict["positions"];
    for (size_t k = 1; k < positions.size(); ++k) {
      EXPECT_LT(positions[k - 1], positions[k]) << id << ": out of order";
    }
    const json& q = r.metadata["queue"];
    const int64_t generated = static_cast<int64_t>(run.results[i].output.output_ids.size());
    EXPECT_EQ(q["accepted"].get<int64_t>(), generated) << id << ": one record per token";
    const int64_t drops = q["dropped"]["overflow"].get<int64_t>() +
                          q["dropped"]["drain_timeout"].get<int64_t>() +
                          q["dropped"]["shutdown"].get<int64_t>();
    // Every accepted record was processed or dropped (drop_oldest counts the evicted ones).
    EXPECT_EQ(q["processed"].get<int64_t>() + drops, generated) << id << ": lost silently";
    EXPECT_EQ(r.verdict["n"].get<int64_t>(), q["processed"].get<int64_t>());
    EXPECT_EQ(q["capacity"], 4);
    EXPECT_EQ(q["overflow_policy"], "drop_oldest");
    processed += q["processed"].get<int64_t>();
    dropped += drops;
    signals_expected += q["processed"].get<int64_t>();
  }
  EXPECT_GT(dropped, 0) << "50 ms per record must overflow a depth-4 queue";
  EXPECT_EQ(run.stats.async_processed, processed);
  EXPECT_EQ(run.stats.async_dropped, dropped);
  // Sinks: one signal per processed record, one result per request.
  int64_t signals = 0, results = 0;
  for (const json& rec : memory->records()) {
    (rec["kind"] == "signal" ? signals : results) += 1;
  }
  EXPECT_EQ(signals, signals_expected);
  EXPECT_EQ(results, 50);
  // Metrics agree, per point.
  probe::PointMetrics& m = metrics.Point("observer", false);
  EXPECT_EQ(m.activations->Value(), static_cast<double>(processed));
  EXPECT_EQ(m.drops_overflow->Value() + m.drops_drain_timeout->Value() + m.drops_shutdown->Value(),
            static_cast<double>(dropped));
  EXPECT_EQ(m.queue_depth->Value(), 0);
}

// Inventory scenario 5: a request that ends right after its activations still gets all of
// them through its async probe before on_end.
TEST(AsyncProbingTest, EndOfRequestDrainsItsQueueBeforeOnEnd) {
  auto llm = OpenLLM();
  ASSERT_NE(llm, nullptr);
  auto session = testing::MakeSession(ObserverSpec(30, 32), llm->engine().config());
  ASSERT_NE(session, nullptr);
  ProbedRun run = testing::RunProbed(*llm, *session, {{"a", Prompt::Ids({1, 403}), Greedy(4)}});
  const probe::ProbeResult& r = ResultOf(run, "a", "observer");
  EXPECT_EQ(r.verdict["n"], 4);
  EXPECT_EQ(r.verdict["positions"], json({2, 3, 4, 5}));
  EXPECT_EQ(r.metadata["queue"]["dropped"]["overflow"], 0);
  EXPECT_FALSE(r.metadata.contains("drain_timed_out"));
}

TEST(AsyncProbingTest, PerPointOverflowPolicyAndDepthFromTheSpec) {
  auto llm = OpenLLM();
  ASSERT_NE(llm, nullptr);
  auto session = testing::MakeSession(ObserverSpec(40, 2, "drop_newest"), llm->engine().config());
  ASSERT_NE(session, nullptr);
  ProbedRun run = testing::RunProbed(*llm, *session, {{"a", Prompt::Ids({1, 403}), Greedy(30)}});
  const probe::ProbeResult& r = ResultOf(run, "a", "observer");
  EXPECT_EQ(r.metadata["queue"]["capacity"], 2);
  EXPECT_EQ(r.metadata["queue"]["overflow_policy"], "drop_newest");
  EXPECT_GT(r.metadata["queue"]["dropped"]["overflow"].get<int>(), 0);
  // drop_newest keeps the oldest: the first positions are the ones seen.
  const std::vector<int64_t> positions = r.verdict["positions"];
  ASSERT_GE(positions.size(), 2u);
  EXPECT_EQ(positions[0], 2);
  EXPECT_EQ(positions[1], 3);
}

TEST(AsyncProbingTest, DrainTimeoutDiscardsTheBacklogAndSaysSo) {
  auto llm = OpenLLM();
  ASSERT_NE(llm, nullptr);
  probe::ProbingOptions options;
  options.async.drain_timeout_seconds = 0.1;
  auto session = testing::MakeSession(ObserverSpec(60, 64), llm->engine().config(), options);
  ASSERT_NE(session, nullptr);
  ProbedRun run = testing::RunProbed(*llm, *session, {{"a", Prompt::Ids({1, 403}), Greedy(40)}});
  const probe::ProbeResult& r = ResultOf(run, "a", "observer");
  EXPECT_EQ(r.metadata["drain_timed_out"], true);
  const json& q = r.metadata["queue"];
  EXPECT_GT(q["dropped"]["drain_timeout"].get<int>(), 0);
  EXPECT_EQ(q["accepted"], 40);
  // The call still running at the deadline is the only record not yet counted; its probe
  // cannot give a verdict, and the result says so.
  const int running = r.metadata.value("probe_still_running", false) ? 1 : 0;
  EXPECT_EQ(q["processed"].get<int>() + q["dropped"]["drain_timeout"].get<int>() +
                q["dropped"]["overflow"].get<int>() + running,
            40);
  EXPECT_EQ(r.metadata.contains("error"), running == 1);
}

// Drives the engine by hand so Shutdown can happen mid-generation.
struct ManualRun {
  std::unique_ptr<engine::LLM> llm;
  std::unique_ptr<probe::ProbingSession> session;
  std::mutex mu;
  std::map<std::string, probe::RequestProbeResults> results;
};

void StartManual(ManualRun& m, int ms, int depth) {
  m.llm = OpenLLM();
  ASSERT_NE(m.llm, nullptr);
  m.session = testing::MakeSession(ObserverSpec(ms, depth), m.llm->engine().config());
  ASSERT_NE(m.session, nullptr);
  m.session->SetResultCallback([&m](probe::RequestProbeResults r) {
    std::lock_guard<std::mutex> lock(m.mu);
    const std::string id = r.request_id;
    m.results[id] = std::move(r);
  });
  m.llm->engine().SetObserver(m.session.get());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(m.llm->engine()
                    .AddRequest("s" + std::to_string(i), Prompt::Ids({1, 403}), Greedy(200))
                    .ok());
  }
  // Generate until the probes are well behind.
  for (int step = 0; step < 40 && m.llm->engine().HasUnfinished(); ++step) m.llm->engine().Step();
  ASSERT_GT(m.session->stats().async_accepted, 60);
}

// Inventory scenario 6, fixed: shutdown with wait processes the whole backlog and every
// registered request gets its result.
TEST(AsyncProbingTest, ShutdownWithWaitProcessesTheBacklog) {
  ManualRun m;
  StartManual(m, 5, 1000);
  m.session->Shutdown(/*wait=*/true, /*timeout_seconds=*/60);
  const probe::ProbingStats stats = m.session->stats();
  EXPECT_EQ(stats.async_processed, stats.async_accepted);
  EXPECT_EQ(stats.async_dropped, 0);
  ASSERT_EQ(m.results.size(), 3u);
  for (const auto& [id, r] : m.results) {
    ASSERT_EQ(r.results.size(), 1u);
    EXPECT_EQ(r.results[0].metadata["ended_by"], "shutdown");
    EXPECT_EQ(r.results[0].verdict["n"], r.results[0].metadata["queue"]["accepted"]);
  }
  // The engine may go on; nothing more is probed and nothing breaks.
  while (m.llm->engine().HasUnfinished()) m.llm->engine().Step();
  EXPECT_EQ(m.session->stats().async_accepted, stats.async_accepted);
  m.llm->engine().SetObserver(nullptr);
}

// Without wait: returns promptly, discards the backlog (counted), and still gives every
// request a result with what was processed (v0.1 lost them).
TEST(AsyncProbingTest, ShutdownWithoutWaitStillGivesEveryRequestAResult) {
  ManualRun m;
  StartManual(m, 100, 1000);
  const auto start = std::chrono::steady_clock::now();
  m.session->Shutdown(/*wait=*/false, /*timeout_seconds=*/10);
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(took, 2.0) << "only the calls already running may finish";
  const probe::ProbingStats stats = m.session->stats();
  EXPECT_GT(stats.async_dropped, 0);
  EXPECT_EQ(stats.async_processed + stats.async_dropped, stats.async_accepted);
  ASSERT_EQ(m.results.size(), 3u);
  for (const auto& [id, r] : m.results) {
    const probe::ProbeResult& result = r.results.at(0);
    EXPECT_EQ(result.metadata["ended_by"], "shutdown");
    EXPECT_GT(result.metadata["queue"]["dropped"]["shutdown"].get<int>(), 0);
    EXPECT_EQ(result.verdict["n"], result.metadata["queue"]["processed"]);
  }
  m.llm->engine().SetObserver(nullptr);
}

// Inline points are measured too, and inline results reach the sinks; the metrics output is
// valid Prometheus text (checked by promtool from Debian's `prometheus` package).
TEST(AsyncProbingTest, InlineAndAsyncMetricsPassPromtool) {
  auto llm = OpenLLM();
  ASSERT_NE(llm, nullptr);
  probe::Metrics metrics;
  const fs::path dir = testing::ScratchDir("async_metrics");
  auto file = probe::NdjsonFileSink::Open(dir / "probes.ndjson");
  ASSERT_TRUE(file.ok());
  probe::ProbingOptions options;
  options.metrics = &metrics;
  options.sinks = {*file};
  auto session = testing::MakeSession(R"(version: "1"
extraction_points:
  - {name: gate, layers: [1], tensor_type: residual_stream, position: "generated[3]",
     probe_type: always_abort, probe_kind: single_shot}
  - {name: observer, layers: [0, 4], tensor_type: mlp_out, position: "generated[*]",
     probe_type: slow_recorder, probe_kind: trajectory, execution_mode: async})",
                                      llm->engine().config(), options);
  ASSERT_NE(session, nullptr);
  llm->engine().SetStepListener([&metrics](const engine::EngineStats& s, double seconds,
                                           const std::vector<engine::RequestOutput>&) {
    metrics.RecordEngineStep(s, seconds);
  });
  ProbedRun run = testing::RunProbed(
      *llm, *session,
      {{"a", Prompt::Ids({1, 403}), Greedy(10)}, {"b", Prompt::Ids({1, 300, 400}), Greedy(10)}});
  llm->engine().SetStepListener(nullptr);
  EXPECT_EQ(metrics.Point("gate", true).activations->Value(), 2);
  EXPECT_EQ(metrics.Point("gate", true).generation_aborts->Value(), 2);
  EXPECT_EQ(metrics.Point("gate", true).signals_abort->Value(), 2);
  EXPECT_EQ(metrics.Point("observer", false).activations->Value(),
            static_cast<double>(run.stats.async_processed));
  // The file sink got: both abort signals, every observer signal, 4 results.
  int aborts = 0, results = 0, observer_signals = 0;
  std::ifstream in(dir / "probes.ndjson");
  std::string line;
  while (std::getline(in, line)) {
    const json rec = json::parse(line);
    if (rec["kind"] == "result") ++results;
    if (rec["kind"] == "signal" && rec["extraction_point_name"] == "gate") {
      EXPECT_EQ(rec["payload"]["action"], "abort");
      ++aborts;
    }
    if (rec["kind"] == "signal" && rec["extraction_point_name"] == "observer") ++observer_signals;
  }
  EXPECT_EQ(aborts, 2);
  EXPECT_EQ(results, 4);
  EXPECT_EQ(observer_signals, run.stats.async_processed);

  const fs::path prom = dir / "metrics.prom";
  ASSERT_TRUE(metrics.WriteFile(prom).ok());
  std::string output;
  const int status =
      testing::RunCommand("promtool check metrics < " + prom.string() + " 2>&1", &output);
  EXPECT_EQ(status, 0) << "promtool (Debian package `prometheus`, installed by "
                          "scripts/install-deps.sh) rejected the metrics:\n"
                       << output;
}

}  // namespace
}  // namespace uc
