// AVX-512 causal attention: avx2::CausalAttentionWith's passes (one task per token and KV head,
// scores, softmax, values) with 512-bit inner loops. Both loops take up to four query heads of
// the group at once, so each key or value vector is loaded once for all of them:
//   scores: four keys x up to four heads = sixteen accumulators over head_dim, then one
//     reduction for all sixteen sums (Sum16, in Sum4's order; fewer heads: Sum4 per head);
//   values: up to four heads x 64 lanes of head_dim = sixteen accumulators over the keys.
// A query's scores and outputs are computed the same way whatever the call holds besides (the
// other keys of its run, the other heads), so rows stay batch invariant. The bits differ from
// the AVX2 loops' (other lane sums), as an AVX2 row's differ from a portable one's.
//
// Everything here but CausalAttention is in an anonymous namespace, for the reason
// matmul_int8_avx512.cc gives.
#if defined(__x86_64__)

// clang-format off
// First, before <immintrin.h> (see the header).
#include "kernels/cpu/avx512_gcc_workaround.h"  // NOLINT(build/include_order)
#include <immintrin.h>
// clang-format on

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/cpu_kernels.h"

namespace uc::kernels::avx512 {
namespace {

constexpr int kHeadsPerPass = 4;

__mmask16 LaneMask(int count) {
  return static_cast<__mmask16>(count >= 16 ? 0xFFFF : count <= 0 ? 0 : (1u << count) - 1);
}

// s[0..4) = the sums of acc[0..4), in one fixed tree (halves, then pairs).
void Sum4(const __m512* acc, float scale, float* s) {
  __m256 r[4];
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    r[j] = _mm256_add_ps(_mm512_castps512_ps256(acc[j]),
                         _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[j]), 1)));
  }
  const __m256 pairs = _mm256_hadd_ps(_mm256_hadd_ps(r[0], r[1]), _mm256_hadd_ps(r[2], r[3]));
  const __m128 sums = _mm_add_ps(_mm256_castps256_ps128(pairs), _mm256_extractf128_ps(pairs, 1));
  _mm_storeu_ps(s, _mm_mul_ps(sums, _mm_set1_ps(scale)));
}

// Lane i of the result = the sum of v[kTreeSlot[i]]'s sixteen lanes, added in Sum4's order
// (lanes l + (l + 8), then neighbours twice, then the two 128-bit halves), so the scores have the
// same bits either way; sixteen sums take 45 shuffles and adds here against 88 in four Sum4.
// Levels: 512-bit halves, pairs within 128-bit lanes (twice), then 128-bit lanes 0 + 1, 2 + 3.
constexpr int kTreeSlot[16] = {0, 4, 2, 6, 8, 12, 10, 14, 1, 5, 3, 7, 9, 13, 11, 15};

// 128-bit lanes [a0 + a2, a1 + a3, b0 + b2, b1 + b3]: elements l + (l + 8) of a, then of b.
__m512 AddHalves(__m512 a, __m512 b) {
  return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                       _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
}

