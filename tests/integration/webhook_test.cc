// The webhook sink against a real HTTP receiver on loopback that fails on demand (Undercurrent
// v0.1 inventory §10 scenario 8, fixed where v0.1 lost records), and through the engine: with
// the endpoint down for the whole run, or down for a while and then up, every record the probes
// emitted is delivered or dead-lettered — counted against a memory sink that saw them all.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <prometheus/counter.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "common/probing_util.h"
#include "common/test_util.h"
#include "engine/llm.h"
#include "probe/sinks/webhook_sink.h"

namespace uc {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

// An HTTP endpoint on 127.0.0.1 that answers 503 while `down`, or for the next `fail_next`
// requests, and 200 otherwise; it keeps every body it accepted.
class Receiver {
 public:
  Receiver() {
    server_.Post("/hook", [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu_);
      ++calls_;
      authorization_ = req.get_header_value("Authorization");
      content_type_ = req.get_header_value("Content-Type");
      if (down_ || fail_next_ > 0) {
        if (fail_next_ > 0) --fail_next_;
        res.status = 503;
        return;
      }
      if (delay_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_));
      accepted_.push_back(json::parse(req.body));
      res.status = 200;
      if (endless_answer_) {
        // 1 GiB of answer, streamed for as long as the client keeps reading.
        auto sent = std::make_shared<size_t>(0);
        res.set_chunked_content_provider("text/plain", [sent](size_t, httplib::DataSink& sink) {
          static const std::string chunk(64 << 10, 'x');
          if (*sent >= (size_t{1} << 30)) {
            sink.done();
            return true;
          }
          *sent += chunk.size();
          return sink.write(chunk.data(), chunk.size());
        });
      }
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(1ms);
  }
  ~Receiver() {
    server_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/hook"; }
  void SetDown(bool down) {
    std::lock_guard<std::mutex> lock(mu_);
    down_ = down;
  }
  void FailNext(int n) {
    std::lock_guard<std::mutex> lock(mu_);
    fail_next_ = n;
  }
  void SetEndlessAnswer(bool endless) {
    std::lock_guard<std::mutex> lock(mu_);
    endless_answer_ = endless;
  }
  void SetDelay(int ms) {
    std::lock_guard<std::mutex> lock(mu_);
    delay_ms_ = ms;
  }
  int calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }
  std::vector<json> accepted() {
    std::lock_guard<std::mutex> lock(mu_);
    return accepted_;
  }
  std::string authorization() {
    std::lock_guard<std::mutex> lock(mu_);
    return authorization_;
  }
  std::string content_type() {
    std::lock_guard<std::mutex> lock(mu_);
    return content_type_;
  }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  bool down_ = false;
  int fail_next_ = 0;
  int delay_ms_ = 0;
  bool endless_answer_ = false;
  int calls_ = 0;
  std::vector<json> accepted_;
  std::string authorization_;
  std::string content_type_;
};

// A URL where nothing listens: a loopback port that was free a moment ago (connections are
// refused at once).
std::string DeadUrl() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return "http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port)) + "/hook";
}

std::vector<json> ReadLines(const fs::path& path) {
  std::vector<json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) out.push_back(json::parse(line));
  return out;
}

probe::WebhookOptions Fast(const std::string& url) {
  probe::WebhookOptions o;
  o.url = url;
  o.backoff_base_seconds = 0.01;
  o.request_timeout_seconds = 2.0;
  o.jitter_seed = 7;
  return o;
}

json Record(int i) {
  return {{"kind", "signal"},
          {"request_id", "r" + std::to_string(i)},
          {"extraction_point_name", "p"},
          {"timestamp", 1.0 + i},
          {"payload", {{"action", "flag"}, {"metadata", {{"i", i}}}, {"timestamp", 2.0 + i}}}};
}

