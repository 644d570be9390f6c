// File: int8_kquants_avx2.h
// -----------------------------------------------------------------------------
// The integer MatMul kernels of the K-quants (Q2_K ... Q6_K, Q8_K weights; Q8_K activations),
// with the interface and the arithmetic rules of int8_blocks_avx2.h. A super-block is eight
// 32-element chunks; chunk c of the activations is y.qs[32 c, 32 c + 32), and sub-block i (16
// elements) is half i % 2 of chunk i / 2.
//
// Every unsigned type unpacks into one KPrep: per row, the unsigned quants of each chunk (the
// value plus Q3_K's 4 or Q6_K's 32), the integer scale of each sub-block and, per sub-block,
// either the min (Q2_K, Q4_K, Q5_K: term = dy d sumi - dy dmin sum(min * bsum)) or again the
// scale (Q3_K, Q6_K: sumi -= offset * sum(scale * bsum)).
//
// Include only from AVX2_SRCS (see simd_avx2.h).
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/matmul/int8_blocks_avx2.h"
#include "tensor/dtype.h"

namespace uc::kernels::avx2::int8 {

// Block b of eight Q8_K activation rows, interleaved as PanelQ8, chunk by chunk.
struct alignas(32) PanelQ8K {
  int8_t qs[8][8][32];                // [chunk][four-byte group]: row i at bytes [4i, 4i + 4)
  float d[kPanelRows];                // each row's d
  int32_t bsum_pairs[8][kPanelRows];  // [chunk c][row]: bsums 2c (low 16 bits) and 2c + 1
};

// How the sub-block mins enter a K-quant term.
enum class KMins {
  kMin,     // Q2_K, Q4_K, Q5_K: term = dy d sumi - dy dmin sum(min * bsum)
  kOffset,  // Q3_K, Q6_K: unsigned q = value + offset; sumi -= offset * sum(scale * bsum)
};

struct KPrep {
  alignas(32) uint8_t q[kTileRows][8][32];           // [row][chunk] unsigned quants
  alignas(32) int16_t sub_scale[kTileRows][16];      // [row][sub-block] integer scale
  alignas(32) int16_t sub_extra[kTileRows][16];      // [row][sub-block] min, or scale (kOffset)
  alignas(32) int16_t pair_scale[kTileRows][8][16];  // [row][chunk] scale of each maddubs pair
  alignas(32) float d[kTileRows], dmin[kTileRows];
};

inline void Store(void* p, __m256i v) { _mm256_store_si256(static_cast<__m256i*>(p), v); }

// The sixteen sub-block scales s (int16) rearranged for PairScale: [s0 s2 ... s14 | s1 s3 ... s15].
inline __m256i ScaleLanes(__m256i s) {
  const __m256i evens_odds = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15,
                                              0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
  return _mm256_permute4x64_epi64(_mm256_shuffle_epi8(s, evens_odds), 0xd8);
}

// The scale of each maddubs pair of chunk c, [s[2c] x 8 | s[2c + 1] x 8], from lanes =
// ScaleLanes(s): int16 c of each half.
inline __m256i PairScale(__m256i lanes, int c) {
  const char lo = static_cast<char>(2 * c), hi = static_cast<char>(2 * c + 1);
  return _mm256_shuffle_epi8(
      lanes, _mm256_setr_epi8(lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo,
                              hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi));
}

// Fills pair_scale from sub_scale.
inline void FinishKPrep(KPrep& p) {
  for (int j = 0; j < kTileRows; ++j) {
    const __m256i s = ScaleLanes(Load(p.sub_scale[j]));
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) Store(p.pair_scale[j][c], PairScale(s, c));
  }
}

// The F32 end of a K-quant term: lane j = dy d_j sumi_j - dy dmin_j extra_j (kMin), or
// dy d_j (sumi_j - (extra_j << kOffsetShift)) (kOffset), where sumi_j and extra_j are the sums of
// the int32 lanes of v[j] and u[j]. KTerm and FusedTerm share it, so both give the same bits.
template <KMins kMins, int kOffsetShift>
__m256 KFinish(const __m256i* v, const __m256i* u, float y_d, const float* d_rows,
               const float* dmin_rows) {
  const __m256 dy = _mm256_set1_ps(y_d);
  const __m256 d = _mm256_mul_ps(dy, _mm256_load_ps(d_rows));
  if constexpr (kMins == KMins::kOffset) {
    const __m256i sumi = _mm256_sub_epi32(SumEach(v), _mm256_slli_epi32(SumEach(u), kOffsetShift));
    return _mm256_mul_ps(d, _mm256_cvtepi32_ps(sumi));
  } else {
    const __m256 dmin = _mm256_mul_ps(dy, _mm256_load_ps(dmin_rows));
    return _mm256_sub_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(SumEach(v))),
                         _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(SumEach(u))));
  }
}

