// AVX-512 MatMul for quantized weights multiplied exactly (MatMulPrecision::kExact): Q8_0, Q4_0,
// Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K, packed once at load (PackQuantExact). The F32 activations
// are multiplied by the weights' integer codes as F32, and each scale is applied once per group.
//
// Arithmetic (reference::MatMulExactGrouped, bit for bit). A weight of group g (the elements
// that share a scale: 32, or 16 for Q6_K) is w = q dl - ml with q the unsigned integer code and
// dl, ml the F32 products the dequantizer forms (Q4_0: dl = d, ml = 8 d; Q5_0: ml = 16 d; Q4_1,
// Q5_1: ml = -m; Q6_K: q
// the stored 6 bits, ml = 32 dl; Q8_0: q signed, ml = 0). Every output is
//   acc = 0;  for each group g in k order:
//     P = 0;  for l in g in order:  P = fma(x_l, q_l, P)
//     acc = fma(dl_g, P, acc);  acc = fma(-ml_g, S_g, acc)   (S_g = Σ x_l over g, in order)
// the same sum as Σ w_l x_l up to F32 rounding (within 1e-5 of reference::MatMul), in one order
// whatever m, the tiles beside it or the thread count: batch invariant by construction.
//
// Why this form. Converting a block to F32 weights costs a multiply and a subtract per element on
// top of the conversion; the decode kernel of the stored layout (avx2::MatMulStreaming) also
// unpacks the 6-bit scales and converts d per 32 elements, about 30 instructions per 18 bytes of
// Q4_K, where Q8_0 needs 14 per 34: Q4_K decode ran compute bound at a quarter of Q8_0's bytes/s.
// Here a code becomes an F32 in two or three operations (widen, mask or shift, convert), the
// scales are applied per group with one FMA per 16 outputs, and the weight rows are the vector
// lanes (x is read as broadcasts), so nothing is summed across lanes.
//
// Layout. Pairs of 32-row tiles (64 rows, n rounded up, rows past n zero); a pair's k range is a
// run of records (256 elements for the K-quants, 32 for the others), each record the pair's
// scale fields and then 64-byte lines with one byte per row: row c of the pair is byte c, tile t
// bytes [32 t, 32 t + 32). Nibble lines hold elements 2 s (low nibble) and 2 s + 1 (high) of a
// group; Q8_0 lines one element; Q6_K's high-bit lines the top two bits of elements 4 s .. 4 s +
// 3 (bits 2 p, 2 p + 1 for element 4 s + p), Q5_0's, Q5_1's and Q5_K's the fifth bit of elements
// 8 s .. 8 s + 7 of a group.
// Every record is a whole number of lines, so the pair is one 64-byte-aligned stream.
//
// Kernels. Decode (m <= kStreamRows): each thread streams its pairs whole, both tiles at once,
// four 16-lane chains per x row. Prefill: groups of four tiles under blocks of kMr x rows and k
// blocks of kKc (whole records), one tile per micro-kernel call; a tile's sibling reads the other
// half of the same lines right after it, from cache.
//
// Everything here but the entry points is in an anonymous namespace, for the reason
// matmul_int8_avx512.cc gives.
#if defined(__x86_64__)

// clang-format off
// First, before <immintrin.h> (see the header).
#include "kernels/cpu/avx512_gcc_workaround.h"  // NOLINT(build/include_order)
#include <immintrin.h>
// clang-format on

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "base/check.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/matmul/tile_avx512.h"

