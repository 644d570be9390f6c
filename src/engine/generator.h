// File: generator.h
// -----------------------------------------------------------------------------
// Generator: one model + tokenizer in this process, generating for one request at a time with
// a contiguous KV cache: chunked prefill of the prompt, then token-by-token decode with the
// request's sampler, streaming text as it becomes complete UTF-8, honouring EOS, stop token
// ids, stop strings (held back while they could still match, never emitted) and max_tokens.
//
//   UC_ASSIGN_OR_RETURN(auto gen, Generator::Open({.model_path = "models/stories260K"}));
//   UC_ASSIGN_OR_RETURN(GenerationResult r, gen->Generate("Once upon a time", params, print));
//
// Not thread-safe: one Generate() at a time per Generator.
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "engine/deployment.h"
#include "kernels/ops.h"
#include "models/checkpoint.h"
#include "models/llama_model.h"
#include "tokenizer/tokenizer.h"
#include "worker/sampling_params.h"

namespace uc::engine {

enum class FinishReason { kStop, kLength, kAbort };
std::string_view FinishReasonName(FinishReason reason);

struct GenerationTimings {
  double prefill_seconds = 0.0;
  double decode_seconds = 0.0;
  int prompt_tokens = 0;
  int generated_tokens = 0;
  double prefill_tokens_per_second() const;
  double decode_tokens_per_second() const;  // excludes the first token (made by prefill)
};

struct GenerationResult {
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> output_ids;  // generated ids, including a final EOS / stop token id
  std::string text;                 // generated text, without any stop string
  FinishReason finish_reason = FinishReason::kLength;
  std::string stop_reason;  // "eos", "stop_token:<id>", "stop:<string>", "max_tokens", ...
  GenerationTimings timings;
};

struct GeneratorOptions {
  std::filesystem::path model_path;
  std::optional<std::filesystem::path> tokenizer_path;  // default: found beside the model
  int num_threads = 0;                                  // 0: all available cores
  // Context length; 0: the model's max_position_embeddings, lowered to what the KV cache holds.
  // Decided as the engine decides (kv_cache_plan.h) for one sequence, so a prompt runs alone
  // exactly when it runs in a batch; a given length the cache cannot hold is an error.
  int max_model_len = 0;
  int64_t kv_cache_bytes = 0;  // KV cache memory per rank; 0: automatic (kv_cache_plan.h)
  int prefill_chunk = 256;     // prompt tokens per forward call
  // How the model is built: matmul precision, control vectors (models::LoadOptions).
  models::LoadOptions load = {};
};

// Receives each piece of newly completed text; return false to abort the request.
using TextCallback = std::function<bool(std::string_view text)>;

class Generator {
 public:
  // One process: loads the model and its tokenizer.
  static StatusOr<std::unique_ptr<Generator>> Open(const GeneratorOptions& options);
  // The driver (world rank 0) of a multi-rank deployment; the other ranks run
  // deployment->worker().Loop(). Takes ownership of the deployment.
  static StatusOr<std::unique_ptr<Generator>> OpenDriver(const GeneratorOptions& options,
                                                         std::unique_ptr<Deployment> deployment);
  ~Generator();

  // Tokenizes `prompt` (BOS per the tokenizer's default) and generates.
  StatusOr<GenerationResult> Generate(std::string_view prompt, const worker::SamplingParams& params,
                                      const TextCallback& on_text = nullptr);
  // Generates from prompt ids as given. InvalidArgument if empty, out of vocabulary or longer
  // than the context.
  StatusOr<GenerationResult> GenerateFromIds(std::vector<int32_t> prompt_ids,
                                             const worker::SamplingParams& params,
                                             const TextCallback& on_text = nullptr);

  // Logits of every position of `ids` in one prefill ([ids.size(), vocab_size]).
  StatusOr<Tensor> ScoreAllPositions(const std::vector<int32_t>& ids);

  const models::Checkpoint& checkpoint() const { return deployment_->checkpoint(); }
  const models::ModelConfig& config() const { return deployment_->checkpoint().config; }
  const tokenizer::Tokenizer& tokenizer() const { return *tokenizer_; }
  // This rank's part of the model (the whole model in one process).
  models::CausalLM& model() { return deployment_->model(); }
  ThreadPool& pool() { return deployment_->pool(); }
  Deployment& deployment() { return *deployment_; }
  int max_model_len() const { return max_model_len_; }

 private:
  Generator() = default;
  Status Init(const GeneratorOptions& options);
  Status CheckPrompt(const std::vector<int32_t>& ids) const;
  // Starts a sequence on every rank and runs the prompt in chunks; returns the first sampled
  // token (sampled on the last pipeline stage).
  int32_t Prefill(const std::vector<int32_t>& ids, int capacity,
                  const worker::SamplingParams& params);

  std::unique_ptr<Deployment> deployment_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  int max_model_len_ = 0;
  int prefill_chunk_ = 256;
};

// Resolves the context length from the model's limit (max_position_embeddings; a longer request
// is allowed with a warning, except for learned absolute positions (GPT-2): InvalidArgument, as
// there is no embedding past the table) and a requested value (0: the model's). Sliding windows
// do not limit it: windowed layers attend to their window at any length.
StatusOr<int> ResolveMaxModelLen(const models::ModelConfig& config, int requested);

// InvalidArgument (naming `model_path`) when the tokenizer has more tokens than the model.
Status CheckTokenizerFits(const tokenizer::Tokenizer& tokenizer, const models::ModelConfig& config,
                          const std::filesystem::path& model_path);

// Loads the tokenizer that belongs to `checkpoint`: GGUF metadata; tokenizer.json or
// tokenizer.model in a Hugging Face directory; for llama2.c, tokenizer.bin or
// tok<vocab_size>.bin beside the .bin. `override_path` wins when given.
StatusOr<std::unique_ptr<tokenizer::Tokenizer>> LoadTokenizerFor(
    const models::Checkpoint& checkpoint,
    const std::optional<std::filesystem::path>& override_path);

}  // namespace uc::engine