TEST(WebhookSinkTest, TwoFailuresThenSuccessIsThreeCalls) {
  Receiver receiver;
  receiver.FailNext(2);
  const fs::path dir = testing::ScratchDir("webhook_retry");
  probe::WebhookOptions o = Fast(receiver.url());
  o.dead_letter_path = dir / "dead.ndjson";
  auto sink = probe::WebhookSink::Open(o);
  ASSERT_TRUE(sink.ok()) << sink.status().ToString();
  (*sink)->Write(Record(0));
  ASSERT_TRUE((*sink)->Close(10).ok());
  EXPECT_EQ(receiver.calls(), 3);
  ASSERT_EQ(receiver.accepted().size(), 1u);
  EXPECT_EQ(receiver.accepted()[0]["payload"]["metadata"]["i"], 0);
  EXPECT_EQ(receiver.content_type(), "application/json");
  const probe::WebhookStats stats = (*sink)->stats();
  EXPECT_EQ(stats.delivered, 1);
  EXPECT_EQ(stats.retries, 2);
  EXPECT_EQ(stats.dead_lettered, 0);
  EXPECT_FALSE(fs::exists(dir / "dead.ndjson") && fs::file_size(dir / "dead.ndjson") > 0);
}

// A receiver that answers 200 with an endless body: the sink reads at most
// kMaxWebhookResponseBytes of it, counts the record delivered (no retry, no dead letter) and
// moves on.
TEST(WebhookSinkTest, AnEndlessAnswerIsReadOnlySoFar) {
  Receiver receiver;
  receiver.SetEndlessAnswer(true);
  const fs::path dir = testing::ScratchDir("webhook_endless");
  probe::WebhookOptions o = Fast(receiver.url());
  o.dead_letter_path = dir / "dead.ndjson";
  auto sink = probe::WebhookSink::Open(o);
  ASSERT_TRUE(sink.ok()) << sink.status().ToString();
  const auto started = std::chrono::steady_clock::now();
  for (int i = 0; i < 3; ++i) (*sink)->Write(Record(i));
  ASSERT_TRUE((*sink)->Close(30).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - started, 20s) << "the whole answer was read";
  EXPECT_EQ(receiver.calls(), 3);
  EXPECT_EQ(receiver.accepted().size(), 3u);
  const probe::WebhookStats stats = (*sink)->stats();
  EXPECT_EQ(stats.delivered, 3);
  EXPECT_EQ(stats.retries, 0);
  EXPECT_EQ(stats.dead_lettered, 0);
}

TEST(WebhookSinkTest, AlwaysFailingIsThreeCallsAndOneDeadLetter) {
  Receiver receiver;
  receiver.SetDown(true);
  const fs::path dir = testing::ScratchDir("webhook_dead");
  probe::WebhookOptions o = Fast(receiver.url());
  o.dead_letter_path = dir / "dead.ndjson";
  probe::Metrics metrics;
  auto sink = probe::WebhookSink::Open(o, &metrics);
  ASSERT_TRUE(sink.ok());
  (*sink)->Write(Record(0));
  ASSERT_TRUE((*sink)->Close(10).ok());
  EXPECT_EQ(receiver.calls(), 3);
  const std::vector<json> dead = ReadLines(dir / "dead.ndjson");
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0]["request_id"], "r0");
  EXPECT_EQ(dead[0]["dead_letter"]["reason"], "retries_exhausted");
  EXPECT_EQ(dead[0]["dead_letter"]["attempts"], 3);
  EXPECT_EQ(dead[0]["dead_letter"]["error"], "HTTP 503");
  EXPECT_EQ(metrics.Sink("webhook").dead_lettered->Value(), 1);
  EXPECT_EQ(metrics.Sink("webhook").retries->Value(), 2);
}