namespace uc::kernels::avx512 {
namespace {

constexpr int kNr = 32;             // weight rows per tile: two vectors
constexpr int kPairRows = 2 * kNr;  // rows per pair, bytes per line
constexpr int kLine = 64;           // bytes per line
constexpr int kMr = 6;              // x rows per prefill micro-kernel call
constexpr int kStreamRows = 2;      // x rows per decode pass (both tiles: 4 x rows x 4 chains)
constexpr int64_t kPrefetchBytes = 4096;

inline uint16_t LoadU16(const std::byte* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

[[gnu::always_inline]] inline __m512i WidenU8(const uint8_t* p) {
  return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
[[gnu::always_inline]] inline __m512i WidenI8(const uint8_t* p) {
  return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
[[gnu::always_inline]] inline __m512 F16s(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
[[gnu::always_inline]] inline __m512 ToF32(__m512i v) { return _mm512_cvtepi32_ps(v); }

// The two elements of a nibble line for the 16 rows at p: w[0] low nibbles, w[1] high.
[[gnu::always_inline]] inline void NibblePair(const uint8_t* p, __m512* lo, __m512* hi) {
  // The low nibble through a table (vpermps reads an index's low four bits): the conversions
  // and shifts share one port on Intel, the permute uses the other.
  const __m512 codes = _mm512_set_ps(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  const __m512i v = WidenU8(p);
  *lo = _mm512_permutexvar_ps(v, codes);
  *hi = ToF32(_mm512_srli_epi32(v, 4));
}

// The two elements of a nibble line with their fifth bits, bits `shift` and `shift` + 1 of the
// high line's bytes, for the tile half at `line` / `high` (32 rows): w[e][h] as NibblePair.
[[gnu::always_inline]] inline void FifthBitPair(const uint8_t* line, const uint8_t* high, int shift,
                                                __m512 (&w)[2][2]) {
  const __m512i m15 = _mm512_set1_epi32(15), m16 = _mm512_set1_epi32(16);
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const __m512i v = WidenU8(line + 16 * h);
    const __m512i b = _mm512_srl_epi32(WidenU8(high + 16 * h), _mm_cvtsi32_si128(shift));
    const __m512i b0 = _mm512_and_si512(_mm512_slli_epi32(b, 4), m16);
    const __m512i b1 = _mm512_and_si512(_mm512_slli_epi32(b, 3), m16);
    w[0][h] = ToF32(_mm512_or_si512(_mm512_and_si512(v, m15), b0));
    w[1][h] = ToF32(_mm512_or_si512(_mm512_srli_epi32(v, 4), b1));
  }
}

// Each type: kRecordElems, kGroup, kHasMin, kRecordBytes, the offsets of its fields in a record,
//   Decode2(rec, g, s, t, w): elements 2 s and 2 s + 1 of group g for tile t's rows as F32 codes,
//     w[e][h] for element e, rows 16 h .. 16 h + 15 of the tile;
//   Scales(rec, g, t, dl, nml): dl and -ml of group g for the tile's two vectors;
//   PackRow(block, c, rec): the stored block of record `rec` for pair row c into the record.
// Offsets are in bytes from the record's start; a line's tile t half starts at + 32 t.

struct PackQ8_0 {
  static constexpr int kRecordElems = 32;
  static constexpr int kGroup = 32;
  // With an offset of zero: the kernels are then those of Q4_0 (GCC 12 spilled a weight vector in
  // every FMA of the prefill kernel without the offset term: Q8_0 prefill ran 1.5x slower).
  static constexpr bool kHasMin = true;
  static constexpr int64_t kD = 0;
  static constexpr int64_t kLines = kD + 2 * kPairRows;
  static constexpr int64_t kRecordBytes = kLines + 32 * kLine;
  [[gnu::always_inline]] static void Decode2(const uint8_t* rec, int /*g*/, int s, int t,
                                             __m512 (&w)[2][2]) {
    const uint8_t* line = rec + kLines + 2 * s * kLine + 32 * t;
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      w[0][h] = ToF32(WidenI8(line + 16 * h));
      w[1][h] = ToF32(WidenI8(line + kLine + 16 * h));
    }
  }
  [[gnu::always_inline]] static void Scales(const uint8_t* rec, int /*g*/, int t, __m512* dl,
                                            __m512* nml) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      dl[h] = F16s(rec + kD + 2 * (32 * t + 16 * h));
      nml[h] = _mm512_setzero_ps();
    }
  }
  static void PackRow(const std::byte* block, int c, uint8_t* rec) {
    const auto* b = reinterpret_cast<const BlockQ8_0*>(block);
    std::memcpy(rec + kD + 2 * c, &b->d, 2);
    for (int l = 0; l < 32; ++l) rec[kLines + l * kLine + c] = static_cast<uint8_t>(b->qs[l]);
  }
};

// Q4_0 and Q4_1: 32-element blocks of nibbles (element l < 16 the low nibble of qs[l], else
// the high nibble of qs[l - 16]).
template <bool kQ4_1>
struct PackQ4Block {
  static constexpr int kRecordElems = 32;
  static constexpr int kGroup = 32;
  static constexpr bool kHasMin = true;
  static constexpr int64_t kD = 0;
  static constexpr int64_t kM = kD + 2 * kPairRows;  // Q4_1's m
  static constexpr int64_t kLines = kM + (kQ4_1 ? 2 * kPairRows : 0);
  static constexpr int64_t kRecordBytes = kLines + 16 * kLine;
  [[gnu::always_inline]] static void Decode2(const uint8_t* rec, int /*g*/, int s, int t,
                                             __m512 (&w)[2][2]) {
    const uint8_t* line = rec + kLines + s * kLine + 32 * t;
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) NibblePair(line + 16 * h, &w[0][h], &w[1][h]);
  }
  [[gnu::always_inline]] static void Scales(const uint8_t* rec, int /*g*/, int t, __m512* dl,
                                            __m512* nml) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const int64_t rows = 2 * (32 * t + 16 * h);
      dl[h] = F16s(rec + kD + rows);
      // Q4_0: w = d (q - 8) = d q - 8 d; Q4_1: w = d q + m.
      nml[h] = kQ4_1 ? F16s(rec + kM + rows) : _mm512_mul_ps(dl[h], _mm512_set1_ps(-8.0f));
    }
  }
  static void PackRow(const std::byte* block, int c, uint8_t* rec) {
    const uint8_t* qs;
    if constexpr (kQ4_1) {
      const auto* b = reinterpret_cast<const BlockQ4_1*>(block);
      std::memcpy(rec + kD + 2 * c, &b->d, 2);
      std::memcpy(rec + kM + 2 * c, &b->m, 2);
      qs = b->qs;
    } else {
      const auto* b = reinterpret_cast<const BlockQ4_0*>(block);
      std::memcpy(rec + kD + 2 * c, &b->d, 2);
      qs = b->qs;
    }
    for (int s = 0; s < 16; ++s) {
      const int e0 = 2 * s, e1 = 2 * s + 1;
      const int q0 = e0 < 16 ? qs[e0] & 15 : qs[e0 - 16] >> 4;
      const int q1 = e1 < 16 ? qs[e1] & 15 : qs[e1 - 16] >> 4;
      rec[kLines + s * kLine + c] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
};
using PackQ4_0 = PackQ4Block<false>;
using PackQ4_1 = PackQ4Block<true>;

// Q5_0 and Q5_1: Q4_0 and Q4_1 with a fifth bit per element (bit l of qh, little-endian), in
// four lines of their own: line s holds elements 8 s .. 8 s + 7.
template <bool kQ5_1>
struct PackQ5Block {
  static constexpr int kRecordElems = 32;
  static constexpr int kGroup = 32;
  static constexpr bool kHasMin = true;
  static constexpr int64_t kD = 0;
  static constexpr int64_t kM = kD + 2 * kPairRows;  // Q5_1's m
  static constexpr int64_t kLines = kM + (kQ5_1 ? 2 * kPairRows : 0);
  static constexpr int64_t kHigh = kLines + 16 * kLine;
  static constexpr int64_t kRecordBytes = kHigh + 4 * kLine;
  [[gnu::always_inline]] static void Decode2(const uint8_t* rec, int /*g*/, int s, int t,
                                             __m512 (&w)[2][2]) {
    FifthBitPair(rec + kLines + s * kLine + 32 * t, rec + kHigh + (s / 4) * kLine + 32 * t,
                 2 * (s % 4), w);
  }
  [[gnu::always_inline]] static void Scales(const uint8_t* rec, int /*g*/, int t, __m512* dl,
                                            __m512* nml) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const int64_t rows = 2 * (32 * t + 16 * h);
      dl[h] = F16s(rec + kD + rows);
      // Q5_0: w = d (q - 16); Q5_1: w = d q + m.
      nml[h] = kQ5_1 ? F16s(rec + kM + rows) : _mm512_mul_ps(dl[h], _mm512_set1_ps(-16.0f));
    }
  }
  static void PackRow(const std::byte* block, int c, uint8_t* rec) {
    const uint8_t* qs;
    const uint8_t* qh;
    if constexpr (kQ5_1) {
      const auto* b = reinterpret_cast<const BlockQ5_1*>(block);
      std::memcpy(rec + kD + 2 * c, &b->d, 2);
      std::memcpy(rec + kM + 2 * c, &b->m, 2);
      qs = b->qs, qh = b->qh;
    } else {
      const auto* b = reinterpret_cast<const BlockQ5_0*>(block);
      std::memcpy(rec + kD + 2 * c, &b->d, 2);
      qs = b->qs, qh = b->qh;
    }
    auto low = [&](int e) { return e < 16 ? qs[e] & 15 : qs[e - 16] >> 4; };
    for (int s = 0; s < 16; ++s) {
      rec[kLines + s * kLine + c] = static_cast<uint8_t>(low(2 * s) | (low(2 * s + 1) << 4));
    }
    for (int s = 0; s < 4; ++s) rec[kHigh + s * kLine + c] = qh[s];
  }
};
using PackQ5_0 = PackQ5Block<false>;
using PackQ5_1 = PackQ5Block<true>;

