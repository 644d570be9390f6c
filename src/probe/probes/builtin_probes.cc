#include "probe/probes/builtin_probes.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <utility>

#include "base/check.h"
#include "probe/probes/aggregate_probes.h"
#include "probe/probes/probe_args.h"
#include "probe/probes/score_probe.h"
#include "probe/probes/scorers.h"
#include "probe/probes/trained/sae.h"

namespace uc::probe {

using nlohmann::json;

namespace {

StatusOr<ScoreProbeOptions> ThresholdOptions(const ProbeArgs& args, bool threshold_required) {
  ScoreProbeOptions options;
  options.verdict_last_score = true;
  if (threshold_required) {
    UC_ASSIGN_OR_RETURN(options.threshold, args.Number("threshold"));
  } else {
    UC_ASSIGN_OR_RETURN(options.threshold, args.OptionalNumber("threshold"));
  }
  UC_ASSIGN_OR_RETURN(options.action, args.Action());
  return options;
}

StatusOr<std::unique_ptr<ProbeType>> MakeLinear(const json& raw, const ProbeEnv& env) {
  UC_ASSIGN_OR_RETURN(
      ProbeArgs args,
      ProbeArgs::Parse("linear", raw, {"weights", "bias", "sigmoid", "threshold", "action"}));
  UC_ASSIGN_OR_RETURN(auto scorer, LinearScorerFromArgs(args, env, /*optional_weights=*/false));
  UC_ASSIGN_OR_RETURN(ScoreProbeOptions options, ThresholdOptions(args, false));
  return MakeScoreProbeType(std::move(scorer), std::move(options));
}

StatusOr<std::unique_ptr<ProbeType>> MakeMlp(const json& raw, const ProbeEnv& env) {
  UC_ASSIGN_OR_RETURN(ProbeArgs args, ProbeArgs::Parse("mlp", raw,
                                                       {"weights", "activation", "sigmoid", "fc1",
                                                        "fc2", "threshold", "action"}));
  UC_ASSIGN_OR_RETURN(auto scorer, MlpScorerFromArgs(args, env));
  UC_ASSIGN_OR_RETURN(ScoreProbeOptions options, ThresholdOptions(args, false));
  return MakeScoreProbeType(std::move(scorer), std::move(options));
}

StatusOr<std::unique_ptr<ProbeType>> MakeNormGate(const json& raw, const ProbeEnv& env) {
  UC_ASSIGN_OR_RETURN(ProbeArgs args, ProbeArgs::Parse("norm_gate", raw, {"threshold", "action"}));
  UC_ASSIGN_OR_RETURN(ScoreProbeOptions options, ThresholdOptions(args, true));
  return MakeScoreProbeType(MakeNormScorer(), std::move(options));
}

StatusOr<std::unique_ptr<ProbeType>> MakeCosine(const json& raw, const ProbeEnv& env) {
  UC_ASSIGN_OR_RETURN(ProbeArgs args,
                      ProbeArgs::Parse("cosine", raw, {"direction", "threshold", "action"}));
  UC_ASSIGN_OR_RETURN(auto scorer, CosineScorerFromArgs(args, env));
  UC_ASSIGN_OR_RETURN(ScoreProbeOptions options, ThresholdOptions(args, false));
  return MakeScoreProbeType(std::move(scorer), std::move(options));
}

// Trajectory probes: a running statistic (EMA, or the mean) of per-activation scores that
// emits `action` once, the first time it reaches the threshold.
struct TrajectoryConfig {
  std::shared_ptr<const Scorer> scorer;
  std::optional<double> alpha;  // EMA weight of the newest score; nullopt: running mean
  std::optional<double> threshold;
  ProbeAction action = ProbeAction::kAbort;
};

class TrajectoryProbe : public RecordingProbe {
 public:
  explicit TrajectoryProbe(std::shared_ptr<const TrajectoryConfig> config)
      : config_(std::move(config)) {}

  std::optional<ProbeSignal> OnActivation(const ActivationRecord& record) override {
    Saw(record);
    const std::optional<double> score = config_->scorer->Score(record);
    if (!score) return std::nullopt;
    ++count_;
    sum_ += *score;
    if (!config_->alpha) {
      value_ = sum_ / static_cast<double>(count_);
    } else {
      value_ = count_ == 1 ? *score : *config_->alpha * *score + (1.0 - *config_->alpha) * value_;
    }
    max_ = count_ == 1 ? value_ : std::max(max_, value_);
    if (triggered_ || !config_->threshold || value_ < *config_->threshold) return std::nullopt;
    triggered_ = true;
    return Emit(config_->action, value_,
                {{StatName(), value_},
                 {"score", *score},
                 {"count", count_},
                 {"threshold", *config_->threshold}});
  }

