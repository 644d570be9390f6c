// File: int8_blocks_avx2.h
// -----------------------------------------------------------------------------
// The per-dtype AVX2 kernels of the integer MatMul (matmul_int8_avx2.cc). A kernel works on a
// tile of eight weight rows, one per F32 lane:
//   K::Prepare(rows, b, prep) unpacks block b of the eight rows into `prep` (integer quants as
//     bytes, scales as vectors), once per block for all the x rows of a pass;
//   K::Term(prep, xb, x_sum) dots it with one activation block (at xb; x_sum = the sum of its
//     quants, used by Q4_0 and Q5_0) and returns the eight block terms of reference::MatMulInt8.
// The block's integer sums are exact (any order gives the same int32), the F32 operations are
// the reference's, lane by lane, so every lane equals the scalar reference bit for bit.
//
// Integer products use _mm256_maddubs_epi16 (unsigned bytes times signed bytes, adjacent pairs
// added into int16, saturating). No pair here can saturate, because activations are in
// [-127, 127] (tensor/quants.h never makes -128): unsigned quants are at most 63 (2 * 63 * 127 <
// 32767) and signed quants (Q8_0, IQ4_NL, Q8_K) go through the sign trick, |w| * sign(x, w),
// with |w| <= 128 (2 * 128 * 127 = 32512). Offsets (Q4_0's -8, Q6_K's -32, ...) are taken out
// of the unsigned products with the activation block sums (x_sum, Q8_K's bsums).
//
// Include only from AVX2_SRCS (see simd_avx2.h).
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/quant_decoders_avx2.h"
#include "tensor/dtype.h"

