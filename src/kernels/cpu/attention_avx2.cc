// AVX2 causal attention. One task is a (token, KV head) pair and handles every query head that
// shares the KV head, so each K and V row is fetched from memory once per group instead of once
// per head (GQA groups are 4-8 heads in Llama models). Two passes over the cache: scores q·k_t
// for all heads of the group, four keys at a time while they sit in L1, then a vector exp; then
// Σ p_t v_t. Both passes walk the positions in runs of kRunRows (one KV block) and ask for the
// group's columns of the next run ahead of use (RunPrefetcher): a group's columns are a share of
// every cache row (a quarter with 4 KV heads), a pattern the hardware prefetchers do not follow,
// so without it decode attention over a cache that memory holds ran at a fifth of the read
// bandwidth. The dot products and the value sums are AttentionKernels: these AVX2 ones, or
// avx512's (attention_avx512.cc), which run inside the same passes.
#if defined(__x86_64__)

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/simd_avx2.h"

namespace uc::kernels::avx2 {
namespace {

// Positions per run of either pass: one KV block of the engine's paged cache. The prefetch asks
// for the run after the one being computed. Measured on a Zen 5 (kernels_benchmark
// BM_AttentionDecodeCold, one decode token over caches memory holds, 4 KV heads of 64, medians
// of 3, two interleaved rounds): 576 positions 206-242 -> 96-98 us at one thread, 135-137 -> 60-64
// at two; 4096 positions 1537-1591 -> 751-753 and 890-944 -> 440-450. Touching the lines with
// loads instead of prefetches gained half as much, two runs ahead no more than one, and one task
// taking every KV head of a token (so each row is read whole) nothing.
constexpr int64_t kRunRows = 16;

// scores[j] = scale * q · key[j * stride + (0, hd)] for j < 4.
void Dot4(const float* q, const float* key, int64_t stride, int hd, float scale, float* scores) {
  __m256 acc[4];
#pragma GCC unroll 16
  for (int j = 0; j < 4; ++j) acc[j] = _mm256_setzero_ps();
  int d = 0;
  for (; d + 8 <= hd; d += 8) {
    const __m256 qv = _mm256_loadu_ps(q + d);
#pragma GCC unroll 16
    for (int j = 0; j < 4; ++j) {
      acc[j] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(key + j * stride + d), acc[j]);
    }
  }
  if (d < hd) {
    const __m256i mask = TailMask(hd - d);
    const __m256 qv = _mm256_maskload_ps(q + d, mask);
#pragma GCC unroll 16
    for (int j = 0; j < 4; ++j) {
      acc[j] = _mm256_fmadd_ps(qv, _mm256_maskload_ps(key + j * stride + d, mask), acc[j]);
    }
  }
  // Lane sums of the four accumulators, in order, in one __m128.
  const __m256 pairs =
      _mm256_hadd_ps(_mm256_hadd_ps(acc[0], acc[1]), _mm256_hadd_ps(acc[2], acc[3]));
  const __m128 sums = _mm_add_ps(_mm256_castps256_ps128(pairs), _mm256_extractf128_ps(pairs, 1));
  _mm_storeu_ps(scores, _mm_mul_ps(sums, _mm_set1_ps(scale)));
}

float Dot(const float* a, const float* b, int hd) {
  __m256 acc = _mm256_setzero_ps();
  int d = 0;
  for (; d + 8 <= hd; d += 8) {
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + d), _mm256_loadu_ps(b + d), acc);
  }
  if (d < hd) {
    const __m256i mask = TailMask(hd - d);
    acc = _mm256_fmadd_ps(_mm256_maskload_ps(a + d, mask), _mm256_maskload_ps(b + d, mask), acc);
  }
  return HorizontalSum(acc);
}

// scores[t] = exp(scores[t] - max); returns the sum. With a sink logit s (gpt-oss), max also
// covers s and the sum has exp(s - max) added.
float ExpInPlace(float* scores, int64_t len, const float* sink = nullptr) {
  __m256 vmax = _mm256_set1_ps(-INFINITY);
  int64_t t = 0;
  for (; t + 8 <= len; t += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(scores + t));
  float max_score = HorizontalMax(vmax);
  for (; t < len; ++t) max_score = std::max(max_score, scores[t]);
  if (sink != nullptr) max_score = std::max(max_score, *sink);

  const __m256 shift = _mm256_set1_ps(max_score);
  __m256 vsum = _mm256_setzero_ps();
  for (t = 0; t + 8 <= len; t += 8) {
    const __m256 e = Exp(_mm256_sub_ps(_mm256_loadu_ps(scores + t), shift));
    _mm256_storeu_ps(scores + t, e);
    vsum = _mm256_add_ps(vsum, e);
  }
  float sum = HorizontalSum(vsum);
  for (; t < len; ++t) {
    scores[t] = std::exp(scores[t] - max_score);
    sum += scores[t];
  }
  if (sink != nullptr) sum += std::exp(*sink - max_score);
  return sum;
}