// Per 128-bit lane: [a.0 + a.1, a.2 + a.3, b.0 + b.1, b.2 + b.3].
__m512 AddNeighbours(__m512 a, __m512 b) {
  return _mm512_add_ps(_mm512_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
}

__m512 Sum16(const __m512* v) {
  __m512 t[8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) t[i] = AddHalves(v[i], v[i + 8]);
  __m512 u[4];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) u[i] = AddNeighbours(t[i], t[i + 4]);
  const __m512 w0 = AddNeighbours(u[0], u[2]);
  const __m512 w1 = AddNeighbours(u[1], u[3]);
  // 128-bit lanes [w0.0 + w0.1, w0.2 + w0.3, w1.0 + w1.1, w1.2 + w1.3].
  return _mm512_add_ps(_mm512_shuffle_f32x4(w0, w1, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(w0, w1, _MM_SHUFFLE(3, 1, 3, 1)));
}

// scores[h * ld + j] for H heads and keys j in [j0, j0 + 4) (rows of four keys), or one key at a
// time (kKeys = 1, the sums by _mm512_reduce_add_ps). Four heads of four keys reduce together
// (Sum16); fewer heads by Sum4 each.
template <int H, int kKeys>
void ScoreBlock(const float* q, int hd, const float* keys, int64_t stride, float scale,
                float* scores, int64_t ld) {
  __m512 acc[H][kKeys];
#pragma GCC unroll 16
  for (int h = 0; h < H; ++h) {
#pragma GCC unroll 4
    for (int j = 0; j < kKeys; ++j) acc[h][j] = _mm512_setzero_ps();
  }
  for (int d = 0; d < hd; d += 16) {
    const __mmask16 mask = LaneMask(hd - d);
    __m512 k[kKeys];
#pragma GCC unroll 4
    for (int j = 0; j < kKeys; ++j) k[j] = _mm512_maskz_loadu_ps(mask, keys + j * stride + d);
#pragma GCC unroll 16
    for (int h = 0; h < H; ++h) {
      const __m512 qv = _mm512_maskz_loadu_ps(mask, q + h * hd + d);
#pragma GCC unroll 4
      for (int j = 0; j < kKeys; ++j) acc[h][j] = _mm512_fmadd_ps(qv, k[j], acc[h][j]);
    }
  }
  if constexpr (H == 4 && kKeys == 4) {
    __m512 slots[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) slots[kTreeSlot[i]] = acc[i / 4][i % 4];
    const __m512 sums = _mm512_mul_ps(Sum16(slots), _mm512_set1_ps(scale));
    _mm_storeu_ps(scores, _mm512_castps512_ps128(sums));
    _mm_storeu_ps(scores + ld, _mm512_extractf32x4_ps(sums, 1));
    _mm_storeu_ps(scores + 2 * ld, _mm512_extractf32x4_ps(sums, 2));
    _mm_storeu_ps(scores + 3 * ld, _mm512_extractf32x4_ps(sums, 3));
    return;
  }
#pragma GCC unroll 16
  for (int h = 0; h < H; ++h) {
    if constexpr (kKeys == 4) {
      Sum4(acc[h], scale, scores + h * ld);
    } else {
      scores[h * ld] = _mm512_reduce_add_ps(acc[h][0]) * scale;
    }
  }
}

template <int H>
void ScoresFor(const float* q, int hd, const float* keys, int64_t stride, int64_t rows, float scale,
               float* scores, int64_t ld) {
  int64_t j = 0;
  for (; j + 4 <= rows; j += 4) {
    ScoreBlock<H, 4>(q, hd, keys + j * stride, stride, scale, scores + j, ld);
  }
  for (; j < rows; ++j) ScoreBlock<H, 1>(q, hd, keys + j * stride, stride, scale, scores + j, ld);
}

using ScoresFn = void (*)(const float*, int, const float*, int64_t, int64_t, float, float*,
                          int64_t);
constexpr ScoresFn kScores[kHeadsPerPass + 1] = {nullptr, ScoresFor<1>, ScoresFor<2>, ScoresFor<3>,
                                                 ScoresFor<4>};

void Scores(const float* q, int heads, int hd, const float* keys, int64_t stride, int64_t rows,
            float scale, float* scores, int64_t ld) {
  for (int h0 = 0; h0 < heads; h0 += kHeadsPerPass) {
    const int h = std::min(kHeadsPerPass, heads - h0);
    kScores[h](q + h0 * hd, hd, keys, stride, rows, scale, scores + h0 * ld, ld);
  }
}

// out_h[d0, d0 + 16 V) += Σ_j p[h * ld + j] * value_j[d0, ...) for h < H, lanes past hd masked.
template <int H, int V>
void ValueBlock(const float* p, int64_t ld, int64_t rows, const float* values, int64_t stride,
                int hd, int d0, float* out) {
  __mmask16 mask[V];
#pragma GCC unroll 4
  for (int u = 0; u < V; ++u) mask[u] = LaneMask(hd - d0 - 16 * u);
  __m512 acc[H][V];
#pragma GCC unroll 16
  for (int h = 0; h < H; ++h) {
#pragma GCC unroll 4
    for (int u = 0; u < V; ++u)
      acc[h][u] = _mm512_maskz_loadu_ps(mask[u], out + h * hd + d0 + 16 * u);
  }
  for (int64_t j = 0; j < rows; ++j) {
    const float* v = values + j * stride + d0;
    __m512 vv[V];
#pragma GCC unroll 4
    for (int u = 0; u < V; ++u) vv[u] = _mm512_maskz_loadu_ps(mask[u], v + 16 * u);
#pragma GCC unroll 16
    for (int h = 0; h < H; ++h) {
      const __m512 pj = _mm512_set1_ps(p[h * ld + j]);
#pragma GCC unroll 4
      for (int u = 0; u < V; ++u) acc[h][u] = _mm512_fmadd_ps(pj, vv[u], acc[h][u]);
    }
  }
#pragma GCC unroll 16
  for (int h = 0; h < H; ++h) {
#pragma GCC unroll 4
    for (int u = 0; u < V; ++u)
      _mm512_mask_storeu_ps(out + h * hd + d0 + 16 * u, mask[u], acc[h][u]);
  }
}

template <int H>
void ValuesFor(const float* p, int64_t ld, int64_t rows, const float* values, int64_t stride,
               int hd, float* out) {
  for (int d0 = 0; d0 < hd; d0 += 64) {
    switch ((std::min(64, hd - d0) + 15) / 16) {
      case 1:
        ValueBlock<H, 1>(p, ld, rows, values, stride, hd, d0, out);
        break;
      case 2:
        ValueBlock<H, 2>(p, ld, rows, values, stride, hd, d0, out);
        break;
      case 3:
        ValueBlock<H, 3>(p, ld, rows, values, stride, hd, d0, out);
        break;
      default:
        ValueBlock<H, 4>(p, ld, rows, values, stride, hd, d0, out);
        break;
    }
  }
}

using ValuesFn = void (*)(const float*, int64_t, int64_t, const float*, int64_t, int, float*);
constexpr ValuesFn kValues[kHeadsPerPass + 1] = {nullptr, ValuesFor<1>, ValuesFor<2>, ValuesFor<3>,
                                                 ValuesFor<4>};

void Values(const float* p, int64_t ld, int heads, int64_t rows, const float* values,
            int64_t stride, int hd, float* out) {
  for (int h0 = 0; h0 < heads; h0 += kHeadsPerPass) {
    const int h = std::min(kHeadsPerPass, heads - h0);
    kValues[h](p + h0 * ld, ld, rows, values, stride, hd, out + h0 * hd);
  }
}

}  // namespace

void CausalAttention(const AttentionArgs& args, ThreadPool* pool) {
  avx2::CausalAttentionWith(args, pool, avx2::AttentionKernels{Scores, Values});
}

}  // namespace uc::kernels::avx512

#endif  // defined(__x86_64__)
