#include "layers/attention.h"

#include <cmath>
#include <cstring>

namespace uc::layers {
namespace {

// x[i] *= weight / sqrt(mean over the whole row of every rank + eps); x: this rank's columns.
void FullWidthRmsNorm(const Tensor& weight, float eps, distributed::GroupCoordinator& group,
                      Tensor& x) {
  const int64_t m = x.dim(0), n = x.dim(1);
  Tensor sums = Tensor::Empty({m}, DType::kF32);
  for (int64_t i = 0; i < m; ++i) {
    const float* row = x.data<float>() + i * n;
    double sum = 0.0;
    for (int64_t j = 0; j < n; ++j) sum += static_cast<double>(row[j]) * row[j];
    sums.data<float>()[i] = static_cast<float>(sum);
  }
  group.AllReduce(sums);
  const float total = static_cast<float>(n * group.world_size());
  const float* w = weight.data<float>();
  for (int64_t i = 0; i < m; ++i) {
    float* row = x.data<float>() + i * n;
    const float inv = 1.0f / std::sqrt(sums.data<float>()[i] / total + eps);
    for (int64_t j = 0; j < n; ++j) row[j] = (row[j] * inv) * w[j];
  }
}

}  // namespace

AttentionBuffers::AttentionBuffers(int64_t max_tokens, int64_t q_size, int64_t kv_size)
    : q(Tensor::ZerosLongLived({max_tokens, q_size}, DType::kF32)),
      k(Tensor::ZerosLongLived({max_tokens, kv_size}, DType::kF32)),
      v(Tensor::ZerosLongLived({max_tokens, kv_size}, DType::kF32)),
      context(Tensor::ZerosLongLived({max_tokens, q_size}, DType::kF32)) {}

Attention::Attention(QKVParallelLinear qkv_proj, RowParallelLinear o_proj, Rotary rotary,
                     kernels::AttentionShape shape, QkNorm qk_norm)
    : qkv_proj_(std::move(qkv_proj)),
      o_proj_(std::move(o_proj)),
      rotary_(std::move(rotary)),
      shape_(shape),
      qk_norm_(std::move(qk_norm)) {
  if (qk_norm_.enabled() && qk_norm_.full_width_group != nullptr) {
    UC_CHECK(qk_norm_.q.weight().dim(0) == int64_t{shape_.num_heads} * shape_.head_dim &&
                 qk_norm_.k.weight().dim(0) == int64_t{shape_.num_kv_heads} * shape_.head_dim &&
                 qk_norm_.q.weight().dtype() == DType::kF32 &&
                 qk_norm_.k.weight().dtype() == DType::kF32,
             "full-width q/k norm weights must be F32 [this rank's q and k sizes]");
  } else if (qk_norm_.enabled()) {
    UC_CHECK(qk_norm_.q.weight().dim(0) == shape_.head_dim &&
                 qk_norm_.k.weight().dim(0) == shape_.head_dim,
             "q/k norm weights must be [head_dim=%d]", shape_.head_dim);
  }
  UC_CHECK(o_proj_.options().reduce_results, "attention o_proj must reduce its results");
  UC_CHECK(qkv_proj_.num_heads_per_rank() == shape_.num_heads &&
               qkv_proj_.num_kv_heads_per_rank() == shape_.num_kv_heads,
           "attention shape does not match this rank's q/k/v heads");
}

void Attention::Forward(const Tensor& x, const AttentionMetadata& meta, KvCacheLayer& cache,
                        AttentionBuffers& buffers, Tensor& out, ThreadPool* pool) const {
  const int64_t m = x.dim(0);
  UC_CHECK(static_cast<int64_t>(meta.positions.size()) == m &&
               static_cast<int64_t>(meta.slot_mapping.size()) == m,
           "attention: %zu positions and %zu slots for %lld tokens", meta.positions.size(),
           meta.slot_mapping.size(), static_cast<long long>(m));
  Tensor q = buffers.q.Slice(0, m);
  Tensor k = buffers.k.Slice(0, m);
  Tensor v = buffers.v.Slice(0, m);
  Tensor context = buffers.context.Slice(0, m);
  qkv_proj_.Forward(x, q, k, v, pool);
  if (qk_norm_.enabled() && qk_norm_.full_width_group != nullptr) {
    FullWidthRmsNorm(qk_norm_.q.weight(), qk_norm_.eps, *qk_norm_.full_width_group, q);
    FullWidthRmsNorm(qk_norm_.k.weight(), qk_norm_.eps, *qk_norm_.full_width_group, k);
  } else if (qk_norm_.enabled()) {  // each head is a row of head_dim values
    Tensor q_heads = q.Reshape({m * shape_.num_heads, shape_.head_dim});
    Tensor k_heads = k.Reshape({m * shape_.num_kv_heads, shape_.head_dim});
    qk_norm_.q.Forward(q_heads, q_heads, pool);
    qk_norm_.k.Forward(k_heads, k_heads, pool);
  }
  rotary_.Forward(meta.positions, shape_.num_heads, q, pool);
  rotary_.Forward(meta.positions, shape_.num_kv_heads, k, pool);
  const int64_t kv_row_bytes = k.row_bytes();
  for (int64_t i = 0; i < m; ++i) {
    const int32_t slot = meta.slot_mapping[i];
    UC_CHECK(slot >= 0 && slot < cache.k.dim(0), "KV slot %d outside the cache's %lld rows", slot,
             static_cast<long long>(cache.k.dim(0)));
    std::memcpy(cache.k.row(slot), k.row(i), kv_row_bytes);
    std::memcpy(cache.v.row(slot), v.row(i), kv_row_bytes);
  }
  kernels::PagedAttention(q, cache.k, cache.v, meta.layout, meta.positions, shape_, context, pool);
  o_proj_.Forward(context, out, pool);
}

}  // namespace uc::layers
