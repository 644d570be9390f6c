// File: attention.h
// -----------------------------------------------------------------------------
// Self-attention of a Llama-family decoder layer, tensor-parallel by heads: this rank's q/k/v
// heads (QKVParallelLinear, optionally biased), rotary embedding, causal grouped-query attention
// over this rank's slice of the sequence's KV cache, and the row-parallel output projection
// whose Forward all-reduces, so the output is the full [m, hidden] on every TP rank. With one
// rank it is plain attention. Per-call buffers live in AttentionBuffers so one set serves every
// layer. Immutable after construction.
#pragma once

#include <span>

#include "base/thread_pool.h"
#include "kernels/ops.h"
#include "layers/parallel_linear.h"
#include "layers/rms_norm.h"
#include "layers/rotary.h"

namespace uc::layers {

// One layer's paged KV cache on this rank: num_blocks blocks of block_size rows; row r holds
// the key/value of the token whose slot is r, for this rank's KV heads. A contiguous cache for
// one sequence is the special case of one block as long as the sequence.
struct KvCacheLayer {
  Tensor k;  // [num_blocks * block_size, num_kv_heads_per_rank * head_dim] F32
  Tensor v;  // [num_blocks * block_size, num_kv_heads_per_rank * head_dim] F32
};

// Where a batch's tokens sit, shared by every layer of one forward call: token i is at
// positions[i] of its sequence, its key/value go to cache row slot_mapping[i], and it attends
// to its sequence's earlier positions through `layout` (see kernels::PagedKvLayout).
struct AttentionMetadata {
  std::span<const int32_t> positions;     // [m]
  std::span<const int32_t> slot_mapping;  // [m]
  kernels::PagedKvLayout layout;
};

// Scratch space for Attention::Forward, sized for at most `max_tokens` tokens.
struct AttentionBuffers {
  AttentionBuffers() = default;
  AttentionBuffers(int64_t max_tokens, int64_t q_size_per_rank, int64_t kv_size_per_rank);
  Tensor q;        // [max_tokens, num_heads_per_rank * head_dim]
  Tensor k;        // [max_tokens, num_kv_heads_per_rank * head_dim]
  Tensor v;        // [max_tokens, num_kv_heads_per_rank * head_dim]
  Tensor context;  // [max_tokens, num_heads_per_rank * head_dim]
};

// RMSNorms applied to the queries and keys before RoPE; both undefined (default) for none.
// Per head (Qwen3, Gemma 3): weights [head_dim], each head normed alone. Full width (OLMo-2,
// full_width_group set): weights are this rank's slice of the [num_heads * head_dim] and
// [num_kv_heads * head_dim] vectors, and each token's whole q (k) projection is normed as one
// vector: the sums of squares of the slices are all-reduced over full_width_group (the TP group).
struct QkNorm {
  RmsNorm q;
  RmsNorm k;
  float eps = 1e-6f;                                          // full width only
  distributed::GroupCoordinator* full_width_group = nullptr;  // full width only
  bool enabled() const { return q.weight().defined() && q.weight().rank() == 1; }
};

class Attention {
 public:
  Attention() = default;
  // shape: this rank's heads (num_heads_per_rank, num_kv_heads_per_rank), as qkv_proj holds,
  // with the layer's scale, sliding window and soft-cap.
  // REQUIRES: o_proj reduces its results (the output must be whole on every rank).
  Attention(QKVParallelLinear qkv_proj, RowParallelLinear o_proj, Rotary rotary,
            kernels::AttentionShape shape, QkNorm qk_norm = {});

  // x: [m, hidden] F32, one row per token of the batch described by `meta`. Writes k/v of the
  // m tokens into their cache slots, then out: [m, hidden]. Each row's result depends only on
  // that token's sequence, never on its batch neighbours.
  // REQUIRES: every earlier position of each token's sequence is already in the cache or
  // earlier in this batch.
  void Forward(const Tensor& x, const AttentionMetadata& meta, KvCacheLayer& cache,
               AttentionBuffers& buffers, Tensor& out, ThreadPool* pool) const;

  const kernels::AttentionShape& shape() const { return shape_; }
  // gpt-oss: this rank's heads' sink logits ([num_heads_per_rank] F32), one more term in each
  // head's softmax denominator (kernels::AttentionShape::sinks).
  void set_sinks(Tensor sinks) {
    sinks_ = std::move(sinks);
    shape_.sinks = sinks_.data<float>();
  }

 private:
  QKVParallelLinear qkv_proj_;
  RowParallelLinear o_proj_;
  Rotary rotary_;
  kernels::AttentionShape shape_{};
  QkNorm qk_norm_;
  Tensor sinks_;  // owns shape_.sinks
};

}  // namespace uc::layers
