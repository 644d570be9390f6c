#include "probe/probes/aggregate_probes.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <memory>
#include <optional>
#include <utility>

#include "probe/probes/probe_args.h"
#include "probe/probes/score_probe.h"
#include "probe/probes/scorers.h"

namespace uc::probe {

using nlohmann::json;

namespace {

// One aggregation's running state: Update takes a record and returns (this token's score, the
// aggregate after it), or nullopt when the record gets no score. Owned by one probe instance.
class Aggregation {
 public:
  struct Step {
    double score;
    double aggregate;
  };
  virtual ~Aggregation() = default;
  virtual std::optional<Step> Update(const ActivationRecord& record) = 0;
};

// The immutable part shared by every instance of a probe type.
struct AggregateConfig {
  std::function<std::unique_ptr<Aggregation>()> spawn;
  std::optional<double> threshold;
  ProbeAction action = ProbeAction::kAbort;
};

class AggregateProbe : public RecordingProbe {
 public:
  explicit AggregateProbe(std::shared_ptr<const AggregateConfig> config)
      : config_(std::move(config)), aggregation_(config_->spawn()) {}

  std::optional<ProbeSignal> OnActivation(const ActivationRecord& record) override {
    Saw(record);
    const std::optional<Aggregation::Step> step = aggregation_->Update(record);
    if (!step) return std::nullopt;
    ++count_;
    final_ = step->aggregate;
    max_ = count_ == 1 ? step->aggregate : std::max(max_, step->aggregate);
    if (fired_at_ || !config_->threshold || step->aggregate < *config_->threshold) {
      return std::nullopt;
    }
    fired_at_ = record.token_pos;
    return Emit(config_->action, step->aggregate,
                {{"aggregate", step->aggregate},
                 {"score", step->score},
                 {"count", count_},
                 {"threshold", *config_->threshold}});
  }

  ProbeResult OnEnd(const RequestContext& ctx) override {
    const bool any = count_ > 0;
    ProbeResult result = Finish(ctx, {{"max", any ? json(max_) : json(nullptr)},
                                      {"final", any ? json(final_) : json(nullptr)},
                                      {"count", count_},
                                      {"fired_at", fired_at_ ? json(*fired_at_) : json(nullptr)},
                                      {config_->action == ProbeAction::kAbort      ? "aborted"
                                       : config_->action == ProbeAction::kEscalate ? "escalated"
                                                                                   : "flagged",
                                       fired_at_.has_value()}});
    result.metadata["threshold"] = config_->threshold ? json(*config_->threshold) : json(nullptr);
    return result;
  }

 private:
  std::shared_ptr<const AggregateConfig> config_;
  std::unique_ptr<Aggregation> aggregation_;
  int64_t count_ = 0;
  double max_ = 0.0;
  double final_ = 0.0;
  std::optional<int64_t> fired_at_;
};

class AggregateProbeType : public ProbeType {
 public:
  explicit AggregateProbeType(std::shared_ptr<const AggregateConfig> config)
      : config_(std::move(config)) {}
  ProbeKind kind() const override { return ProbeKind::kTrajectory; }
  std::unique_ptr<Probe> Spawn() const override {
    return std::make_unique<AggregateProbe>(config_);
  }

 private:
  std::shared_ptr<const AggregateConfig> config_;
};

// The running maximum of an EMA of scores.
class EmaMax : public Aggregation {
 public:
  EmaMax(std::shared_ptr<const Scorer> scorer, double alpha)
      : scorer_(std::move(scorer)), alpha_(alpha) {}
  std::optional<Step> Update(const ActivationRecord& record) override {
    const std::optional<double> s = scorer_->Score(record);
    if (!s) return std::nullopt;
    ema_ = started_ ? alpha_ * *s + (1.0 - alpha_) * ema_ : *s;
    started_ = true;
    return Step{*s, ema_};
  }

