// File: quant_decoders_avx2.h
// -----------------------------------------------------------------------------
// AVX2 weight decoders for the ggml block types Q5_0, Q5_1, IQ4_NL, MXFP4 and the K-quants (Q2_K
// ... Q6_K, Q8_K); layouts in tensor/dtype.h. Same interface as the decoders in simd_avx2.h (which
// includes this file and lists them in VisitDecoder): Load32(row, i, w) sets w[0..3] to elements
// [i, i + 32) of the row in natural order. For K-quants that is one 32-element group of a
// 256-element super-block; its scales are unpacked on each call.
//
// Results are bit-identical to the scalar DequantizeRow (tensor/quants.h) and so to gguf-py:
// integer quants convert exactly, each scale is the same F32 product, and every element is one
// _mm256_mul_ps plus, for the types with a min, one _mm256_sub_ps / _mm256_add_ps, as in the
// reference. (With f16 d and small integer scales and quants most of these products are exact
// anyway, so their order hardly matters; the code does not rely on that.)
//
// Load32 is forced inline: left to itself GCC calls the larger ones out of line, and the call
// (spilled accumulators, vzeroupper) then costs more than the decoding.
//
// Include only from AVX2_SRCS (see simd_avx2.h).
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "tensor/dtype.h"

namespace uc::kernels::avx2 {
namespace quant_detail {

inline float F16(uint16_t h) { return _cvtsh_ss(h); }

inline __m256i Load256(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// (bytes >> shift) & mask in every byte, shift < 8.
inline __m256i ShiftMask(__m256i bytes, int shift, uint8_t mask) {
  return _mm256_and_si256(_mm256_srl_epi16(bytes, _mm_cvtsi32_si128(shift)),
                          _mm256_set1_epi8(static_cast<char>(mask)));
}

// 32 unsigned / signed bytes to four vectors of F32, in order.
inline void U8ToF32(__m256i bytes, __m256* out) {
  const __m128i lo = _mm256_castsi256_si128(bytes);
  const __m128i hi = _mm256_extracti128_si256(bytes, 1);
  out[0] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo));
  out[1] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8)));
  out[2] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi));
  out[3] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8)));
}
inline void I8ToF32(__m256i bytes, __m256* out) {
  const __m128i lo = _mm256_castsi256_si128(bytes);
  const __m128i hi = _mm256_extracti128_si256(bytes, 1);
  out[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo));
  out[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)));
  out[2] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi));
  out[3] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)));
}

// The 32 nibbles of a 32-element block in element order: low nibbles of qs[0..16), then high.
inline __m256i Nibbles32(const uint8_t* qs) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i mask = _mm_set1_epi8(0x0f);
  const __m128i lo = _mm_and_si128(bytes, mask);
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
  return _mm256_set_m128i(hi, lo);
}

// 0x10 in byte j where bit j of the little-endian uint32 at qh is set, else 0.
inline __m256i HighBitsTimes16(const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, sizeof(bits));
  // Byte j takes byte j / 8 of `bits`, then tests bit j % 8 of it.
  const __m256i spread =
      _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)),
                          _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101,
                                             0x0202020202020202, 0x0303030303030303));
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

// w[v] = q[v] * scale (- min), one rounding per operation.
inline void Scale(__m256* w, __m256 lo_scale, __m256 hi_scale) {
  w[0] = _mm256_mul_ps(w[0], lo_scale);
  w[1] = _mm256_mul_ps(w[1], lo_scale);
  w[2] = _mm256_mul_ps(w[2], hi_scale);
  w[3] = _mm256_mul_ps(w[3], hi_scale);
}
inline void ScaleSub(__m256* w, __m256 lo_scale, __m256 lo_min, __m256 hi_scale, __m256 hi_min) {
  w[0] = _mm256_sub_ps(_mm256_mul_ps(w[0], lo_scale), lo_min);
  w[1] = _mm256_sub_ps(_mm256_mul_ps(w[1], lo_scale), lo_min);
  w[2] = _mm256_sub_ps(_mm256_mul_ps(w[2], hi_scale), hi_min);
  w[3] = _mm256_sub_ps(_mm256_mul_ps(w[3], hi_scale), hi_min);
}

}  // namespace quant_detail

