#include "engine/perplexity.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>

namespace uc::engine {

double NegativeLogLikelihood(const float* logits, int64_t vocab_size, int32_t token) {
  float max_logit = logits[0];
  for (int64_t i = 1; i < vocab_size; ++i) max_logit = std::max(max_logit, logits[i]);
  double sum_exp = 0.0;
  for (int64_t i = 0; i < vocab_size; ++i) sum_exp += std::exp(logits[i] - max_logit);
  return -(static_cast<double>(logits[token] - max_logit) - std::log(sum_exp));
}

StatusOr<PerplexityResult> ComputePerplexity(Generator& generator, std::vector<int32_t> tokens,
                                             const PerplexityOptions& options,
                                             const PerplexityProgress& progress) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int ctx = options.context;
  if (ctx < 4) {
    return InvalidArgumentError("perplexity: a context of " + std::to_string(ctx) +
                                " tokens is too short (at least 4)");
  }
  if (ctx > generator.max_model_len()) {
    return InvalidArgumentError(
        "perplexity: a context of " + std::to_string(ctx) + " tokens exceeds the model length " +
        std::to_string(generator.max_model_len()) + " (lower --ctx or raise --max-model-len)");
  }
  if (n < 2 * static_cast<int64_t>(ctx)) {
    return InvalidArgumentError("perplexity: the text tokenizes to " + std::to_string(n) +
                                " tokens; a context of " + std::to_string(ctx) +
                                " needs at least " + std::to_string(2 * ctx) +
                                " (use a longer text or a smaller --ctx)");
  }
  int64_t num_chunks = n / ctx;
  if (options.max_chunks >= 0) num_chunks = std::min<int64_t>(num_chunks, options.max_chunks);
  const int first = ctx / 2;
  const int64_t vocab = generator.config().vocab_size;

  PerplexityResult result;
  result.num_tokens = n;
  double nll = 0.0, nll2 = 0.0;
  for (int64_t c = 0; c < num_chunks; ++c) {
    std::vector<int32_t> chunk(tokens.begin() + c * ctx, tokens.begin() + (c + 1) * ctx);
    if (options.bos_id >= 0) chunk[0] = options.bos_id;
    const auto start = std::chrono::steady_clock::now();
    UC_ASSIGN_OR_RETURN(Tensor logits, generator.ScoreAllPositions(chunk));
    PerplexityChunk done;
    done.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // Scored against the text's own tokens: position j predicts token j + 1 of the chunk, whose
    // first position (replaced by BOS above) is never a target.
    for (int j = first; j < ctx - 1; ++j) {
      const double v =
          NegativeLogLikelihood(logits.data<float>() + j * vocab, vocab, tokens[c * ctx + j + 1]);
      nll += v;
      nll2 += v * v;
      ++result.scored;
    }
    done.running_ppl = std::exp(nll / static_cast<double>(result.scored));
    result.chunks.push_back(done);
    if (progress) progress(static_cast<int>(c), done);
  }
  const double count = static_cast<double>(result.scored);
  result.mean_nll = nll / count;
  result.ppl = std::exp(result.mean_nll);
  const double variance = nll2 / count - result.mean_nll * result.mean_nll;
  result.ppl_stderr =
      variance > 0 && count > 1 ? std::sqrt(variance / (count - 1)) * result.ppl : 0.0;
  return result;
}

}  // namespace uc::engine
