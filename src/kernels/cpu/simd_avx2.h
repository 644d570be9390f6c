// File: simd_avx2.h
// -----------------------------------------------------------------------------
// AVX2+FMA+F16C building blocks shared by the *_avx2.cc kernels: horizontal sums, masked tails,
// a vector exp, and one decoder per weight dtype that turns 32 stored elements into four
// __m256 of F32 in registers (so weights are never expanded in memory). The decoders of Q5_0,
// Q5_1, IQ4_NL, MXFP4 and the K-quants are in quant_decoders_avx2.h.
//
// Include only from files listed as AVX2_SRCS (compiled with -mavx2 -mfma -mf16c); everything
// here is inline and used only after internal::UseAvx2() said yes.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/quant_decoders_avx2.h"
#include "kernels/dispatch.h"
#include "tensor/dtype.h"

namespace uc::kernels::avx2 {

inline float HorizontalSum(__m256 v) {
  const __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 pairs = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  return _mm_cvtss_f32(_mm_add_ss(pairs, _mm_movehdup_ps(pairs)));
}

inline float HorizontalMax(__m256 v) {
  const __m128 lo = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 pairs = _mm_max_ps(lo, _mm_movehl_ps(lo, lo));
  return _mm_cvtss_f32(_mm_max_ss(pairs, _mm_movehdup_ps(pairs)));
}

// Lane mask with the first `count` lanes set, for _mm256_maskload_ps / maskstore.
// REQUIRES: 0 <= count <= 8.
inline __m256i TailMask(int64_t count) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count)), lanes);
}

inline float HalfToFloat(uint16_t h) { return _cvtsh_ss(h); }

// Prefetches the line holding p into L1 (T0) or L2 (T1). Through asm volatile, not
// _mm_prefetch: GCC treats __builtin_prefetch as free of side effects, so a function made only of
// prefetches (a helper, a lambda) can be judged pure and every call to it dropped, silently (it
// happened to the integer MatMul's tile prefetch, and cost decode half its speed).
inline void PrefetchT0(const void* p) {
  asm volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(p)));
}
inline void PrefetchT1(const void* p) {
  asm volatile("prefetcht1 %0" : : "m"(*static_cast<const char*>(p)));
}

// e^x for each lane, |relative error| < 2 ulp for x in [-87.3, 88]. Below -87.3 (where e^x
// is under FLT_MIN) the result is 0; above 88 it saturates at e^88 (~1.65e38) instead of
// overflowing. NaN propagates. Softmax (arguments <= 0) and silu do not notice the limits.
inline __m256 Exp(__m256 x) {
  const __m256 lowest = _mm256_set1_ps(-87.33654f);
  const __m256 not_underflow = _mm256_cmp_ps(x, lowest, _CMP_NLT_UQ);
  // max/min return their second operand for NaN, so NaN passes through the clamp.
  x = _mm256_min_ps(_mm256_set1_ps(88.0f), _mm256_max_ps(lowest, x));
  // x = n ln2 + r, |r| <= ln2 / 2; ln2 is split in two so that n * 0.693359375 is exact.
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  // Minimax polynomial for (e^r - 1 - r) / r² (Cephes expf coefficients).
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  const __m256 e = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
  // 2^n built in the exponent field; the clamp keeps n in [-126, 127], a normal float.
  const __m256i biased = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
  const __m256 result = _mm256_mul_ps(e, _mm256_castsi256_ps(_mm256_slli_epi32(biased, 23)));
  return _mm256_and_ps(result, not_underflow);
}