 private:
  std::shared_ptr<const Scorer> scorer_;
  double alpha_;
  double ema_ = 0.0;
  bool started_ = false;
};

// The mean of the last `window` scores. The sum is recomputed from the window (at most
// `window` additions) rather than kept as a running difference, so rounding never accumulates
// over a long generation.
class RollingMean : public Aggregation {
 public:
  RollingMean(std::shared_ptr<const Scorer> scorer, int64_t window)
      : scorer_(std::move(scorer)), window_(window) {}
  std::optional<Step> Update(const ActivationRecord& record) override {
    const std::optional<double> s = scorer_->Score(record);
    if (!s) return std::nullopt;
    scores_.push_back(*s);
    if (static_cast<int64_t>(scores_.size()) > window_) scores_.pop_front();
    double sum = 0.0;
    for (const double x : scores_) sum += x;
    return Step{*s, sum / static_cast<double>(scores_.size())};
  }

 private:
  std::shared_ptr<const Scorer> scorer_;
  int64_t window_;
  std::deque<double> scores_;
};

struct AttentionPoolWeights {
  std::vector<float> query;  // [hidden_size]
  std::vector<float> value;  // [hidden_size]
  double bias = 0.0;
  bool sigmoid = false;
};

// Online softmax pooling: with m the largest logit so far, z = Σ exp(a_i − m) and
// n = Σ exp(a_i − m) v_i; a larger logit rescales both by exp(m_old − m_new).
class AttentionPool : public Aggregation {
 public:
  explicit AttentionPool(std::shared_ptr<const AttentionPoolWeights> weights)
      : weights_(std::move(weights)) {}
  std::optional<Step> Update(const ActivationRecord& record) override {
    UC_CHECK(record.values.size() == weights_->query.size(),
             "attention_pool weights hold %zu values but the activation of point '%s' (layer "
             "%d) has %zu",
             weights_->query.size(), record.point.c_str(), record.layer, record.values.size());
    const double a = ScoreDot(weights_->query, record.values);
    const double v = ScoreDot(weights_->value, record.values);
    if (z_ == 0.0) {
      max_logit_ = a;
      z_ = 1.0;
      n_ = v;
    } else if (a > max_logit_) {
      const double rescale = std::exp(max_logit_ - a);
      z_ = z_ * rescale + 1.0;
      n_ = n_ * rescale + v;
      max_logit_ = a;
    } else {
      const double p = std::exp(a - max_logit_);
      z_ += p;
      n_ += p * v;
    }
    double pooled = n_ / z_ + weights_->bias;
    if (weights_->sigmoid) pooled = Sigmoid(pooled);
    return Step{v, pooled};
  }

