// File: int8_kquants_avx512.h
// -----------------------------------------------------------------------------
// The AVX-512 integer MatMul's kernels for the K-quants (Q2_K ... Q6_K, Q8_K; matmul_int8_avx512.cc
// has the design and the drivers that call them): unpacking into KPrep and KLanes, the packed
// layouts of Q4_K, Q5_K and Q6_K, and the decode row kernels.
// Include only from matmul_int8_avx512.cc, after kernels/cpu/avx512_gcc_workaround.h: the
// definitions are in an anonymous namespace, so that no AVX-512 copy of an inline function
// can be the one the linker keeps for code that runs on CPUs without AVX-512 (the .cc's
// header says more).
#pragma once

#if defined(__x86_64__)

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/matmul/int8_common_avx512.h"
#include "tensor/dtype.h"

namespace uc::kernels::avx512 {
namespace {  // NOLINT(build/namespaces): one translation unit

// ---------------------------------------------------------------------------------------------
// K-quants (Q8_K activations). A super-block is eight 32-element chunks; sub-block i (16
// elements) is half i % 2 of chunk i / 2. Every type unpacks into one KPrep: per row, the
// unsigned quants in element order, the integer scale of each sub-block and, per sub-block,
// either the min (kMin: Q2_K, Q4_K, Q5_K: term = dy d sumi - dy dmin sum(min * bsum)) or again
// the scale (kOffset: Q3_K, Q6_K, Q8_K: sumi -= offset * sum(scale * bsum)).

enum class KMins { kMin, kOffset };

struct KPrep {
  alignas(64) uint8_t q[kTileRows][kQK_K];           // [row] unsigned quants
  alignas(64) int16_t sub_scale[kTileRows][16];      // [row][sub-block] integer scale
  alignas(64) int16_t sub_extra[kTileRows][16];      // [row][sub-block] min, or scale (kOffset)
  alignas(64) int16_t pair_scale[kTileRows][4][32];  // [row][64 elements]: scale of each pair
  alignas(64) int16_t neg_offset[kTileRows][32];     // kOffset: -(scale << shift), then 16 zeros
  alignas(64) float d[kTileRows], dmin[kTileRows];
};

// (bytes >> shift) & mask per byte.
__m256i Bits(__m256i bytes, int shift, uint8_t mask) {
  return _mm256_and_si256(_mm256_srli_epi16(bytes, shift),
                          _mm256_set1_epi8(static_cast<char>(mask)));
}

// pair_scale (unless kUnitScale) and neg_offset of row j from its sub_scale and sub_extra.
template <KMins kMins, int kShift, bool kUnitScale>
void FinishKRow(KPrep& p, int j) {
  alignas(64) static constexpr int16_t kPairSubBlock[32] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1,
                                                            1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2,
                                                            2, 2, 3, 3, 3, 3, 3, 3, 3, 3};
  const __m512i scales = _mm512_zextsi256_si512(Load256(p.sub_scale[j]));
  const __m512i pick = Load(kPairSubBlock);
#pragma GCC unroll 4
  for (int r = 0; r < (kUnitScale ? 0 : 4); ++r) {
    // Register r covers elements [64 r, 64 r + 64): pair t is in sub-block 4 r + t / 8.
    const __m512i index = _mm512_add_epi16(pick, _mm512_set1_epi16(static_cast<int16_t>(4 * r)));
    _mm512_store_si512(p.pair_scale[j][r], _mm512_permutexvar_epi16(index, scales));
  }
  if constexpr (kMins == KMins::kOffset) {
    const __m256i neg = _mm256_sub_epi16(_mm256_setzero_si256(),
                                         _mm256_slli_epi16(Load256(p.sub_extra[j]), kShift));
    _mm512_store_si512(p.neg_offset[j], _mm512_zextsi256_si512(neg));
  }
}

// The block terms of sixteen weight rows (lanes) against one activation super-block (its d
// and bsums, broadcast to both halves), from their integer sums sumi (with any kOffset term in
// them), their d and dmin, and (kMin) the mins of their sub-blocks.
template <KMins kMins>
__m512 KTileTerm(__m512i sumi, float y_d, __m512i bsums, const float* d_rows,
                 const float* dmin_rows, const int16_t (*mins)[16]) {
  const __m512 dy = _mm512_set1_ps(y_d);
  const __m512 d = _mm512_mul_ps(dy, _mm512_load_ps(d_rows));
  if constexpr (kMins == KMins::kOffset) {
    return _mm512_mul_ps(d, _mm512_cvtepi32_ps(sumi));
  } else {
    __m512i e[kTileRows / 2];
#pragma GCC unroll 8
    for (int pr = 0; pr < kTileRows / 2; ++pr) {
      e[pr] = _mm512_madd_epi16(Load(mins[2 * pr]), bsums);  // rows 2 pr, 2 pr + 1
    }
    const __m512 dmin = _mm512_mul_ps(dy, _mm512_load_ps(dmin_rows));
    return _mm512_sub_ps(_mm512_mul_ps(d, _mm512_cvtepi32_ps(sumi)),
                         _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(SumPairedRows(e))));
  }
}

// The block terms for the sixteen rows (lanes) against one activation super-block.
template <KMins kMins, int kShift, bool kUnitScale>
__m512 KTerm(const KPrep& p, const BlockQ8_K& y) {
  __m512i yv[4];
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r) yv[r] = Load(y.qs + 64 * r);
  const __m512i bsums = _mm512_broadcast_i64x4(Load256(y.bsums));
  __m512i v[kTileRows];
#pragma GCC unroll 16
  for (int j = 0; j < kTileRows; ++j) {
    __m512i acc = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
      const __m512i q = Load(p.q[j] + 64 * r);
      if constexpr (kUnitScale) {
        acc = _mm512_dpbusd_epi32(acc, q, yv[r]);
      } else {
        acc = _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(q, yv[r]), Load(p.pair_scale[j][r]));
      }
    }
    if constexpr (kMins == KMins::kOffset)
      acc = _mm512_dpwssd_epi32(acc, Load(p.neg_offset[j]), bsums);
    v[j] = acc;
  }
  return KTileTerm<kMins>(SumEach(v), y.d, bsums, p.d, p.dmin, p.sub_extra);
}

