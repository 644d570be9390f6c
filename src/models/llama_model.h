// File: llama_model.h
// -----------------------------------------------------------------------------
// The Llama-family decoder shared by every architecture in models/architectures/: token
// embedding, N pre-norm decoder layers (RMSNorm -> attention -> add, RMSNorm -> SwiGLU -> add),
// final RMSNorm and the LM head. Weights are views into the checkpoint, checked against the
// config at load (shape mismatches name the tensor and both shapes).
//
// Forward runs a contiguous run of tokens of ONE sequence (prefill chunk or one decode token)
// against that sequence's KV cache. Not thread-safe: a CausalLM owns scratch buffers reused
// across calls; use one per thread, or serialize calls.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "base/thread_pool.h"
#include "layers/attention.h"
#include "layers/embedding.h"
#include "layers/gated_mlp.h"
#include "layers/linear.h"
#include "layers/rms_norm.h"
#include "models/checkpoint.h"
#include "models/forward_hooks.h"

namespace uc::models {

// Per-sequence KV cache: one layer entry per decoder layer, `capacity` positions each.
struct KvCache {
  int capacity = 0;
  std::vector<layers::KvCacheLayer> layers;
};

// Buffers reused by every layer of one forward call, sized for `max_tokens` tokens.
struct Activations {
  Activations(int64_t max_tokens, const ModelConfig& config);
  int64_t max_tokens;
  Tensor residual;   // [max_tokens, hidden_size]  the residual stream
  Tensor normed;     // [max_tokens, hidden_size]  RMSNorm output fed to a block
  Tensor block_out;  // [max_tokens, hidden_size]  attention or MLP output
  layers::AttentionBuffers attention;
  layers::MlpBuffers mlp;
};

// The part of a forward call every layer needs.
struct ForwardContext {
  std::span<const int32_t> positions;  // [m]
  KvCache* cache = nullptr;
  ForwardHooks* hooks = nullptr;  // may be null
  ThreadPool* pool = nullptr;     // may be null
};

class DecoderLayer {
 public:
  DecoderLayer(int layer_index, layers::RmsNorm input_layernorm, layers::Attention attention,
               layers::RmsNorm post_attention_layernorm, layers::GatedMlp mlp);

  // Updates act.residual[0:m] in place with this layer's attention and MLP contributions.
  void Forward(const ForwardContext& ctx, Activations& act, int64_t m) const;

 private:
  void Tap(const ForwardContext& ctx, Site site, const Tensor& value) const;

  int layer_index_;
  layers::RmsNorm input_layernorm_;
  layers::Attention attention_;
  layers::RmsNorm post_attention_layernorm_;
  layers::GatedMlp mlp_;
};

class CausalLM {
 public:
  // Builds the model from `checkpoint`, checking every tensor's presence, shape and dtype.
  static StatusOr<std::unique_ptr<CausalLM>> Load(const Checkpoint& checkpoint);

  const ModelConfig& config() const { return config_; }
  // A zeroed cache for sequences of up to `capacity` positions.
  KvCache NewKvCache(int capacity) const;

  // Runs tokens ids[i] at positions[i] (consecutive, continuing what `cache` holds) and writes
  // logits: [m, vocab_size] if all_logits, else [1, vocab_size] for the last token.
  // REQUIRES: ids.size() == positions.size() >= 1; positions < cache.capacity.
  void Forward(std::span<const int32_t> ids, std::span<const int32_t> positions, KvCache& cache,
               bool all_logits, Tensor& logits, ThreadPool* pool, ForwardHooks* hooks = nullptr);

  // Total bytes of weights (as stored), for bandwidth figures.
  int64_t weight_bytes() const { return weight_bytes_; }

 private:
  CausalLM() = default;
  Activations& ActivationsFor(int64_t m);

  ModelConfig config_;
  layers::Embedding embed_tokens_;
  std::vector<DecoderLayer> layers_;
  layers::RmsNorm norm_;
  layers::Linear lm_head_;
  int64_t weight_bytes_ = 0;
  std::unique_ptr<Activations> activations_;
};

}  // namespace uc::models
