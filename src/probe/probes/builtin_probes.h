// File: builtin_probes.h
// -----------------------------------------------------------------------------
// The probes every ProbeRegistry starts with. Each reads its probe_args once when the point is
// registered (unknown keys, wrong types, missing files and wrong shapes are InvalidArgument
// naming the probe_type, the argument and the file), loads its weights once, and shares them,
// immutable, by every instance it spawns; an instance holds only its own running state.
// Relative file paths resolve against ProbeEnv::base_dir (the spec file's directory). Weight
// files are .safetensors, .npy or .json (formats in weights.h); their length must equal the
// model's hidden_size.
//
// Single-shot probes (probe_kind: single_shot). Each activation gets a score s and emits one
// signal: `action` when `threshold` is set and s >= threshold, else continue; confidence = s,
// metadata {"score": s}. Verdict {"flagged", "max_score", "last_score", "n"} (scores null
// before the first activation). Common args: threshold (number), action ("abort", default, or
// "flag").
//
//   linear      s = w·x + b, then sigmoid(s) if `sigmoid`.
//               weights  (required) file with the vector w (tensor / key "weight") and
//                        optionally "bias"
//               bias     number; overrides the file's bias (default: the file's, else 0)
//               sigmoid  bool, default false
//   mlp         s = fc2(act(fc1(x))), then sigmoid(s) if `sigmoid`.
//               weights     (required) .safetensors with fc1.weight [d, hidden_size],
//                           fc1.bias [d], fc2.weight [1, d] or [d], fc2.bias [1] (biases
//                           optional, zero when absent)
//               activation  "relu" (default) | "gelu" (exact, erf form) | "tanh"
//               sigmoid     bool, default false
//               fc1, fc2    tensor name prefixes, default "fc1" and "fc2" (e.g. "net.0",
//                           "net.2" for a torch nn.Sequential)
//   norm_gate   s = ||x||₂.  threshold is required.
//   cosine      s = x·d / (||x|| ||d||) (0 for a zero activation).
//               direction  (required) file with the vector d (tensor / key "direction" or
//                          "weight"); a zero vector is rejected
//
// Trajectory probes (probe_kind: trajectory; inline or async). Each activation gets a score s:
// the mean of the activation, or w·x + b when `weights` is given (args weights, bias, sigmoid
// as for linear; bias requires weights; sigmoid also applies to the mean). The probe keeps a
// running statistic and emits `action` once, the first time the statistic >= threshold
// (confidence = the statistic, metadata {"ema" or "running_mean", "score", "count",
// "threshold"}: v0.1's keys, and ours beside them);
// other activations emit nothing. Result metadata {"threshold"}.
//
//   ema           ema = s₁, then ema = alpha·s + (1 − alpha)·ema.
//                 alpha      (required) number in (0, 1]
//                 threshold  number; none: never acts
//                 verdict {"final_ema", "max" (the largest EMA; null before any), "count",
//                 "aborted"} ("flagged" instead of "aborted" when action is flag)
//   running_mean  mean of the scores so far (Undercurrent v0.1's TrajectoryScoreProbe).
//                 threshold  number, default 0.8
//                 verdict {"final_mean" (0.0 before any activation, as in v0.1), "max" (the
//                 largest mean; null before any), "count", "aborted"} (or "flagged")
//
// REQUIRES at every activation: its length equals the weights' length (the router guarantees
// it when ProbeEnv::hidden_size was known at creation); a mismatch is a fatal check.
#pragma once

#include "probe/probes/registry.h"

namespace uc::probe {

// Registers linear, mlp, norm_gate, cosine, ema and running_mean, the streaming aggregations of
// aggregate_probes.h and the SAE feature probe of sae.h (replacing any registration of those
// names).
void RegisterBuiltinProbes(ProbeRegistry& registry);

}  // namespace uc::probe