// A tile's super-block with its sixteen weight rows as lanes, for the K-quants' m >= 16 kernel
// (LaneTileRange): each four-byte group of the sixteen rows is one vector, met by an x row's
// group broadcast from memory in dpbusd, and the rows' sub-block scales are vectors too.
struct alignas(64) KLanes {
  uint8_t q[64][64];      // [group g][4 j + i]: row j's unsigned quant 4 g + i
  int32_t scale[16][16];  // [sub-block][row]: the scale, zero-extended (dpwssd) or sign-extended
  // [c][row]: sub_extra 2 c (low half) and 2 c + 1 (high half); with kPairScale (Q4_K, Q5_K)
  // the mins of chunks 2 (c / 2) and 2 (c / 2) + 1 instead (KLaneTerms).
  int32_t extra[8][16];
  float d[kTileRows], dmin[kTileRows];
};

// Transpose16x16 as a call, as StorePanel had it (ChunkTileRange measured level or slower with
// the transpose inlined).
[[gnu::noinline]] void TransposeOutOfLine(__m512* v) { Transpose16x16(v); }

// Writes the 16 x 16 int32 transpose of v_in[0..16) to out: 64-byte row i of out (i < count)
// holds int32 i of every v_in[j], in lane j.
[[gnu::always_inline]] inline void TransposeRows(const __m512i* v_in, void* out, int count) {
  __m512 v[kTileRows];
#pragma GCC unroll 16
  for (int j = 0; j < kTileRows; ++j) v[j] = _mm512_castsi512_ps(v_in[j]);
  Transpose16x16(v);
  for (int i = 0; i < count; ++i) _mm512_store_ps(static_cast<float*>(out) + 16 * i, v[i]);
}

// KLanes from the unpacked rows of p. kSignExtend: scales for vpmulld, else for dpwssd.
// kPairMins (Q4_K, Q5_K: sub_extra 2 c and 2 c + 1 both hold chunk c's min): extra[c] holds the
// mins of chunks 2 (c / 2) and 2 (c / 2) + 1, as KLaneTerms' kPairScale takes them.
template <bool kSignExtend, bool kPairMins>
void ToLanes(const KPrep& p, KLanes& w) {
  __m512i v[kTileRows];
  for (int part = 0; part < 4; ++part) {
#pragma GCC unroll 16
    for (int j = 0; j < kTileRows; ++j) v[j] = _mm512_load_si512(p.q[j] + 64 * part);
    TransposeRows(v, w.q[16 * part], 16);
  }
#pragma GCC unroll 16
  for (int j = 0; j < kTileRows; ++j) {
    const __m256i s = Load256(p.sub_scale[j]);
    v[j] = kSignExtend ? _mm512_cvtepi16_epi32(s) : _mm512_cvtepu16_epi32(s);
  }
  TransposeRows(v, w.scale, 16);
#pragma GCC unroll 16
  for (int j = 0; j < kTileRows; ++j) {
    // int16 2 c + h of the row's extras: sub-block 4 (c / 2) + 2 h (kPairMins), else 2 c + h.
    alignas(32) static constexpr int16_t kPairIndex[16] = {0, 2,  0, 2,  4,  6,  4,  6,
                                                           8, 10, 8, 10, 12, 14, 12, 14};
    const __m256i extra = Load256(p.sub_extra[j]);
    v[j] = _mm512_zextsi256_si512(kPairMins ? _mm256_permutexvar_epi16(Load256(kPairIndex), extra)
                                            : extra);
  }
  TransposeRows(v, w.extra, 8);
  std::memcpy(w.d, p.d, sizeof(w.d));
  std::memcpy(w.dmin, p.dmin, sizeof(w.dmin));
}

// One x row's running sums in KLaneTerms.
struct LaneSums {
  __m512i sumi, extra;
};

// Adds sub-blocks 2c and 2c + 1 of x row y to its sums s, with the sixteen weight rows' groups
// wv (eight) and scales of those sub-blocks.
template <int kDotGroups, bool kUnitScale, bool kMulLo, bool kPairScale>
[[gnu::always_inline]] inline void LaneChunk(const __m512i* wv, const __m512i* scale, __m512i e,
                                             const BlockQ8_K* y, int c, LaneSums& s) {
  if constexpr (kPairScale) {
    // One scale for both halves: the 32-element sum (at most 32 * 31 * 127) times it once, in two
    // chains of four dpbusd (one chain of eight waits on dpbusd's latency).
    static_assert(kMulLo);
    const int8_t* xq = y->qs + 32 * c;
    __m512i t0 = DpbusdBroadcast(_mm512_setzero_si512(), wv[0], xq);
    __m512i t1 = DpbusdBroadcast(_mm512_setzero_si512(), wv[4], xq + 16);
#pragma GCC unroll 4
    for (int g = 1; g < 4; ++g) {
      t0 = DpbusdBroadcast(t0, wv[g], xq + 4 * g);
      t1 = DpbusdBroadcast(t1, wv[4 + g], xq + 16 + 4 * g);
    }
    s.sumi = _mm512_add_epi32(s.sumi, _mm512_mullo_epi32(_mm512_add_epi32(t0, t1), scale[0]));
    return;  // the mins: KLaneTerms, once per two chunks
  }
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const int8_t* xq = y->qs + 32 * c + 16 * h;
    const __m512i* w = wv + 4 * h;
    if constexpr (kUnitScale) {
#pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) s.sumi = DpbusdBroadcast(s.sumi, w[g], xq + 4 * g);
    } else if constexpr (kMulLo) {
      __m512i t = DpbusdBroadcast(_mm512_setzero_si512(), w[0], xq);
#pragma GCC unroll 4
      for (int g = 1; g < 4; ++g) t = DpbusdBroadcast(t, w[g], xq + 4 * g);
      s.sumi = _mm512_add_epi32(s.sumi, _mm512_mullo_epi32(t, scale[h]));
    } else {
#pragma GCC unroll 4
      for (int g0 = 0; g0 < 4; g0 += kDotGroups) {
        __m512i t = DpbusdBroadcast(_mm512_setzero_si512(), w[g0], xq + 4 * g0);
#pragma GCC unroll 4
        for (int g = g0 + 1; g < g0 + kDotGroups; ++g) {
          t = DpbusdBroadcast(t, w[g], xq + 4 * g);
        }
        s.sumi = _mm512_dpwssd_epi32(s.sumi, t, scale[h]);
      }
    }
  }
  s.extra = DpwssdBroadcast(s.extra, e, y->bsums + 2 * c);
}