// The block terms for the eight rows (lanes) against one activation super-block.
template <KMins kMins, int kOffsetShift>
__m256 KTerm(const KPrep& p, const BlockQ8_K& y) {
  __m256i yv[8];
#pragma GCC unroll 8
  for (int c = 0; c < 8; ++c) yv[c] = Load(y.qs + 32 * c);
  __m256i v[kTileRows];
#pragma GCC unroll 8
  for (int j = 0; j < kTileRows; ++j) {
    __m256i acc = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
      acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(Load(p.q[j][c]), yv[c]),
                                                    Load(p.pair_scale[j][c])));
    }
    v[j] = acc;
  }
  const __m256i bsums = Load(y.bsums);
  __m256i u[kTileRows];
#pragma GCC unroll 8
  for (int j = 0; j < kTileRows; ++j) u[j] = _mm256_madd_epi16(Load(p.sub_extra[j]), bsums);
  return KFinish<kMins, kOffsetShift>(v, u, y.d, p.d, p.dmin);
}

// acc[j] += row j's block terms for the eight x rows of a panel (lanes), j < cols. Each chunk
// of the panel is loaded once for all rows. kGroupsPerSum four-byte groups are summed in int16
// before the scale: each adds 2 products of at most umax * 127, so four groups are fine up to
// 5-bit quants (31496) and Q6_K takes two (32004).
template <KMins kMins, int kOffsetShift, int kGroupsPerSum>
void KPanelTerms(const KPrep& p, int cols, const PanelQ8K& x, __m256* acc) {
  __m256i sumi[kTileRows], extra[kTileRows];
  for (int j = 0; j < cols; ++j) sumi[j] = extra[j] = _mm256_setzero_si256();
#pragma GCC unroll 1
  for (int c = 0; c < 8; ++c) {
    __m256i xq[8];
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) xq[g] = Load(x.qs[c][g]);
    const __m256i bsum_pairs = Load(x.bsum_pairs[c]);
    for (int j = 0; j < cols; ++j) {
      __m256i total = sumi[j];
#pragma GCC unroll 8
      for (int g0 = 0; g0 < 8; g0 += kGroupsPerSum) {
        __m256i s = _mm256_maddubs_epi16(Broadcast4(p.q[j][c] + 4 * g0), xq[g0]);
#pragma GCC unroll 4
        for (int g = g0 + 1; g < g0 + kGroupsPerSum; ++g) {
          s = _mm256_add_epi16(s, _mm256_maddubs_epi16(Broadcast4(p.q[j][c] + 4 * g), xq[g]));
        }
        // Groups 0-3 are sub-block 2c, 4-7 sub-block 2c + 1.
        const __m256i scale = _mm256_set1_epi16(p.sub_scale[j][2 * c + g0 / 4]);
        total = _mm256_add_epi32(total, _mm256_madd_epi16(s, scale));
      }
      sumi[j] = total;
      extra[j] = _mm256_add_epi32(
          extra[j], _mm256_madd_epi16(Broadcast4(&p.sub_extra[j][2 * c]), bsum_pairs));
    }
  }
  const __m256 dy = _mm256_load_ps(x.d);
  for (int j = 0; j < cols; ++j) {
    const __m256 d = _mm256_mul_ps(dy, _mm256_broadcast_ss(p.d + j));
    __m256 term;
    if constexpr (kMins == KMins::kOffset) {
      const __m256i s = _mm256_sub_epi32(sumi[j], _mm256_slli_epi32(extra[j], kOffsetShift));
      term = _mm256_mul_ps(d, _mm256_cvtepi32_ps(s));
    } else {
      const __m256 dmin = _mm256_mul_ps(dy, _mm256_broadcast_ss(p.dmin + j));
      term = _mm256_sub_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(sumi[j])),
                           _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(extra[j])));
    }
    acc[j] = _mm256_add_ps(acc[j], term);
  }
}

