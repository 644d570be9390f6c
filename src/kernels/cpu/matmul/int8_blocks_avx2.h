// File: int8_blocks_avx2.h
// -----------------------------------------------------------------------------
// The per-dtype AVX2 kernels of the integer MatMul (matmul_int8_avx2.cc), here for the
// 32-element block types; int8_kquants_avx2.h has the K-quants. A kernel works on a tile of
// eight weight rows:
//   K::Prepare(rows, b, prep) unpacks block b of the eight rows into `prep` (quants as bytes,
//     scales), once per block for all the x rows of a pass;
//   K::Term(prep, xb, x_sum) dots it with one activation block (at xb; x_sum = the sum of its
//     quants, used by Q4_0 and Q5_0): lane j = row j's block term. The decode shape.
//   K::PanelTerms(prep, cols, panel, acc) (where K::kHasPanel) dots each row c < cols with
//     eight x rows at once, their blocks interleaved in a panel, adding to acc[c]: lane i = x
//     row i's block term. The prefill shape: no horizontal sums, and four-byte groups of the
//     weight row are simply broadcast.
//   K::FusedTerm(rows, b, xb, x_sum) (where K::kHasFusedTerm) = Term(Prepare(rows, b), xb,
//     x_sum) with the unpacked block kept in registers: for a pass of one x row, where
//     Prepare's stores and reloads would not be shared.
// Both give, lane by lane, the block term of reference::MatMulInt8: block sums are exact
// integers (any order gives the same int32) and the F32 operations are the reference's, so
// every path, shape and batch produces the same bits.
//
// Integer products use _mm256_maddubs_epi16 (unsigned bytes times signed bytes, adjacent pairs
// added into int16, saturating). No pair here can saturate, because activations are in
// [-127, 127] (tensor/quants.h never makes -128): unsigned quants are at most 63 (2 * 63 * 127 <
// 32767) and signed quants (Q8_0, IQ4_NL, MXFP4, Q8_K) go through the sign trick, |w| * sign(x, w),
// with |w| <= 128 (2 * 128 * 127 = 32512). Products of small unsigned quants are summed further
// in int16 where the bound allows (stated at each place). Offsets (Q4_0's -8, Q6_K's -32, ...,
// and MXFP4's +12 in its FusedTerm, which makes its codes unsigned) are taken out with the
// activation block sums (x_sum, Q8_K's bsums).
//
// On Zen 3, _mm256_hadd_epi32 / _epi16 take two cycles each against half a cycle for maddubs:
// the horizontal sums here are unpacks and adds.
//
// Include only from AVX2_SRCS (see simd_avx2.h).
#pragma once

#include <immintrin.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/matmul/e8m0_simd.h"
#include "kernels/cpu/quant_decoders_avx2.h"
#include "tensor/dtype.h"

