// File: logprobs.h
// -----------------------------------------------------------------------------
// Token log-probabilities as the engine returns them (OpenAI's `logprobs` / `top_logprobs`,
// vLLM's `prompt_logprobs`), computed on the last pipeline stage from the very logits row the
// sampler drew from, and carried back to the driver beside the sampled ids.
//
// Which row: the model's raw logits for that position, log-softmaxed once (max in float, the
// sum of exp in double, each value `(logit - max) - log(sum)` rounded to float). Temperature,
// top-k, top-p and min-p are NOT applied: under sampling a token's logprob is its probability
// under the model, not under the filtered distribution it was drawn from (vLLM's default
// `raw_logprobs`). The chosen token's value and the top entries come from the same row with
// the same formula, so a greedy token's logprob equals the first top entry bit for bit, and
// its rank is 1.
//
// Thread-safety: pure functions and plain value types.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace uc::worker {

// The most top entries a request may ask for (OpenAI's limit for `logprobs` / `top_logprobs`).
inline constexpr int kMaxLogprobs = 20;

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
  int32_t rank = 1;  // 1 + the number of tokens with a strictly larger logit
};

// The logprobs of one position: the token that came next (sampled, or the prompt's) and the
// `k` most likely tokens of the row, most likely first (ties: lower id first, as Argmax).
struct PositionLogprobs {
  TokenLogprob chosen;
  std::vector<TokenLogprob> top;
};

// REQUIRES: logits non-empty, 0 <= token < logits.size(), k >= 0.
PositionLogprobs ComputeLogprobs(std::span<const float> logits, int32_t token, int k);

// What one step computed for one sequence: logprobs of prompt tokens at positions
// first_prompt_position, first_prompt_position + 1, ... (from the rows before them), and of the
// token it sampled.
struct SequenceLogprobs {
  uint64_t seq_id = 0;
  int32_t first_prompt_position = 0;
  std::vector<PositionLogprobs> prompt;
  bool has_sampled = false;
  PositionLogprobs sampled;
};

// Exact inverses (the bytes the last stage sends the driver).
std::string SerializeLogprobs(const std::vector<SequenceLogprobs>& logprobs);
StatusOr<std::vector<SequenceLogprobs>> ParseLogprobs(const std::string& bytes);

}  // namespace uc::worker