namespace uc::kernels::avx2::int8 {

inline constexpr int kTileRows = 8;  // weight rows per tile: one per F32 lane

inline uint16_t LoadU16(const std::byte* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// The f16 at byte `offset` of each of the eight rows, as F32 lanes.
inline __m256 GatherF16(const std::byte* const* rows, int64_t offset) {
  auto at = [&](int j) { return static_cast<short>(LoadU16(rows[j] + offset)); };
  return _mm256_cvtph_ps(_mm_setr_epi16(at(0), at(1), at(2), at(3), at(4), at(5), at(6), at(7)));
}

// Lane j = the sum of the eight int32 lanes of v[j].
inline __m256i SumEach(const __m256i* v) {
  const __m256i ab =
      _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  const __m256i cd =
      _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
  // ab = [v0..v3 partial (low 128 bits of each) | v0..v3 partial (high)], cd likewise.
  return _mm256_add_epi32(_mm256_permute2x128_si256(ab, cd, 0x20),
                          _mm256_permute2x128_si256(ab, cd, 0x31));
}

// Adjacent-pair dot products of unsigned bytes u and signed bytes s, summed into int32 lanes.
inline __m256i DotU8I8(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

// The same for signed w: |w| * (x with w's signs).
inline __m256i DotI8I8(__m256i w_abs, __m256i w, __m256i x) {
  return DotU8I8(w_abs, _mm256_sign_epi8(x, w));
}

inline __m256i LoadBytes(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

// ---------------------------------------------------------------------------------------------
// 32-element blocks.

// Q4_0, Q5_0 (offset 8, 16; Q8_0 activations) and Q4_1, Q5_1 (a min; Q8_1 activations): the
// unsigned quant q, x = d * (q - kOffset) (+ m).
template <typename Block, int kOffset, bool kHasMin, bool kFifthBit>
struct UnsignedBlocks {
  static constexpr bool kNeedsSums = kOffset != 0;
  struct Prep {
    __m256i q[kTileRows];
    __m256 d, m;
  };
  using Activation = std::conditional_t<kHasMin, BlockQ8_1, BlockQ8_0>;

  static void Prepare(const std::byte* const* rows, int64_t b, Prep& p) {
    for (int j = 0; j < kTileRows; ++j) {
      const Block& x = reinterpret_cast<const Block*>(rows[j])[b];
      __m256i q = quant_detail::Nibbles32(x.qs);
      if constexpr (kFifthBit) q = _mm256_or_si256(q, quant_detail::HighBitsTimes16(x.qh));
      p.q[j] = q;
    }
    const int64_t block = b * static_cast<int64_t>(sizeof(Block));
    p.d = GatherF16(rows, block + offsetof(Block, d));
    if constexpr (kHasMin) p.m = GatherF16(rows, block + offsetof(Block, m));
  }

  static __m256 Term(const Prep& p, const std::byte* xb, int32_t x_sum) {
    const Activation& x = *reinterpret_cast<const Activation*>(xb);
    const __m256i y = LoadBytes(x.qs);
    __m256i v[kTileRows];
#pragma GCC unroll 8
    for (int j = 0; j < kTileRows; ++j) v[j] = DotU8I8(p.q[j], y);
    __m256i sumi = SumEach(v);
    if constexpr (kOffset != 0) sumi = _mm256_sub_epi32(sumi, _mm256_set1_epi32(kOffset * x_sum));
    const __m256 scale = _mm256_mul_ps(p.d, _mm256_set1_ps(_cvtsh_ss(x.d)));
    __m256 term = _mm256_mul_ps(scale, _mm256_cvtepi32_ps(sumi));
    if constexpr (kHasMin) {
      term = _mm256_add_ps(term, _mm256_mul_ps(p.m, _mm256_set1_ps(_cvtsh_ss(x.s))));
    }
    return term;
  }
};

// Q8_0 and IQ4_NL (signed values, kTable: looked up from nibbles); Q8_0 activations.
template <typename Block, bool kTable>
struct SignedBlocks {
  static constexpr bool kNeedsSums = false;
  struct Prep {
    __m256i w[kTileRows];
    __m256i w_abs[kTileRows];
    __m256 d;
  };

  static void Prepare(const std::byte* const* rows, int64_t b, Prep& p) {
    for (int j = 0; j < kTileRows; ++j) {
      const Block& x = reinterpret_cast<const Block*>(rows[j])[b];
      __m256i w;
      if constexpr (kTable) {
        const __m256i table = _mm256_broadcastsi128_si256(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4NlValues)));
        w = _mm256_shuffle_epi8(table, quant_detail::Nibbles32(x.qs));
      } else {
        w = LoadBytes(x.qs);
      }
      p.w[j] = w;
      p.w_abs[j] = _mm256_sign_epi8(w, w);
    }
    p.d = GatherF16(rows, b * static_cast<int64_t>(sizeof(Block)) + offsetof(Block, d));
  }

  static __m256 Term(const Prep& p, const std::byte* xb, int32_t /*x_sum*/) {
    const BlockQ8_0& x = *reinterpret_cast<const BlockQ8_0*>(xb);
    const __m256i y = LoadBytes(x.qs);
    __m256i v[kTileRows];
#pragma GCC unroll 8
    for (int j = 0; j < kTileRows; ++j) v[j] = DotI8I8(p.w_abs[j], p.w[j], y);
    const __m256 scale = _mm256_mul_ps(p.d, _mm256_set1_ps(_cvtsh_ss(x.d)));
    return _mm256_mul_ps(scale, _mm256_cvtepi32_ps(SumEach(v)));
  }
};

// ---------------------------------------------------------------------------------------------
// Super-blocks (Q8_K activations). A super-block is eight 32-element chunks; chunk c of the
// activations is y.qs[32 c, 32 c + 32).

// How the sub-block mins enter a K-quant term.
enum class KMins {
  kNone,    // Q2_K / Q4_K / Q5_K's: term = dy d sumi - dy dmin sum(min * bsum)
  kOffset,  // Q3_K / Q6_K: unsigned q = value + offset; sumi -= offset * sum(scale * bsum)
};

// Unsigned quants of the eight rows, per 32-element chunk, with the int16 scale of each maddubs
// pair and, per row, the sixteen sub-block mins (kNone) or scales (kOffset) for the bsums.
struct KPrep {
  __m256i q[kTileRows][8];
  __m256i scale[kTileRows][8];
  __m256i per_sub_block[kTileRows];
  __m256 d, dmin;
};

// [s[2c] x 8 | s[2c + 1] x 8] from the sixteen int16 sub-block scales s: chunk c's pair scales.
inline __m256i ChunkScales(__m256i s, int c) {
  const __m256i pair = _mm256_permutevar8x32_epi32(s, _mm256_set1_epi32(c));
  const __m256i pick = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1,  //
                                        2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3);
  return _mm256_shuffle_epi8(pair, pick);
}

// sumi (and the bsum term) of one super-block for the eight rows; returns the block terms.
template <KMins kMins, int kOffsetShift>
__m256 KTerm(const KPrep& p, const BlockQ8_K& y) {
  __m256i yv[8];
#pragma GCC unroll 8
  for (int c = 0; c < 8; ++c) yv[c] = LoadBytes(y.qs + 32 * c);
  __m256i v[kTileRows];
#pragma GCC unroll 8
  for (int j = 0; j < kTileRows; ++j) {
    __m256i acc = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
      acc = _mm256_add_epi32(
          acc, _mm256_madd_epi16(_mm256_maddubs_epi16(p.q[j][c], yv[c]), p.scale[j][c]));
    }
    v[j] = acc;
  }
  __m256i sumi = SumEach(v);
  const __m256i bsums = LoadBytes(y.bsums);
  __m256i u[kTileRows];
#pragma GCC unroll 8
  for (int j = 0; j < kTileRows; ++j) u[j] = _mm256_madd_epi16(p.per_sub_block[j], bsums);
  const __m256i sub = SumEach(u);
  const __m256 dy = _mm256_set1_ps(y.d);
  if constexpr (kMins == KMins::kOffset) {
    sumi = _mm256_sub_epi32(sumi, _mm256_slli_epi32(sub, kOffsetShift));
    return _mm256_mul_ps(_mm256_mul_ps(p.d, dy), _mm256_cvtepi32_ps(sumi));
  } else {
    const __m256 term = _mm256_mul_ps(_mm256_mul_ps(p.d, dy), _mm256_cvtepi32_ps(sumi));
    return _mm256_sub_ps(term, _mm256_mul_ps(_mm256_mul_ps(p.dmin, dy), _mm256_cvtepi32_ps(sub)));
  }
}