namespace uc::kernels::avx2::int8 {

inline constexpr int kTileRows = 8;   // weight rows per tile
inline constexpr int kPanelRows = 8;  // x rows per panel: one per F32 lane

inline uint16_t LoadU16(const std::byte* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// The f16 at byte `offset` of each of the eight rows, as F32.
inline void GatherF16(const std::byte* const* rows, int64_t offset, float* out) {
  auto at = [&](int j) { return static_cast<short>(LoadU16(rows[j] + offset)); };
  _mm256_store_ps(
      out, _mm256_cvtph_ps(_mm_setr_epi16(at(0), at(1), at(2), at(3), at(4), at(5), at(6), at(7))));
}

inline __m256i Load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// The four bytes at p in every int32 lane.
inline __m256i Broadcast4(const void* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return _mm256_set1_epi32(v);
}

// The sixteen bytes at p in both halves.
inline __m256i Broadcast16(const void* p) {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(static_cast<const __m128i*>(p)));
}

// [a | b]: 16 bytes at a in the low half, 16 at b in the high half.
inline __m256i LoadPair(const void* a, const void* b) {
  return _mm256_inserti128_si256(
      _mm256_castsi128_si256(_mm_loadu_si128(static_cast<const __m128i*>(a))),
      _mm_loadu_si128(static_cast<const __m128i*>(b)), 1);
}

// Adjacent-pair dot products of unsigned bytes u and signed bytes s, summed into int32 lanes.
inline __m256i DotU8I8(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

// The same for signed w: |w| * (x with w's signs).
inline __m256i DotI8I8(__m256i w_abs, __m256i w, __m256i x) {
  return DotU8I8(w_abs, _mm256_sign_epi8(x, w));
}

// Per half: [a 0+2, b 0+2, a 1+3, b 1+3] (int32 lanes).
inline __m256i AddInterleaved(__m256i a, __m256i b) {
  return _mm256_add_epi32(_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b));
}

// Lane j = the sum of row j's int32 lanes, from v[p] = [row 2p's four sums | row 2p + 1's].
inline __m256i SumPairedRows(const __m256i* v) {
  const __m256i a = AddInterleaved(v[0], v[1]);
  const __m256i b = AddInterleaved(v[2], v[3]);
  const __m256i sums = _mm256_add_epi32(_mm256_unpacklo_epi64(a, b), _mm256_unpackhi_epi64(a, b));
  // sums = [rows 0, 2, 4, 6 | rows 1, 3, 5, 7].
  return _mm256_permutevar8x32_epi32(sums, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// Lane j = the sum of the eight int32 lanes of v[j].
inline __m256i SumEach(const __m256i* v) {
  const __m256i t[4] = {AddInterleaved(v[0], v[1]), AddInterleaved(v[2], v[3]),
                        AddInterleaved(v[4], v[5]), AddInterleaved(v[6], v[7])};
  // Per half: the half sums of v0..v3, and of v4..v7.
  const __m256i lo =
      _mm256_add_epi32(_mm256_unpacklo_epi64(t[0], t[1]), _mm256_unpackhi_epi64(t[0], t[1]));
  const __m256i hi =
      _mm256_add_epi32(_mm256_unpacklo_epi64(t[2], t[3]), _mm256_unpackhi_epi64(t[2], t[3]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(lo, hi, 0x20),
                          _mm256_permute2x128_si256(lo, hi, 0x31));
}

// r[i] becomes lane i of the eight inputs: the 8x8 transpose of 32-bit lanes.
inline void Transpose8x8(__m256i* r) {
  __m256i t[8], u[8];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {  // rows 0-3, then 4-7
    u[4 * h] = _mm256_unpacklo_epi64(t[4 * h], t[4 * h + 2]);
    u[4 * h + 1] = _mm256_unpackhi_epi64(t[4 * h], t[4 * h + 2]);
    u[4 * h + 2] = _mm256_unpacklo_epi64(t[4 * h + 1], t[4 * h + 3]);
    u[4 * h + 3] = _mm256_unpackhi_epi64(t[4 * h + 1], t[4 * h + 3]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x20);
    r[i + 4] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x31);
  }
}

// Block b of eight Q8_0 / Q8_1 activation rows, interleaved: qs[g] holds elements [4g, 4g + 4)
// of row i at bytes [4i, 4i + 4).
struct alignas(32) PanelQ8 {
  int8_t qs[8][32];
  float d[kPanelRows];      // each row's d, widened
  int32_t sum[kPanelRows];  // Q8_0: the sum of the row's quants
  float s[kPanelRows];      // Q8_1: the row's s, widened
};

// ---------------------------------------------------------------------------------------------
// 32-element blocks. In Prepare, rows 2p and 2p + 1 share a register: lo[p] = [row 2p's
// elements 0-15 | row 2p + 1's elements 0-15], hi[p] = elements 16-31, so that in Term one
// register of activations (16 quants in both halves) serves two rows.

// Q4_0, Q5_0 (offset 8, 16; Q8_0 activations) and Q4_1, Q5_1 (a min; Q8_1 activations): the
// unsigned quant q, x = d * (q - kOffset) (+ m).
template <typename Block, int kOffset, bool kHasMin, bool kFifthBit>
struct UnsignedBlocks {
  static constexpr bool kNeedsSums = kOffset != 0;
  static constexpr bool kHasPanel = true;
  static constexpr bool kHasFusedTerm = true;
  using Panel = PanelQ8;
  struct Prep {
    alignas(32) uint8_t lo[kTileRows / 2][32];
    alignas(32) uint8_t hi[kTileRows / 2][32];
    alignas(32) float d[kTileRows];
    alignas(32) float m[kTileRows];
  };
  using Activation = std::conditional_t<kHasMin, BlockQ8_1, BlockQ8_0>;

  static void Prepare(const std::byte* const* rows, int64_t b, Prep& p) {
    for (int pair = 0; pair < kTileRows / 2; ++pair) {
      __m256i lo, hi;
      Unpack(rows, b, pair, lo, hi);
      _mm256_store_si256(reinterpret_cast<__m256i*>(p.lo[pair]), lo);
      _mm256_store_si256(reinterpret_cast<__m256i*>(p.hi[pair]), hi);
    }
    GatherScales(rows, b, p.d, p.m);
  }

  static __m256 Term(const Prep& p, const std::byte* xb, int32_t x_sum) {
    __m256i lo[kTileRows / 2], hi[kTileRows / 2];
#pragma GCC unroll 4
    for (int pair = 0; pair < kTileRows / 2; ++pair) {
      lo[pair] = Load(p.lo[pair]);
      hi[pair] = Load(p.hi[pair]);
    }
    return TermOf(lo, hi, p.d, p.m, xb, x_sum);
  }

  // Term(Prepare(rows, b), xb, x_sum) with the unpacked block in registers.
  static __m256 FusedTerm(const std::byte* const* rows, int64_t b, const std::byte* xb,
                          int32_t x_sum) {
    __m256i lo[kTileRows / 2], hi[kTileRows / 2];
#pragma GCC unroll 4
    for (int pair = 0; pair < kTileRows / 2; ++pair) Unpack(rows, b, pair, lo[pair], hi[pair]);
    alignas(32) float d[kTileRows], m[kTileRows];
    GatherScales(rows, b, d, m);
    return TermOf(lo, hi, d, m, xb, x_sum);
  }

  // acc[c] += row c's block terms for the panel's eight rows, c < cols.
  static void PanelTerms(const Prep& p, int cols, const PanelQ8& x, __m256* acc) {
    __m256i xq[8];
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) xq[g] = Load(x.qs[g]);
    const __m256 dx = _mm256_load_ps(x.d);
    __m256i offset = _mm256_setzero_si256();
    if constexpr (kOffset != 0) {
      constexpr int kShift = kOffset == 8 ? 3 : 4;
      static_assert(kOffset == 1 << kShift);
      offset = _mm256_slli_epi32(Load(x.sum), kShift);
    }
    __m256 sx = _mm256_setzero_ps();
    if constexpr (kHasMin) sx = _mm256_load_ps(x.s);
    const __m256i ones = _mm256_set1_epi16(1);
    for (int c = 0; c < cols; ++c) {
      // Row c's elements 0-15 and 16-31.
      const uint8_t* lo = p.lo[c / 2] + 16 * (c % 2);
      const uint8_t* hi = p.hi[c / 2] + 16 * (c % 2);
      auto dot = [&](int g) {
        return _mm256_maddubs_epi16(Broadcast4(g < 4 ? lo + 4 * g : hi + 4 * (g - 4)), xq[g]);
      };
      // Per int16 lane, four groups add 8 products of at most 31 * 127 (31496), eight groups
      // 16 of at most 15 * 127 (30480).
      const __m256i first =
          _mm256_add_epi16(_mm256_add_epi16(dot(0), dot(1)), _mm256_add_epi16(dot(2), dot(3)));
      const __m256i second =
          _mm256_add_epi16(_mm256_add_epi16(dot(4), dot(5)), _mm256_add_epi16(dot(6), dot(7)));
      __m256i sumi;
      if constexpr (kFifthBit) {
        sumi = _mm256_add_epi32(_mm256_madd_epi16(first, ones), _mm256_madd_epi16(second, ones));
      } else {
        sumi = _mm256_madd_epi16(_mm256_add_epi16(first, second), ones);
      }
      if constexpr (kOffset != 0) sumi = _mm256_sub_epi32(sumi, offset);
      acc[c] = _mm256_add_ps(acc[c], Scale(_mm256_broadcast_ss(p.d + c), dx, sumi, p.m + c, sx,
                                           /*broadcast_m=*/true));
    }
  }

 private:
  // Block b of rows 2 pair and 2 pair + 1: [row 2p's elements 0-15 | row 2p + 1's] and
  // elements 16-31 likewise, as unsigned bytes.
  static void Unpack(const std::byte* const* rows, int64_t b, int pair, __m256i& lo, __m256i& hi) {
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    const Block& x0 = reinterpret_cast<const Block*>(rows[2 * pair])[b];
    const Block& x1 = reinterpret_cast<const Block*>(rows[2 * pair + 1])[b];
    const __m256i bytes = LoadPair(x0.qs, x1.qs);
    lo = _mm256_and_si256(bytes, low4);
    hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4);
    if constexpr (kFifthBit) {
      const __m256i h0 = quant_detail::HighBitsTimes16(x0.qh);
      const __m256i h1 = quant_detail::HighBitsTimes16(x1.qh);
      lo = _mm256_or_si256(lo, _mm256_permute2x128_si256(h0, h1, 0x20));
      hi = _mm256_or_si256(hi, _mm256_permute2x128_si256(h0, h1, 0x31));
    }
  }

  static void GatherScales(const std::byte* const* rows, int64_t b, float* d, float* m) {
    const int64_t block = b * static_cast<int64_t>(sizeof(Block));
    GatherF16(rows, block + offsetof(Block, d), d);
    if constexpr (kHasMin) GatherF16(rows, block + offsetof(Block, m), m);
  }

  // The block terms of the unpacked rows (lo, hi as Unpack gives them; d and m their scales)
  // against the activation block at xb.
  static __m256 TermOf(const __m256i* lo, const __m256i* hi, const float* d, const float* m,
                       const std::byte* xb, int32_t x_sum) {
    const Activation& x = *reinterpret_cast<const Activation*>(xb);
    const __m256i y_lo = Broadcast16(x.qs);
    const __m256i y_hi = Broadcast16(x.qs + 16);
    __m256i v[kTileRows / 2];
#pragma GCC unroll 4
    for (int pair = 0; pair < kTileRows / 2; ++pair) {
      // Each int16 lane sums 4 products of at most 31 * 127: 15748.
      const __m256i s = _mm256_add_epi16(_mm256_maddubs_epi16(lo[pair], y_lo),
                                         _mm256_maddubs_epi16(hi[pair], y_hi));
      v[pair] = _mm256_madd_epi16(s, _mm256_set1_epi16(1));
    }
    __m256i sumi = SumPairedRows(v);
    if constexpr (kOffset != 0) sumi = _mm256_sub_epi32(sumi, _mm256_set1_epi32(kOffset * x_sum));
    __m256 sx = _mm256_setzero_ps();
    if constexpr (kHasMin) sx = _mm256_set1_ps(_cvtsh_ss(x.s));
    return Scale(_mm256_load_ps(d), _mm256_set1_ps(_cvtsh_ss(x.d)), sumi, m, sx);
  }

  // (dw * dx) * float(sumi), plus mw * sx with a min (the reference's term). `m` points at the
  // eight mins (broadcast_m: at the one min of all lanes).
  static __m256 Scale(__m256 dw, __m256 dx, __m256i sumi, const float* m, __m256 sx,
                      bool broadcast_m = false) {
    __m256 term = _mm256_mul_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(sumi));
    if constexpr (kHasMin) {
      const __m256 mw = broadcast_m ? _mm256_broadcast_ss(m) : _mm256_load_ps(m);
      term = _mm256_add_ps(term, _mm256_mul_ps(mw, sx));
    }
    return term;
  }
};

