// Portable causal attention: one (token, head) pair at a time, two passes over the cache
// (scores and their softmax, then the weighted sum of values).
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"

namespace uc::kernels::cpu {
namespace {

void AttendOne(const AttentionArgs& a, int64_t token, int head, std::vector<float>& scores) {
  const int hd = a.shape.head_dim;
  const int kv_head = head / (a.shape.num_heads / a.shape.num_kv_heads);
  const int64_t kv_stride = int64_t{a.shape.num_kv_heads} * hd;
  const int64_t q_offset = (token * a.shape.num_heads + head) * hd;
  const float* q = a.q + q_offset;
  const int32_t* table = a.TableOf(token);
  // Cache row of sequence position t, at this KV head.
  auto row = [&](int64_t t) {
    return (int64_t{table[t / a.block_size]} * a.block_size + t % a.block_size) * kv_stride +
           int64_t{kv_head} * hd;
  };
  // Positions first .. first + len - 1 (the window, or the whole prefix).
  const int64_t first = a.shape.FirstPosition(a.positions[token]);
  const int64_t len = int64_t{a.positions[token]} + 1 - first;
  scores.resize(static_cast<size_t>(len));

  const float cap = a.shape.softcap;
  float max_score = -INFINITY;
  for (int64_t t = 0; t < len; ++t) {
    const float* key = a.k_cache + row(first + t);
    float dot = 0.0f;
    for (int d = 0; d < hd; ++d) dot += q[d] * key[d];
    scores[t] = dot * a.shape.scale;
    if (cap > 0.0f) scores[t] = cap * std::tanh(scores[t] / cap);
    max_score = std::max(max_score, scores[t]);
  }
  const float* sinks = a.shape.sinks;
  if (sinks != nullptr) max_score = std::max(max_score, sinks[head]);
  double sum = sinks != nullptr ? std::exp(sinks[head] - max_score) : 0.0;
  for (int64_t t = 0; t < len; ++t) {
    scores[t] = std::exp(scores[t] - max_score);
    sum += scores[t];
  }
  float* out = a.out + q_offset;
  std::fill_n(out, hd, 0.0f);
  for (int64_t t = 0; t < len; ++t) {
    const float* value = a.v_cache + row(first + t);
    for (int d = 0; d < hd; ++d) out[d] += scores[t] * value[d];
  }
  const float inv_sum = static_cast<float>(1.0 / sum);
  for (int d = 0; d < hd; ++d) out[d] *= inv_sum;
}

}  // namespace

void CausalAttention(const AttentionArgs& args, ThreadPool* pool) {
  const int heads = args.shape.num_heads;
  ForEachStrided(pool, args.m * heads, [&](int64_t item) {
    thread_local std::vector<float> scores;
    AttendOne(args, item / heads, static_cast<int>(item % heads), scores);
  });
}

}  // namespace uc::kernels::cpu