template <typename Block>
const Block& SuperBlock(const std::byte* const* rows, int j, int64_t b) {
  return reinterpret_cast<const Block*>(rows[j])[b];
}

// (bytes >> shift) & mask per byte.
inline __m256i Bits(__m256i bytes, int shift, uint8_t mask) {
  return quant_detail::ShiftMask(bytes, shift, mask);
}

struct Q2KBlocks {
  static constexpr bool kNeedsSums = false;
  using Prep = KPrep;
  static void Prepare(const std::byte* const* rows, int64_t b, Prep& p) {
    for (int j = 0; j < kTileRows; ++j) {
      const BlockQ2_K& x = SuperBlock<BlockQ2_K>(rows, j, b);
      const __m256i qs[2] = {LoadBytes(x.qs), LoadBytes(x.qs + 32)};
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) p.q[j][c] = Bits(qs[c / 4], 2 * (c % 4), 3);
      const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.scales));
      const __m128i low = _mm_and_si128(raw, _mm_set1_epi8(0xF));
      const __m128i high = _mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(0xF));
      const __m256i scales = _mm256_cvtepu8_epi16(low);
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) p.scale[j][c] = ChunkScales(scales, c);
      p.per_sub_block[j] = _mm256_cvtepu8_epi16(high);
    }
    const int64_t block = b * static_cast<int64_t>(sizeof(BlockQ2_K));
    p.d = GatherF16(rows, block + offsetof(BlockQ2_K, d));
    p.dmin = GatherF16(rows, block + offsetof(BlockQ2_K, dmin));
  }
  static __m256 Term(const Prep& p, const std::byte* xb, int32_t /*x_sum*/) {
    return KTerm<KMins::kNone, 0>(p, *reinterpret_cast<const BlockQ8_K*>(xb));
  }
};

