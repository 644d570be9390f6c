#include "probe/probes/score_probe.h"

#include <algorithm>
#include <utility>

#include "base/check.h"

namespace uc::probe {

using nlohmann::json;

ProbeSignal RecordingProbe::Emit(ProbeAction action, std::optional<double> confidence,
                                 json metadata) {
  ProbeSignal signal;
  signal.action = action;
  signal.confidence = confidence;
  signal.metadata = std::move(metadata);
  signal.timestamp = UnixSeconds();
  history_.push_back(signal);
  return signal;
}

void RecordingProbe::Saw(const ActivationRecord& record) {
  if (point_seen_.empty()) point_seen_ = record.point;
}

ProbeResult RecordingProbe::Finish(const RequestContext& ctx, json verdict) {
  ProbeResult result;
  result.request_id = ctx.request_id;
  result.point = ctx.point != nullptr ? ctx.point->name : point_seen_;
  result.verdict = std::move(verdict);
  result.signal_history = history_;
  return result;
}

namespace {

struct ScoreProbeConfig {
  std::shared_ptr<const Scorer> scorer;
  ScoreProbeOptions options;
};

class ScoreProbe : public RecordingProbe {
 public:
  explicit ScoreProbe(std::shared_ptr<const ScoreProbeConfig> config)
      : config_(std::move(config)) {}

  std::optional<ProbeSignal> OnActivation(const ActivationRecord& record) override {
    Saw(record);
    const std::optional<double> score = config_->scorer->Score(record);
    if (!score) return std::nullopt;
    const ScoreProbeOptions& options = config_->options;
    ++count_;
    max_score_ = max_score_ ? std::max(*max_score_, *score) : *score;
    last_score_ = *score;
    const bool fires = options.threshold && *score >= *options.threshold;
    flagged_ = flagged_ || fires;
    json metadata = {{"score", *score}};
    if (!options.probe_name.empty()) metadata["probe"] = options.probe_name;
    return Emit(fires ? options.action : ProbeAction::kContinue, *score, std::move(metadata));
  }

  ProbeResult OnEnd(const RequestContext& ctx) override {
    json verdict = {{"flagged", flagged_},
                    {"max_score", max_score_ ? json(*max_score_) : json(nullptr)},
                    {"n", count_}};
    if (config_->options.verdict_last_score) {
      verdict["last_score"] = last_score_ ? json(*last_score_) : json(nullptr);
    }
    return Finish(ctx, std::move(verdict));
  }

 private:
  std::shared_ptr<const ScoreProbeConfig> config_;
  bool flagged_ = false;
  int64_t count_ = 0;
  std::optional<double> max_score_;
  std::optional<double> last_score_;
};

class ScoreProbeType : public ProbeType {
 public:
  explicit ScoreProbeType(std::shared_ptr<const ScoreProbeConfig> config)
      : config_(std::move(config)) {}
  ProbeKind kind() const override { return ProbeKind::kSingleShot; }
  std::unique_ptr<Probe> Spawn() const override { return std::make_unique<ScoreProbe>(config_); }

 private:
  std::shared_ptr<const ScoreProbeConfig> config_;
};

}  // namespace

std::unique_ptr<ProbeType> MakeScoreProbeType(std::shared_ptr<const Scorer> scorer,
                                              ScoreProbeOptions options) {
  UC_CHECK(scorer != nullptr, "MakeScoreProbeType without a scorer");
  auto config = std::make_shared<const ScoreProbeConfig>(
      ScoreProbeConfig{std::move(scorer), std::move(options)});
  return std::make_unique<ScoreProbeType>(std::move(config));
}

}  // namespace uc::probe