// acc += the block terms of x row y against the sixteen weight rows (lanes, their d and dmin),
// from its sums.
template <KMins kMins, int kShift>
[[gnu::always_inline]] inline void LaneFinish(__m512 w_d, __m512 w_dmin, const BlockQ8_K* y,
                                              const LaneSums& s, __m512* acc) {
  const __m512 dy = _mm512_set1_ps(y->d);
  const __m512 d = _mm512_mul_ps(dy, w_d);
  __m512 term;
  if constexpr (kMins == KMins::kOffset) {
    const __m512i t = _mm512_sub_epi32(s.sumi, _mm512_slli_epi32(s.extra, kShift));
    term = _mm512_mul_ps(d, _mm512_cvtepi32_ps(t));
  } else {
    const __m512 dmin = _mm512_mul_ps(dy, w_dmin);
    term = _mm512_sub_ps(_mm512_mul_ps(d, _mm512_cvtepi32_ps(s.sumi)),
                         _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(s.extra)));
  }
  *acc = _mm512_add_ps(*acc, term);
}

// acc[r] += the block terms of x rows r < kR (at most 4; Q8_K super-blocks at xb + r * x_stride)
// against the sixteen weight rows of w (lanes): each weight vector is loaded once for the kR
// rows, and each x group is broadcast from memory. The rows' sums are named variables, not an
// array: GCC at -O2 kept an array of them in memory, a store and a load per update (the kernel
// was then 1.2x slower than the panel kernel it replaces, and 1.3-1.4x faster without). Sums:
// kUnitScale (Q8_K, u up to 255), dpbusd into int32; kMulLo (Q6_K), each sub-block's sum of
// four groups (at most 16 * 63 * 127) times its scale by vpmulld (measured 1.3x faster for Q6_K
// than one dpwssd per group); kPairScale (Q4_K, Q5_K: a scale per 32 elements), the sum of the
// chunk's eight groups times the scale by one vpmulld (kernels_benchmark BM_MatMulPrecision,
// packed, 1 thread, 16 and 128 rows: 1.07-1.13x faster than two vpmulld for Q5_K or two dpwssd
// for Q4_K); otherwise kDotGroups groups per sum, which must fit in int16 (Q2_K, Q3_K: four
// groups, at most 16 * 15 * 127 = 30480), meet the scale in dpwssd: the low halves times the
// scale, the high halves (the sum's sign) times 0.
// Chunk: chunk(c, wv, scale, e) gives chunk c's eight group vectors, the scales of its two
// sub-blocks and its extra (KLanes' q[8 c ..], scale[2 c ..] and extra[c]); w_d and w_dmin are
// the rows' d and dmin. kPairScale: the extra is the mins of chunks 2 (c / 2) and 2 (c / 2) + 1
// (int16 halves of each lane), which meet x row r's chunk sums cs[r * cs_stride + 2 (c / 2) ..]
// (QuantizedX::chunk_sums) in one dpwssd per two chunks instead of one per chunk with the
// 16-element bsums; cs is unused otherwise.
template <KMins kMins, int kShift, int kDotGroups, bool kUnitScale, bool kMulLo, bool kPairScale,
          int kR, typename Chunk>
[[gnu::always_inline]] inline void KLaneTerms(const Chunk& chunk, __m512 w_d, __m512 w_dmin,
                                              const std::byte* xb, int64_t x_stride,
                                              const int16_t* cs, int64_t cs_stride, __m512* acc) {
  static_assert(kR >= 1 && kR <= 4);
  auto row = [&](int r) {
    return reinterpret_cast<const BlockQ8_K*>(xb + std::min(r, kR - 1) * x_stride);
  };
  const BlockQ8_K *y0 = row(0), *y1 = row(1), *y2 = row(2), *y3 = row(3);
  LaneSums s0{_mm512_setzero_si512(), _mm512_setzero_si512()};
  LaneSums s1 = s0, s2 = s0, s3 = s0;
  auto step = [&](int c, __m512i& e) __attribute__((always_inline)) {
    __m512i wv[8], scale[2];
    chunk(c, wv, scale, e);
    LaneChunk<kDotGroups, kUnitScale, kMulLo, kPairScale>(wv, scale, e, y0, c, s0);
    if constexpr (kR > 1) {
      LaneChunk<kDotGroups, kUnitScale, kMulLo, kPairScale>(wv, scale, e, y1, c, s1);
    }
    if constexpr (kR > 2) {
      LaneChunk<kDotGroups, kUnitScale, kMulLo, kPairScale>(wv, scale, e, y2, c, s2);
    }
    if constexpr (kR > 3) {
      LaneChunk<kDotGroups, kUnitScale, kMulLo, kPairScale>(wv, scale, e, y3, c, s3);
    }
  };
  if constexpr (kPairScale) {
    // Chunks 2 cc and 2 cc + 1, then their mins (e: the pair) against the rows' chunk sums.
    auto sums = [&](int r, int cc) { return cs + std::min(r, kR - 1) * cs_stride + 2 * cc; };
#pragma GCC unroll 1
    for (int cc = 0; cc < 4; ++cc) {
      __m512i e;
      step(2 * cc, e);
      step(2 * cc + 1, e);
      s0.extra = DpwssdBroadcast(s0.extra, e, sums(0, cc));
      if constexpr (kR > 1) s1.extra = DpwssdBroadcast(s1.extra, e, sums(1, cc));
      if constexpr (kR > 2) s2.extra = DpwssdBroadcast(s2.extra, e, sums(2, cc));
      if constexpr (kR > 3) s3.extra = DpwssdBroadcast(s3.extra, e, sums(3, cc));
    }
  } else {
#pragma GCC unroll 1
    for (int c = 0; c < 8; ++c) {
      __m512i e;
      step(c, e);
    }
  }
  LaneFinish<kMins, kShift>(w_d, w_dmin, y0, s0, acc);
  if constexpr (kR > 1) LaneFinish<kMins, kShift>(w_d, w_dmin, y1, s1, acc + 1);
  if constexpr (kR > 2) LaneFinish<kMins, kShift>(w_d, w_dmin, y2, s2, acc + 2);
  if constexpr (kR > 3) LaneFinish<kMins, kShift>(w_d, w_dmin, y3, s3, acc + 3);
}

