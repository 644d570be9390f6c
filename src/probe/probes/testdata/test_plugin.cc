// A probe plugin for registry_test: registers "always_abort" (a class-based single_shot probe
// that aborts on every activation) and "plugin_mean" (a function probe scoring the activation
// mean); and for the CLI tests "plugin_slow_count" (a trajectory probe that sleeps
// probe_args.sleep_ms milliseconds per activation and never acts: a slow async observer). Built as
// a MODULE library; its uc::probe symbols resolve against the executable that loads it.
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "probe/probes/registry.h"

namespace {

using uc::probe::ActivationRecord;
using uc::probe::Probe;
using uc::probe::ProbeAction;
using uc::probe::ProbeResult;
using uc::probe::ProbeSignal;
using uc::probe::RequestContext;

class AlwaysAbortProbe : public Probe {
 public:
  std::optional<ProbeSignal> OnActivation(const ActivationRecord& record) override {
    ProbeSignal signal;
    signal.action = ProbeAction::kAbort;
    signal.confidence = 1.0;
    signal.metadata = {{"plugin", true}};
    history_.push_back(signal);
    return signal;
  }
  ProbeResult OnEnd(const RequestContext& ctx) override {
    ProbeResult result;
    result.request_id = ctx.request_id;
    result.point = ctx.point != nullptr ? ctx.point->name : "";
    result.verdict = {{"aborts", static_cast<int>(history_.size())}};
    result.signal_history = history_;
    return result;
  }

 private:
  std::vector<ProbeSignal> history_;
};

class AlwaysAbortType : public uc::probe::ProbeType {
 public:
  uc::probe::ProbeKind kind() const override { return uc::probe::ProbeKind::kSingleShot; }
  std::unique_ptr<Probe> Spawn() const override { return std::make_unique<AlwaysAbortProbe>(); }
};

// A slow observer: sleeps sleep_ms per activation, never acts; its verdict is the count.
class SlowCountProbe : public Probe {
 public:
  explicit SlowCountProbe(int sleep_ms) : sleep_ms_(sleep_ms) {}
  std::optional<ProbeSignal> OnActivation(const ActivationRecord&) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms_));
    ++count_;
    return std::nullopt;
  }
  ProbeResult OnEnd(const RequestContext& ctx) override {
    ProbeResult result;
    result.request_id = ctx.request_id;
    result.point = ctx.point != nullptr ? ctx.point->name : "";
    result.verdict = {{"count", count_}};
    return result;
  }

 private:
  int sleep_ms_;
  int count_ = 0;
};

class SlowCountType : public uc::probe::ProbeType {
 public:
  explicit SlowCountType(int sleep_ms) : sleep_ms_(sleep_ms) {}
  uc::probe::ProbeKind kind() const override { return uc::probe::ProbeKind::kTrajectory; }
  std::unique_ptr<Probe> Spawn() const override {
    return std::make_unique<SlowCountProbe>(sleep_ms_);
  }

 private:
  int sleep_ms_;
};

}  // namespace

extern "C" void undercurrent_register_probes(uc::probe::ProbeRegistry* registry) {
  (void)registry->Register(
      "always_abort", uc::probe::ProbeKind::kSingleShot,
      [](const nlohmann::json&,
         const uc::probe::ProbeEnv&) -> uc::StatusOr<std::unique_ptr<uc::probe::ProbeType>> {
        return std::unique_ptr<uc::probe::ProbeType>(std::make_unique<AlwaysAbortType>());
      });
  (void)registry->RegisterFunction(
      "plugin_mean",
      [](const ActivationRecord& record, const nlohmann::json&) -> std::optional<double> {
        if (record.values.empty()) return std::nullopt;
        double sum = 0.0;
        for (const float x : record.values) sum += x;
        return sum / static_cast<double>(record.values.size());
      },
      /*threshold=*/1.0);
  (void)registry->Register(
      "plugin_slow_count", uc::probe::ProbeKind::kTrajectory,
      [](const nlohmann::json& args,
         const uc::probe::ProbeEnv&) -> uc::StatusOr<std::unique_ptr<uc::probe::ProbeType>> {
        return std::unique_ptr<uc::probe::ProbeType>(
            std::make_unique<SlowCountType>(args.value("sleep_ms", 0)));
      });
}