// A tile of eight rows of Q8_0 or MXFP4 as avx2::PackInt8 lays it out: block b's scale field
// (Q8_0's f16 d, MXFP4's E8M0 byte) of row j at (8 b + j) kScaleBytes, padded to 32 bytes, then
// block b's code bytes (qs) of row j at (8 b + j) kCodeBytes from there. One stream a tile, in
// block order: a block's eight scales are one load, each row's (Q8_0) or row pair's (MXFP4)
// codes one aligned 32-byte line.
template <typename Block>
struct PackedTile {
  static constexpr int64_t kScaleBytes = sizeof(Block) - sizeof(Block::qs);
  static constexpr int64_t kCodeBytes = sizeof(Block::qs);
  static int64_t ScaleBytes(int64_t blocks) { return (8 * kScaleBytes * blocks + 31) / 32 * 32; }
  static int64_t Bytes(int64_t blocks) { return ScaleBytes(blocks) + 8 * kCodeBytes * blocks; }
  const std::byte* scales(int64_t b) const { return base + 8 * kScaleBytes * b; }
  const std::byte* codes(int64_t b, int row) const {
    return base + ScaleBytes(blocks) + kCodeBytes * (8 * b + row);
  }
  const std::byte* base;  // 32-byte aligned
  int64_t blocks;
};

