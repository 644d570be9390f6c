// AVX2 activation quantizers of the integer MatMul, bit-identical to the scalar ones in
// tensor/quants.h: the same F32 max (exact in any order), the same scalar division for the
// scale, the same F32 products, and the same rounding: roundf's ties-away-from-zero for Q8_0 and
// Q8_1 as truncate(v + copysign(0.49999997, v)), which equals roundf for every float, and
// ties-to-even for Q8_K as _mm256_cvtps_epi32 (under the default rounding mode, as ggml's
// nearest_int).
#if defined(__x86_64__)

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/simd_avx2.h"
#include "tensor/quants.h"

namespace uc::kernels::avx2 {
namespace {

__m256 Abs(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

// max |x| over x[0, 8 * count).
float AbsMax(const float* x, int count) {
  __m256 m = _mm256_setzero_ps();
  for (int v = 0; v < count; ++v) m = _mm256_max_ps(m, Abs(_mm256_loadu_ps(x + 8 * v)));
  return HorizontalMax(m);
}

// roundf(v) for each lane: v + copysign(largest float below 0.5, v), truncated. The addition
// rounds up exactly when v's fraction is at least one half.
__m256i RoundHalfAway(__m256 v) {
  const __m256 below_half = _mm256_castsi256_ps(_mm256_set1_epi32(0x3effffff));
  const __m256 sign = _mm256_and_ps(v, _mm256_set1_ps(-0.0f));
  return _mm256_cvttps_epi32(_mm256_add_ps(v, _mm256_or_ps(below_half, sign)));
}

// Four vectors of int32 in [-128, 127] to 32 int8 in order.
__m256i PackToBytes(const __m256i* q) {
  const __m256i lo = _mm256_packs_epi32(q[0], q[1]);  // per 128-bit lane: q0, q1 halves
  const __m256i hi = _mm256_packs_epi32(q[2], q[3]);
  const __m256i bytes = _mm256_packs_epi16(lo, hi);  // dwords q0a q1a q2a q3a | q0b q1b ...
  return _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// Quantizes 32 floats with the Q8_0 / Q8_1 rule; returns the F32 d and the sum of the quants.
float Quantize32(const float* x, int8_t* qs, int* sum) {
  const float amax = AbsMax(x, 4);
  const float d = amax < kActivationTinyMax ? 0.0f : amax / 127.0f;
  const __m256 id = _mm256_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
  __m256i q[4];
#pragma GCC unroll 4
  for (int v = 0; v < 4; ++v) q[v] = RoundHalfAway(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * v), id));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs), PackToBytes(q));
  const __m256i total =
      _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(total), _mm256_extracti128_si256(total, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  *sum = _mm_cvtsi128_si32(s);
  return d;
}

void QuantizeQ8_0(const float* x, int64_t num_blocks, BlockQ8_0* dst) {
  for (int64_t b = 0; b < num_blocks; ++b) {
    int sum;
    dst[b].d = F32ToF16(Quantize32(x + 32 * b, dst[b].qs, &sum));
  }
}

void QuantizeQ8_1(const float* x, int64_t num_blocks, BlockQ8_1* dst) {
  for (int64_t b = 0; b < num_blocks; ++b) {
    int sum;
    const float d = Quantize32(x + 32 * b, dst[b].qs, &sum);
    dst[b].d = F32ToF16(d);
    dst[b].s = F32ToF16(static_cast<float>(sum) * d);
  }
}

void QuantizeQ8_K(const float* x, int64_t num_blocks, BlockQ8_K* dst) {
  for (int64_t b = 0; b < num_blocks; ++b, x += kQK_K) {
    BlockQ8_K& y = dst[b];
    const float amax = AbsMax(x, kQK_K / 8);
    if (amax < kActivationTinyMax) {
      std::memset(&y, 0, sizeof(y));
      continue;
    }
    // The scalar loop keeps the first element that reaches amax.
    int first = 0;
    for (int v = 0; v < kQK_K / 8; ++v) {
      const __m256 hit =
          _mm256_cmp_ps(Abs(_mm256_loadu_ps(x + 8 * v)), _mm256_set1_ps(amax), _CMP_EQ_OQ);
      const int mask = _mm256_movemask_ps(hit);
      if (mask != 0) {
        first = 8 * v + __builtin_ctz(static_cast<unsigned>(mask));
        break;
      }
    }
    const float iscale = -127.0f / x[first];
    const __m256 scale = _mm256_set1_ps(iscale);
    for (int c = 0; c < kQK_K / 32; ++c) {
      __m256i q[4];
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) {
        const __m256 scaled = _mm256_mul_ps(_mm256_loadu_ps(x + 32 * c + 8 * v), scale);
        q[v] = _mm256_min_epi32(_mm256_cvtps_epi32(scaled), _mm256_set1_epi32(127));
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y.qs + 32 * c), PackToBytes(q));
    }
    for (int i = 0; i < kQK_K / 16; ++i) {
      // Sum of 16 int8: widen to int16 and add pairs twice.
      const __m256i wide =
          _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(y.qs + 16 * i)));
      const __m256i pairs = _mm256_madd_epi16(wide, _mm256_set1_epi16(1));
      __m128i s = _mm_add_epi32(_mm256_castsi256_si128(pairs), _mm256_extracti128_si256(pairs, 1));
      s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
      s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
      y.bsums[i] = static_cast<int16_t>(_mm_cvtsi128_si32(s));
    }
    y.d = 1.0f / iscale;
  }
}

}  // namespace

void QuantizeActivations(ActivationFormat format, const float* x, int64_t k, std::byte* dst) {
  switch (format) {
    case ActivationFormat::kQ8_0:
      QuantizeQ8_0(x, k / 32, reinterpret_cast<BlockQ8_0*>(dst));
      return;
    case ActivationFormat::kQ8_1:
      QuantizeQ8_1(x, k / 32, reinterpret_cast<BlockQ8_1*>(dst));
      return;
    case ActivationFormat::kQ8_K:
      QuantizeQ8_K(x, k / kQK_K, reinterpret_cast<BlockQ8_K*>(dst));
      return;
  }
}

}  // namespace uc::kernels::avx2

#endif  // defined(__x86_64__)