// Q4_K and Q5_K: eight groups of 32 with a 6-bit scale and min each; Q5_K's fifth bits in lines
// of their own.
template <bool kFifthBit>
struct PackKScaleMin {
  static constexpr int kRecordElems = 256;
  static constexpr int kGroup = 32;
  static constexpr bool kHasMin = true;
  static constexpr int64_t kD = 0;
  static constexpr int64_t kDmin = kD + 2 * kPairRows;
  static constexpr int64_t kScale = kDmin + 2 * kPairRows;  // [group][row] u8
  static constexpr int64_t kMin = kScale + 8 * kPairRows;   // [group][row] u8
  static constexpr int64_t kLines = kMin + 8 * kPairRows;   // 128 nibble lines
  static constexpr int64_t kHigh = kLines + 128 * kLine;    // Q5_K: 32 lines of fifth bits
  static constexpr int64_t kRecordBytes = kHigh + (kFifthBit ? 32 * kLine : 0);
  [[gnu::always_inline]] static void Decode2(const uint8_t* rec, int g, int s, int t,
                                             __m512 (&w)[2][2]) {
    const uint8_t* line = rec + kLines + (16 * g + s) * kLine + 32 * t;
    if constexpr (!kFifthBit) {
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) NibblePair(line + 16 * h, &w[0][h], &w[1][h]);
    } else {
      // Elements 2 s and 2 s + 1 are bits 2 (s % 4) and 2 (s % 4) + 1 of high line 4 g + s / 4.
      FifthBitPair(line, rec + kHigh + (4 * g + s / 4) * kLine + 32 * t, 2 * (s % 4), w);
    }
  }
  [[gnu::always_inline]] static void Scales(const uint8_t* rec, int g, int t, __m512* dl,
                                            __m512* nml) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const int64_t row = 32 * t + 16 * h;
      dl[h] = _mm512_mul_ps(F16s(rec + kD + 2 * row),
                            ToF32(WidenU8(rec + kScale + g * kPairRows + row)));
      const __m512 neg_dmin = _mm512_sub_ps(_mm512_setzero_ps(), F16s(rec + kDmin + 2 * row));
      nml[h] = _mm512_mul_ps(neg_dmin, ToF32(WidenU8(rec + kMin + g * kPairRows + row)));
    }
  }
  static void PackRow(const std::byte* block, int c, uint8_t* rec) {
    const uint8_t* scales;
    const uint8_t* qs;
    const uint8_t* qh = nullptr;
    uint16_t d, dmin;
    if constexpr (kFifthBit) {
      const auto* b = reinterpret_cast<const BlockQ5_K*>(block);
      d = b->d, dmin = b->dmin, scales = b->scales, qs = b->qs, qh = b->qh;
    } else {
      const auto* b = reinterpret_cast<const BlockQ4_K*>(block);
      d = b->d, dmin = b->dmin, scales = b->scales, qs = b->qs;
    }
    std::memcpy(rec + kD + 2 * c, &d, 2);
    std::memcpy(rec + kDmin + 2 * c, &dmin, 2);
    for (int g = 0; g < 8; ++g) {
      uint8_t scale, min;
      KScaleMin(scales, g, &scale, &min);
      rec[kScale + g * kPairRows + c] = scale;
      rec[kMin + g * kPairRows + c] = min;
      auto code = [&](int l) { return (qs[32 * (g / 2) + l] >> (4 * (g % 2))) & 15; };
      for (int s = 0; s < 16; ++s) {
        rec[kLines + (16 * g + s) * kLine + c] =
            static_cast<uint8_t>(code(2 * s) | (code(2 * s + 1) << 4));
      }
      if constexpr (kFifthBit) {
        for (int s = 0; s < 4; ++s) {
          int bits = 0;
          for (int e = 0; e < 8; ++e) bits |= ((qh[8 * s + e] >> g) & 1) << e;
          rec[kHigh + (4 * g + s) * kLine + c] = static_cast<uint8_t>(bits);
        }
      }
    }
  }
};
using PackQ4_K = PackKScaleMin<false>;
using PackQ5_K = PackKScaleMin<true>;