  ProbeResult OnEnd(const RequestContext& ctx) override {
    const char* final_key = config_->alpha ? "final_ema" : "final_mean";
    const char* fired_key = config_->action == ProbeAction::kAbort      ? "aborted"
                            : config_->action == ProbeAction::kEscalate ? "escalated"
                                                                        : "flagged";
    // Before any activation the running mean is 0.0, as v0.1 reports it; an EMA has no value.
    const json final_value = count_ > 0 || !config_->alpha ? json(value_) : json(nullptr);
    ProbeResult result = Finish(ctx, {{final_key, final_value},
                                      {"max", count_ > 0 ? json(max_) : json(nullptr)},
                                      {"count", count_},
                                      {fired_key, triggered_}});
    result.metadata["threshold"] = config_->threshold ? json(*config_->threshold) : json(nullptr);
    return result;
  }

 private:
  // The running mean's key is v0.1's (TrajectoryScoreProbe's signal metadata), which its sink
  // readers look up.
  const char* StatName() const { return config_->alpha ? "ema" : "running_mean"; }

  std::shared_ptr<const TrajectoryConfig> config_;
  int64_t count_ = 0;
  double sum_ = 0.0;
  double value_ = 0.0;
  double max_ = 0.0;  // the largest value_ so far (what the threshold is first reached by)
  bool triggered_ = false;
};

class TrajectoryProbeType : public ProbeType {
 public:
  explicit TrajectoryProbeType(std::shared_ptr<const TrajectoryConfig> config)
      : config_(std::move(config)) {}
  ProbeKind kind() const override { return ProbeKind::kTrajectory; }
  std::unique_ptr<Probe> Spawn() const override {
    return std::make_unique<TrajectoryProbe>(config_);
  }

 private:
  std::shared_ptr<const TrajectoryConfig> config_;
};

// The arguments both trajectory probes share; `threshold` is set by the caller.
StatusOr<TrajectoryConfig> TrajectoryConfigFromArgs(const ProbeArgs& args, const ProbeEnv& env) {
  TrajectoryConfig config;
  UC_ASSIGN_OR_RETURN(config.scorer, LinearScorerFromArgs(args, env, /*optional_weights=*/true));
  UC_ASSIGN_OR_RETURN(config.action, args.Action());
  return config;
}

StatusOr<std::unique_ptr<ProbeType>> MakeEma(const json& raw, const ProbeEnv& env) {
  UC_ASSIGN_OR_RETURN(
      ProbeArgs args,
      ProbeArgs::Parse("ema", raw, {"alpha", "threshold", "action", "weights", "bias", "sigmoid"}));
  UC_ASSIGN_OR_RETURN(TrajectoryConfig config, TrajectoryConfigFromArgs(args, env));
  UC_ASSIGN_OR_RETURN(const double alpha, args.Number("alpha"));
  if (!(alpha > 0.0 && alpha <= 1.0)) {
    return args.Error("alpha", "must be in (0, 1] (got " + json(alpha).dump() + ")");
  }
  config.alpha = alpha;
  UC_ASSIGN_OR_RETURN(config.threshold, args.OptionalNumber("threshold"));
  return std::unique_ptr<ProbeType>(std::make_unique<TrajectoryProbeType>(
      std::make_shared<const TrajectoryConfig>(std::move(config))));
}

StatusOr<std::unique_ptr<ProbeType>> MakeRunningMean(const json& raw, const ProbeEnv& env) {
  UC_ASSIGN_OR_RETURN(
      ProbeArgs args,
      ProbeArgs::Parse("running_mean", raw, {"threshold", "action", "weights", "bias", "sigmoid"}));
  UC_ASSIGN_OR_RETURN(TrajectoryConfig config, TrajectoryConfigFromArgs(args, env));
  UC_ASSIGN_OR_RETURN(const std::optional<double> threshold, args.OptionalNumber("threshold"));
  config.threshold = threshold.value_or(0.8);
  return std::unique_ptr<ProbeType>(std::make_unique<TrajectoryProbeType>(
      std::make_shared<const TrajectoryConfig>(std::move(config))));
}

}  // namespace

void RegisterBuiltinProbes(ProbeRegistry& registry) {
  const auto add = [&](const char* name, ProbeKind kind, ProbeFactory factory) {
    const Status status = registry.Register(name, kind, std::move(factory), /*override=*/true);
    UC_CHECK(status.ok(), "registering built-in probe %s: %s", name, status.ToString().c_str());
  };
  add("linear", ProbeKind::kSingleShot, MakeLinear);
  add("mlp", ProbeKind::kSingleShot, MakeMlp);
  add("norm_gate", ProbeKind::kSingleShot, MakeNormGate);
  add("cosine", ProbeKind::kSingleShot, MakeCosine);
  add("ema", ProbeKind::kTrajectory, MakeEma);
  add("running_mean", ProbeKind::kTrajectory, MakeRunningMean);
  RegisterAggregateProbes(registry);
  RegisterSaeProbe(registry);
}

}  // namespace uc::probe