// KLaneTerms' chunks from KLanes.
struct LanesChunk {
  const KLanes& w;
  [[gnu::always_inline]] void operator()(int c, __m512i* wv, __m512i* scale, __m512i& e) const {
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) wv[g] = _mm512_load_si512(w.q[8 * c + g]);
    scale[0] = _mm512_load_si512(w.scale[2 * c]);
    scale[1] = _mm512_load_si512(w.scale[2 * c + 1]);
    e = _mm512_load_si512(w.extra[c]);
  }
};

// ---------------------------------------------------------------------------------------------
// Packed weights (PackInt8): tile t's super-block b, its sixteen rows' blocks interleaved, at
// (t * blocks + b) * kPackedBytes<K>. Each field of the block that is a whole number of four-byte
// groups becomes one 64-byte vector per group (lane j: row j's four bytes) and each f16 an array
// of the sixteen rows' values, so KLanes comes from it without the transpose: what ToLanes does
// for every call and every pass, done once at load. The sizes equal sixteen blocks'.

struct PackedQ4K {
  uint8_t qs[32][64];      // [i][4 j + t]: row j's qs[4 i + t]
  uint32_t scales[3][16];  // [i][j]: row j's scales[4 i, 4 i + 4)
  uint16_t d[16], dmin[16];
};
struct PackedQ5K {
  uint8_t qs[32][64];
  uint8_t qh[8][64];  // [i][4 j + t]: row j's qh[4 i + t]
  uint32_t scales[3][16];
  uint16_t d[16], dmin[16];
};
struct PackedQ6K {
  uint8_t ql[32][64];  // [i][4 j + t]: row j's ql[4 i + t]
  uint8_t qh[16][64];
  int8_t scales[4][64];  // [i][4 j + t]: row j's scales[4 i + t]
  uint16_t d[16];
};
static_assert(sizeof(PackedQ4K) == 16 * sizeof(BlockQ4_K));
static_assert(sizeof(PackedQ5K) == 16 * sizeof(BlockQ5_K));
static_assert(sizeof(PackedQ6K) == 16 * sizeof(BlockQ6_K));

// Q4_K and Q5_K scales and mins of chunk c (0..7) for the sixteen rows (int32 lanes), from the
// rows' three four-byte groups of packed scales (ScalesMins's arithmetic, lane-wise). Inlined:
// called, it was 6% of a Q4_K_M decode profile (Q5_K decode 1.15-1.2x faster inlined).
[[gnu::always_inline]] inline void ScaleMinLanes(const uint32_t (*scales)[16], int c,
                                                 __m512i& scale, __m512i& min) {
  const __m512i a0 = _mm512_load_si512(scales[0]);
  const __m512i a1 = _mm512_load_si512(scales[1]);
  const __m512i low6 = _mm512_set1_epi32(63), low4 = _mm512_set1_epi32(15);
  const __m512i low2 = _mm512_set1_epi32(3);
  if (c < 4) {
    scale = _mm512_and_si512(_mm512_srli_epi32(a0, 8 * c), low6);
    min = _mm512_and_si512(_mm512_srli_epi32(a1, 8 * c), low6);
    return;
  }
  const int s = 8 * (c - 4);
  const __m512i a2 = _mm512_load_si512(scales[2]);
  scale =
      _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(a2, s), low4),
                      _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(a0, s + 6), low2), 4));
  min = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(a2, s + 4), low4),
                        _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(a1, s + 6), low2), 4));
}

// KLaneTerms' chunks from a packed Q4_K / Q5_K super-block: qs vector 8 c' + u holds groups
// 16 c' + u (low nibbles) and 16 c' + 8 + u (high); Q5_K's fifth bit of group 8 c + u is bit c of
// qh vector u.
template <typename Packed, bool kFifthBit>
struct ScaleMinPackedChunk {
  const Packed& p;
  [[gnu::always_inline]] void operator()(int c, __m512i* wv, __m512i* scale, __m512i& e) const {
    const __m512i low4 = _mm512_set1_epi8(0x0F);
#pragma GCC unroll 8
    for (int u = 0; u < 8; ++u) {
      const __m512i v = Load(p.qs[8 * (c / 2) + u]);
      __m512i q = _mm512_and_si512(c % 2 == 0 ? v : _mm512_srli_epi16(v, 4), low4);
      if constexpr (kFifthBit) {
        // Bit c of each byte to bit 4 (shifts of 16-bit words keep each byte's bit 4 its own).
        const __m512i qh = Load(p.qh[u]);
        const __m512i bit =
            _mm512_and_si512(c <= 4 ? _mm512_slli_epi16(qh, 4 - c) : _mm512_srli_epi16(qh, c - 4),
                             _mm512_set1_epi8(0x10));
        q = _mm512_or_si512(q, bit);
      }
      wv[u] = q;
    }
    // The extra: the mins of chunks 2 (c / 2) (low half) and 2 (c / 2) + 1 (high half).
    __m512i min, other_scale, other_min;
    ScaleMinLanes(p.scales, c, scale[0], min);
    ScaleMinLanes(p.scales, c ^ 1, other_scale, other_min);
    scale[1] = scale[0];
    e = c % 2 == 0 ? _mm512_or_si512(min, _mm512_slli_epi32(other_min, 16))
                   : _mm512_or_si512(other_min, _mm512_slli_epi32(min, 16));
  }
};