// kBlockElems / kBlockBytes: the storage unit (PrefetchAhead finds element i's bytes with them).
struct DecodeQ5_0 {
  static constexpr int kBlockElems = 32;
  static constexpr int kBlockBytes = sizeof(BlockQ5_0);
  static constexpr bool kQuantized = true;
  static constexpr bool kQuadSwapped = false;
  [[gnu::always_inline]] static void Load32(const std::byte* row, int64_t i, __m256* w) {
    using namespace quant_detail;
    const BlockQ5_0* b = reinterpret_cast<const BlockQ5_0*>(row) + i / 32;
    const __m256i q = _mm256_or_si256(Nibbles32(b->qs), HighBitsTimes16(b->qh));
    I8ToF32(_mm256_sub_epi8(q, _mm256_set1_epi8(16)), w);
    const __m256 d = _mm256_set1_ps(F16(b->d));
    Scale(w, d, d);
  }
};

struct DecodeQ5_1 {
  static constexpr int kBlockElems = 32;
  static constexpr int kBlockBytes = sizeof(BlockQ5_1);
  static constexpr bool kQuantized = true;
  static constexpr bool kQuadSwapped = false;
  [[gnu::always_inline]] static void Load32(const std::byte* row, int64_t i, __m256* w) {
    using namespace quant_detail;
    const BlockQ5_1* b = reinterpret_cast<const BlockQ5_1*>(row) + i / 32;
    U8ToF32(_mm256_or_si256(Nibbles32(b->qs), HighBitsTimes16(b->qh)), w);
    const __m256 d = _mm256_set1_ps(F16(b->d));
    const __m256 m = _mm256_set1_ps(F16(b->m));
#pragma GCC unroll 16
    for (int v = 0; v < 4; ++v) w[v] = _mm256_add_ps(_mm256_mul_ps(w[v], d), m);
  }
};

struct DecodeIQ4_NL {
  static constexpr int kBlockElems = 32;
  static constexpr int kBlockBytes = sizeof(BlockIQ4_NL);
  static constexpr bool kQuantized = true;
  static constexpr bool kQuadSwapped = false;
  [[gnu::always_inline]] static void Load32(const std::byte* row, int64_t i, __m256* w) {
    using namespace quant_detail;
    const BlockIQ4_NL* b = reinterpret_cast<const BlockIQ4_NL*>(row) + i / 32;
    const __m256i table = _mm256_broadcastsi128_si256(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4NlValues)));
    I8ToF32(_mm256_shuffle_epi8(table, Nibbles32(b->qs)), w);
    const __m256 d = _mm256_set1_ps(F16(b->d));
    Scale(w, d, d);
  }
};

struct DecodeMXFP4 {
  static constexpr int kBlockElems = 32;
  static constexpr int kBlockBytes = sizeof(BlockMXFP4);
  static constexpr bool kQuantized = true;
  static constexpr bool kQuadSwapped = false;
  [[gnu::always_inline]] static void Load32(const std::byte* row, int64_t i, __m256* w) {
    using namespace quant_detail;
    const BlockMXFP4* b = reinterpret_cast<const BlockMXFP4*>(row) + i / 32;
    const __m256i table = _mm256_broadcastsi128_si256(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(kMxfp4Values)));
    I8ToF32(_mm256_shuffle_epi8(table, Nibbles32(b->qs)), w);
    const __m256 d = _mm256_set1_ps(E8M0HalfToF32(b->e));
    Scale(w, d, d);
  }
};

struct DecodeQ2_K {
  static constexpr int kBlockElems = kQK_K;
  static constexpr int kBlockBytes = sizeof(BlockQ2_K);
  static constexpr bool kQuantized = true;
  static constexpr bool kQuadSwapped = false;
  [[gnu::always_inline]] static void Load32(const std::byte* row, int64_t i, __m256* w) {
    using namespace quant_detail;
    const BlockQ2_K* b = reinterpret_cast<const BlockQ2_K*>(row) + i / kQK_K;
    const int g = static_cast<int>(i % kQK_K) / 32;
    U8ToF32(ShiftMask(Load256(b->qs + 32 * (g / 4)), 2 * (g % 4), 3), w);
    const float d = F16(b->d);
    const float dmin = F16(b->dmin);
    const uint8_t lo = b->scales[2 * g], hi = b->scales[2 * g + 1];
    ScaleSub(w, _mm256_set1_ps(d * static_cast<float>(lo & 0xF)),
             _mm256_set1_ps(dmin * static_cast<float>(lo >> 4)),
             _mm256_set1_ps(d * static_cast<float>(hi & 0xF)),
             _mm256_set1_ps(dmin * static_cast<float>(hi >> 4)));
  }
};