struct Q3KBlocks {
  static constexpr bool kNeedsSums = false;
  using Prep = KPrep;
  static void Prepare(const std::byte* const* rows, int64_t b, Prep& p) {
    for (int j = 0; j < kTileRows; ++j) {
      const BlockQ3_K& x = SuperBlock<BlockQ3_K>(rows, j, b);
      const __m256i qs[2] = {LoadBytes(x.qs), LoadBytes(x.qs + 32)};
      const __m256i hmask = LoadBytes(x.hmask);
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) {
        // q + 4 = low bits | high bit << 2, in [0, 7].
        p.q[j][c] = _mm256_or_si256(Bits(qs[c / 4], 2 * (c % 4), 3),
                                    _mm256_slli_epi16(Bits(hmask, c, 1), 2));
      }
      // The sixteen 6-bit scales + 32 (Q3KScale): low 4 bits from bytes 0-7 (low nibble for
      // sub-blocks 0-7, high for 8-15), high 2 bits from bytes 8-11 at 2 (i / 4).
      uint32_t a[3];
      std::memcpy(a, x.scales, sizeof(a));
      const uint32_t kLow4 = 0x0f0f0f0f, kLow2 = 0x03030303;
      const uint32_t s[4] = {(a[0] & kLow4) | ((a[2] & kLow2) << 4),
                             (a[1] & kLow4) | (((a[2] >> 2) & kLow2) << 4),
                             ((a[0] >> 4) & kLow4) | (((a[2] >> 4) & kLow2) << 4),
                             ((a[1] >> 4) & kLow4) | (((a[2] >> 6) & kLow2) << 4)};
      const __m256i scales = _mm256_sub_epi16(
          _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s))),
          _mm256_set1_epi16(32));
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) p.scale[j][c] = ChunkScales(scales, c);
      p.per_sub_block[j] = scales;
    }
    p.d = GatherF16(rows, b * static_cast<int64_t>(sizeof(BlockQ3_K)) + offsetof(BlockQ3_K, d));
  }
  static __m256 Term(const Prep& p, const std::byte* xb, int32_t /*x_sum*/) {
    return KTerm<KMins::kOffset, 2>(p, *reinterpret_cast<const BlockQ8_K*>(xb));
  }
};

// Q4_K and Q5_K: one 6-bit scale and min per 32-element chunk.
template <typename Block, bool kFifthBit>
struct KScaleMinBlocks {
  static constexpr bool kNeedsSums = false;
  using Prep = KPrep;
  static void Prepare(const std::byte* const* rows, int64_t b, Prep& p) {
    for (int j = 0; j < kTileRows; ++j) {
      const Block& x = SuperBlock<Block>(rows, j, b);
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) {
        __m256i q = Bits(LoadBytes(x.qs + 32 * (c / 2)), 4 * (c % 2), 0xF);
        if constexpr (kFifthBit) {
          q = _mm256_or_si256(q, _mm256_slli_epi16(Bits(LoadBytes(x.qh), c, 1), 4));
        }
        p.q[j][c] = q;
      }
      // KScaleMin for all eight chunks at once, four bytes at a time: scales 0-3 are the low 6
      // bits of bytes 0-3, scales 4-7 the low nibbles of bytes 8-11 with the top 2 bits of bytes
      // 0-3 above them; mins likewise from bytes 4-7 and the high nibbles of 8-11.
      uint32_t a[3];
      std::memcpy(a, x.scales, sizeof(a));
      const uint32_t kLow6 = 0x3f3f3f3f, kLow4 = 0x0f0f0f0f, kLow2 = 0x03030303;
      const uint32_t scales[2] = {a[0] & kLow6, (a[2] & kLow4) | (((a[0] >> 6) & kLow2) << 4)};
      const uint32_t mins[2] = {a[1] & kLow6, ((a[2] >> 4) & kLow4) | (((a[1] >> 6) & kLow2) << 4)};
      uint8_t s[8];
      std::memcpy(s, scales, sizeof(s));
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) p.scale[j][c] = _mm256_set1_epi16(s[c]);
      uint64_t m8;
      std::memcpy(&m8, mins, sizeof(m8));
      const __m128i m = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<int64_t>(m8)));
      // Sub-blocks 2c and 2c + 1 share chunk c's min.
      p.per_sub_block[j] = _mm256_set_m128i(_mm_unpackhi_epi16(m, m), _mm_unpacklo_epi16(m, m));
    }
    const int64_t block = b * static_cast<int64_t>(sizeof(Block));
    p.d = GatherF16(rows, block + offsetof(Block, d));
    p.dmin = GatherF16(rows, block + offsetof(Block, dmin));
  }
  static __m256 Term(const Prep& p, const std::byte* xb, int32_t /*x_sum*/) {
    return KTerm<KMins::kNone, 0>(p, *reinterpret_cast<const BlockQ8_K*>(xb));
  }
};

