// Probe action `escalate` end to end on stories260K: an inline point escalates request "gated"
// at generated[3]; a real HTTP classifier on loopback answers continue, abort, too late, never,
// or is not there at all. The gated request's tokens are exactly the unprobed run's up to the
// escalated token, plus the rest only when the outcome is continue; its neighbours in the batch
// are exactly their unprobed runs; while it is held, no token of it comes out (checked step by
// step on the engine's outputs); the classifier got the text so far, the point and the score;
// the outcome is counted in the metrics. Also: a held request preempted for its KV blocks stays
// token-exact.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <prometheus/counter.h>
#include <prometheus/histogram.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "common/batching_workload.h"
#include "common/classifier_util.h"
#include "common/probing_util.h"
#include "common/test_util.h"
#include "engine/generator.h"
#include "engine/llm.h"

namespace uc {
namespace {

using engine::GenerateRequest;
using engine::Prompt;
using nlohmann::json;
using testing::Classifier;
using testing::Greedy;
using namespace std::chrono_literals;

std::string ModelPath() { return std::string(UC_SOURCE_DIR) + "/models/stories260K"; }

engine::EngineOptions Options() {
  engine::EngineOptions o;
  o.model_path = ModelPath();
  o.num_threads = 2;
  o.max_model_len = 256;
  o.max_num_seqs = 16;
  o.max_num_batched_tokens = 64;
  o.max_prefill_chunk = 6;
  return o;
}

// A loopback port bound but not listening while this object lives: connections to it are
// refused, and no other process can take the port meanwhile.
class ClosedPort {
 public:
  ClosedPort() : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    socklen_t len = sizeof(addr);
    EXPECT_EQ(getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    port_ = ntohs(addr.sin_port);
  }
  ~ClosedPort() { close(fd_); }
  ClosedPort(const ClosedPort&) = delete;
  ClosedPort& operator=(const ClosedPort&) = delete;
  int port() const { return port_; }