// Q8_0, IQ4_NL and MXFP4 (signed values, kTable: looked up from nibbles in the dtype's table);
// Q8_0 activations. No panel: the sign trick would need a sign per broadcast group and an int32
// sum per group. Q8_0 and MXFP4 also read their packed tile (kHasTile: PrepareTile,
// FusedTermTile), with the same bits.
template <typename Block, bool kTable>
struct SignedBlocks {
  static constexpr bool kMxfp4 = std::is_same_v<Block, BlockMXFP4>;
  // FusedTerm takes MXFP4's codes as unsigned bytes, value + kMxfp4Offset (0..24), and the
  // offset back out with the activation block's sum: no sign instructions.
  static constexpr bool kNeedsSums = kMxfp4;
  static constexpr bool kHasPanel = false;
  static constexpr bool kHasFusedTerm = true;
  static constexpr bool kHasTile = kMxfp4 || !kTable;
  using Tile = PackedTile<Block>;
  static constexpr int kMxfp4Offset = 12;
  alignas(16) static constexpr auto kMxfp4Unsigned = [] {
    std::array<int8_t, 16> t{};
    for (int i = 0; i < 16; ++i) t[i] = static_cast<int8_t>(kMxfp4Values[i] + kMxfp4Offset);
    return t;
  }();
  using Panel = PanelQ8;
  struct Prep {
    __m256i lo[kTileRows / 2], hi[kTileRows / 2];
    __m256i lo_abs[kTileRows / 2], hi_abs[kTileRows / 2];
    alignas(32) float d[kTileRows];
  };