template <typename Block>
const Block& SuperBlock(const std::byte* const* rows, int j, int64_t b) {
  return reinterpret_cast<const Block*>(rows[j])[b];
}

// Bits [from, from + width) of each byte, moved to [to, to + width), the others zero: one 16-bit
// shift (the bits kept come from the same byte) and a mask. The arguments are constants after
// unrolling, so the shift takes an immediate.
inline __m256i BitsAt(__m256i bytes, int from, int width, int to) {
  __m256i v = bytes;
  if (to > from) v = _mm256_slli_epi16(v, to - from);
  if (to < from) v = _mm256_srli_epi16(v, from - to);
  return _mm256_and_si256(v, _mm256_set1_epi8(static_cast<char>(((1 << width) - 1) << to)));
}

// (bytes >> shift) & (2^width - 1) per byte.
inline __m256i Bits(__m256i bytes, int shift, int width) { return BitsAt(bytes, shift, width, 0); }

// The kernel of an unsigned K-quant, from its Unpacker: Chunk(block, c), the unsigned quants of
// chunk c, and Scales(block, scale, extra), the sixteen sub-block scales and extras (int16).
// Prepare stores them (and pair_scale, d, dmin) in a KPrep for the x rows of a pass; FusedTerm,
// for a pass of one x row (the decode shape), keeps them in registers: the same integer sums and
// the same KFinish, so the same bits.
template <typename Block, typename Unpacker, KMins kMins, int kOffsetShift, int kGroupsPerSum>
struct KBlocks {
  static constexpr bool kNeedsSums = false;
  static constexpr bool kHasPanel = true;
  static constexpr bool kHasFusedTerm = true;
  using Prep = KPrep;
  using Panel = PanelQ8K;
  static void Prepare(const std::byte* const* rows, int64_t b, Prep& p) {
    for (int j = 0; j < kTileRows; ++j) {
      const Block& x = SuperBlock<Block>(rows, j, b);
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) Store(p.q[j][c], Unpacker::Chunk(x, c));
      __m256i scale, extra;
      Unpacker::Scales(x, scale, extra);
      Store(p.sub_scale[j], scale);
      Store(p.sub_extra[j], extra);
    }
    FinishKPrep(p);
    GatherScales(rows, b, p.d, p.dmin);
  }
  static __m256 Term(const Prep& p, const std::byte* xb, int32_t /*x_sum*/) {
    return KTerm<kMins, kOffsetShift>(p, *reinterpret_cast<const BlockQ8_K*>(xb));
  }
  // Term(Prepare(rows, b), xb) without the KPrep.
  static __m256 FusedTerm(const std::byte* const* rows, int64_t b, const std::byte* xb,
                          int32_t /*x_sum*/) {
    const BlockQ8_K& y = *reinterpret_cast<const BlockQ8_K*>(xb);
    const __m256i bsums = Load(y.bsums);
    __m256i v[kTileRows], u[kTileRows];
#pragma GCC unroll 1
    for (int j = 0; j < kTileRows; ++j) {
      const Block& x = SuperBlock<Block>(rows, j, b);
      __m256i scale, extra;
      Unpacker::Scales(x, scale, extra);
      const __m256i lanes = ScaleLanes(scale);
      __m256i acc = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) {
        const __m256i prod = _mm256_maddubs_epi16(Unpacker::Chunk(x, c), Load(y.qs + 32 * c));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(prod, PairScale(lanes, c)));
      }
      v[j] = acc;
      u[j] = _mm256_madd_epi16(extra, bsums);
    }
    alignas(32) float d[kTileRows], dmin[kTileRows];
    GatherScales(rows, b, d, dmin);
    return KFinish<kMins, kOffsetShift>(v, u, y.d, d, dmin);
  }
  static void PanelTerms(const Prep& p, int cols, const PanelQ8K& x, __m256* acc) {
    KPanelTerms<kMins, kOffsetShift, kGroupsPerSum>(p, cols, x, acc);
  }

 private:
  static void GatherScales(const std::byte* const* rows, int64_t b, float* d, float* dmin) {
    const int64_t block = b * static_cast<int64_t>(sizeof(Block));
    GatherF16(rows, block + offsetof(Block, d), d);
    if constexpr (kMins == KMins::kMin) GatherF16(rows, block + offsetof(Block, dmin), dmin);
  }
};