struct Q6KBlocks {
  static constexpr bool kNeedsSums = false;
  using Prep = KPrep;
  static void Prepare(const std::byte* const* rows, int64_t b, Prep& p) {
    for (int j = 0; j < kTileRows; ++j) {
      const BlockQ6_K& x = SuperBlock<BlockQ6_K>(rows, j, b);
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) {
        const int h = c / 4, r = c % 4;
        const __m256i low = Bits(LoadBytes(x.ql + 64 * h + 32 * (r % 2)), 4 * (r / 2), 0xF);
        const __m256i high = Bits(LoadBytes(x.qh + 32 * h), 2 * r, 3);
        p.q[j][c] = _mm256_or_si256(low, _mm256_slli_epi16(high, 4));  // q + 32, in [0, 63]
      }
      const __m256i scales =
          _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x.scales)));
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) p.scale[j][c] = ChunkScales(scales, c);
      p.per_sub_block[j] = scales;
    }
    p.d = GatherF16(rows, b * static_cast<int64_t>(sizeof(BlockQ6_K)) + offsetof(BlockQ6_K, d));
  }
  static __m256 Term(const Prep& p, const std::byte* xb, int32_t /*x_sum*/) {
    return KTerm<KMins::kOffset, 5>(p, *reinterpret_cast<const BlockQ8_K*>(xb));
  }
};

// Q8_K weights: signed quants and an F32 d.
struct Q8KBlocks {
  static constexpr bool kNeedsSums = false;
  struct Prep {
    __m256i w[kTileRows][8];
    __m256i w_abs[kTileRows][8];
    __m256 d;
  };
  static void Prepare(const std::byte* const* rows, int64_t b, Prep& p) {
    float d[kTileRows];
    for (int j = 0; j < kTileRows; ++j) {
      // By byte offsets: a row need not be 4-aligned.
      const std::byte* x = rows[j] + b * static_cast<int64_t>(sizeof(BlockQ8_K));
      std::memcpy(&d[j], x + offsetof(BlockQ8_K, d), sizeof(float));
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) {
        const __m256i w = LoadBytes(x + offsetof(BlockQ8_K, qs) + 32 * c);
        p.w[j][c] = w;
        p.w_abs[j][c] = _mm256_sign_epi8(w, w);
      }
    }
    p.d = _mm256_loadu_ps(d);
  }
  static __m256 Term(const Prep& p, const std::byte* xb, int32_t /*x_sum*/) {
    const BlockQ8_K& y = *reinterpret_cast<const BlockQ8_K*>(xb);
    __m256i yv[8];
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) yv[c] = LoadBytes(y.qs + 32 * c);
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
    return _mm256_mul_ps(_mm256_mul_ps(p.d, _mm256_set1_ps(y.d)), _mm256_cvtepi32_ps(SumEach(v)));
  }
};

// Calls fn(Kernel{}) with the kernel of a quantized weight dtype; false for any other dtype.
template <typename Fn>
bool VisitInt8Kernel(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kQ8_0:
      fn(SignedBlocks<BlockQ8_0, false>{});
      return true;
    case DType::kIQ4_NL:
      fn(SignedBlocks<BlockIQ4_NL, true>{});
      return true;
    case DType::kQ4_0:
      fn(UnsignedBlocks<BlockQ4_0, 8, false, false>{});
      return true;
    case DType::kQ5_0:
      fn(UnsignedBlocks<BlockQ5_0, 16, false, true>{});
      return true;
    case DType::kQ4_1:
      fn(UnsignedBlocks<BlockQ4_1, 0, true, false>{});
      return true;
    case DType::kQ5_1:
      fn(UnsignedBlocks<BlockQ5_1, 0, true, true>{});
      return true;
    case DType::kQ2_K:
      fn(Q2KBlocks{});
      return true;
    case DType::kQ3_K:
      fn(Q3KBlocks{});
      return true;
    case DType::kQ4_K:
      fn(KScaleMinBlocks<BlockQ4_K, false>{});
      return true;
    case DType::kQ5_K:
      fn(KScaleMinBlocks<BlockQ5_K, true>{});
      return true;
    case DType::kQ6_K:
      fn(Q6KBlocks{});
      return true;
    case DType::kQ8_K:
      fn(Q8KBlocks{});
      return true;
    default:
      return false;
  }
}

}  // namespace uc::kernels::avx2::int8
