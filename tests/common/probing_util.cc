#include "common/probing_util.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <stdexcept>
#include <thread>

#include "probe/probes/score_probe.h"

namespace uc::testing {
namespace {

using probe::ActivationRecord;
using probe::Probe;
using probe::ProbeKind;
using probe::ProbeResult;
using probe::ProbeSignal;
using probe::ProbeType;
using probe::RequestContext;

class Recorder : public Probe {
 public:
  explicit Recorder(std::string name) : name_(std::move(name)) {}
  std::optional<ProbeSignal> OnActivation(const ActivationRecord& record) override {
    RecordLog::Get().Add(record, name_);
    ++n_;
    return std::nullopt;
  }
  ProbeResult OnEnd(const RequestContext& ctx) override {
    ProbeResult r;
    r.request_id = ctx.request_id;
    r.verdict = {{"n", n_}};
    return r;
  }

 private:
  std::string name_;
  int n_ = 0;
};

class AlwaysAbort : public Probe {
 public:
  AlwaysAbort(int layer, std::string request) : layer_(layer), request_(std::move(request)) {}
  std::optional<ProbeSignal> OnActivation(const ActivationRecord& record) override {
    RecordLog::Get().Add(record, "always_abort");
    ++n_;
    if (layer_ >= 0 && record.layer != layer_) return std::nullopt;
    if (!request_.empty() && record.request_id != request_) return std::nullopt;
    ProbeSignal s;
    s.action = probe::ProbeAction::kAbort;
    s.confidence = 1.0;
    history_.push_back(s);
    return s;
  }
  ProbeResult OnEnd(const RequestContext& ctx) override {
    ProbeResult r;
    r.request_id = ctx.request_id;
    r.verdict = {{"n", n_}};
    r.signal_history = history_;
    return r;
  }

 private:
  int layer_;
  std::string request_;
  int n_ = 0;
  std::vector<ProbeSignal> history_;
};

// ESCALATE (confidence 0.75) on every record of request {request} (all when empty) at layer
// {layer} (all when < 0).
class AlwaysEscalate : public Probe {
 public:
  AlwaysEscalate(int layer, std::string request) : layer_(layer), request_(std::move(request)) {}
  std::optional<ProbeSignal> OnActivation(const ActivationRecord& record) override {
    RecordLog::Get().Add(record, "always_escalate");
    if (layer_ >= 0 && record.layer != layer_) return std::nullopt;
    if (!request_.empty() && record.request_id != request_) return std::nullopt;
    ProbeSignal s;
    s.action = probe::ProbeAction::kEscalate;
    s.confidence = 0.75;
    return s;
  }
  ProbeResult OnEnd(const RequestContext& ctx) override {
    ProbeResult r;
    r.request_id = ctx.request_id;
    return r;
  }

 private:
  int layer_;
  std::string request_;
};

class Sleepy : public Probe {
 public:
  // fail_first: calls (shared by every instance of the type) that throw before it works.
  Sleepy(int ms, bool raise, std::shared_ptr<std::atomic<int>> fail_first)
      : ms_(ms), raise_(raise), fail_first_(std::move(fail_first)) {}
  std::optional<ProbeSignal> OnActivation(const ActivationRecord&) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms_));
    if (raise_ || fail_first_->fetch_sub(1) > 0) {
      throw std::runtime_error("sleepy probe failed on purpose");
    }
    ProbeSignal s;
    s.metadata = {{"slept_ms", ms_}};
    return s;
  }
  ProbeResult OnEnd(const RequestContext& ctx) override {
    ProbeResult r;
    r.request_id = ctx.request_id;
    r.verdict = "done";
    return r;
  }

 private:
  int ms_;
  bool raise_;
  std::shared_ptr<std::atomic<int>> fail_first_;
};

// Sleeps {ms} per record and reports, in its verdict, every (token_pos, layer) it saw and how
// many records belonged to another request (must be none).
class SlowRecorder : public Probe {
 public:
  explicit SlowRecorder(int ms) : ms_(ms) {}
  void OnStart(const RequestContext& ctx) override { request_id_ = ctx.request_id; }
  std::optional<ProbeSignal> OnActivation(const ActivationRecord& record) override {
    if (ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms_));
    if (record.request_id != request_id_) ++foreign_;
    positions_.push_back(record.token_pos);
    layers_.push_back(record.layer);
    ProbeSignal s;
    s.confidence = static_cast<double>(record.token_pos);
    s.metadata = {{"token_pos", record.token_pos}, {"layer", record.layer}};
    return s;
  }
  ProbeResult OnEnd(const RequestContext& ctx) override {
    ProbeResult r;
    r.request_id = ctx.request_id;
    r.verdict = {{"n", positions_.size()},
                 {"positions", positions_},
                 {"layers", layers_},
                 {"foreign", foreign_}};
    return r;
  }

 private:
  int ms_;
  std::string request_id_;
  std::vector<int64_t> positions_;
  std::vector<int> layers_;
  int foreign_ = 0;
};

template <typename Make>
class LambdaType : public ProbeType {
 public:
  LambdaType(ProbeKind kind, Make make) : kind_(kind), make_(std::move(make)) {}
  ProbeKind kind() const override { return kind_; }
  std::unique_ptr<Probe> Spawn() const override { return make_(); }

 private:
  ProbeKind kind_;
  Make make_;
};

template <typename Make>
std::unique_ptr<ProbeType> TypeOf(ProbeKind kind, Make make) {
  return std::make_unique<LambdaType<Make>>(kind, std::move(make));
}

}  // namespace