inline __m256 LoadBf16(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

inline __m256 LoadF16(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Weight decoders. Load32(row, i, w) sets w[0..3] to elements [i, i + 32) of the row, in
// natural order unless kQuadSwapped (see UnpackNibblesQuadSwapped);
// REQUIRES: i % 32 == 0 and i + 32 <= row length. At(row, i) returns one element and exists
// only for plain dtypes (quantized rows are whole blocks, so they never have a tail).
// Storage comes in units of kBlockElems elements taking kBlockBytes bytes (32 for plain dtypes).
struct DecodeF32 {
  static constexpr int kBlockElems = 32;
  static constexpr int kBlockBytes = 128;
  static constexpr bool kQuantized = false;
  static constexpr bool kQuadSwapped = false;
  static void Load32(const std::byte* row, int64_t i, __m256* w) {
    const float* p = reinterpret_cast<const float*>(row) + i;
#pragma GCC unroll 16
    for (int v = 0; v < 4; ++v) w[v] = _mm256_loadu_ps(p + 8 * v);
  }
  static float At(const std::byte* row, int64_t i) {
    return reinterpret_cast<const float*>(row)[i];
  }
};

struct DecodeF16 {
  static constexpr int kBlockElems = 32;
  static constexpr int kBlockBytes = 64;
  static constexpr bool kQuantized = false;
  static constexpr bool kQuadSwapped = false;
  static void Load32(const std::byte* row, int64_t i, __m256* w) {
    const uint16_t* p = reinterpret_cast<const uint16_t*>(row) + i;
#pragma GCC unroll 16
    for (int v = 0; v < 4; ++v) w[v] = LoadF16(p + 8 * v);
  }
  static float At(const std::byte* row, int64_t i) {
    return HalfToFloat(reinterpret_cast<const uint16_t*>(row)[i]);
  }
};

struct DecodeBf16 {
  static constexpr int kBlockElems = 32;
  static constexpr int kBlockBytes = 64;
  static constexpr bool kQuantized = false;
  static constexpr bool kQuadSwapped = false;
  static void Load32(const std::byte* row, int64_t i, __m256* w) {
    const uint16_t* p = reinterpret_cast<const uint16_t*>(row) + i;
#pragma GCC unroll 16
    for (int v = 0; v < 4; ++v) w[v] = LoadBf16(p + 8 * v);
  }
  static float At(const std::byte* row, int64_t i) {
    return Bf16ToF32(reinterpret_cast<const uint16_t*>(row)[i]);
  }
};

struct DecodeQ8_0 {
  static constexpr int kBlockElems = 32;
  static constexpr int kBlockBytes = 34;
  static constexpr bool kQuantized = true;
  static constexpr bool kQuadSwapped = false;
  static void Load32(const std::byte* row, int64_t i, __m256* w) {
    const BlockQ8_0* b = reinterpret_cast<const BlockQ8_0*>(row) + i / 32;
    const __m256 d = _mm256_set1_ps(HalfToFloat(b->d));
#pragma GCC unroll 16
    for (int v = 0; v < 4; ++v) {
      const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b->qs + 8 * v));
      w[v] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d);
    }
  }
};

// Splits 16 bytes of packed nibbles into elements 0..31 as F32 (low nibbles first).
inline void UnpackNibbles(const uint8_t* qs, __m256* q) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i low_mask = _mm_set1_epi8(0x0f);
  const __m128i lo = _mm_and_si128(bytes, low_mask);
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), low_mask);
  q[0] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo));
  q[1] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8)));
  q[2] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi));
  q[3] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8)));
}

// The same 32 elements in "quad-swapped" order: within each 16, the quads of elements 0-3, 8-11,
// 4-7, 12-15. Only in-lane unpacks, about half the shuffle work of the natural order, which
// makes Q4 decode cheaper than the memory it streams; callers permute x to match
// (SwapQuads).
inline void UnpackNibblesQuadSwapped(const uint8_t* qs, __m256* q) {
  const __m256i bytes = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
  const __m256i lo = _mm256_and_si256(bytes, _mm256_set1_epi16(0x0f));
  const __m256i hi = _mm256_srli_epi16(bytes, 4);
  const __m256i zero = _mm256_setzero_si256();
  q[0] = _mm256_cvtepi32_ps(_mm256_unpacklo_epi16(lo, zero));
  q[1] = _mm256_cvtepi32_ps(_mm256_unpackhi_epi16(lo, zero));
  q[2] = _mm256_cvtepi32_ps(_mm256_unpacklo_epi16(hi, zero));
  q[3] = _mm256_cvtepi32_ps(_mm256_unpackhi_epi16(hi, zero));
}

template <bool kSwapped>
void UnpackNibblesInOrder(const uint8_t* qs, __m256* q) {
  if constexpr (kSwapped) {
    UnpackNibblesQuadSwapped(qs, q);
  } else {
    UnpackNibbles(qs, q);
  }
}

template <bool kSwapped>
struct DecodeQ4_0Order {
  static constexpr int kBlockElems = 32;
  static constexpr int kBlockBytes = 18;
  static constexpr bool kQuantized = true;
  static constexpr bool kQuadSwapped = kSwapped;
  static void Load32(const std::byte* row, int64_t i, __m256* w) {
    const BlockQ4_0* b = reinterpret_cast<const BlockQ4_0*>(row) + i / 32;
    const float d = HalfToFloat(b->d);
    const __m256 scale = _mm256_set1_ps(d);
    const __m256 offset = _mm256_set1_ps(-8.0f * d);  // d * (q - 8) == d * q - 8 d, one rounding
    UnpackNibblesInOrder<kSwapped>(b->qs, w);
#pragma GCC unroll 16
    for (int v = 0; v < 4; ++v) w[v] = _mm256_fmadd_ps(w[v], scale, offset);
  }
};
using DecodeQ4_0 = DecodeQ4_0Order<false>;

