// File: scorers.h
// -----------------------------------------------------------------------------
// The per-activation scorers of the built-in probes (builtin_probes.h documents their
// arguments), each built from a point's probe_args: weights are read and checked here, once,
// and the returned Scorer is immutable and shared by every probe instance.
//
// Errors are InvalidArgument "probe_type 'T': argument 'A': FILE: what is wrong".
// Scoring REQUIRES an activation as long as the weights (a fatal check otherwise).
#pragma once

#include <memory>
#include <span>

#include "base/status.h"
#include "probe/probes/probe_args.h"
#include "probe/probes/score_probe.h"
#include "probe/probes/trained/weights.h"

namespace uc::probe {

// s = w·x + b (args weights, bias, sigmoid); with `optional_weights` and no weights given, the
// mean of the activation (then optionally sigmoid).
StatusOr<std::shared_ptr<const Scorer>> LinearScorerFromArgs(const ProbeArgs& args,
                                                             const ProbeEnv& env,
                                                             bool optional_weights);
// s = fc2(act(fc1(x))) (args weights, activation, sigmoid, fc1, fc2).
StatusOr<std::shared_ptr<const Scorer>> MlpScorerFromArgs(const ProbeArgs& args,
                                                          const ProbeEnv& env);
// s = cos(x, d) (arg direction).
StatusOr<std::shared_ptr<const Scorer>> CosineScorerFromArgs(const ProbeArgs& args,
                                                             const ProbeEnv& env);
// s = ||x||₂.
std::shared_ptr<const Scorer> MakeNormScorer();

// a · b accumulated in double: activations reach thousands of elements and scores are compared
// with thresholds, so float rounding would make verdicts depend on summation order.
double ScoreDot(std::span<const float> a, std::span<const float> b);
// 1 / (1 + e^-z), without overflow for large |z|.
double Sigmoid(double z);

// The vector file of argument `key` (LoadVectorWeights with `names`), its length checked against
// env.hidden_size when known; errors name the argument and the file.
StatusOr<VectorWeights> LoadVectorArg(const ProbeArgs& args, std::string_view key,
                                      const ProbeEnv& env, const std::vector<std::string>& names);

}  // namespace uc::probe
