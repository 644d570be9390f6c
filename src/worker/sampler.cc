#include "worker/sampler.h"

#include <algorithm>
#include <cmath>

namespace uc::worker {

Sampler::Sampler(const SamplingParams& params) : params_(params) {
  rng_.seed(params.seed.has_value() ? *params.seed : std::random_device{}());
}

// Two passes, each free of a loop-carried compare-and-branch: the largest value (eight running
// maxima, which the compiler keeps in one vector), then the first index holding it. The same
// answer as the one-pass scan `if (logits[i] > logits[best]) best = i` from best = 0: NaNs never
// win (nor does anything over a NaN at 0), and -0 == +0 keeps the first of a tie. A vocabulary
// of 262k (Gemma 3) took 4.6% of a two-thread decode as that scan.
int32_t Sampler::Argmax(std::span<const float> logits) {
  const size_t n = logits.size();
  if (n == 0 || std::isnan(logits[0])) return 0;
  constexpr size_t kLanes = 8;
  float lane_max[kLanes];
  std::fill_n(lane_max, kLanes, logits[0]);
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (size_t j = 0; j < kLanes; ++j) {
      const float v = logits[i + j];
      lane_max[j] = v > lane_max[j] ? v : lane_max[j];
    }
  }
  float best = lane_max[0];
  for (size_t j = 1; j < kLanes; ++j) best = lane_max[j] > best ? lane_max[j] : best;
  for (; i < n; ++i) best = logits[i] > best ? logits[i] : best;
  for (size_t k = 0; k < n; ++k) {
    if (logits[k] == best) return static_cast<int32_t>(k);
  }
  return 0;  // not reached: best is one of the logits
}

double Sampler::Uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

int32_t Sampler::Sample(std::span<const float> logits) {
  if (params_.greedy()) return Argmax(logits);
  const float max_logit = logits[Argmax(logits)];
  const float inv_t = 1.0f / params_.temperature;
  candidates_.resize(logits.size());
  double total = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float p = std::exp((logits[i] - max_logit) * inv_t);
    candidates_[i] = {p, static_cast<int32_t>(i)};
    total += p;
  }
  // Most likely first; ties by id so the order (and the draw) is deterministic.
  auto by_prob = [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  };
  size_t keep = candidates_.size();
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < keep) {
    keep = params_.top_k;
    std::partial_sort(candidates_.begin(), candidates_.begin() + keep, candidates_.end(), by_prob);
  } else {
    std::sort(candidates_.begin(), candidates_.end(), by_prob);
  }
  total = 0.0;
  for (size_t i = 0; i < keep; ++i) total += candidates_[i].first;
  if (params_.top_p < 1.0f) {
    double cumulative = 0.0;
    for (size_t i = 0; i < keep; ++i) {
      cumulative += candidates_[i].first / total;
      if (cumulative >= params_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  if (params_.min_p > 0.0f) {
    const float threshold = params_.min_p * candidates_[0].first;
    size_t i = 1;
    while (i < keep && candidates_[i].first >= threshold) ++i;
    keep = i;
  }
  double kept_total = 0.0;
  for (size_t i = 0; i < keep; ++i) kept_total += candidates_[i].first;
  const double r = Uniform() * kept_total;
  double cumulative = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    cumulative += candidates_[i].first;
    if (r < cumulative) return candidates_[i].second;
  }
  return candidates_[keep - 1].second;
}

}  // namespace uc::worker