TEST(WebhookSinkTest, AFullQueueDeadLettersAtOnceInsteadOfDropping) {
  Receiver receiver;
  receiver.SetDelay(300);
  const fs::path dir = testing::ScratchDir("webhook_full");
  probe::WebhookOptions o = Fast(receiver.url());
  o.queue_max = 1;
  o.dead_letter_path = dir / "dead.ndjson";
  auto sink = probe::WebhookSink::Open(o);
  ASSERT_TRUE(sink.ok());
  (*sink)->Write(Record(0));
  // Until the receiver holds record 0 (it answers after 300 ms), the queue is empty again.
  for (int i = 0; i < 500 && receiver.calls() == 0; ++i) std::this_thread::sleep_for(2ms);
  ASSERT_EQ(receiver.calls(), 1);
  (*sink)->Write(Record(1));  // queued
  const auto start = std::chrono::steady_clock::now();
  (*sink)->Write(Record(2));  // the queue is full
  EXPECT_LT(std::chrono::steady_clock::now() - start, 250ms) << "Write must never block";
  ASSERT_TRUE((*sink)->Close(10).ok());
  const std::vector<json> dead = ReadLines(dir / "dead.ndjson");
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0]["request_id"], "r2");
  EXPECT_EQ(dead[0]["dead_letter"]["reason"], "queue_full");
  EXPECT_EQ(receiver.accepted().size(), 2u);
  const probe::WebhookStats stats = (*sink)->stats();
  EXPECT_EQ(stats.delivered + stats.dead_lettered + stats.dropped, 3);
}

TEST(WebhookSinkTest, AnUnwritableDeadLetterFileDoesNotStopTheSender) {
  Receiver receiver;
  const fs::path dir = testing::ScratchDir("webhook_unwritable");
  probe::WebhookOptions o = Fast(receiver.url());
  o.dead_letter_path = dir / "dead.ndjson";
  auto sink = probe::WebhookSink::Open(o);
  ASSERT_TRUE(sink.ok());
  fs::remove_all(dir);  // the dead-letter directory vanishes
  receiver.FailNext(3);
  (*sink)->Write(Record(0));  // fails 3 times; its dead letter cannot be written: dropped
  (*sink)->Write(Record(1));  // delivered
  ASSERT_TRUE((*sink)->Close(10).ok());
  const probe::WebhookStats stats = (*sink)->stats();
  EXPECT_EQ(stats.dropped, 1);
  EXPECT_EQ(stats.delivered, 1);
  ASSERT_EQ(receiver.accepted().size(), 1u);
  EXPECT_EQ(receiver.accepted()[0]["request_id"], "r1");
}

TEST(WebhookSinkTest, CloseIsBoundedAndDeadLettersWhatIsLeft) {
  const fs::path dir = testing::ScratchDir("webhook_close");
  Receiver receiver;
  receiver.SetDelay(200);
  probe::WebhookOptions o = Fast(receiver.url());
  o.dead_letter_path = dir / "dead.ndjson";
  auto sink = probe::WebhookSink::Open(o);
  ASSERT_TRUE(sink.ok());
  for (int i = 0; i < 50; ++i) (*sink)->Write(Record(i));
  const auto start = std::chrono::steady_clock::now();
  const Status closed = (*sink)->Close(0.5);
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_FALSE(closed.ok());
  EXPECT_LT(took, 2.0);
  const probe::WebhookStats stats = (*sink)->stats();
  EXPECT_EQ(stats.delivered + stats.dead_lettered, 50) << "nothing lost on a timed-out close";
  EXPECT_EQ(static_cast<int64_t>(ReadLines(dir / "dead.ndjson").size()), stats.dead_lettered);
  (*sink)->Write(Record(99));  // after close: dead-lettered, not lost
  EXPECT_EQ((*sink)->stats().dead_lettered, stats.dead_lettered + 1);
}