struct DecodeQ3_K {
  static constexpr int kBlockElems = kQK_K;
  static constexpr int kBlockBytes = sizeof(BlockQ3_K);
  static constexpr bool kQuantized = true;
  static constexpr bool kQuadSwapped = false;
  [[gnu::always_inline]] static void Load32(const std::byte* row, int64_t i, __m256* w) {
    using namespace quant_detail;
    const BlockQ3_K* b = reinterpret_cast<const BlockQ3_K*>(row) + i / kQK_K;
    const int g = static_cast<int>(i % kQK_K) / 32;
    const __m256i low = ShiftMask(Load256(b->qs + 32 * (g / 4)), 2 * (g % 4), 3);
    const __m256i high = _mm256_slli_epi16(ShiftMask(Load256(b->hmask), g, 1), 2);
    // q = low - (high bit ? 0 : 4) = (low | high bit << 2) - 4.
    I8ToF32(_mm256_sub_epi8(_mm256_or_si256(low, high), _mm256_set1_epi8(4)), w);
    const float d = F16(b->d);
    Scale(w, _mm256_set1_ps(d * static_cast<float>(Q3KScale(b->scales, 2 * g))),
          _mm256_set1_ps(d * static_cast<float>(Q3KScale(b->scales, 2 * g + 1))));
  }
};

// Q4_K and Q5_K: one scale and min per 32 elements.
template <typename Block, bool kFifthBit>
struct DecodeKScaleMin {
  static constexpr int kBlockElems = kQK_K;
  static constexpr int kBlockBytes = sizeof(Block);
  static constexpr bool kQuantized = true;
  static constexpr bool kQuadSwapped = false;
  [[gnu::always_inline]] static void Load32(const std::byte* row, int64_t i, __m256* w) {
    using namespace quant_detail;
    const Block* b = reinterpret_cast<const Block*>(row) + i / kQK_K;
    const int g = static_cast<int>(i % kQK_K) / 32;
    __m256i q = ShiftMask(Load256(b->qs + 32 * (g / 2)), 4 * (g % 2), 0xF);
    if constexpr (kFifthBit) {
      q = _mm256_or_si256(q, _mm256_slli_epi16(ShiftMask(Load256(b->qh), g, 1), 4));
    }
    U8ToF32(q, w);
    uint8_t scale, min;
    KScaleMin(b->scales, g, &scale, &min);
    const __m256 dl = _mm256_set1_ps(F16(b->d) * static_cast<float>(scale));
    const __m256 ml = _mm256_set1_ps(F16(b->dmin) * static_cast<float>(min));
    ScaleSub(w, dl, ml, dl, ml);
  }
};
using DecodeQ4_K = DecodeKScaleMin<BlockQ4_K, false>;
using DecodeQ5_K = DecodeKScaleMin<BlockQ5_K, true>;

struct DecodeQ6_K {
  static constexpr int kBlockElems = kQK_K;
  static constexpr int kBlockBytes = sizeof(BlockQ6_K);
  static constexpr bool kQuantized = true;
  static constexpr bool kQuadSwapped = false;
  [[gnu::always_inline]] static void Load32(const std::byte* row, int64_t i, __m256* w) {
    using namespace quant_detail;
    const BlockQ6_K* b = reinterpret_cast<const BlockQ6_K*>(row) + i / kQK_K;
    const int g = static_cast<int>(i % kQK_K) / 32;
    const int h = g / 4, r = g % 4;
    const __m256i low = ShiftMask(Load256(b->ql + 64 * h + 32 * (r % 2)), 4 * (r / 2), 0xF);
    const __m256i high = _mm256_slli_epi16(ShiftMask(Load256(b->qh + 32 * h), 2 * r, 3), 4);
    I8ToF32(_mm256_sub_epi8(_mm256_or_si256(low, high), _mm256_set1_epi8(32)), w);
    const float d = F16(b->d);
    Scale(w, _mm256_set1_ps(d * static_cast<float>(b->scales[2 * g])),
          _mm256_set1_ps(d * static_cast<float>(b->scales[2 * g + 1])));
  }
};

struct DecodeQ8_K {
  static constexpr int kBlockElems = kQK_K;
  static constexpr int kBlockBytes = sizeof(BlockQ8_K);
  static constexpr bool kQuantized = true;
  static constexpr bool kQuadSwapped = false;
  [[gnu::always_inline]] static void Load32(const std::byte* row, int64_t i, __m256* w) {
    using namespace quant_detail;
    // By byte offsets: d is a float, and a row need not be 4-aligned.
    const auto* b = reinterpret_cast<const uint8_t*>(row) + i / kQK_K * sizeof(BlockQ8_K);
    float d;
    std::memcpy(&d, b + offsetof(BlockQ8_K, d), sizeof(d));
    I8ToF32(Load256(b + offsetof(BlockQ8_K, qs) + i % kQK_K), w);
    const __m256 scale = _mm256_set1_ps(d);
    Scale(w, scale, scale);
  }
};

}  // namespace uc::kernels::avx2
