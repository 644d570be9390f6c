// File: sampler.h
// -----------------------------------------------------------------------------
// Turns one row of logits into a token id under SamplingParams: greedy argmax, or temperature
// -> top-k -> top-p -> min-p filtering and a draw from the renormalized distribution.
// The random stream is a std::mt19937_64 seeded per request, and draws
// use only its raw 64-bit output, so a seed gives the same tokens on every platform and
// whatever else is in the batch. Thread-compatible (one Sampler per request).
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "worker/sampling_params.h"

namespace uc::worker {

class Sampler {
 public:
  // Seeds from params.seed, or from std::random_device when unset.
  explicit Sampler(const SamplingParams& params);

  // logits: [vocab_size]. Returns the chosen id.
  int32_t Sample(std::span<const float> logits);

  // Index of the largest logit; the first one on ties (as llama2.c's argmax).
  static int32_t Argmax(std::span<const float> logits);

 private:
  // Uniform in [0, 1) from the top 53 bits of the generator.
  double Uniform();

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> candidates_;  // (probability, id) scratch
};

}  // namespace uc::worker