// KLaneTerms' chunks from a packed Q6_K super-block: group 8 c + u (c = 4 h + r) takes its low
// nibble from ql vector 16 h + 8 (r % 2) + u (shifted by 4 (r / 2)) and its high bits from qh
// vector 8 h + u (shifted by 2 r); scale s, sign-extended, is byte s % 4 of scales vector s / 4.
struct Q6KPackedChunk {
  const PackedQ6K& p;
  [[gnu::always_inline]] void operator()(int c, __m512i* wv, __m512i* scale, __m512i& e) const {
    const int h = c / 4, r = c % 4;
    const __m512i low4 = _mm512_set1_epi8(0x0F), bits45 = _mm512_set1_epi8(0x30);
#pragma GCC unroll 8
    for (int u = 0; u < 8; ++u) {
      const __m512i ql = Load(p.ql[16 * h + 8 * (r % 2) + u]);
      const __m512i qh = Load(p.qh[8 * h + u]);
      const __m512i lo = _mm512_and_si512(r < 2 ? ql : _mm512_srli_epi16(ql, 4), low4);
      const __m512i hi = _mm512_and_si512(
          2 * r <= 4 ? _mm512_slli_epi16(qh, 4 - 2 * r) : _mm512_srli_epi16(qh, 2 * r - 4), bits45);
      wv[u] = _mm512_or_si512(lo, hi);
    }
    // Sub-blocks 2 c and 2 c + 1: bytes t and t + 1 of vector c / 2.
    const __m512i v = Load(p.scales[c / 2]);
    const int t = 2 * (c % 2);
    scale[0] = _mm512_srai_epi32(_mm512_slli_epi32(v, 24 - 8 * t), 24);
    scale[1] = _mm512_srai_epi32(_mm512_slli_epi32(v, 16 - 8 * t), 24);
    // The extra: the int16 pair of the two scales.
    const __m512i even = _mm512_srai_epi16(_mm512_slli_epi16(v, 8), 8);  // bytes 0, 2
    const __m512i odd = _mm512_srai_epi16(v, 8);                         // bytes 1, 3
    constexpr __mmask32 kHigh = 0xAAAAAAAA;
    e = c % 2 == 0 ? _mm512_mask_blend_epi16(kHigh, even, _mm512_slli_epi32(odd, 16))
                   : _mm512_mask_blend_epi16(kHigh, _mm512_srli_epi32(even, 16), odd);
  }
};

// KLanes from the chunks of a packed super-block (for the passes of many x rows).
template <typename Chunk>
void LanesFromChunks(const Chunk& chunk, KLanes& w) {
#pragma GCC unroll 1
  for (int c = 0; c < 8; ++c) {
    __m512i wv[8], scale[2], e;
    chunk(c, wv, scale, e);
#pragma GCC unroll 8
    for (int u = 0; u < 8; ++u) _mm512_store_si512(w.q[8 * c + u], wv[u]);
    _mm512_store_si512(w.scale[2 * c], scale[0]);
    _mm512_store_si512(w.scale[2 * c + 1], scale[1]);
    _mm512_store_si512(w.extra[c], e);
  }
}

// The packed layout of the K-quants that have one (kPacked), for KBlocks' parameter P.
struct PackQ4K {
  static constexpr bool kPacked = true;
  static constexpr bool kNextIntoL1 = true;  // PackedTile::Prefetch
  using Block = BlockQ4_K;
  static constexpr size_t kBytes = sizeof(PackedQ4K);
  static void Interleave(const std::byte* const* src, std::byte* dst) {
    InterleaveField(src, offsetof(BlockQ4_K, qs), 128, dst + offsetof(PackedQ4K, qs));
    InterleaveField(src, offsetof(BlockQ4_K, scales), 12, dst + offsetof(PackedQ4K, scales));
    InterleaveField(src, offsetof(BlockQ4_K, d), 2, dst + offsetof(PackedQ4K, d));
    InterleaveField(src, offsetof(BlockQ4_K, dmin), 2, dst + offsetof(PackedQ4K, dmin));
  }
  static auto Chunk(const std::byte* bytes) {
    return ScaleMinPackedChunk<PackedQ4K, false>{*reinterpret_cast<const PackedQ4K*>(bytes)};
  }
  static __m512 D(const std::byte* bytes) { return HalvesAt(bytes + offsetof(PackedQ4K, d)); }
  static __m512 Dmin(const std::byte* bytes) { return HalvesAt(bytes + offsetof(PackedQ4K, dmin)); }
};
struct PackQ5K {
  static constexpr bool kPacked = true;
  static constexpr bool kNextIntoL1 = true;  // PackedTile::Prefetch
  using Block = BlockQ5_K;
  static constexpr size_t kBytes = sizeof(PackedQ5K);
  static void Interleave(const std::byte* const* src, std::byte* dst) {
    InterleaveField(src, offsetof(BlockQ5_K, qs), 128, dst + offsetof(PackedQ5K, qs));
    InterleaveField(src, offsetof(BlockQ5_K, qh), 32, dst + offsetof(PackedQ5K, qh));
    InterleaveField(src, offsetof(BlockQ5_K, scales), 12, dst + offsetof(PackedQ5K, scales));
    InterleaveField(src, offsetof(BlockQ5_K, d), 2, dst + offsetof(PackedQ5K, d));
    InterleaveField(src, offsetof(BlockQ5_K, dmin), 2, dst + offsetof(PackedQ5K, dmin));
  }
  static auto Chunk(const std::byte* bytes) {
    return ScaleMinPackedChunk<PackedQ5K, true>{*reinterpret_cast<const PackedQ5K*>(bytes)};
  }
  static __m512 D(const std::byte* bytes) { return HalvesAt(bytes + offsetof(PackedQ5K, d)); }
  static __m512 Dmin(const std::byte* bytes) { return HalvesAt(bytes + offsetof(PackedQ5K, dmin)); }
};
struct PackQ6K {
  static constexpr bool kPacked = true;
  static constexpr bool kNextIntoL1 = false;  // PackedTile::Prefetch
  using Block = BlockQ6_K;
  static constexpr size_t kBytes = sizeof(PackedQ6K);
  static void Interleave(const std::byte* const* src, std::byte* dst) {
    InterleaveField(src, offsetof(BlockQ6_K, ql), 128, dst + offsetof(PackedQ6K, ql));
    InterleaveField(src, offsetof(BlockQ6_K, qh), 64, dst + offsetof(PackedQ6K, qh));
    InterleaveField(src, offsetof(BlockQ6_K, scales), 16, dst + offsetof(PackedQ6K, scales));
    InterleaveField(src, offsetof(BlockQ6_K, d), 2, dst + offsetof(PackedQ6K, d));
  }
  static auto Chunk(const std::byte* bytes) {
    return Q6KPackedChunk{*reinterpret_cast<const PackedQ6K*>(bytes)};
  }
  static __m512 D(const std::byte* bytes) { return HalvesAt(bytes + offsetof(PackedQ6K, d)); }
  static __m512 Dmin(const std::byte* /*bytes*/) { return _mm512_setzero_ps(); }
};
struct NoPack {
  static constexpr bool kPacked = false;
  static constexpr bool kNextIntoL1 = false;
  static constexpr size_t kBytes = 0;
  static void Interleave(const std::byte* const* /*src*/, std::byte* /*dst*/) {}
  static LanesChunk Chunk(const std::byte* /*bytes*/);  // never called
  static __m512 D(const std::byte* /*bytes*/);
  static __m512 Dmin(const std::byte* /*bytes*/);
};