  // The code bytes of block b of rows 2 pair and 2 pair + 1 (row 2 pair in the low half).
  [[gnu::always_inline]] static __m256i PairBytes(const std::byte* const* rows, int pair,
                                                  int64_t b) {
    return LoadPair(reinterpret_cast<const Block*>(rows[2 * pair])[b].qs,
                    reinterpret_cast<const Block*>(rows[2 * pair + 1])[b].qs);
  }

  // A row pair's code bytes of a table type looked up in `table`: lo = elements 0-15 of both
  // rows (row 2 pair in the low half), hi = elements 16-31.
  [[gnu::always_inline]] static void LookUp(__m256i table, __m256i bytes, __m256i& lo,
                                            __m256i& hi) requires kTable {
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    lo = _mm256_shuffle_epi8(table, _mm256_and_si256(bytes, low4));
    hi = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4));
  }

  // Prepare's codes of a table type from each pair's code bytes (pair_bytes(pair): PairBytes'
  // 32 bytes).
  template <typename PairBytesFn>
  [[gnu::always_inline]] static void PrepareCodes(PairBytesFn pair_bytes, Prep& p) requires kTable {
    for (int pair = 0; pair < kTileRows / 2; ++pair) {
      __m256i lo, hi;
      LookUp(Broadcast16(kMxfp4 ? kMxfp4Values : kIq4NlValues), pair_bytes(pair), lo, hi);
      p.lo[pair] = lo;
      p.hi[pair] = hi;
      p.lo_abs[pair] = _mm256_sign_epi8(lo, lo);
      p.hi_abs[pair] = _mm256_sign_epi8(hi, hi);
    }
  }

  // Prepare's codes of Q8_0 from each row's 32 code bytes (row_codes(j)).
  template <typename RowCodesFn>
  [[gnu::always_inline]] static void PrepareQ8(RowCodesFn row_codes, Prep& p) requires(!kTable) {
    for (int pair = 0; pair < kTileRows / 2; ++pair) {
      const std::byte* q0 = row_codes(2 * pair);
      const std::byte* q1 = row_codes(2 * pair + 1);
      p.lo[pair] = LoadPair(q0, q1);
      p.hi[pair] = LoadPair(q0 + 16, q1 + 16);
      p.lo_abs[pair] = _mm256_sign_epi8(p.lo[pair], p.lo[pair]);
      p.hi_abs[pair] = _mm256_sign_epi8(p.hi[pair], p.hi[pair]);
    }
  }

  static void Prepare(const std::byte* const* rows, int64_t b, Prep& p) {
    if constexpr (kTable) {
      PrepareCodes([&](int pair) { return PairBytes(rows, pair, b); }, p);
    } else {
      PrepareQ8([&](int j) { return RowCodes(rows, j, b); }, p);
    }
    if constexpr (kMxfp4) {
      _mm256_store_ps(p.d, E8M0HalfToF32x8(E8M0Bytes(rows, b)));
    } else {
      _mm256_store_ps(p.d, RowF16s(rows, b));
    }
  }

  // Prepare from the packed tile.
  static void PrepareTile(const Tile& tile, int64_t b, Prep& p) requires kHasTile {
    if constexpr (kMxfp4) {
      PrepareCodes([&](int pair) { return Load(tile.codes(b, 2 * pair)); }, p);
      _mm256_store_ps(p.d, E8M0HalfToF32x8(E8M0Bytes(tile, b)));
    } else {
      PrepareQ8([&](int j) { return tile.codes(b, j); }, p);
      _mm256_store_ps(p.d, TileF16s(tile, b));
    }
  }

  static __m256 Term(const Prep& p, const std::byte* xb, int32_t /*x_sum*/) {
    const BlockQ8_0& x = *reinterpret_cast<const BlockQ8_0*>(xb);
    const __m256i y_lo = Broadcast16(x.qs);
    const __m256i y_hi = Broadcast16(x.qs + 16);
    __m256i v[kTileRows / 2];
#pragma GCC unroll 4
    for (int pair = 0; pair < kTileRows / 2; ++pair) {
      v[pair] = _mm256_add_epi32(DotI8I8(p.lo_abs[pair], p.lo[pair], y_lo),
                                 DotI8I8(p.hi_abs[pair], p.hi[pair], y_hi));
    }
    return ScaleSums(_mm256_load_ps(p.d), x, SumPairedRows(v));
  }

  // Term(Prepare(rows, b), xb) with the unpacked block kept in registers (the same integer sums,
  // the same F32 operations, so the same bits): Q8_0 holds each row's 32 quants in one register;
  // the table types hold rows 2p and 2p + 1 in one, as Prepare does, MXFP4 as unsigned codes
  // (kMxfp4Offset) with its eight E8M0 scales widened in one vector. On a 2-core AMD EPYC (AVX2),
  // one thread: `undercurrent bench --matmul int8` on the gpt-oss-20b shape decodes 1.4-1.9x
  // faster than through Prepare / Term (2.2-3.0 -> 4.2-4.8 tokens/s, four interleaved rounds),
  // where the MXFP4 kernel had taken 67% of the time for half the bytes.
  static __m256 FusedTerm(const std::byte* const* rows, int64_t b, const std::byte* xb,
                          int32_t x_sum) {
    const BlockQ8_0& x = *reinterpret_cast<const BlockQ8_0*>(xb);
    if constexpr (kMxfp4) {
      return Mxfp4Term([&](int pair) { return PairBytes(rows, pair, b); }, E8M0Bytes(rows, b), x,
                       x_sum);
    } else if constexpr (kTable) {
      const __m256i table = Broadcast16(kIq4NlValues);
      const __m256i y_lo = Broadcast16(x.qs);
      const __m256i y_hi = Broadcast16(x.qs + 16);
      __m256i v[kTileRows / 2];
#pragma GCC unroll 4
      for (int pair = 0; pair < kTileRows / 2; ++pair) {
        __m256i lo, hi;
        LookUp(table, PairBytes(rows, pair, b), lo, hi);
        v[pair] = _mm256_add_epi32(DotI8I8(_mm256_sign_epi8(lo, lo), lo, y_lo),
                                   DotI8I8(_mm256_sign_epi8(hi, hi), hi, y_hi));
      }
      return ScaleSums(RowF16s(rows, b), x, SumPairedRows(v));
    } else {
      return Q8Term([&](int j) { return RowCodes(rows, j, b); }, RowF16s(rows, b), x);
    }
  }

  // FusedTerm from the packed tile: one aligned load a row (Q8_0) or row pair (MXFP4) and one
  // for the eight scales, where the stored rows take eight two-byte or one-byte loads and inserts
  // for the scales (and MXFP4 two loads and an insert a pair).
  static __m256 FusedTermTile(const Tile& tile, int64_t b, const std::byte* xb,
                              int32_t x_sum) requires kHasTile {
    const BlockQ8_0& x = *reinterpret_cast<const BlockQ8_0*>(xb);
    if constexpr (kMxfp4) {
      return Mxfp4Term([&](int pair) { return Load(tile.codes(b, 2 * pair)); }, E8M0Bytes(tile, b),
                       x, x_sum);
    } else {
      return Q8Term([&](int j) { return tile.codes(b, j); }, TileF16s(tile, b), x);
    }
  }

  static void PanelTerms(const Prep&, int, const PanelQ8&, __m256*) {}

 private:
  // (d_j * dx) * float(sumi_j), lane j = row j: every term's last two operations.
  [[gnu::always_inline]] static __m256 ScaleSums(__m256 d, const BlockQ8_0& x, __m256i sumi) {
    const __m256 scale = _mm256_mul_ps(d, _mm256_set1_ps(_cvtsh_ss(x.d)));
    return _mm256_mul_ps(scale, _mm256_cvtepi32_ps(sumi));
  }

  // Block b's f16 scales of the eight stored rows as F32, lane j = row j (Q8_0, IQ4_NL).
  [[gnu::always_inline]] static __m256 RowF16s(const std::byte* const* rows, int64_t b) {
    alignas(32) float d[kTileRows];
    GatherF16(rows, b * static_cast<int64_t>(sizeof(Block)) + offsetof(Block, d), d);
    return _mm256_load_ps(d);
  }

  // Block b's code bytes of stored row j.
  [[gnu::always_inline]] static const std::byte* RowCodes(const std::byte* const* rows, int j,
                                                          int64_t b) {
    return reinterpret_cast<const std::byte*>(reinterpret_cast<const Block*>(rows[j])[b].qs);
  }

  // Q8_0's block term from each row's 32 code bytes (row_codes(j)) and the eight scales d.
  template <typename RowCodesFn>
  [[gnu::always_inline]] static __m256 Q8Term(RowCodesFn row_codes, __m256 d,
                                              const BlockQ8_0& x) requires(!kTable) {
    const __m256i y = Load(x.qs);
    __m256i v[kTileRows];
#pragma GCC unroll 8
    for (int j = 0; j < kTileRows; ++j) {
      const __m256i w = Load(row_codes(j));
      v[j] = DotI8I8(_mm256_sign_epi8(w, w), w, y);
    }
    return ScaleSums(d, x, SumEach(v));
  }

  // MXFP4's block term from each pair's code bytes (pair_bytes(pair)) and the eight E8M0 bytes
  // as int32 lanes.
  template <typename PairBytesFn>
  [[gnu::always_inline]] static __m256 Mxfp4Term(PairBytesFn pair_bytes, __m256i e,
                                                 const BlockQ8_0& x,
                                                 int32_t x_sum) requires kMxfp4 {
    const __m256i table = Broadcast16(kMxfp4Unsigned.data());
    const __m256i y_lo = Broadcast16(x.qs);
    const __m256i y_hi = Broadcast16(x.qs + 16);
    __m256i v[kTileRows / 2];
#pragma GCC unroll 4
    for (int pair = 0; pair < kTileRows / 2; ++pair) {
      __m256i lo, hi;
      LookUp(table, pair_bytes(pair), lo, hi);
      // Each int16 lane at most 2 * 24 * 127 per product pair: the two halves add in int16.
      v[pair] = _mm256_madd_epi16(
          _mm256_add_epi16(_mm256_maddubs_epi16(lo, y_lo), _mm256_maddubs_epi16(hi, y_hi)),
          _mm256_set1_epi16(1));
    }
    const __m256i sumi =
        _mm256_sub_epi32(SumPairedRows(v), _mm256_set1_epi32(kMxfp4Offset * x_sum));
    return ScaleSums(E8M0HalfToF32x8(e), x, sumi);
  }

  // Block b's E8M0 byte of each of the eight rows, lane j = row j.
  [[gnu::always_inline]] static __m256i E8M0Bytes(const std::byte* const* rows,
                                                  int64_t b) requires kMxfp4 {
    auto e = [&](int j) { return int{reinterpret_cast<const Block*>(rows[j])[b].e}; };
    return _mm256_setr_epi32(e(0), e(1), e(2), e(3), e(4), e(5), e(6), e(7));
  }
  // A tile's eight f16 scales of block b as F32, lane j = row j (Q8_0).
  [[gnu::always_inline]] static __m256 TileF16s(const Tile& tile, int64_t b) requires kHasTile {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tile.scales(b))));
  }
  [[gnu::always_inline]] static __m256i E8M0Bytes(const Tile& tile, int64_t b) requires kMxfp4 {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(tile.scales(b))));
  }

  // E8M0HalfToF32 lane by lane.
  [[gnu::always_inline]] static __m256 E8M0HalfToF32x8(__m256i v) requires kMxfp4 {
    return simd::E8M0HalfToF32x8(v);
  }
};