RecordLog& RecordLog::Get() {
  static RecordLog log;
  return log;
}

void RecordLog::Add(const ActivationRecord& record, const std::string& probe) {
  std::lock_guard<std::mutex> lock(mu_);
  records_.push_back(record);
  (void)probe;
}

std::vector<ActivationRecord> RecordLog::Take() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::move(records_);
}

std::vector<ActivationRecord> RecordLog::Of(const std::vector<ActivationRecord>& all,
                                            const std::string& request_id) {
  std::vector<ActivationRecord> out;
  for (const ActivationRecord& r : all) {
    if (r.request_id == request_id) out.push_back(r);
  }
  return out;
}

void RegisterTestProbes(probe::ProbeRegistry& registry) {
  for (auto [name, kind] : {std::pair{"recorder", ProbeKind::kSingleShot},
                            std::pair{"trajectory_recorder", ProbeKind::kTrajectory}}) {
    const std::string n = name;
    const ProbeKind k = kind;
    (void)registry.Register(
        n, k,
        [n, k](const nlohmann::json&,
               const probe::ProbeEnv&) -> StatusOr<std::unique_ptr<ProbeType>> {
          return TypeOf(k, [n] { return std::make_unique<Recorder>(n); });
        },
        /*override=*/true);
  }
  (void)registry.Register(
      "always_abort", ProbeKind::kSingleShot,
      [](const nlohmann::json& args,
         const probe::ProbeEnv&) -> StatusOr<std::unique_ptr<ProbeType>> {
        const int layer = args.value("layer", -1);
        const std::string request = args.value("request", std::string());
        return TypeOf(ProbeKind::kSingleShot,
                      [layer, request] { return std::make_unique<AlwaysAbort>(layer, request); });
      },
      true);
  (void)registry.Register(
      "always_escalate", ProbeKind::kSingleShot,
      [](const nlohmann::json& args,
         const probe::ProbeEnv&) -> StatusOr<std::unique_ptr<ProbeType>> {
        const int layer = args.value("layer", -1);
        const std::string request = args.value("request", std::string());
        return TypeOf(ProbeKind::kSingleShot, [layer, request] {
          return std::make_unique<AlwaysEscalate>(layer, request);
        });
      },
      true);
  (void)registry.Register(
      "slow_recorder", ProbeKind::kTrajectory,
      [](const nlohmann::json& args,
         const probe::ProbeEnv&) -> StatusOr<std::unique_ptr<ProbeType>> {
        const int ms = args.value("ms", 0);
        return TypeOf(ProbeKind::kTrajectory, [ms] { return std::make_unique<SlowRecorder>(ms); });
      },
      true);
  (void)registry.Register(
      "sleepy", ProbeKind::kSingleShot,
      [](const nlohmann::json& args,
         const probe::ProbeEnv&) -> StatusOr<std::unique_ptr<ProbeType>> {
        const int ms = args.value("ms", 0);
        const bool raise = args.value("throw", false);
        auto fail_first = std::make_shared<std::atomic<int>>(args.value("fail_first", 0));
        return TypeOf(ProbeKind::kSingleShot, [ms, raise, fail_first] {
          return std::make_unique<Sleepy>(ms, raise, fail_first);
        });
      },
      true);
}

ProbedRun RunProbed(engine::LLM& llm, probe::ProbingSession& session,
                    const std::vector<engine::GenerateRequest>& requests) {
  ProbedRun run;
  RecordLog::Get().Take();
  // Results of requests with async points arrive on a worker once their queues drained.
  std::mutex mu;
  std::condition_variable cv;
  session.SetResultCallback([&](probe::RequestProbeResults r) {
    std::lock_guard<std::mutex> lock(mu);
    const std::string id = r.request_id;
    run.probing[id] = std::move(r);
    cv.notify_all();
  });
  llm.engine().SetObserver(&session);
  run.results = llm.Generate(requests);
  llm.engine().SetObserver(nullptr);
  size_t accepted = 0;
  for (const engine::GenerateResult& r : run.results) accepted += r.status.ok() ? 1 : 0;
  {
    std::unique_lock<std::mutex> lock(mu);
    EXPECT_TRUE(cv.wait_for(lock, std::chrono::seconds(120),
                            [&] { return run.probing.size() >= accepted; }))
        << "probe results missing: " << run.probing.size() << " of " << accepted;
  }
  session.SetResultCallback(nullptr);
  run.records = RecordLog::Get().Take();
  run.stats = session.stats();
  return run;
}

std::unique_ptr<probe::ProbingSession> MakeSession(const std::string& yaml,
                                                   const models::ModelConfig& config,
                                                   probe::ProbingOptions options) {
  auto spec = probe::ParseSpecText(yaml, "test.yaml");
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  if (!spec.ok()) return nullptr;
  static probe::ProbeRegistry* registry = [] {
    auto* r = new probe::ProbeRegistry();
    RegisterTestProbes(*r);
    return r;
  }();
  auto session = probe::ProbingSession::Create(*spec, *registry, config, std::move(options));
  EXPECT_TRUE(session.ok()) << session.status().ToString();
  if (!session.ok()) return nullptr;
  return std::move(session).value();
}

double RelativeDiff(const ActivationRecord& a, const ActivationRecord& b) {
  if (a.values.size() != b.values.size()) return INFINITY;
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < a.values.size(); ++i) {
    diff = std::max(diff, std::fabs(double{a.values[i]} - b.values[i]));
    scale = std::max(scale, std::fabs(double{b.values[i]}));
  }
  return scale > 0.0 ? diff / scale : diff;
}

}  // namespace uc::testing