// The kernel of a K-quant, from its Unpack(row bytes of the super-block, p, j) that fills row
// j's q, sub_scale, sub_extra, d and dmin.
template <typename Block, typename Unpacker, KMins kMins, int kShift, int kDotGroups,
          bool kUnitScale = false, typename Row = void, typename P = NoPack>
struct KBlocks {
  static constexpr bool kNeedsSums = false;
  using Prep = KPrep;
  using RowKernel = Row;  // the m < 16 kernel (KRowTileRange), or void: RowTileRange
  using Pack = P;         // the packed layout (PackInt8), or NoPack
  static void Prepare(const std::byte* const* rows, int64_t b, Prep& p) {
    for (int j = 0; j < kTileRows; ++j) {
      Unpacker::Unpack(rows[j] + b * static_cast<int64_t>(sizeof(Block)), p, j);
      FinishKRow<kMins, kShift, kUnitScale>(p, j);
    }
  }
  static __m512 Term(const Prep& p, const std::byte* xb, int32_t /*x_sum*/) {
    return KTerm<kMins, kShift, kUnitScale>(p, *reinterpret_cast<const BlockQ8_K*>(xb));
  }
  static constexpr bool kUsesPanels = false;
  // Q4_K and Q5_K: the two 16-element halves of each 32-element sub-block share its scale.
  static constexpr bool kPairScale =
      std::is_same_v<Block, BlockQ4_K> || std::is_same_v<Block, BlockQ5_K>;
  // Sub-block sums scaled by vpmulld where kDotGroups < 4 (Q6_K) or a pair of halves shares the
  // scale (Q4_K, Q5_K: one vpmulld per 32 elements instead of two vpmulld or two dpwssd).
  static constexpr bool kMulLo = !kUnitScale && (kDotGroups < 4 || kPairScale);
  static void PrepareLanes(const std::byte* const* rows, int64_t b, Prep& p, KLanes& w) {
    for (int j = 0; j < kTileRows; ++j) {
      Unpacker::Unpack(rows[j] + b * static_cast<int64_t>(sizeof(Block)), p, j);
    }
    ToLanes<kMulLo, kPairScale>(p, w);
  }
  template <int kR>
  [[gnu::always_inline]] static void LaneTerms(const KLanes& w, const std::byte* xb,
                                               int64_t x_stride, const int16_t* cs,
                                               int64_t cs_stride, __m512* acc) {
    KLaneTerms<kMins, kShift, (kDotGroups > 0 ? kDotGroups : 1), kUnitScale, kMulLo, kPairScale,
               kR>(LanesChunk{w}, _mm512_load_ps(w.d), _mm512_load_ps(w.dmin), xb, x_stride, cs,
                   cs_stride, acc);
  }
  // LaneTerms straight from a packed super-block (P), its chunks unpacked in registers.
  template <int kR>
  [[gnu::always_inline]] static void PackedLaneTerms(const std::byte* packed, const std::byte* xb,
                                                     int64_t x_stride, const int16_t* cs,
                                                     int64_t cs_stride, __m512* acc) {
    KLaneTerms<kMins, kShift, (kDotGroups > 0 ? kDotGroups : 1), kUnitScale, kMulLo, kPairScale,
               kR>(P::Chunk(packed), P::D(packed), P::Dmin(packed), xb, x_stride, cs, cs_stride,
                   acc);
  }
  // KLanes of a packed super-block (P).
  static void PackedLanes(const std::byte* packed, KLanes& w) {
    LanesFromChunks(P::Chunk(packed), w);
    _mm512_store_ps(w.d, P::D(packed));
    _mm512_store_ps(w.dmin, P::Dmin(packed));
  }
};

template <typename Block>
const Block& BlockAt(const std::byte* bytes) {
  return *reinterpret_cast<const Block*>(bytes);
}

struct Q2KUnpacker {
  static void Unpack(const std::byte* bytes, KPrep& p, int j) {
    const auto& x = BlockAt<BlockQ2_K>(bytes);
    const __m256i qs[2] = {Load256(x.qs), Load256(x.qs + 32)};
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) Store256(p.q[j] + 32 * c, Bits(qs[c / 4], 2 * (c % 4), 3));
    const __m128i raw = Load128(x.scales);
    const __m128i low4 = _mm_set1_epi8(0x0F);
    Store256(p.sub_scale[j], _mm256_cvtepu8_epi16(_mm_and_si128(raw, low4)));
    Store256(p.sub_extra[j], _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), low4)));
    p.d[j] = Half(x.d);
    p.dmin[j] = Half(x.dmin);
  }
};