// Fills panel `out` from block b of the eight rows (Q8_0 or Q8_1, kQ8_1).
template <bool kQ8_1>
void BuildPanelQ8(const std::byte* const* rows, int64_t b, PanelQ8& out) {
  using Block = std::conditional_t<kQ8_1, BlockQ8_1, BlockQ8_0>;
  __m256i r[kPanelRows];
  for (int i = 0; i < kPanelRows; ++i) {
    const Block& x = reinterpret_cast<const Block*>(rows[i])[b];
    r[i] = Load(x.qs);
    out.d[i] = _cvtsh_ss(x.d);
    if constexpr (kQ8_1) {
      out.s[i] = _cvtsh_ss(x.s);
    } else {
      // Sum of the 32 quants: widen pairs and add.
      const __m256i pairs =
          _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), r[i]), _mm256_set1_epi16(1));
      __m128i s = _mm_add_epi32(_mm256_castsi256_si128(pairs), _mm256_extracti128_si256(pairs, 1));
      s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
      out.sum[i] = _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1)));
    }
  }
  Transpose8x8(r);
  for (int g = 0; g < 8; ++g) _mm256_store_si256(reinterpret_cast<__m256i*>(out.qs[g]), r[g]);
}

}  // namespace uc::kernels::avx2::int8
