// A probe plugin for registry_test: registers "always_abort" (a class-based single_shot probe
// that aborts on every activation) and "plugin_mean" (a function probe scoring the activation
// mean). Built as a MODULE library; its uc::probe symbols resolve against the test executable.
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "probe/registry.h"

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
}