// Q6_K: sixteen groups of 16 with an int8 scale each; codes of 6 bits, q - 32 in the stored
// format (ml = 32 dl).
struct PackQ6_K {
  static constexpr int kRecordElems = 256;
  static constexpr int kGroup = 16;
  static constexpr bool kHasMin = true;
  static constexpr int64_t kD = 0;
  static constexpr int64_t kScale = kD + 2 * kPairRows;       // [group][row] i8
  static constexpr int64_t kLines = kScale + 16 * kPairRows;  // 128 nibble lines
  static constexpr int64_t kHigh = kLines + 128 * kLine;      // 64 lines of two-bit pairs
  static constexpr int64_t kRecordBytes = kHigh + 64 * kLine;
  [[gnu::always_inline]] static void Decode2(const uint8_t* rec, int g, int s, int t,
                                             __m512 (&w)[2][2]) {
    const uint8_t* line = rec + kLines + (8 * g + s) * kLine + 32 * t;
    // Elements 2 s, 2 s + 1: bits 4 (s % 2) .. 4 (s % 2) + 3 of high line 4 g + s / 2.
    const uint8_t* high = rec + kHigh + (4 * g + s / 2) * kLine + 32 * t;
    const int shift = 4 * (s % 2);
    const __m512i m15 = _mm512_set1_epi32(15), m48 = _mm512_set1_epi32(48);
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m512i v = WidenU8(line + 16 * h);
      const __m512i b = _mm512_srl_epi32(WidenU8(high + 16 * h), _mm_cvtsi32_si128(shift));
      w[0][h] = ToF32(_mm512_or_si512(_mm512_and_si512(v, m15),
                                      _mm512_and_si512(_mm512_slli_epi32(b, 4), m48)));
      w[1][h] = ToF32(
          _mm512_or_si512(_mm512_srli_epi32(v, 4), _mm512_and_si512(_mm512_slli_epi32(b, 2), m48)));
    }
  }
  [[gnu::always_inline]] static void Scales(const uint8_t* rec, int g, int t, __m512* dl,
                                            __m512* nml) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const int64_t row = 32 * t + 16 * h;
      dl[h] = _mm512_mul_ps(F16s(rec + kD + 2 * row),
                            ToF32(WidenI8(rec + kScale + g * kPairRows + row)));
      nml[h] = _mm512_mul_ps(dl[h], _mm512_set1_ps(-32.0f));
    }
  }
  static void PackRow(const std::byte* block, int c, uint8_t* rec) {
    const auto* b = reinterpret_cast<const BlockQ6_K*>(block);
    std::memcpy(rec + kD + 2 * c, &b->d, 2);
    for (int g = 0; g < 16; ++g)
      rec[kScale + g * kPairRows + c] = static_cast<uint8_t>(b->scales[g]);
    auto code = [&](int e) {
      const int h = e / 128, r = (e % 128) / 32, l = e % 32;
      return ((b->ql[64 * h + 32 * (r % 2) + l] >> (4 * (r / 2))) & 15) |
             (((b->qh[32 * h + l] >> (2 * r)) & 3) << 4);
    };
    for (int s = 0; s < 128; ++s) {
      rec[kLines + s * kLine + c] =
          static_cast<uint8_t>((code(2 * s) & 15) | ((code(2 * s + 1) & 15) << 4));
    }
    for (int s = 0; s < 64; ++s) {
      int bits = 0;
      for (int p = 0; p < 4; ++p) bits |= (code(4 * s + p) >> 4) << (2 * p);
      rec[kHigh + s * kLine + c] = static_cast<uint8_t>(bits);
    }
  }
};