template <bool kSwapped>
struct DecodeQ4_1Order {
  static constexpr int kBlockElems = 32;
  static constexpr int kBlockBytes = 20;
  static constexpr bool kQuantized = true;
  static constexpr bool kQuadSwapped = kSwapped;
  static void Load32(const std::byte* row, int64_t i, __m256* w) {
    const BlockQ4_1* b = reinterpret_cast<const BlockQ4_1*>(row) + i / 32;
    const __m256 scale = _mm256_set1_ps(HalfToFloat(b->d));
    const __m256 min = _mm256_set1_ps(HalfToFloat(b->m));
    UnpackNibblesInOrder<kSwapped>(b->qs, w);
#pragma GCC unroll 16
    for (int v = 0; v < 4; ++v) w[v] = _mm256_fmadd_ps(w[v], scale, min);
  }
};
using DecodeQ4_1 = DecodeQ4_1Order<false>;

// Requests the weight bytes `ahead` (PrefetchBytes<D>()) past chunk i (elements [i, i + 32)) of
// a row that is being streamed. With only the hardware prefetcher, one core leaves ~5-10% of the
// read bandwidth unused (measured on Zen 3); prefetches past the row's end fetch the next row.
// Float rows stream two to four times as many bytes per FMA as quantized ones and need a longer
// distance: 2 KiB read 10-15% faster than 1 KiB on F16 and BF16 decode on a Xeon with AVX-512,
// and on an AMD EPYC (Zen 5) 6 KiB 1.3x faster than 2 KiB at one thread and 1.13-1.16x at two
// (4 and 8 KiB in between; kernels_benchmark BM_MatMulDecode, medians of 5 interleaved rounds),
// while the quantized decoders, bound by their unpacking, showed no gain.
template <typename D>
inline int64_t PrefetchBytes() {
  if constexpr (D::kQuantized) {
    return 1024;
  } else {
    static const int64_t bytes = internal::CpuIsAmd() ? 6144 : 2048;
    return bytes;
  }
}
template <typename D>
inline void PrefetchAhead(const std::byte* row, int64_t i, int64_t ahead) {
  // The bytes of elements [i, i + 32): a share of a super-block for the K-quants.
  constexpr int kChunkBytes = (D::kBlockBytes * 32 + D::kBlockElems - 1) / D::kBlockElems;
  const int64_t offset =
      i / D::kBlockElems * D::kBlockBytes + i % D::kBlockElems * D::kBlockBytes / D::kBlockElems;
  const char* p = reinterpret_cast<const char*>(row) + offset + ahead;
#pragma GCC unroll 16
  for (int byte = 0; byte < kChunkBytes; byte += 64) PrefetchT0(p + byte);
}

// Calls fn(Decoder{}) with the decoder for `dtype`; returns false for a non-weight dtype.
template <typename Fn>
bool VisitDecoder(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kF32:
      fn(DecodeF32{});
      return true;
    case DType::kF16:
      fn(DecodeF16{});
      return true;
    case DType::kBF16:
      fn(DecodeBf16{});
      return true;
    case DType::kQ8_0:
      fn(DecodeQ8_0{});
      return true;
    case DType::kQ4_0:
      fn(DecodeQ4_0{});
      return true;
    case DType::kQ4_1:
      fn(DecodeQ4_1{});
      return true;
    case DType::kQ5_0:
      fn(DecodeQ5_0{});
      return true;
    case DType::kQ5_1:
      fn(DecodeQ5_1{});
      return true;
    case DType::kIQ4_NL:
      fn(DecodeIQ4_NL{});
      return true;
    case DType::kMXFP4:
      fn(DecodeMXFP4{});
      return true;
    case DType::kQ2_K:
      fn(DecodeQ2_K{});
      return true;
    case DType::kQ3_K:
      fn(DecodeQ3_K{});
      return true;
    case DType::kQ4_K:
      fn(DecodeQ4_K{});
      return true;
    case DType::kQ5_K:
      fn(DecodeQ5_K{});
      return true;
    case DType::kQ6_K:
      fn(DecodeQ6_K{});
      return true;
    case DType::kQ8_K:
      fn(DecodeQ8_K{});
      return true;
    case DType::kI32:
      break;
  }
  return false;
}

// Converts elements [0, n) of a stored row to F32 in dst.
template <typename D>
void DecodeRow(const std::byte* row, int64_t n, float* dst) {
  static_assert(!D::kQuadSwapped, "DecodeRow writes elements in natural order");
  const int64_t n32 = n / 32 * 32;
  for (int64_t i = 0; i < n32; i += 32) {
    __m256 w[4];
    D::Load32(row, i, w);
#pragma GCC unroll 16
    for (int v = 0; v < 4; ++v) _mm256_storeu_ps(dst + i + 8 * v, w[v]);
  }
  if constexpr (!D::kQuantized) {
    for (int64_t i = n32; i < n; ++i) dst[i] = D::At(row, i);
  }
}

}  // namespace uc::kernels::avx2