struct Q2KUnpacker {
  static __m256i Chunk(const BlockQ2_K& x, int c) {
    return Bits(Load(x.qs + 32 * (c / 4)), 2 * (c % 4), 2);
  }
  static void Scales(const BlockQ2_K& x, __m256i& scale, __m256i& extra) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.scales));
    const __m128i low4 = _mm_set1_epi8(0x0F);
    scale = _mm256_cvtepu8_epi16(_mm_and_si128(raw, low4));
    extra = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), low4));
  }
};

struct Q3KUnpacker {
  // q + 4 = low bits | high bit << 2, in [0, 7].
  static __m256i Chunk(const BlockQ3_K& x, int c) {
    return _mm256_or_si256(Bits(Load(x.qs + 32 * (c / 4)), 2 * (c % 4), 2),
                           BitsAt(Load(x.hmask), c, 1, 2));
  }
  // The sixteen 6-bit scales + 32 (Q3KScale): low 4 bits from bytes 0-7 (low nibble for
  // sub-blocks 0-7, high for 8-15), high 2 bits from bytes 8-11 at 2 (i / 4).
  static void Scales(const BlockQ3_K& x, __m256i& scale, __m256i& extra) {
    uint32_t a[3];
    std::memcpy(a, x.scales, sizeof(a));
    const uint32_t kLow4 = 0x0f0f0f0f, kLow2 = 0x03030303;
    const uint32_t s[4] = {(a[0] & kLow4) | ((a[2] & kLow2) << 4),
                           (a[1] & kLow4) | (((a[2] >> 2) & kLow2) << 4),
                           ((a[0] >> 4) & kLow4) | (((a[2] >> 4) & kLow2) << 4),
                           ((a[1] >> 4) & kLow4) | (((a[2] >> 6) & kLow2) << 4)};
    scale =
        _mm256_sub_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s))),
                         _mm256_set1_epi16(32));
    extra = scale;
  }
};

// Q4_K and Q5_K: one 6-bit scale and min per 32-element chunk.
template <bool kFifthBit>
struct KScaleMinUnpacker {
  template <typename Block>
  static __m256i Chunk(const Block& x, int c) {
    __m256i q = Bits(Load(x.qs + 32 * (c / 2)), 4 * (c % 2), 4);
    if constexpr (kFifthBit) q = _mm256_or_si256(q, BitsAt(Load(x.qh), c, 1, 4));
    return q;
  }
  // KScaleMin for all eight chunks, four bytes at a time: scales 0-3 are the low 6 bits of
  // bytes 0-3, scales 4-7 the low nibbles of bytes 8-11 with the top 2 bits of bytes 0-3
  // above them; mins likewise from bytes 4-7 and the high nibbles of 8-11.
  template <typename Block>
  static void Scales(const Block& x, __m256i& scale, __m256i& extra) {
    uint32_t a[3];
    std::memcpy(a, x.scales, sizeof(a));
    const uint32_t kLow6 = 0x3f3f3f3f, kLow4 = 0x0f0f0f0f, kLow2 = 0x03030303;
    const uint32_t scales[2] = {a[0] & kLow6, (a[2] & kLow4) | (((a[0] >> 6) & kLow2) << 4)};
    const uint32_t mins[2] = {a[1] & kLow6, ((a[2] >> 4) & kLow4) | (((a[1] >> 6) & kLow2) << 4)};
    // Sub-blocks 2c and 2c + 1 share chunk c's scale and min.
    auto per_sub_block = [](const uint32_t* bytes8) {
      uint64_t v;
      std::memcpy(&v, bytes8, sizeof(v));
      const __m128i w = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<int64_t>(v)));
      return _mm256_set_m128i(_mm_unpackhi_epi16(w, w), _mm_unpacklo_epi16(w, w));
    };
    scale = per_sub_block(scales);
    extra = per_sub_block(mins);
  }
};