// out[0, width) += Σ_t p[t] * values[t * stride + (0, width)], for 8(V-1) < width <= 8V.
// Two interleaved accumulator sets halve the FMA dependency chain.
template <int V>
void AccumulateValues(const float* p, int64_t len, const float* values, int64_t stride, int width,
                      float* out) {
  const __m256i mask = TailMask(width - 8 * (V - 1));
  __m256 acc[2][V];
#pragma GCC unroll 16
  for (int u = 0; u < V; ++u) {
    acc[0][u] = u + 1 < V ? _mm256_loadu_ps(out + 8 * u) : _mm256_maskload_ps(out + 8 * u, mask);
    acc[1][u] = _mm256_setzero_ps();
  }
  auto step = [&](int s, int64_t t) {
    const __m256 pt = _mm256_broadcast_ss(p + t);
    const float* v = values + t * stride;
#pragma GCC unroll 16
    for (int u = 0; u + 1 < V; ++u) {
      acc[s][u] = _mm256_fmadd_ps(pt, _mm256_loadu_ps(v + 8 * u), acc[s][u]);
    }
    acc[s][V - 1] = _mm256_fmadd_ps(pt, _mm256_maskload_ps(v + 8 * (V - 1), mask), acc[s][V - 1]);
  };
  int64_t t = 0;
  for (; t + 2 <= len; t += 2) {
    step(0, t);
    step(1, t + 1);
  }
  if (t < len) step(0, t);
#pragma GCC unroll 16
  for (int u = 0; u < V; ++u) {
    const __m256 r = _mm256_add_ps(acc[0][u], acc[1][u]);
    if (u + 1 < V) {
      _mm256_storeu_ps(out + 8 * u, r);
    } else {
      _mm256_maskstore_ps(out + 8 * u, mask, r);
    }
  }
}

using AccumulateFn = void (*)(const float*, int64_t, const float*, int64_t, int, float*);
// Indexed by the number of vectors, 1..4.
constexpr AccumulateFn kAccumulate[5] = {nullptr, AccumulateValues<1>, AccumulateValues<2>,
                                         AccumulateValues<3>, AccumulateValues<4>};

// out[0, hd) += Σ_t p[t] * values[t * stride + (0, hd)], 32 lanes of out at a time.
void AccumulateHead(const float* p, int64_t len, const float* values, int64_t stride, int hd,
                    float* out) {
  for (int d0 = 0; d0 < hd; d0 += 32) {
    const int width = std::min(32, hd - d0);
    kAccumulate[(width + 7) / 8](p, len, values + d0, stride, width, out + d0);
  }
}

// AttentionKernels::scores: four keys at a time while they sit in L1.
void Scores(const float* q, int heads, int hd, const float* keys, int64_t stride, int64_t rows,
            float scale, float* scores, int64_t ld) {
  const int64_t rows4 = rows / 4 * 4;
  for (int64_t j = 0; j < rows4; j += 4) {
    for (int h = 0; h < heads; ++h) {
      Dot4(q + h * hd, keys + j * stride, stride, hd, scale, scores + h * ld + j);
    }
  }
  for (int64_t j = rows4; j < rows; ++j) {
    for (int h = 0; h < heads; ++h) {
      scores[h * ld + j] = Dot(q + h * hd, keys + j * stride, hd) * scale;
    }
  }
}

// AttentionKernels::values.
void Values(const float* p, int64_t ld, int heads, int64_t rows, const float* values,
            int64_t stride, int hd, float* out) {
  for (int h = 0; h < heads; ++h) {
    AccumulateHead(p + h * ld, rows, values, stride, hd, out + h * hd);
  }
}

// The query heads of one KV head for one token: `heads` consecutive heads starting at q / out,
// hd apart. keys and values point at the group's column of the cache (rows `stride` apart);
// sequence position t sits in row table[t / block_size] * block_size + t % block_size.
struct Group {
  const float* q;
  const float* keys;
  const float* values;
  float* out;
  int heads;
  int hd;
  int64_t stride;
  int64_t first;  // positions attended: first .. first + len - 1
  int64_t len;
  float scale;
  float softcap;       // 0: none
  const float* sinks;  // [heads] of the group, or null
  const int32_t* table;
  int64_t block_size;

  // Rows of the block holding positions [t0, t0 + rows), rows = min(block_size, len - t0).
  int64_t BlockOffset(int64_t t0) const {
    return (int64_t{table[t0 / block_size]} * block_size + t0 % block_size) * stride;
  }
};

// Calls fn(t0, rows, offset) for each run of consecutive positions stored contiguously (one
// block, or the whole sequence in a contiguous cache), at most `max_rows` at a time.
template <typename Fn>
void ForEachRun(const Group& g, int64_t max_rows, Fn&& fn) {
  const int64_t end = g.first + g.len;
  for (int64_t t0 = g.first; t0 < end;) {
    const int64_t in_block = g.block_size - t0 % g.block_size;
    const int64_t rows = std::min({in_block, end - t0, max_rows});
    fn(t0, rows, g.BlockOffset(t0));
    t0 += rows;
  }
}