// y[r, t0 * 32 + c] (+)= x[r, 0..records * kRecordElems) · tiles t0 .. t0 + NT - 1 of the pair
// whose records start at `rec`, for r < MR and columns c < cols (REQUIRES: cols > (NT - 1) * 32;
// NT == 2 only with t0 == 0). xs: the group sums of the x rows (ldxs apart) from the same k.
template <typename T, int MR, int NT, bool kPrefetch>
void MicroKernel(const float* x, int64_t ldx, const float* xs, int64_t ldxs, const uint8_t* rec,
                 int t0, int64_t records, float* y, int64_t ldy, int cols, bool accumulate) {
  constexpr int kGroups = T::kRecordElems / T::kGroup;
  constexpr int kSteps = T::kGroup / 2;
  TileMasks masks[NT];
  __m512 acc[NT][MR][2];
#pragma GCC unroll 2
  for (int t = 0; t < NT; ++t) {
    masks[t] = MasksForColumns(std::min(cols - t * kNr, kNr));
    LoadTile<MR>(acc[t], y + t * kNr, ldy, masks[t], accumulate);
  }
  for (int64_t rr = 0; rr < records; ++rr, rec += T::kRecordBytes) {
    for (int g = 0; g < kGroups; ++g) {
      const int64_t e0 = rr * T::kRecordElems + g * T::kGroup;
      __m512 p[NT][MR][2];
#pragma GCC unroll 2
      for (int t = 0; t < NT; ++t) {
#pragma GCC unroll 8
        for (int r = 0; r < MR; ++r) p[t][r][0] = p[t][r][1] = _mm512_setzero_ps();
      }
#pragma GCC unroll 2
      for (int s = 0; s < kSteps; ++s) {
        if constexpr (kPrefetch) {
          // The stream kPrefetchBytes ahead of this step's share of the record, into L2 as
          // MatMulHalf.
          constexpr int64_t kStride = T::kRecordBytes / (kGroups * kSteps);
          const char* ahead =
              reinterpret_cast<const char*>(rec) + kPrefetchBytes + (g * kSteps + s) * kStride;
#pragma GCC unroll 4
          for (int64_t b = 0; b < kStride + kLine - 1; b += kLine) {
            _mm_prefetch(ahead + b, _MM_HINT_T1);
          }
        }
        __m512 w[NT][2][2];
#pragma GCC unroll 2
        for (int t = 0; t < NT; ++t) T::Decode2(rec, g, s, t0 + t, w[t]);
#pragma GCC unroll 2
        for (int e = 0; e < 2; ++e) {
#pragma GCC unroll 8
          for (int r = 0; r < MR; ++r) {
            const __m512 xb = _mm512_set1_ps(x[r * ldx + e0 + 2 * s + e]);
#pragma GCC unroll 2
            for (int t = 0; t < NT; ++t) {
              p[t][r][0] = _mm512_fmadd_ps(xb, w[t][e][0], p[t][r][0]);
              p[t][r][1] = _mm512_fmadd_ps(xb, w[t][e][1], p[t][r][1]);
            }
          }
        }
      }
      const int64_t gi = rr * kGroups + g;
#pragma GCC unroll 2
      for (int t = 0; t < NT; ++t) {
        __m512 dl[2], nml[2];
        T::Scales(rec, g, t0 + t, dl, nml);
#pragma GCC unroll 8
        for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 2
          for (int h = 0; h < 2; ++h) {
            acc[t][r][h] = _mm512_fmadd_ps(dl[h], p[t][r][h], acc[t][r][h]);
            if constexpr (T::kHasMin) {
              acc[t][r][h] =
                  _mm512_fmadd_ps(nml[h], _mm512_set1_ps(xs[r * ldxs + gi]), acc[t][r][h]);
            }
          }
        }
      }
    }
  }