struct Q3KUnpacker {
  static void Unpack(const std::byte* bytes, KPrep& p, int j) {
    const auto& x = BlockAt<BlockQ3_K>(bytes);
    const __m256i qs[2] = {Load256(x.qs), Load256(x.qs + 32)};
    const __m256i hmask = Load256(x.hmask);
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
      // q + 4 = low bits | high bit << 2, in [0, 7].
      Store256(p.q[j] + 32 * c, _mm256_or_si256(Bits(qs[c / 4], 2 * (c % 4), 3),
                                                _mm256_slli_epi16(Bits(hmask, c, 1), 2)));
    }
    // The sixteen 6-bit scales - 32 (Q3KScale): low 4 bits from bytes 0-7 (low nibble for
    // sub-blocks 0-7, high for 8-15), high 2 bits from bytes 8-11 at 2 (i / 4).
    uint32_t a[3];
    std::memcpy(a, x.scales, sizeof(a));
    const uint32_t kLow4 = 0x0f0f0f0f, kLow2 = 0x03030303;
    const uint32_t s[4] = {(a[0] & kLow4) | ((a[2] & kLow2) << 4),
                           (a[1] & kLow4) | (((a[2] >> 2) & kLow2) << 4),
                           ((a[0] >> 4) & kLow4) | (((a[2] >> 4) & kLow2) << 4),
                           ((a[1] >> 4) & kLow4) | (((a[2] >> 6) & kLow2) << 4)};
    const __m256i scales =
        _mm256_sub_epi16(_mm256_cvtepu8_epi16(Load128(s)), _mm256_set1_epi16(32));
    Store256(p.sub_scale[j], scales);
    Store256(p.sub_extra[j], scales);
    p.d[j] = Half(x.d);
  }
};

// KScaleMin for all eight chunks of a Q4_K / Q5_K block, four bytes at a time: scales 0-3 are
// the low 6 bits of bytes 0-3, scales 4-7 the low nibbles of bytes 8-11 with the top 2 bits of
// bytes 0-3 above them; mins likewise from bytes 4-7 and the high nibbles of 8-11.
struct ScalesMins {
  uint64_t scales;  // byte c: chunk c's scale
  uint64_t mins;    // byte c: chunk c's min

  explicit ScalesMins(const uint8_t* packed) {
    uint32_t a[3];
    std::memcpy(a, packed, sizeof(a));
    const uint32_t kLow6 = 0x3f3f3f3f, kLow4 = 0x0f0f0f0f, kLow2 = 0x03030303;
    scales = (a[0] & kLow6) | static_cast<uint64_t>((a[2] & kLow4) | (((a[0] >> 6) & kLow2) << 4))
                                  << 32;
    mins = (a[1] & kLow6) |
           static_cast<uint64_t>(((a[2] >> 4) & kLow4) | (((a[1] >> 6) & kLow2) << 4)) << 32;
  }
};

// The eight bytes of v as int16, each twice: sub-blocks 2c and 2c + 1 share chunk c's value.
__m256i PerSubBlock(uint64_t v) {
  const __m128i w = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<int64_t>(v)));
  return _mm256_set_m128i(_mm_unpackhi_epi16(w, w), _mm_unpacklo_epi16(w, w));
}

// Q4_K and Q5_K: one 6-bit scale and min per 32-element chunk.
template <typename Block, bool kFifthBit>
struct KScaleMinUnpacker {
  static void Unpack(const std::byte* bytes, KPrep& p, int j) {
    const auto& x = BlockAt<Block>(bytes);
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
      __m256i q = Bits(Load256(x.qs + 32 * (c / 2)), 4 * (c % 2), 0xF);
      if constexpr (kFifthBit) {
        q = _mm256_or_si256(q, _mm256_slli_epi16(Bits(Load256(x.qh), c, 1), 4));
      }
      Store256(p.q[j] + 32 * c, q);
    }
    const ScalesMins sm(x.scales);
    Store256(p.sub_scale[j], PerSubBlock(sm.scales));
    Store256(p.sub_extra[j], PerSubBlock(sm.mins));
    p.d[j] = Half(x.d);
    p.dmin[j] = Half(x.dmin);
  }
};

struct Q6KUnpacker {
  static void Unpack(const std::byte* bytes, KPrep& p, int j) {
    const auto& x = BlockAt<BlockQ6_K>(bytes);
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
      const int h = c / 4, r = c % 4;
      const __m256i low = Bits(Load256(x.ql + 64 * h + 32 * (r % 2)), 4 * (r / 2), 0xF);
      const __m256i high = Bits(Load256(x.qh + 32 * h), 2 * r, 3);
      Store256(p.q[j] + 32 * c, _mm256_or_si256(low, _mm256_slli_epi16(high, 4)));  // q + 32
    }
    const __m256i scales = _mm256_cvtepi8_epi16(Load128(x.scales));
    Store256(p.sub_scale[j], scales);
    Store256(p.sub_extra[j], scales);
    p.d[j] = Half(x.d);
  }
};

// Q8_K weights: q + 128, unit scales, an F32 d (read by bytes: a row need not be 4-aligned).
struct Q8KUnpacker {
  static void Unpack(const std::byte* bytes, KPrep& p, int j) {
    const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
      _mm512_store_si512(p.q[j] + 64 * r,
                         _mm512_xor_si512(Load(bytes + offsetof(BlockQ8_K, qs) + 64 * r), flip));
    }
    const __m256i ones = _mm256_set1_epi16(1);
    Store256(p.sub_scale[j], ones);
    Store256(p.sub_extra[j], ones);
    std::memcpy(&p.d[j], bytes + offsetof(BlockQ8_K, d), sizeof(float));
  }
};

// ---------------------------------------------------------------------------------------------
// K-quant rows for the decode shape (m < 16). A super-block of one weight row is unpacked into
// registers, in element order, with the scale of every int32 lane, and dotted with each x row
// in turn; only the per-row integer sums go through memory. R::Unpack(bytes, row) fills:
struct KRow {
  __m512i q[4];      // q[z]: elements [64 z, 64 z + 64), as unsigned bytes
  __m512i scale[4];  // int32 lane l of scale[z]: the scale of elements [64 z + 4 l, + 4) of
                     // q[z], as int16 in its low half (0 in the high half)
  __m256i extra;     // per 16-element sub-block, int16: the min (kMin), -(scale << shift)
                     // (kOffset)
  float d, dmin;
};