TEST(WebhookSinkTest, PromptTextIsRedactedByDefaultAlsoInDeadLetters) {
  Receiver receiver;
  const fs::path dir = testing::ScratchDir("webhook_redact");
  probe::WebhookOptions o = Fast(receiver.url());
  o.dead_letter_path = dir / "dead.ndjson";
  o.redaction.drop_keys = {"payload.metadata.internal"};
  auto sink = probe::WebhookSink::Open(o);
  ASSERT_TRUE(sink.ok());
  json rec = Record(0);
  rec["payload"]["metadata"]["prompt"] = "my secret prompt";
  rec["payload"]["metadata"]["internal"] = 1;
  (*sink)->Write(rec);
  ASSERT_TRUE((*sink)->Close(10).ok());
  ASSERT_EQ(receiver.accepted().size(), 1u);
  receiver.SetDown(true);
  auto sink2 = probe::WebhookSink::Open(o);
  ASSERT_TRUE(sink2.ok());
  (*sink2)->Write(rec);
  ASSERT_TRUE((*sink2)->Close(10).ok());
  for (const json& got : receiver.accepted()) {
    EXPECT_EQ(got["payload"]["metadata"]["prompt"], "[REDACTED]");
    EXPECT_FALSE(got["payload"]["metadata"].contains("internal"));
  }
  const std::vector<json> dead = ReadLines(dir / "dead.ndjson");
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0]["payload"]["metadata"]["prompt"], "[REDACTED]");
  EXPECT_EQ(dead[0].dump().find("my secret prompt"), std::string::npos);
}

TEST(WebhookSinkTest, BearerTokenComesFromTheEnvironment) {
  Receiver receiver;
  ::setenv("UC_TEST_WEBHOOK_TOKEN", "s3cret", 1);
  probe::WebhookOptions o = Fast(receiver.url());
  o.bearer_token_env = "UC_TEST_WEBHOOK_TOKEN";
  auto sink = probe::WebhookSink::Open(o);
  ASSERT_TRUE(sink.ok());
  (*sink)->Write(Record(0));
  ASSERT_TRUE((*sink)->Close(10).ok());
  EXPECT_EQ(receiver.authorization(), "Bearer s3cret");
  o.bearer_token_env = "UC_TEST_WEBHOOK_TOKEN_UNSET";
  auto missing = probe::WebhookSink::Open(o);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("UC_TEST_WEBHOOK_TOKEN_UNSET"), std::string::npos);
}

TEST(WebhookSinkTest, BadUrlsAreRejected) {
  for (const std::string url : {"127.0.0.1:80/x", "ftp://host/x", "http:///x", "http://u:p@h/x"}) {
    auto sink = probe::WebhookSink::Open(Fast(url));
    EXPECT_FALSE(sink.ok()) << url;
  }
}

// The identity of a record, for matching what arrived against what was emitted.
std::string Identity(const json& rec) {
  return rec["kind"].get<std::string>() + "|" + rec["request_id"].get<std::string>() + "|" +
         rec["extraction_point_name"].get<std::string>() + "|" +
         (rec["kind"] == "signal" ? rec["payload"]["metadata"].dump()
                                  : rec["payload"]["verdict"].dump());
}

struct EngineRun {
  std::multiset<std::string> emitted;  // what a memory sink beside the webhook saw
  probe::WebhookStats stats;
};

