#include "layers/attention.h"

#include <cstring>

namespace uc::layers {

AttentionBuffers::AttentionBuffers(int64_t max_tokens, int64_t q_size, int64_t kv_size)
    : q(Tensor::Empty({max_tokens, q_size}, DType::kF32)),
      k(Tensor::Empty({max_tokens, kv_size}, DType::kF32)),
      v(Tensor::Empty({max_tokens, kv_size}, DType::kF32)),
      context(Tensor::Empty({max_tokens, q_size}, DType::kF32)) {}

Attention::Attention(QKVParallelLinear qkv_proj, RowParallelLinear o_proj, Rotary rotary,
                     kernels::AttentionShape shape)
    : qkv_proj_(std::move(qkv_proj)),
      o_proj_(std::move(o_proj)),
      rotary_(std::move(rotary)),
      shape_(shape) {
  UC_CHECK(o_proj_.options().reduce_results, "attention o_proj must reduce its results");
  UC_CHECK(qkv_proj_.num_heads_per_rank() == shape_.num_heads &&
               qkv_proj_.num_kv_heads_per_rank() == shape_.num_kv_heads,
           "attention shape does not match this rank's q/k/v heads");
}

void Attention::Forward(const Tensor& x, std::span<const int32_t> positions, KvCacheLayer& cache,
                        AttentionBuffers& buffers, Tensor& out, ThreadPool* pool) const {
  const int64_t m = x.dim(0);
  Tensor q = buffers.q.Slice(0, m);
  Tensor k = buffers.k.Slice(0, m);
  Tensor v = buffers.v.Slice(0, m);
  Tensor context = buffers.context.Slice(0, m);
  qkv_proj_.Forward(x, q, k, v, pool);
  rotary_.Forward(positions, shape_.num_heads, q);
  rotary_.Forward(positions, shape_.num_kv_heads, k);
  const int64_t kv_row_bytes = k.row_bytes();
  for (int64_t i = 0; i < m; ++i) {
    UC_CHECK(positions[i] >= 0 && positions[i] < cache.k.dim(0),
             "position %d outside the KV cache capacity %lld", positions[i],
             static_cast<long long>(cache.k.dim(0)));
    std::memcpy(cache.k.row(positions[i]), k.row(i), kv_row_bytes);
    std::memcpy(cache.v.row(positions[i]), v.row(i), kv_row_bytes);
  }
  kernels::CausalAttention(q, cache.k, cache.v, positions, shape_, context, pool);
  o_proj_.Forward(context, out, pool);
}

}  // namespace uc::layers