 private:
  int fd_;
  int port_ = 0;
};

std::string GateSpec(const std::string& url, int timeout_ms, const std::string& on_timeout) {
  return R"(version: "1"
extraction_points:
  - {name: gate, layers: [2], tensor_type: residual_stream, position: "generated[3]",
     probe_type: always_escalate, probe_kind: single_shot, probe_args: {request: gated},
     escalation: {url: ")" +
         url + R"(", timeout_ms: )" + std::to_string(timeout_ms) + ", on_timeout: " + on_timeout +
         "}}\n";
}

// What the engine streamed, step by step.
struct Streamed {
  std::map<std::string, std::vector<int32_t>> tokens;  // concatenated new_token_ids
  std::map<std::string, engine::RequestOutput> finished;
  int gated_tokens_while_held = 0;      // must stay 0
  int neighbour_tokens_while_held = 0;  // the others kept going
  int max_held = 0;
  int step_calls = 0;
};

Streamed RunStepwise(engine::LLMEngine& engine, const std::vector<GenerateRequest>& requests,
                     const std::function<void()>& after_step = nullptr) {
  Streamed s;
  for (const GenerateRequest& r : requests) {
    EXPECT_TRUE(engine.AddRequest(r.id, r.prompt, r.params).ok()) << r.id;
  }
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (engine.HasUnfinished() && std::chrono::steady_clock::now() < deadline) {
    const bool held_before = engine.stats().num_held > 0;
    std::vector<engine::RequestOutput> outputs = engine.Step();
    ++s.step_calls;
    if (after_step) after_step();
    const int held_after = engine.stats().num_held;
    s.max_held = std::max(s.max_held, held_after);
    for (engine::RequestOutput& out : outputs) {
      std::vector<int32_t>& t = s.tokens[out.request_id];
      t.insert(t.end(), out.new_token_ids.begin(), out.new_token_ids.end());
      if (held_before && held_after > 0) {
        (out.request_id == "gated" ? s.gated_tokens_while_held : s.neighbour_tokens_while_held) +=
            static_cast<int>(out.new_token_ids.size());
      }
      if (out.finished) s.finished[out.request_id] = std::move(out);
    }
  }
  EXPECT_FALSE(engine.HasUnfinished()) << "the run did not end within 60 s";
  return s;
}

struct Case {
  std::string name = "";
  std::string decision = "";  // what the classifier answers
  int delay_ms = 0;
  bool silent = false;
  bool closed = false;  // no classifier at all
  int timeout_ms = 5000;
  std::string on_timeout = "continue";
  bool expect_abort = false;
  std::string outcome = "";         // continue / abort / timeout / error
  std::string reason_snippet = "";  // in the abort reason
};

TEST(EscalationTest, TokenExactForEveryOutcomeAndNeighboursUntouched) {
  std::vector<GenerateRequest> requests = testing::BatchingWorkload(5);
  requests.push_back({"gated", Prompt::Text("Once upon a time there was a little"), Greedy(20)});
  auto solo =
      engine::Generator::Open({.model_path = ModelPath(), .tokenizer_path = {}, .num_threads = 2});
  ASSERT_TRUE(solo.ok());
  const auto alone = testing::RunAlone(**solo, requests);
  const engine::GenerationResult& gated_alone = alone.at("gated");
  ASSERT_GE(gated_alone.output_ids.size(), 10u);
  const std::vector<int32_t> prefix(gated_alone.output_ids.begin(),
                                    gated_alone.output_ids.begin() + 4);  // through generated[3]
  auto llm = engine::LLM::Open(Options());
  ASSERT_TRUE(llm.ok()) << llm.status().ToString();
  engine::LLMEngine& engine = (*llm)->engine();

  const std::vector<Case> cases = {
      {.name = "continue", .decision = "continue", .outcome = "continue"},
      {.name = "abort",
       .decision = "abort",
       .expect_abort = true,
       .outcome = "abort",
       .reason_snippet = "the classifier answered abort"},
      {.name = "late, on_timeout continue",
       .decision = "abort",
       .delay_ms = 1500,
       .timeout_ms = 300,
       .outcome = "timeout"},
      {.name = "late, on_timeout abort",
       .decision = "continue",
       .delay_ms = 1500,
       .timeout_ms = 300,
       .on_timeout = "abort",
       .expect_abort = true,
       .outcome = "timeout",
       .reason_snippet = "within 300 ms); on_timeout abort"},
      {.name = "silent, on_timeout abort",
       .decision = "continue",
       .silent = true,
       .timeout_ms = 300,
       .on_timeout = "abort",
       .expect_abort = true,
       .outcome = "timeout",
       .reason_snippet = "on_timeout abort"},
      {.name = "unreachable, on_timeout abort",
       .closed = true,
       .timeout_ms = 2000,
       .on_timeout = "abort",
       .expect_abort = true,
       .outcome = "error",
       .reason_snippet = "unreachable"},
      {.name = "unreachable, on_timeout continue",
       .closed = true,
       .timeout_ms = 2000,
       .outcome = "error"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::unique_ptr<Classifier> classifier;
    std::string url;
    ClosedPort closed;
    if (c.closed) {
      url = "http://127.0.0.1:" + std::to_string(closed.port()) + "/classify";
    } else {
      classifier = std::make_unique<Classifier>(c.decision, c.delay_ms, c.silent);
      url = classifier->url();
    }
    probe::ProbingOptions options;
    options.tokenizer = &engine.tokenizer();
    auto session =
        testing::MakeSession(GateSpec(url, c.timeout_ms, c.on_timeout), engine.config(), options);
    ASSERT_NE(session, nullptr);
    engine.SetObserver(session.get());
    const Streamed run = RunStepwise(engine, requests);
    engine.SetObserver(nullptr);

    // The gated request: the unprobed prefix through the escalated token, the rest only on
    // continue; what was streamed is exactly what it returned, and nothing while held.
    ASSERT_EQ(run.finished.count("gated"), 1u);
    const engine::RequestOutput& gated = run.finished.at("gated");
    EXPECT_EQ(run.tokens.at("gated"), gated.output_ids);
    EXPECT_EQ(run.gated_tokens_while_held, 0);
    EXPECT_EQ(run.max_held, 1);
    if (c.expect_abort) {
      EXPECT_EQ(gated.output_ids, prefix);
      EXPECT_EQ(gated.finish_reason, engine::FinishReason::kAbort);
      ASSERT_TRUE(gated.abort.has_value());
      EXPECT_EQ(gated.abort->by, "probe");
      EXPECT_EQ(gated.abort->point, "gate");
      EXPECT_EQ(gated.abort->token_pos, static_cast<int64_t>(gated.prompt_ids.size()) + 3);
      EXPECT_EQ(gated.abort->confidence, 0.75);
      EXPECT_NE(gated.abort->reason.find("extraction point 'gate' escalated at token"),
                std::string::npos)
          << gated.abort->reason;
      EXPECT_NE(gated.abort->reason.find(c.reason_snippet), std::string::npos)
          << gated.abort->reason;
    } else {
      EXPECT_EQ(gated.output_ids, gated_alone.output_ids);
      EXPECT_EQ(gated.text, gated_alone.text);
      EXPECT_EQ(gated.finish_reason, gated_alone.finish_reason);
    }
    // The neighbours: exactly their unprobed runs.
    for (const GenerateRequest& r : requests) {
      if (r.id == "gated") continue;
      ASSERT_EQ(run.finished.count(r.id), 1u) << r.id;
      EXPECT_EQ(run.finished.at(r.id).output_ids, alone.at(r.id).output_ids) << r.id;
      EXPECT_EQ(run.tokens.at(r.id), alone.at(r.id).output_ids) << r.id;
    }
    // What the classifier got: the text through the escalated token, the point, the score.
    if (classifier != nullptr) {
      const std::vector<json> bodies = classifier->bodies();
      ASSERT_EQ(bodies.size(), 1u);
      const json& b = bodies[0];
      EXPECT_EQ(b["request_id"], "gated");
      EXPECT_EQ(b["extraction_point_name"], "gate");
      EXPECT_EQ(b["token_pos"], gated.prompt_ids.size() + 3);
      EXPECT_EQ(b["layer"], 2);
      EXPECT_EQ(b["score"], 0.75);
      EXPECT_EQ(b["text"], engine.tokenizer().Decode(prefix));
      EXPECT_EQ(b["prompt"], engine.tokenizer().Decode(gated.prompt_ids));
      std::vector<int32_t> ids = gated.prompt_ids;
      ids.insert(ids.end(), prefix.begin(), prefix.end());
      EXPECT_EQ(b["token_ids"].get<std::vector<int32_t>>(), ids);
    }
    // Counted: one escalation, one decision of the expected outcome, one hold observed.
    EXPECT_EQ(session->stats().escalations, 1);
    probe::PointMetrics& m = session->metrics().Point("gate", true);
    EXPECT_EQ(m.escalations->Value(), 1.0);
    const std::map<std::string, prometheus::Counter*> outcomes = {
        {"continue", m.escalation_continue},
        {"abort", m.escalation_abort},
        {"timeout", m.escalation_timeout},
        {"error", m.escalation_error}};
    for (const auto& [outcome, counter] : outcomes) {
      EXPECT_EQ(counter->Value(), outcome == c.outcome ? 1.0 : 0.0) << outcome;
    }
    EXPECT_EQ(m.escalation_hold->Collect().histogram.sample_count, 1u);
    EXPECT_NE(session->metrics().Serialize().find("undercurrent_escalation_hold_seconds"),
              std::string::npos);
  }
}

// The neighbours do not wait for the classifier: they finish while the gated request is held.
TEST(EscalationTest, OthersKeepGeneratingWhileOneIsHeld) {
  Classifier classifier("continue", 1500);
  auto llm = engine::LLM::Open(Options());
  ASSERT_TRUE(llm.ok()) << llm.status().ToString();
  engine::LLMEngine& engine = (*llm)->engine();
  probe::ProbingOptions options;
  options.tokenizer = &engine.tokenizer();
  auto session =
      testing::MakeSession(GateSpec(classifier.url(), 10000, "abort"), engine.config(), options);
  ASSERT_NE(session, nullptr);
  engine.SetObserver(session.get());
  std::vector<GenerateRequest> requests = {
      {"gated", Prompt::Text("Once upon a time there was a little"), Greedy(12)},
      {"other", Prompt::Text("Lily and Tom went to the park"), Greedy(12)}};
  const auto start = std::chrono::steady_clock::now();
  const Streamed run = RunStepwise(engine, requests);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  engine.SetObserver(nullptr);
  EXPECT_EQ(run.gated_tokens_while_held, 0);
  EXPECT_GT(run.neighbour_tokens_while_held, 0);
  EXPECT_EQ(run.finished.at("gated").output_ids.size(), 12u);
  EXPECT_EQ(run.finished.at("other").output_ids.size(), 12u);
  EXPECT_GE(seconds, 1.4);  // the gated request really waited for the answer
  // The engine idled while only the held request was left: Step waited instead of spinning
  // (about one call per poll interval, not thousands).
  EXPECT_LT(run.step_calls, 200);
}

// A held request loses its KV blocks to the others (preemption) and is recomputed once
// released: still exactly its unprobed run.
TEST(EscalationTest, AHeldRequestPreemptedForItsBlocksStaysTokenExact) {
  std::vector<GenerateRequest> requests = {
      {"gated", Prompt::Text("Once upon a time there was a little"), Greedy(24)},
      {"a", Prompt::Text("Lily and Tom went to the park"), Greedy(24)},
      {"b", Prompt::Text("The cat sat on the mat and"), Greedy(24)},
      {"c", Prompt::Text("One day, a big dog"), Greedy(24)},
      {"d", Prompt::Text("Sam liked to play with his ball"), Greedy(24)}};
  auto solo =
      engine::Generator::Open({.model_path = ModelPath(), .tokenizer_path = {}, .num_threads = 2});
  ASSERT_TRUE(solo.ok());
  const auto alone = testing::RunAlone(**solo, requests);
  engine::EngineOptions o = Options();
  o.max_model_len = 64;
  o.block_size = 4;
  o.num_kv_blocks = 20;  // one full-length sequence needs 16
  auto llm = engine::LLM::Open(o);
  ASSERT_TRUE(llm.ok()) << llm.status().ToString();
  engine::LLMEngine& engine = (*llm)->engine();
  // Answers once the held request has lost its blocks (at the latest after 20 s).
  Classifier classifier("continue", 20000);
  probe::ProbingOptions options;
  options.tokenizer = &engine.tokenizer();
  auto session =
      testing::MakeSession(GateSpec(classifier.url(), 10000, "abort"), engine.config(), options);
  ASSERT_NE(session, nullptr);
  engine.SetObserver(session.get());
  // "gated" is the engine's first sequence (id 1).
  const Streamed run = RunStepwise(engine, requests, [&] {
    const auto info = engine.scheduler().Info(1);
    if (engine.stats().num_held > 0 && info.ok() &&
        info->status == engine::SequenceStatus::kPreempted) {
      classifier.Release();
    }
  });
  engine.SetObserver(nullptr);
  EXPECT_EQ(run.gated_tokens_while_held, 0);
  EXPECT_GT(engine.stats().num_preemptions, 0);
  EXPECT_GT(run.finished.at("gated").metrics.num_preemptions, 0);
  for (const GenerateRequest& r : requests) {
    ASSERT_EQ(run.finished.count(r.id), 1u) << r.id;
    EXPECT_EQ(run.finished.at(r.id).output_ids, alone.at(r.id).output_ids) << r.id;
    EXPECT_EQ(run.tokens.at(r.id), alone.at(r.id).output_ids) << r.id;
  }
}

// A built-in probe escalates through `action: escalate`: every request is held once (at the
// same point) and, on continue, each is exactly its unprobed run; the classifier got the score.
TEST(EscalationTest, BuiltInProbesEscalateWithActionEscalate) {
  Classifier classifier("continue", 50);
  const std::vector<GenerateRequest> requests = testing::BatchingWorkload(4);
  auto solo =
      engine::Generator::Open({.model_path = ModelPath(), .tokenizer_path = {}, .num_threads = 2});
  ASSERT_TRUE(solo.ok());
  const auto alone = testing::RunAlone(**solo, requests);
  auto llm = engine::LLM::Open(Options());
  ASSERT_TRUE(llm.ok()) << llm.status().ToString();
  engine::LLMEngine& engine = (*llm)->engine();
  probe::ProbingOptions options;
  options.tokenizer = &engine.tokenizer();
  auto session = testing::MakeSession(R"(version: "1"
extraction_points:
  - {name: norm, layers: [1], tensor_type: residual_stream, position: "generated[2]",
     probe_type: norm_gate, probe_kind: single_shot,
     probe_args: {threshold: 0.0, action: escalate},
     escalation: {url: ")" + classifier.url() +
                                          R"(", timeout_ms: 10000, on_timeout: abort}}
)",
                                      engine.config(), options);
  ASSERT_NE(session, nullptr);
  engine.SetObserver(session.get());
  const Streamed run = RunStepwise(engine, requests);
  engine.SetObserver(nullptr);
  for (const GenerateRequest& r : requests) {
    ASSERT_EQ(run.finished.count(r.id), 1u) << r.id;
    EXPECT_EQ(run.finished.at(r.id).output_ids, alone.at(r.id).output_ids) << r.id;
    EXPECT_EQ(run.tokens.at(r.id), alone.at(r.id).output_ids) << r.id;
  }
  // Requests that reach generated[2] are held once each (the workload's shortest may not).
  size_t reaching = 0;
  for (const GenerateRequest& r : requests) reaching += alone.at(r.id).output_ids.size() >= 3;
  EXPECT_EQ(session->stats().escalations, static_cast<int64_t>(reaching));
  const std::vector<json> bodies = classifier.bodies();
  ASSERT_EQ(bodies.size(), reaching);
  for (const json& b : bodies) {
    EXPECT_EQ(b["extraction_point_name"], "norm");
    EXPECT_TRUE(b["score"].is_number());
    EXPECT_GT(b["score"].get<double>(), 0.0);
  }
  EXPECT_EQ(session->metrics().Point("norm", true).escalation_continue->Value(),
            static_cast<double>(reaching));
}

// A session shut down while a request is held leaves nothing hanging: the engine aborts it
// at its next step (by "shutdown"), the prefix unchanged.
TEST(EscalationTest, ShutdownWhileHeldAbortsTheHeldRequest) {
  Classifier classifier("continue", 0, /*silent=*/true);
  auto llm = engine::LLM::Open(Options());
  ASSERT_TRUE(llm.ok()) << llm.status().ToString();
  engine::LLMEngine& engine = (*llm)->engine();
  probe::ProbingOptions options;
  options.tokenizer = &engine.tokenizer();
  auto session =
      testing::MakeSession(GateSpec(classifier.url(), 60000, "continue"), engine.config(), options);
  ASSERT_NE(session, nullptr);
  engine.SetObserver(session.get());
  ASSERT_TRUE(
      engine.AddRequest("gated", Prompt::Text("Once upon a time there was a little"), Greedy(12))
          .ok());
  std::vector<int32_t> streamed;
  std::optional<engine::RequestOutput> finished;
  for (int i = 0; i < 1000 && engine.stats().num_held == 0 && engine.HasUnfinished(); ++i) {
    for (engine::RequestOutput& out : engine.Step()) {
      streamed.insert(streamed.end(), out.new_token_ids.begin(), out.new_token_ids.end());
    }
  }
  ASSERT_EQ(engine.stats().num_held, 1);
  session->Shutdown(/*wait=*/false);
  const auto start = std::chrono::steady_clock::now();
  while (engine.HasUnfinished() && std::chrono::steady_clock::now() - start < 10s) {
    for (engine::RequestOutput& out : engine.Step()) {
      streamed.insert(streamed.end(), out.new_token_ids.begin(), out.new_token_ids.end());
      if (out.finished) finished = std::move(out);
    }
  }
  engine.SetObserver(nullptr);
  ASSERT_TRUE(finished.has_value());
  EXPECT_EQ(finished->output_ids.size(), 4u);
  EXPECT_EQ(finished->output_ids, streamed);
  ASSERT_TRUE(finished->abort.has_value());
  EXPECT_EQ(finished->abort->by, "shutdown");
  // The call still out to the silent classifier is cut short, not waited out (60 s).
  const auto destroy = std::chrono::steady_clock::now();
  session.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - destroy, 5s);
}

}  // namespace
}  // namespace uc
