// File: aggregate_probes.h
// -----------------------------------------------------------------------------
// Streaming aggregation probes (probe_kind: trajectory; inline or async), the aggregations the
// published production monitors put over per-token probe scores. Each activation gets a score;
// the probe updates a statistic online in O(hidden) per token (an EMA, a rolling mean, a pooled
// score) and emits `action` once, at the token where the statistic first reaches `threshold`
// (no threshold: never acts) — for ema_max and rolling_mean_max that is where their maximum
// over the tokens so far first reaches it. The value at token t equals the batch formula over
// tokens 1..t.
//
// Per-token scores (ema_max, rolling_mean_max): `scorer` "linear" (default; args weights,
// bias, sigmoid as the linear probe) or "mlp" (args weights, activation, sigmoid, fc1, fc2 as
// the mlp probe).
//
//   ema_max           ema_1 = s_1, ema_t = alpha·s_t + (1 − alpha)·ema_(t−1); the aggregate is
//                     max over t of ema_t (the "EMA, then max" of the cheap-monitor papers).
//                     alpha  (required) number in (0, 1]
//   rolling_mean_max  m_t = mean of the last `window` scores (of all of them while fewer than
//                     `window` have come); the aggregate is max over t of m_t.
//                     window  (required) integer >= 1
//   attention_pool    softmax attention pooling with a learned query q and value direction v:
//                     a_i = q·x_i, v_i = v·x_i, p_t = Σ_(i<=t) softmax(a)_i v_i + b, then
//                     sigmoid(p_t) if `sigmoid`; the statistic is p_t, the pooled score over
//                     the tokens so far. Kept online as a running max of a_i and the two
//                     rescaled sums, two dot products per token.
//                     weights  (required) .safetensors or .json with vectors "query" and
//                              "value" ([hidden_size] each) and an optional scalar "bias"
//                     sigmoid  bool, default false
//
// Common args: threshold (number), action ("abort", default, or "flag").
// Signal metadata: {"aggregate" (the statistic), "score" (this token's score; attention_pool:
// v·x), "count", "threshold"}.
// Verdict: {"max" (the largest statistic so far: the aggregate of ema_max and rolling_mean_max;
// null before any token), "final" (the statistic after the last token), "count", "fired_at"
// (the token_pos where it fired, or null), "flagged" or "aborted"}.
#pragma once

#include "probe/probes/registry.h"

namespace uc::probe {

// Registers ema_max, rolling_mean_max and attention_pool (replacing any registration of those
// names).
void RegisterAggregateProbes(ProbeRegistry& registry);

}  // namespace uc::probe