#pragma GCC unroll 2
  for (int t = 0; t < NT; ++t) StoreTile<MR>(acc[t], y + t * kNr, ldy, masks[t]);
}

using MicroKernelFn = void (*)(const float*, int64_t, const float*, int64_t, const uint8_t*, int,
                               int64_t, float*, int64_t, int, bool);

template <typename T, int NT, bool kPrefetch, int... kRows>
constexpr auto KernelTable(std::integer_sequence<int, kRows...>) {
  return std::array<MicroKernelFn, sizeof...(kRows) + 1>{
      nullptr, MicroKernel<T, kRows + 1, NT, kPrefetch>...};
}
template <typename T>
struct Kernels {
  // The last pair's first tile alone (its second is past n), decode widths.
  static constexpr auto kTiled =
      KernelTable<T, 1, false>(std::make_integer_sequence<int, kStreamRows>());
  static constexpr auto kStream =
      KernelTable<T, 2, true>(std::make_integer_sequence<int, kStreamRows>());
};

template <typename T>
int64_t PairBytes(int64_t k) {
  return k / T::kRecordElems * T::kRecordBytes;
}

// The group sums S_g of every x row: xs[i * (k / kGroup) + g], each summed in element order.
template <typename T>
const float* GroupSums(const MatMulArgs& a) {
  thread_local std::vector<float> sums;
  const int64_t groups = a.k / T::kGroup;
  sums.resize(static_cast<size_t>(a.m * groups));
  for (int64_t i = 0; i < a.m; ++i) {
    const float* row = a.x + i * a.k;
    for (int64_t g = 0; g < groups; ++g) {
      float s = 0.0f;
      for (int l = 0; l < T::kGroup; ++l) s += row[g * T::kGroup + l];
      sums[static_cast<size_t>(i * groups + g)] = s;
    }
  }
  return sums.data();
}

int Columns(const MatMulArgs& a, int64_t j0, int64_t tiles) {
  return static_cast<int>(std::min<int64_t>(tiles * kNr, a.n - j0));
}

// Decode: pairs [p_begin, p_end), each streamed whole per pass of up to kStreamRows x rows.
template <typename T>
void StreamPairs(const MatMulArgs& a, const float* xs, int64_t p_begin, int64_t p_end) {
  const int64_t groups = a.k / T::kGroup;
  const auto* packed = reinterpret_cast<const uint8_t*>(a.w_packed);
  for (int64_t p = p_begin; p < p_end; ++p) {
    const int64_t j0 = p * kPairRows;
    for (int64_t i0 = 0; i0 < a.m; i0 += kStreamRows) {
      const int rows = static_cast<int>(std::min<int64_t>(kStreamRows, a.m - i0));
      const int cols = Columns(a, j0, 2);
      const uint8_t* rec = packed + p * PairBytes<T>(a.k);
      if (cols > kNr) {
        Kernels<T>::kStream[rows](a.x + i0 * a.k, a.k, xs + i0 * groups, groups, rec, 0,
                                  a.k / T::kRecordElems, a.y + i0 * a.n + j0, a.n, cols, false);
      } else {  // the last pair's second tile is past n
        Kernels<T>::kTiled[rows](a.x + i0 * a.k, a.k, xs + i0 * groups, groups, rec, 0,
                                 a.k / T::kRecordElems, a.y + i0 * a.n + j0, a.n, cols, false);
      }
    }
  }
}

// One tile's k block for the prefill kernel, as F32: the codes of element kk of the block for
// the tile's 32 rows at codes[kk * 32], and each group's dl and nml for the rows.
constexpr int64_t kPanelKc = 256;  // one K-quant record: 32 KiB of codes, in L2 with its siblings
struct Panel {
  alignas(64) float codes[kPanelKc * kNr];
  alignas(64) float dl[kPanelKc / 16][kNr];
  alignas(64) float nml[kPanelKc / 16][kNr];
};

