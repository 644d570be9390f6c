// File: attention.h
// -----------------------------------------------------------------------------
// Self-attention of a Llama-family decoder layer: q/k/v projections (optionally biased),
// rotary embedding, causal grouped-query attention over the sequence's KV cache, and the output
// projection. Holds weight views only; per-call buffers live in AttentionBuffers so that one
// set serves every layer. Immutable after construction.
#pragma once

#include <span>

#include "base/thread_pool.h"
#include "kernels/ops.h"
#include "layers/linear.h"
#include "layers/rotary.h"

namespace uc::layers {

// One layer's KV cache for one sequence: row p holds the key/value of the token at position p.
struct KvCacheLayer {
  Tensor k;  // [capacity, num_key_value_heads * head_dim] F32
  Tensor v;  // [capacity, num_key_value_heads * head_dim] F32
};

// Scratch space for Attention::Forward, sized for at most `max_tokens` tokens.
struct AttentionBuffers {
  AttentionBuffers() = default;
  AttentionBuffers(int64_t max_tokens, int64_t q_size, int64_t kv_size);
  Tensor q;        // [max_tokens, num_heads * head_dim]
  Tensor k;        // [max_tokens, num_kv_heads * head_dim]
  Tensor v;        // [max_tokens, num_kv_heads * head_dim]
  Tensor context;  // [max_tokens, num_heads * head_dim]
};

class Attention {
 public:
  Attention() = default;
  // q_proj: [num_heads*head_dim, hidden], k_proj/v_proj: [num_kv_heads*head_dim, hidden],
  // o_proj: [hidden, num_heads*head_dim].
  Attention(Linear q_proj, Linear k_proj, Linear v_proj, Linear o_proj, Rotary rotary,
            kernels::AttentionShape shape);

  // x: [m, hidden] F32; token i is at positions[i] of the sequence whose cache is `cache`.
  // Writes k/v of the m tokens into the cache rows at their positions, then out: [m, hidden].
  // REQUIRES: every earlier position of the sequence is already in the cache.
  void Forward(const Tensor& x, std::span<const int32_t> positions, KvCacheLayer& cache,
               AttentionBuffers& buffers, Tensor& out, ThreadPool* pool) const;

  const kernels::AttentionShape& shape() const { return shape_; }

 private:
  Linear q_proj_, k_proj_, v_proj_, o_proj_;
  Rotary rotary_;
  kernels::AttentionShape shape_{};
};

}  // namespace uc::layers