// Runs 12 requests with an async observer (a signal per generated token) and an inline gate,
// writing to a memory sink and the webhook.
EngineRun RunWithWebhook(const probe::WebhookOptions& options) {
  EngineRun out;
  engine::EngineOptions eo;
  eo.model_path = std::string(UC_SOURCE_DIR) + "/models/stories260K";
  eo.num_threads = 2;
  eo.max_model_len = 256;
  auto llm = engine::LLM::Open(eo);
  EXPECT_TRUE(llm.ok());
  if (!llm.ok()) return out;
  auto memory = std::make_shared<probe::MemorySink>();
  auto webhook = probe::WebhookSink::Open(options);
  EXPECT_TRUE(webhook.ok()) << webhook.status().ToString();
  if (!webhook.ok()) return out;
  probe::ProbingOptions po;
  po.sinks = {memory, *webhook};
  auto session = testing::MakeSession(R"(version: "1"
extraction_points:
  - {name: observer, layers: [1], tensor_type: residual_stream, position: "generated[*]",
     probe_type: slow_recorder, probe_kind: trajectory, execution_mode: async,
     queue_depth: 1000}
  - {name: gate, layers: [2], tensor_type: residual_stream, position: "generated[5]",
     probe_type: always_abort, probe_kind: single_shot, probe_args: {request: r3}})",
                                      (*llm)->engine().config(), po);
  EXPECT_NE(session, nullptr);
  if (session == nullptr) return out;
  std::vector<engine::GenerateRequest> requests;
  for (int i = 0; i < 12; ++i) {
    worker::SamplingParams p;
    p.temperature = 0.0f;
    p.max_tokens = 10 + i;
    p.ignore_eos = true;
    requests.push_back({"r" + std::to_string(i), engine::Prompt::Ids({1, 300 + 5 * i}), p});
  }
  testing::RunProbed(**llm, *session, requests);
  session->Shutdown(/*wait=*/true);
  EXPECT_TRUE((*webhook)->Close(30).ok());
  for (const json& rec : memory->records()) out.emitted.insert(Identity(rec));
  out.stats = (*webhook)->stats();
  return out;
}

TEST(WebhookEngineTest, EndpointDownForTheWholeRunDeadLettersEveryRecord) {
  const fs::path dir = testing::ScratchDir("webhook_engine_down");
  probe::WebhookOptions o = Fast(DeadUrl());
  o.dead_letter_path = dir / "dead.ndjson";
  o.max_retries = 1;
  const EngineRun run = RunWithWebhook(o);
  ASSERT_GT(run.emitted.size(), 100u);
  std::multiset<std::string> dead;
  for (const json& rec : ReadLines(dir / "dead.ndjson")) {
    json plain = rec;
    plain.erase("dead_letter");
    dead.insert(Identity(plain));
  }
  EXPECT_EQ(dead, run.emitted) << "every emitted record must be in the dead-letter file";
  EXPECT_EQ(run.stats.delivered, 0);
  EXPECT_EQ(run.stats.dropped, 0);
  EXPECT_EQ(run.stats.dead_lettered, static_cast<int64_t>(run.emitted.size()));
}

TEST(WebhookEngineTest, EndpointDownThenUpDeliversOrDeadLettersEveryRecord) {
  Receiver receiver;
  receiver.SetDown(true);
  const fs::path dir = testing::ScratchDir("webhook_engine_flaky");
  probe::WebhookOptions o = Fast(receiver.url());
  o.dead_letter_path = dir / "dead.ndjson";
  o.max_retries = 2;
  o.queue_max = 64;  // small: some records overflow to the dead-letter file while it is down
  std::thread revive([&receiver] {
    std::this_thread::sleep_for(400ms);
    receiver.SetDown(false);
  });
  const EngineRun run = RunWithWebhook(o);
  revive.join();
  std::multiset<std::string> arrived;
  for (const json& rec : receiver.accepted()) arrived.insert(Identity(rec));
  std::multiset<std::string> dead;
  for (const json& rec : ReadLines(dir / "dead.ndjson")) {
    json plain = rec;
    plain.erase("dead_letter");
    dead.insert(Identity(plain));
  }
  std::multiset<std::string> both = arrived;
  both.insert(dead.begin(), dead.end());
  EXPECT_EQ(both, run.emitted) << "delivered + dead-lettered must be exactly what was emitted";
  EXPECT_GT(arrived.size(), 0u);
  EXPECT_GT(dead.size(), 0u);
  EXPECT_EQ(run.stats.dropped, 0);
  EXPECT_EQ(run.stats.delivered, static_cast<int64_t>(arrived.size()));
  EXPECT_EQ(run.stats.dead_lettered, static_cast<int64_t>(dead.size()));
}

}  // namespace
}  // namespace uc