// Tile t's records [rec, rec + kc / kRecordElems) into `panel`, with the decode kernel's own
// conversions (so the codes and scales are the same F32 values).
template <typename T>
void FillPanel(const uint8_t* rec, int t, int64_t kc, Panel& panel) {
  constexpr int kGroups = T::kRecordElems / T::kGroup;
  for (int64_t rr = 0; rr < kc / T::kRecordElems; ++rr, rec += T::kRecordBytes) {
    for (int g = 0; g < kGroups; ++g) {
      const int64_t gi = rr * kGroups + g;
      for (int s = 0; s < T::kGroup / 2; ++s) {
        __m512 w[2][2];
        T::Decode2(rec, g, s, t, w);
        float* out = panel.codes + (gi * T::kGroup + 2 * s) * kNr;
        _mm512_store_ps(out, w[0][0]);
        _mm512_store_ps(out + 16, w[0][1]);
        _mm512_store_ps(out + kNr, w[1][0]);
        _mm512_store_ps(out + kNr + 16, w[1][1]);
      }
      __m512 dl[2], nml[2];
      T::Scales(rec, g, t, dl, nml);
      _mm512_store_ps(panel.dl[gi], dl[0]);
      _mm512_store_ps(panel.dl[gi] + 16, dl[1]);
      _mm512_store_ps(panel.nml[gi], nml[0]);
      _mm512_store_ps(panel.nml[gi] + 16, nml[1]);
    }
  }
}

// y[r, c] (+)= x[r, 0..kc) · the panel's tile for r < MR, c < cols: MicroKernel's operations in
// its order, the codes read from the panel instead of converted again.
template <typename T, int MR>
void PanelKernel(const float* x, int64_t ldx, const float* xs, int64_t ldxs, const Panel& panel,
                 int64_t kc, float* y, int64_t ldy, int cols, bool accumulate) {
  const TileMasks masks = MasksForColumns(std::min(cols, kNr));
  __m512 acc[MR][2];
  LoadTile<MR>(acc, y, ldy, masks, accumulate);
  for (int64_t gi = 0; gi < kc / T::kGroup; ++gi) {
    __m512 p[MR][2];
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) p[r][0] = p[r][1] = _mm512_setzero_ps();
    const float* xg = x + gi * T::kGroup;
    const float* codes = panel.codes + gi * T::kGroup * kNr;
#pragma GCC unroll 4
    for (int l = 0; l < T::kGroup; ++l) {
      const __m512 w0 = _mm512_load_ps(codes + l * kNr);
      const __m512 w1 = _mm512_load_ps(codes + l * kNr + 16);
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) {
        const __m512 xb = _mm512_set1_ps(xg[r * ldx + l]);
        p[r][0] = _mm512_fmadd_ps(xb, w0, p[r][0]);
        p[r][1] = _mm512_fmadd_ps(xb, w1, p[r][1]);
      }
    }
    const __m512 dl[2] = {_mm512_load_ps(panel.dl[gi]), _mm512_load_ps(panel.dl[gi] + 16)};
    const __m512 nml[2] = {_mm512_load_ps(panel.nml[gi]), _mm512_load_ps(panel.nml[gi] + 16)};
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        acc[r][h] = _mm512_fmadd_ps(dl[h], p[r][h], acc[r][h]);
        if constexpr (T::kHasMin) {
          acc[r][h] = _mm512_fmadd_ps(nml[h], _mm512_set1_ps(xs[r * ldxs + gi]), acc[r][h]);
        }
      }
    }
  }
  StoreTile<MR>(acc, y, ldy, masks);
}

using PanelKernelFn = void (*)(const float*, int64_t, const float*, int64_t, const Panel&, int64_t,
                               float*, int64_t, int, bool);
template <typename T, int... kRows>
constexpr auto PanelKernelTable(std::integer_sequence<int, kRows...>) {
  return std::array<PanelKernelFn, sizeof...(kRows) + 1>{nullptr, PanelKernel<T, kRows + 1>...};
}

// Prefill: tiles [t_begin, t_end) in groups of four; per k block of kPanelKc each tile is
// converted into a panel once, then every block of kMr x rows runs over the group's panels.
template <typename T>
void TiledRange(const MatMulArgs& a, const float* xs, int64_t t_begin, int64_t t_end) {
  constexpr int64_t kTilesPerGroup = 4;
  static constexpr auto kKernels = PanelKernelTable<T>(std::make_integer_sequence<int, kMr>());
  thread_local std::vector<Panel> panels(kTilesPerGroup);
  const int64_t groups = a.k / T::kGroup;
  const auto* packed = reinterpret_cast<const uint8_t*>(a.w_packed);
  for (int64_t g0 = t_begin; g0 < t_end; g0 += kTilesPerGroup) {
    const int64_t g_end = std::min(t_end, g0 + kTilesPerGroup);
    for (int64_t k0 = 0; k0 < a.k; k0 += kPanelKc) {
      const int64_t kc = std::min(kPanelKc, a.k - k0);
      for (int64_t t = g0; t < g_end; ++t) {
        const uint8_t* rec = packed + (t / 2) * PairBytes<T>(a.k) + PairBytes<T>(k0);
        FillPanel<T>(rec, static_cast<int>(t % 2), kc, panels[t - g0]);
      }
      for (int64_t i0 = 0; i0 < a.m; i0 += kMr) {
        const int rows = static_cast<int>(std::min<int64_t>(kMr, a.m - i0));
        for (int64_t t = g0; t < g_end; ++t) {
          const int64_t j0 = t * kNr;
          kKernels[rows](a.x + i0 * a.k + k0, a.k, xs + i0 * groups + k0 / T::kGroup, groups,
                         panels[t - g0], kc, a.y + i0 * a.n + j0, a.n, Columns(a, j0, 1), k0 > 0);
        }
      }
    }
  }
}