// Prefetches a group's columns (keys or values: `base` is the group's column of the cache)
// position by position, up to a position the caller names; each position's row once.
class RunPrefetcher {
 public:
  RunPrefetcher(const Group& g, const float* base) : g_(g), base_(base), next_(g.first) {}

  // Asks for the rows of positions [next, upto) (clipped to the group's positions) into L1.
  void Upto(int64_t upto) {
    upto = std::min(upto, g_.first + g_.len);
    const int64_t bytes = int64_t{g_.hd} * static_cast<int64_t>(sizeof(float));
    for (; next_ < upto; ++next_) {
      const char* row = reinterpret_cast<const char*>(base_ + g_.BlockOffset(next_));
      const char* end = row + bytes;
      const char* line = row - reinterpret_cast<uintptr_t>(row) % 64;
      for (; line < end; line += 64) _mm_prefetch(line, _MM_HINT_T0);
    }
  }

 private:
  const Group& g_;
  const float* base_;
  int64_t next_;  // the first position not asked for yet
};

void AttendGroup(const Group& g, const AttentionKernels& kernels, std::vector<float>& scores) {
  scores.resize(static_cast<size_t>(g.heads * g.len));
  RunPrefetcher keys(g, g.keys);
  // Runs of kRunRows from g.first keep the four-key groups of the scores kernels where they were
  // with one run per block (runs start at multiples of four from g.first or at a block), so the
  // bits do not depend on the run length.
  ForEachRun(g, kRunRows, [&](int64_t t0, int64_t rows, int64_t offset) {
    keys.Upto(t0 + rows + kRunRows);
    kernels.scores(g.q, g.heads, g.hd, g.keys + offset, g.stride, rows, g.scale,
                   scores.data() + t0 - g.first, g.len);
  });
  if (g.softcap > 0.0f) {
    for (float& s : scores) s = g.softcap * std::tanh(s / g.softcap);
  }
  std::vector<float> inv_sums(static_cast<size_t>(g.heads));
  for (int h = 0; h < g.heads; ++h) {
    inv_sums[h] = 1.0f / ExpInPlace(scores.data() + h * g.len, g.len,
                                    g.sinks == nullptr ? nullptr : g.sinks + h);
    std::fill_n(g.out + h * g.hd, g.hd, 0.0f);
  }
  // The AVX2 value sums pair a run's rows (two accumulator sets), so their bits follow the runs:
  // the token's positions and the block size decide them, never the batch.
  RunPrefetcher values(g, g.values);
  ForEachRun(g, kRunRows, [&](int64_t t0, int64_t rows, int64_t offset) {
    values.Upto(t0 + rows + kRunRows);
    kernels.values(scores.data() + t0 - g.first, g.len, g.heads, rows, g.values + offset, g.stride,
                   g.hd, g.out);
  });
  for (int h = 0; h < g.heads; ++h) {
    float* out = g.out + h * g.hd;
    for (int d = 0; d < g.hd; ++d) out[d] *= inv_sums[h];
  }
}

}  // namespace

void CausalAttention(const AttentionArgs& args, ThreadPool* pool) {
  CausalAttentionWith(args, pool, AttentionKernels{Scores, Values});
}

void CausalAttentionWith(const AttentionArgs& args, ThreadPool* pool,
                         const AttentionKernels& kernels) {
  const AttentionShape& s = args.shape;
  const int group_size = s.num_heads / s.num_kv_heads;
  const int64_t q_width = int64_t{s.num_heads} * s.head_dim;
  const int64_t kv_width = int64_t{s.num_kv_heads} * s.head_dim;
  ForEachStrided(pool, args.m * s.num_kv_heads, [&](int64_t item) {
    const int64_t token = item / s.num_kv_heads;
    const int64_t kv_head = item % s.num_kv_heads;
    const int64_t q_offset = token * q_width + kv_head * group_size * s.head_dim;
    const int64_t first = s.FirstPosition(args.positions[token]);
    const Group group{args.q + q_offset,
                      args.k_cache + kv_head * s.head_dim,
                      args.v_cache + kv_head * s.head_dim,
                      args.out + q_offset,
                      group_size,
                      s.head_dim,
                      kv_width,
                      first,
                      int64_t{args.positions[token]} + 1 - first,
                      s.scale,
                      s.softcap,
                      s.sinks == nullptr ? nullptr : s.sinks + kv_head * group_size,
                      args.TableOf(token),
                      args.block_size};
    thread_local std::vector<float> scores;
    AttendGroup(group, kernels, scores);
  });
}

}  // namespace uc::kernels::avx2

#endif  // defined(__x86_64__)