 private:
  std::shared_ptr<const AttentionPoolWeights> weights_;
  double max_logit_ = 0.0;
  double z_ = 0.0;
  double n_ = 0.0;
};

// The per-token scorer of ema_max / rolling_mean_max: `scorer` linear (default) or mlp.
StatusOr<std::shared_ptr<const Scorer>> TokenScorer(const ProbeArgs& args, const ProbeEnv& env) {
  UC_ASSIGN_OR_RETURN(std::string kind, args.Choice("scorer", {"linear", "mlp"}, "linear"));
  if (kind == "mlp") {
    if (args.Has("bias")) return args.Error("bias", "applies to scorer 'linear' only");
    return MlpScorerFromArgs(args, env);
  }
  for (const char* key : {"activation", "fc1", "fc2"}) {
    if (args.Has(key)) return args.Error(key, "applies to scorer 'mlp' only");
  }
  return LinearScorerFromArgs(args, env, /*optional_weights=*/false);
}

StatusOr<std::unique_ptr<ProbeType>> Finish(const ProbeArgs& args, AggregateConfig config) {
  UC_ASSIGN_OR_RETURN(config.threshold, args.OptionalNumber("threshold"));
  UC_ASSIGN_OR_RETURN(config.action, args.Action());
  return std::unique_ptr<ProbeType>(std::make_unique<AggregateProbeType>(
      std::make_shared<const AggregateConfig>(std::move(config))));
}

const std::vector<std::string> kScorerKeys = {
    "scorer", "weights", "bias", "sigmoid", "activation", "fc1", "fc2", "threshold", "action"};

std::vector<std::string> With(std::vector<std::string> keys, const char* extra) {
  keys.push_back(extra);
  return keys;
}

StatusOr<std::unique_ptr<ProbeType>> MakeEmaMax(const json& raw, const ProbeEnv& env) {
  UC_ASSIGN_OR_RETURN(ProbeArgs args, ProbeArgs::Parse("ema_max", raw, With(kScorerKeys, "alpha")));
  UC_ASSIGN_OR_RETURN(std::shared_ptr<const Scorer> scorer, TokenScorer(args, env));
  UC_ASSIGN_OR_RETURN(const double alpha, args.Number("alpha"));
  if (!(alpha > 0.0 && alpha <= 1.0)) {
    return args.Error("alpha", "must be in (0, 1] (got " + json(alpha).dump() + ")");
  }
  AggregateConfig config;
  config.spawn = [scorer, alpha] { return std::make_unique<EmaMax>(scorer, alpha); };
  return Finish(args, std::move(config));
}

StatusOr<std::unique_ptr<ProbeType>> MakeRollingMeanMax(const json& raw, const ProbeEnv& env) {
  UC_ASSIGN_OR_RETURN(ProbeArgs args,
                      ProbeArgs::Parse("rolling_mean_max", raw, With(kScorerKeys, "window")));
  UC_ASSIGN_OR_RETURN(std::shared_ptr<const Scorer> scorer, TokenScorer(args, env));
  UC_ASSIGN_OR_RETURN(const double window, args.Number("window"));
  if (!(window >= 1.0 && window <= 1e6 && std::floor(window) == window)) {
    return args.Error("window", "must be a whole number of tokens, 1 to 1000000 (got " +
                                    json(window).dump() + ")");
  }
  const auto w = static_cast<int64_t>(window);
  AggregateConfig config;
  config.spawn = [scorer, w] { return std::make_unique<RollingMean>(scorer, w); };
  return Finish(args, std::move(config));
}

StatusOr<std::unique_ptr<ProbeType>> MakeAttentionPool(const json& raw, const ProbeEnv& env) {
  UC_ASSIGN_OR_RETURN(
      ProbeArgs args,
      ProbeArgs::Parse("attention_pool", raw, {"weights", "sigmoid", "threshold", "action"}));
  auto weights = std::make_shared<AttentionPoolWeights>();
  UC_ASSIGN_OR_RETURN(VectorWeights query, LoadVectorArg(args, "weights", env, {"query"}));
  UC_ASSIGN_OR_RETURN(VectorWeights value, LoadVectorArg(args, "weights", env, {"value"}));
  if (query.weight.size() != value.weight.size()) {
    return args.Error("weights", "'query' holds " + std::to_string(query.weight.size()) +
                                     " values but 'value' holds " +
                                     std::to_string(value.weight.size()));
  }
  weights->query = std::move(query.weight);
  weights->value = std::move(value.weight);
  weights->bias = value.bias.value_or(0.0);
  UC_ASSIGN_OR_RETURN(weights->sigmoid, args.Bool("sigmoid", false));
  AggregateConfig config;
  std::shared_ptr<const AttentionPoolWeights> shared = std::move(weights);
  config.spawn = [shared] { return std::make_unique<AttentionPool>(shared); };
  return Finish(args, std::move(config));
}

}  // namespace

void RegisterAggregateProbes(ProbeRegistry& registry) {
  const auto add = [&](const char* name, ProbeFactory factory) {
    const Status status =
        registry.Register(name, ProbeKind::kTrajectory, std::move(factory), /*override=*/true);
    UC_CHECK(status.ok(), "registering built-in probe %s: %s", name, status.ToString().c_str());
  };
  add("ema_max", MakeEmaMax);
  add("rolling_mean_max", MakeRollingMeanMax);
  add("attention_pool", MakeAttentionPool);
}

}  // namespace uc::probe
