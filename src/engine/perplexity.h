// File: perplexity.h
// -----------------------------------------------------------------------------
// Perplexity of a model on a text, computed the way llama.cpp's perplexity tool does it, so the
// two numbers can be compared directly:
//   - the whole text is tokenized once (BOS first when the tokenizer adds one);
//   - it is cut into floor(n / ctx) chunks of `ctx` tokens (a short tail is dropped);
//   - each chunk is evaluated alone from an empty cache, its first token replaced by BOS when
//     the tokenizer adds one;
//   - only the second half of each chunk is scored: the log-probability of token j + 1 given the
//     logits at j, for j in [ctx / 2, ctx - 1), so every scored token has at least ctx / 2
//     tokens of context;
//   - PPL = exp(mean negative log-likelihood) over all scored tokens, with the standard error
//     llama.cpp prints (sqrt(var(nll) / (count - 1)) * PPL).
// log-softmax: max logit in float, sum of expf(logit - max) in double, as llama.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "base/status.h"
#include "engine/generator.h"

namespace uc::engine {

struct PerplexityOptions {
  int context = 512;    // tokens per chunk (llama.cpp's -c)
  int max_chunks = -1;  // < 0: every whole chunk (llama.cpp's --chunks)
  // BOS replaces each chunk's first token when >= 0 (the tokenizer's BOS when it adds one).
  int32_t bos_id = -1;
};

struct PerplexityChunk {
  double running_ppl = 0.0;  // over every chunk so far, this one included
  double seconds = 0.0;      // this chunk's forward pass
};

struct PerplexityResult {
  double ppl = 0.0;
  double ppl_stderr = 0.0;
  double mean_nll = 0.0;
  int64_t num_tokens = 0;  // in the tokenized text
  int64_t scored = 0;      // tokens scored over all chunks
  std::vector<PerplexityChunk> chunks;
};

// Called after each chunk (index, its result); for progress output.
using PerplexityProgress = std::function<void(int chunk, const PerplexityChunk&)>;

// Scores `tokens` (already tokenized, BOS included when the tokenizer adds one) with
// `generator`. InvalidArgument, with the counts, when there are fewer than 2 * context tokens or
// the context exceeds the generator's maximum model length.
StatusOr<PerplexityResult> ComputePerplexity(Generator& generator, std::vector<int32_t> tokens,
                                             const PerplexityOptions& options,
                                             const PerplexityProgress& progress = nullptr);

// -log softmax(logits)[token] as llama.cpp computes it (float max, double sum of expf).
double NegativeLogLikelihood(const float* logits, int64_t vocab_size, int32_t token);

}  // namespace uc::engine