struct Q6KUnpacker {
  // q + 32, in [0, 63].
  static __m256i Chunk(const BlockQ6_K& x, int c) {
    const int h = c / 4, r = c % 4;
    const __m256i low = Bits(Load(x.ql + 64 * h + 32 * (r % 2)), 4 * (r / 2), 4);
    return _mm256_or_si256(low, BitsAt(Load(x.qh + 32 * h), 2 * r, 2, 4));
  }
  static void Scales(const BlockQ6_K& x, __m256i& scale, __m256i& extra) {
    scale = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x.scales)));
    extra = scale;
  }
};

using Q2KBlocks = KBlocks<BlockQ2_K, Q2KUnpacker, KMins::kMin, 0, 4>;
using Q3KBlocks = KBlocks<BlockQ3_K, Q3KUnpacker, KMins::kOffset, 2, 4>;
using Q4KBlocks = KBlocks<BlockQ4_K, KScaleMinUnpacker<false>, KMins::kMin, 0, 4>;
using Q5KBlocks = KBlocks<BlockQ5_K, KScaleMinUnpacker<true>, KMins::kMin, 0, 4>;
using Q6KBlocks = KBlocks<BlockQ6_K, Q6KUnpacker, KMins::kOffset, 5, 2>;

// Q8_K weights: signed quants and an F32 d. No panel (see SignedBlocks).
struct Q8KBlocks {
  static constexpr bool kNeedsSums = false;
  static constexpr bool kHasPanel = false;
  static constexpr bool kHasFusedTerm = false;
  using Panel = PanelQ8K;
  struct Prep {
    __m256i w[kTileRows][8];
    __m256i w_abs[kTileRows][8];
    alignas(32) float d[kTileRows];
  };
  static void Prepare(const std::byte* const* rows, int64_t b, Prep& p) {
    for (int j = 0; j < kTileRows; ++j) {
      // By byte offsets: a row need not be 4-aligned.
      const std::byte* x = rows[j] + b * static_cast<int64_t>(sizeof(BlockQ8_K));
      std::memcpy(&p.d[j], x + offsetof(BlockQ8_K, d), sizeof(float));
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) {
        const __m256i w = Load(x + offsetof(BlockQ8_K, qs) + 32 * c);
        p.w[j][c] = w;
        p.w_abs[j][c] = _mm256_sign_epi8(w, w);
      }
    }
  }
  static __m256 Term(const Prep& p, const std::byte* xb, int32_t /*x_sum*/) {
    const BlockQ8_K& y = *reinterpret_cast<const BlockQ8_K*>(xb);
    __m256i yv[8];
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) yv[c] = Load(y.qs + 32 * c);
    __m256i v[kTileRows];
#pragma GCC unroll 8
    for (int j = 0; j < kTileRows; ++j) {
      __m256i acc = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) {
        acc = _mm256_add_epi32(acc, DotI8I8(p.w_abs[j][c], p.w[j][c], yv[c]));
      }
      v[j] = acc;
    }
    const __m256 d = _mm256_mul_ps(_mm256_set1_ps(y.d), _mm256_load_ps(p.d));
    return _mm256_mul_ps(d, _mm256_cvtepi32_ps(SumEach(v)));
  }
  static void PanelTerms(const Prep&, int, const PanelQ8K&, __m256*) {}
};

// Fills panel `out` from super-block b of the eight Q8_K rows.
inline void BuildPanelQ8K(const std::byte* const* rows, int64_t b, PanelQ8K& out) {
  for (int c = 0; c < 8; ++c) {
    __m256i r[kPanelRows];
    for (int i = 0; i < kPanelRows; ++i) {
      r[i] = Load(reinterpret_cast<const BlockQ8_K*>(rows[i])[b].qs + 32 * c);
    }
    Transpose8x8(r);
    for (int g = 0; g < 8; ++g) Store(out.qs[c][g], r[g]);
  }
  for (int i = 0; i < kPanelRows; ++i) {
    const BlockQ8_K& x = reinterpret_cast<const BlockQ8_K*>(rows[i])[b];
    out.d[i] = x.d;
    for (int c = 0; c < 8; ++c) {
      out.bsum_pairs[c][i] = static_cast<int32_t>(static_cast<uint16_t>(x.bsums[2 * c]) |
                                                  static_cast<uint32_t>(x.bsums[2 * c + 1]) << 16);
    }
  }
}

}  // namespace uc::kernels::avx2::int8