template <typename T>
void Run(const MatMulArgs& args, ThreadPool* pool) {
  const float* xs = GroupSums<T>(args);
  const int64_t num_tiles = (args.n + kNr - 1) / kNr;
  const int64_t num_pairs = (num_tiles + 1) / 2;
  const bool stream = args.m <= kStreamRows;
  const int64_t min_pairs = std::max<int64_t>(1, MinRowsPerChunk(args.m * args.k) / kPairRows);
  ParallelForDynamic(
      pool, num_pairs,
      [&](int64_t begin, int64_t end) {
        if (stream) {
          StreamPairs<T>(args, xs, begin, end);
        } else {
          TiledRange<T>(args, xs, 2 * begin, std::min(2 * end, num_tiles));
        }
      },
      min_pairs);
}

template <typename T>
void Pack(const MatMulArgs& a, std::byte* out, ThreadPool* pool) {
  const int64_t records = a.k / T::kRecordElems;
  const int64_t record_row_bytes = DTypeRowBytes(a.w_dtype, T::kRecordElems);
  const int64_t num_pairs = (a.n + kPairRows - 1) / kPairRows;
  ParallelFor(
      pool, num_pairs,
      [&](int64_t begin, int64_t end) {
        for (int64_t p = begin; p < end; ++p) {
          auto* pair = reinterpret_cast<uint8_t*>(out) + p * PairBytes<T>(a.k);
          std::memset(pair, 0, static_cast<size_t>(PairBytes<T>(a.k)));
          const int rows = static_cast<int>(std::min<int64_t>(kPairRows, a.n - p * kPairRows));
          for (int64_t rr = 0; rr < records; ++rr) {
            uint8_t* rec = pair + rr * T::kRecordBytes;
            for (int c = 0; c < rows; ++c) {
              const std::byte* row = a.w + (p * kPairRows + c) * a.w_row_bytes;
              T::PackRow(row + rr * record_row_bytes, c, rec);
            }
          }
        }
      },
      1);
}

template <typename F>
bool VisitPacker(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kQ8_0:
      f(PackQ8_0{});
      return true;
    case DType::kQ4_0:
      f(PackQ4_0{});
      return true;
    case DType::kQ4_1:
      f(PackQ4_1{});
      return true;
    case DType::kQ5_0:
      f(PackQ5_0{});
      return true;
    case DType::kQ5_1:
      f(PackQ5_1{});
      return true;
    case DType::kQ4_K:
      f(PackQ4_K{});
      return true;
    case DType::kQ5_K:
      f(PackQ5_K{});
      return true;
    case DType::kQ6_K:
      f(PackQ6_K{});
      return true;
    default:
      return false;
  }
}

}  // namespace

int64_t PackedQuantExactBytes(DType dtype, int64_t n, int64_t k) {
  int64_t bytes = 0;
  VisitPacker(dtype, [&](auto t) {
    using T = decltype(t);
    if (k % T::kRecordElems == 0) bytes = (n + kPairRows - 1) / kPairRows * PairBytes<T>(k);
  });
  return bytes;
}

void PackQuantExact(const MatMulArgs& args, std::byte* out, ThreadPool* pool) {
  const bool known = VisitPacker(args.w_dtype, [&](auto t) { Pack<decltype(t)>(args, out, pool); });
  UC_CHECK(known, "PackQuantExact: no packed exact layout for %s",
           std::string(DTypeName(args.w_dtype)).c_str());
}

void MatMulQuantExact(const MatMulArgs& args, ThreadPool* pool) {
  UC_CHECK(args.w_packed != nullptr, "MatMulQuantExact: needs PackQuantExact's layout");
  const bool known = VisitPacker(args.w_dtype, [&](auto t) { Run<decltype(t)>(args, pool); });
  UC_CHECK(known, "MatMulQuantExact: no packed exact layout for %s",
           std::string(DTypeName(args.w_dtype)).c_str());
}

}  // namespace uc::kernels::avx512

#endif  // defined(__x86_64__)