// Row's integer sum against x super-block y, in int32 lanes: each lane's dpbusd sum of four
// products (at most 4 * 63 * 127 = 32004, so its low 16 bits hold it) times its lane's scale by
// _mm512_dpwssd_epi32 (the high halves multiply by 0); kOffset adds the offset terms.
template <KMins kMins>
[[gnu::always_inline]] inline __m512i KRowSum(const KRow& w, const BlockQ8_K& y) {
  __m512i acc = _mm512_setzero_si512();
#pragma GCC unroll 4
  for (int z = 0; z < 4; ++z) {
    const __m512i t = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w.q[z], Load(y.qs + 64 * z));
    acc = _mm512_dpwssd_epi32(acc, t, w.scale[z]);
  }
  if constexpr (kMins == KMins::kOffset) {
    acc = _mm512_dpwssd_epi32(acc, _mm512_zextsi256_si512(w.extra),
                              _mm512_broadcast_i64x4(Load256(y.bsums)));
  }
  return acc;
}

// out[z] lane l = lane (16 z + l) / kLanesPer of `scales` (int32 lanes): kLanesPer lanes per
// scale, 16 / kLanesPer scales per register.
template <int kLanesPer>
void SpreadScales(__m512i scales, __m512i* out) {
#pragma GCC unroll 4
  for (int z = 0; z < 4; ++z) {
    alignas(64) int32_t index[16];
    for (int l = 0; l < 16; ++l) index[l] = 16 / kLanesPer * z + l / kLanesPer;
    out[z] = _mm512_permutexvar_epi32(_mm512_load_si512(index), scales);
  }
}

// Q4_K and Q5_K: qs[32 c', 32 c' + 32) holds chunk 2 c' in its low nibbles and 2 c' + 1 in its
// high ones, so q[z] = [low nibbles | high nibbles] of those 32 bytes; Q5_K's fifth bit of
// element 32 c + l is bit c of qh[l].
template <typename B, bool kFifthBit>
struct KScaleMinRow {
  using Block = B;
  static constexpr KMins kMins = KMins::kMin;
  [[gnu::always_inline]] static void Unpack(const std::byte* bytes, KRow& w) {
    const auto& x = BlockAt<Block>(bytes);
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    __m512i qh;
    if constexpr (kFifthBit) qh = _mm512_broadcast_i64x4(Load256(x.qh));
#pragma GCC unroll 4
    for (int z = 0; z < 4; ++z) {
      const __m256i packed = Load256(x.qs + 32 * z);
      __m512i q = _mm512_and_si512(
          _mm512_inserti64x4(_mm512_castsi256_si512(packed), _mm256_srli_epi16(packed, 4), 1),
          low4);
      if constexpr (kFifthBit) {
        // Bytes 0-31 take bit 2 z of qh, bytes 32-63 bit 2 z + 1.
        const __m512i bit =
            _mm512_inserti64x4(_mm512_set1_epi8(static_cast<char>(1 << (2 * z))),
                               _mm256_set1_epi8(static_cast<char>(1 << (2 * z + 1))), 1);
        q = _mm512_mask_add_epi8(q, _mm512_test_epi8_mask(qh, bit), q, _mm512_set1_epi8(16));
      }
      w.q[z] = q;
    }
    const ScalesMins sm(x.scales);
    SpreadScales<8>(_mm512_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<int64_t>(sm.scales))),
                    w.scale);
    w.extra = PerSubBlock(sm.mins);
    w.d = Half(x.d);
    w.dmin = Half(x.dmin);
  }
};

// Q6_K: the low nibbles of ql[0, 64) are elements 0-63 and the high ones 64-127 (ql[64, 128):
// 128-255); the 2-bit high parts of element 128 h + 32 s + l are bits 2 s of qh[32 h + l].
struct Q6KRow {
  using Block = BlockQ6_K;
  static constexpr KMins kMins = KMins::kOffset;
  [[gnu::always_inline]] static void Unpack(const std::byte* bytes, KRow& w) {
    const auto& x = BlockAt<BlockQ6_K>(bytes);
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    const __m512i bits45 = _mm512_set1_epi8(0x30);
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m512i ql = Load(x.ql + 64 * h);
      const __m256i qh = Load256(x.qh + 32 * h);
      // Bytes 0-31: qh (s = 0), 32-63: qh >> 2 (s = 1); shifted by 4 more for s = 2, 3.
      const __m512i high =
          _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
      w.q[2 * h] = _mm512_or_si512(_mm512_and_si512(ql, low4),
                                   _mm512_and_si512(_mm512_slli_epi16(high, 4), bits45));
      w.q[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low4),
                                       _mm512_and_si512(high, bits45));
    }
    const __m256i scales = _mm256_cvtepi8_epi16(Load128(x.scales));
    SpreadScales<4>(_mm512_cvtepu16_epi32(scales), w.scale);
    w.extra = _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(scales, 5));
    w.d = Half(x.d);
    w.dmin = 0.0f;
  }
};

using Q2KBlocks = KBlocks<BlockQ2_K, Q2KUnpacker, KMins::kMin, 0, 4>;
using Q3KBlocks = KBlocks<BlockQ3_K, Q3KUnpacker, KMins::kOffset, 2, 4>;
using Q4KBlocks = KBlocks<BlockQ4_K, KScaleMinUnpacker<BlockQ4_K, false>, KMins::kMin, 0, 4, false,
                          KScaleMinRow<BlockQ4_K, false>, PackQ4K>;
using Q5KBlocks = KBlocks<BlockQ5_K, KScaleMinUnpacker<BlockQ5_K, true>, KMins::kMin, 0, 2, false,
                          KScaleMinRow<BlockQ5_K, true>, PackQ5K>;
using Q6KBlocks = KBlocks<BlockQ6_K, Q6KUnpacker, KMins::kOffset, 5, 0, false, Q6KRow, PackQ6K>;
using Q8KBlocks = KBlocks<BlockQ8_K, Q8KUnpacker, KMins::kOffset, 7, 0, /*kUnitScale=*/true>;

}  // namespace
}  // namespace uc::kernels::avx512

#endif  // defined(__x86_64__)
