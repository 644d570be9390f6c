// File: int8_blocks32_avx512.h
// -----------------------------------------------------------------------------
// The AVX-512 integer MatMul's kernels for the 32-element block types (Q8_0, Q4_0, Q4_1, Q5_0,
// Q5_1, IQ4_NL, MXFP4; matmul_int8_avx512.cc has the design and the drivers that call them): how a
// block's quants become unsigned bytes, the packed layout, and the decode and panel terms.
// Include only from matmul_int8_avx512.cc, after kernels/cpu/avx512_gcc_workaround.h: the
// definitions are in an anonymous namespace, so that no AVX-512 copy of an inline function
// can be the one the linker keeps for code that runs on CPUs without AVX-512 (the .cc's
// header says more).
#pragma once

#if defined(__x86_64__)

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/matmul/e8m0_simd.h"
#include "kernels/cpu/matmul/int8_common_avx512.h"
#include "tensor/dtype.h"

namespace uc::kernels::avx512 {
namespace {  // NOLINT(build/namespaces): one translation unit

// ---------------------------------------------------------------------------------------------
// 32-element blocks (Q8_0 / Q8_1 activations). A kernel works on a tile of sixteen weight rows:
//   K::Prepare(rows, b, prep) unpacks block b of the sixteen rows into `prep`;
//   K::Term(prep, xb, x_sum) dots it with one activation block (x_sum: the sum of its quants):
//     lane j = row j's block term;
//   K::PanelTerms<kC0, kCols>(prep, panel, acc) adds row kC0 + c's block terms for the sixteen
//     x rows of a panel to acc[c] (lane i = x row i), c < kCols, inlined into a loop over the
//     blocks that keeps acc in registers (K::kPanelCols columns at a time). K::kUsesPanels: true
//     here; the K-quants' m >= 16 kernel (K::LaneTerms) reads the x rows instead.

// Block b of sixteen Q8_0 / Q8_1 activation rows, interleaved: qs[g] holds elements [4g, 4g + 4)
// of row i at bytes [4i, 4i + 4).
struct alignas(64) PanelQ8 {
  int8_t qs[8][64];
  float d[kPanelRows];      // each row's d, widened
  int32_t sum[kPanelRows];  // Q8_0: the sum of the row's quants
  float s[kPanelRows];      // Q8_1: the row's s, widened
};

// How a block's quants become unsigned bytes.
enum class Quants {
  kNibbles,          // Q4_0, Q4_1: the nibble
  kNibblesFifthBit,  // Q5_0, Q5_1: the nibble plus 16 times the bit of qh
  kIq4Nl,            // IQ4_NL: kIq4NlValues[nibble] + 128
  kMxfp4,            // MXFP4: kMxfp4Values[nibble] + 128 (its scale an E8M0 byte, not an f16)
  kBytes,            // Q8_0: q + 128
};

// kIq4NlValues + 128, as unsigned bytes.
alignas(16) constexpr uint8_t kIq4NlUnsigned[16] = {1,   24,  45,  63,  79,  93,  106, 118,
                                                    129, 141, 153, 166, 181, 197, 217, 241};
// kMxfp4Values + 128, as unsigned bytes.
alignas(16) constexpr auto kMxfp4Unsigned = [] {
  std::array<uint8_t, 16> t{};
  for (int i = 0; i < 16; ++i) t[i] = static_cast<uint8_t>(kMxfp4Values[i] + 128);
  return t;
}();

// The table of a looked-up type's unsigned bytes, in every 128-bit lane.
template <Quants kQuants>
[[gnu::always_inline]] inline __m512i UnsignedTable() {
  static_assert(kQuants == Quants::kIq4Nl || kQuants == Quants::kMxfp4);
  return _mm512_broadcast_i32x4(
      Load128(kQuants == Quants::kIq4Nl ? kIq4NlUnsigned : kMxfp4Unsigned.data()));
}

// The block scale field of a type: an f16 d, or MXFP4's E8M0 byte e.
template <typename B>
constexpr bool kE8M0Scale = std::is_same_v<B, BlockMXFP4>;
template <typename B>
constexpr size_t ScaleOffset() {
  if constexpr (kE8M0Scale<B>) {
    return offsetof(B, e);
  } else {
    return offsetof(B, d);
  }
}

// Sixteen block scales at p as F32: f16s, or (kE8M0) E8M0 bytes.
template <bool kE8M0>
[[gnu::always_inline]] inline __m512 ScalesAt(const std::byte* p) {
  if constexpr (kE8M0) {
    return simd::E8M0HalfToF32x16(_mm512_cvtepu8_epi32(Load128(p)));
  } else {
    return HalvesAt(p);
  }
}

// The packed layout of a 32-element block type (PackInt8), for Blocks32: block b of a tile's
// sixteen rows at (t * blocks + b) * kBytes, each four-byte group of qs one 64-byte vector (lane
// j: row j's four bytes), qh (Q5_0, Q5_1) one vector (lane j: row j's 32 bits), d and m arrays
// of the sixteen rows' f16 (MXFP4: the sixteen E8M0 bytes). As many bytes as sixteen blocks. Q8_0's
// and Q4_0's blocks (544 and 288 bytes) leave every other block's vectors off 64-byte lines;
// padding each block to whole lines read no faster per byte of weights in decode (Zen 4, medians of
// 9 interleaved rounds), so the layout stays as dense as the file.
template <typename B, bool kQh, bool kMin>
struct Pack32 {
  static constexpr bool kPacked = true;
  static constexpr bool kNextIntoL1 = false;  // PackedTile::Prefetch
  using Block = B;
  static constexpr size_t kQsBytes = sizeof(B::qs);  // 16 (nibbles) or 32 (Q8_0)
  static constexpr size_t kQhOffset = kQsBytes * kTileRows;
  static constexpr size_t kDOffset = kQhOffset + (kQh ? 4 * kTileRows : 0);
  static constexpr size_t kScaleBytes = kE8M0Scale<B> ? 1 : 2;
  static constexpr size_t kMOffset = kDOffset + kScaleBytes * kTileRows;
  static constexpr size_t kBytes = kTileRows * sizeof(B);
  static_assert(kMOffset + (kMin ? 2 * kTileRows : 0) == kBytes);
  static void Interleave(const std::byte* const* src, std::byte* dst) {
    InterleaveField(src, offsetof(B, qs), kQsBytes, dst);
    if constexpr (kQh) InterleaveField(src, offsetof(B, qh), 4, dst + kQhOffset);
    InterleaveField(src, ScaleOffset<B>(), kScaleBytes, dst + kDOffset);
    if constexpr (kMin) InterleaveField(src, offsetof(B, m), 2, dst + kMOffset);
  }
};

// v[q] lane 4 L + i = v[i] lane 4 L + q before, for q, i < 4 (a 4x4 transpose of the int32
// lanes within each 128-bit lane).
[[gnu::always_inline]] inline void Transpose4x4InLanes(__m512i* v) {
  const __m512i t0 = _mm512_unpacklo_epi32(v[0], v[1]), t1 = _mm512_unpackhi_epi32(v[0], v[1]);
  const __m512i t2 = _mm512_unpacklo_epi32(v[2], v[3]), t3 = _mm512_unpackhi_epi32(v[2], v[3]);
  v[0] = _mm512_unpacklo_epi64(t0, t2);
  v[1] = _mm512_unpackhi_epi64(t0, t2);
  v[2] = _mm512_unpacklo_epi64(t1, t3);
  v[3] = _mm512_unpackhi_epi64(t1, t3);
}

// x = d * (u - kOffset) (+ m with kHasMin; Q8_1 activations then, else Q8_0).
template <typename Block, Quants kQuants, int kOffset, bool kHasMin>
struct Blocks32 {
  static constexpr bool kNeedsSums = kOffset != 0;
  static constexpr int kShift = kOffset == 0 ? 0 : __builtin_ctz(kOffset);
  static_assert(kOffset == 0 || kOffset == 1 << kShift);
  using Panel = PanelQ8;
  using RowKernel = void;
  using Pack = Pack32<Block, kQuants == Quants::kNibblesFifthBit, kHasMin>;
  using Activation = std::conditional_t<kHasMin, BlockQ8_1, BlockQ8_0>;
  struct Prep {
    // 128-bit lane L of lo[q]: elements 0-15 of row 4 L + q, as unsigned bytes; hi: 16-31.
    __m512i lo[4], hi[4];
    alignas(64) float d[kTileRows];
    alignas(64) float m[kTileRows];
  };

  [[gnu::always_inline]] static void Prepare(const std::byte* const* rows, int64_t b, Prep& p) {
    const __m512i low4 = _mm512_set1_epi8(0x0F);
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) {
      const Block* x[4];
      for (int lane = 0; lane < 4; ++lane) {
        x[lane] = reinterpret_cast<const Block*>(rows[4 * lane + q]) + b;
      }
      __m512i lo, hi;
      if constexpr (kQuants == Quants::kBytes) {
        const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
        lo = _mm512_xor_si512(Lanes(x[0]->qs, x[1]->qs, x[2]->qs, x[3]->qs), flip);
        hi = _mm512_xor_si512(Lanes(x[0]->qs + 16, x[1]->qs + 16, x[2]->qs + 16, x[3]->qs + 16),
                              flip);
      } else {
        const __m512i bytes = Lanes(x[0]->qs, x[1]->qs, x[2]->qs, x[3]->qs);
        lo = _mm512_and_si512(bytes, low4);
        hi = _mm512_and_si512(_mm512_srli_epi16(bytes, 4), low4);
        if constexpr (kQuants == Quants::kIq4Nl || kQuants == Quants::kMxfp4) {
          const __m512i table = UnsignedTable<kQuants>();
          lo = _mm512_shuffle_epi8(table, lo);
          hi = _mm512_shuffle_epi8(table, hi);
        }
        if constexpr (kQuants == Quants::kNibblesFifthBit) {
          // Bit l of row 4 L + q's qh goes to byte l (l < 16) of lane L of lo, else of hi.
          uint64_t lo_bits = 0, hi_bits = 0;
          for (int lane = 0; lane < 4; ++lane) {
            uint32_t qh;
            std::memcpy(&qh, x[lane]->qh, sizeof(qh));
            lo_bits |= static_cast<uint64_t>(qh & 0xFFFF) << (16 * lane);
            hi_bits |= static_cast<uint64_t>(qh >> 16) << (16 * lane);
          }
          const __m512i sixteen = _mm512_set1_epi8(16);
          lo = _mm512_mask_add_epi8(lo, lo_bits, lo, sixteen);
          hi = _mm512_mask_add_epi8(hi, hi_bits, hi, sixteen);
        }
      }
      p.lo[q] = lo;
      p.hi[q] = hi;
    }
    const int64_t block = b * static_cast<int64_t>(sizeof(Block));
    if constexpr (kE8M0Scale<Block>) {
#pragma GCC unroll 16
      for (int j = 0; j < kTileRows; ++j) {
        p.d[j] = E8M0HalfToF32(static_cast<uint8_t>(rows[j][block + offsetof(Block, e)]));
      }
    } else {
      GatherF16(rows, block + offsetof(Block, d), p.d);
    }
    if constexpr (kHasMin) GatherF16(rows, block + offsetof(Block, m), p.m);
  }

  [[gnu::always_inline]] static __m512 Term(const Prep& p, const std::byte* xb, int32_t x_sum) {
    const Activation& x = *reinterpret_cast<const Activation*>(xb);
    const __m512i y_lo = _mm512_broadcast_i32x4(Load128(x.qs));
    const __m512i y_hi = _mm512_broadcast_i32x4(Load128(x.qs + 16));
    __m512i v[4];
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) {
      v[q] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), p.lo[q], y_lo),
                                 p.hi[q], y_hi);
    }
    __m512i sumi = SumQuads(v);
    if constexpr (kOffset != 0) sumi = _mm512_sub_epi32(sumi, _mm512_set1_epi32(kOffset * x_sum));
    __m512 mw = _mm512_setzero_ps(), sx = _mm512_setzero_ps();
    if constexpr (kHasMin) {
      mw = _mm512_load_ps(p.m);
      sx = _mm512_set1_ps(Half(x.s));
    }
    return Scale(_mm512_load_ps(p.d), _mm512_set1_ps(Half(x.d)), sumi, mw, sx);
  }

  // Block `packed` of a packed tile (Pack) as Prepare would leave it: its lanes transposed
  // within 128-bit lanes.
  [[gnu::always_inline]] static void PreparePacked(const std::byte* packed, Prep& p) {
    PackedLanes w = UnpackPacked(packed);
    Transpose4x4InLanes(w.lo);
    Transpose4x4InLanes(w.hi);
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) {
      p.lo[q] = w.lo[q];
      p.hi[q] = w.hi[q];
    }
    _mm512_store_ps(p.d, ScalesAt<kE8M0Scale<Block>>(packed + Pack::kDOffset));
    if constexpr (kHasMin) _mm512_store_ps(p.m, HalvesAt(packed + Pack::kMOffset));
  }

  // acc[r] += the terms of x rows r < kR (blocks at xb + r * x_stride, their quants' sums at
  // sums[r * sums_stride]) against block `packed` of a packed tile, lane j = row j's term: the
  // weight rows are the lanes, so each x group is broadcast and no horizontal sum is left.
  template <int kR>
  [[gnu::always_inline]] static void PackedLaneTerms(const std::byte* packed, const std::byte* xb,
                                                     int64_t x_stride, const int32_t* sums,
                                                     int64_t sums_stride, __m512* acc) {
    const PackedLanes w = UnpackPacked(packed);
    const __m512 dw = ScalesAt<kE8M0Scale<Block>>(packed + Pack::kDOffset);
    __m512 mw = _mm512_setzero_ps();
    if constexpr (kHasMin) mw = HalvesAt(packed + Pack::kMOffset);
#pragma GCC unroll 4
    for (int r = 0; r < kR; ++r) {
      const Activation& x = *reinterpret_cast<const Activation*>(xb + r * x_stride);
      __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) {
        s0 = DpbusdBroadcast(s0, w.lo[g], x.qs + 4 * g);
        s1 = DpbusdBroadcast(s1, w.hi[g], x.qs + 16 + 4 * g);
      }
      __m512i sumi = _mm512_add_epi32(s0, s1);
      if constexpr (kOffset != 0) {
        sumi = _mm512_sub_epi32(sumi, _mm512_set1_epi32(kOffset * sums[r * sums_stride]));
      }
      __m512 sx = _mm512_setzero_ps();
      if constexpr (kHasMin) sx = _mm512_set1_ps(Half(x.s));
      acc[r] = _mm512_add_ps(acc[r], Scale(dw, _mm512_set1_ps(Half(x.d)), sumi, mw, sx));
    }
  }

  static constexpr bool kUsesPanels = true;
  static constexpr int kPanelCols = 8;
  static constexpr int64_t kChunkBlocks = 16;  // 10 KiB unpacked, 9 KiB of a panel

  template <int kC0, int kCols>
  [[gnu::always_inline]] static void PanelTerms(const Prep& p, const PanelQ8& x, __m512* acc) {
    __m512i xq[8];
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) xq[g] = Load(x.qs[g]);
    const __m512 dx = _mm512_load_ps(x.d);
    __m512i offset = _mm512_setzero_si512();
    if constexpr (kOffset != 0) offset = _mm512_slli_epi32(Load(x.sum), kShift);
    __m512 sx = _mm512_setzero_ps();
    if constexpr (kHasMin) sx = _mm512_load_ps(x.s);
    const auto* lo_bytes = reinterpret_cast<const uint8_t*>(p.lo);
    const auto* hi_bytes = reinterpret_cast<const uint8_t*>(p.hi);
#pragma GCC unroll 16
    for (int i = 0; i < kCols; ++i) {
      // Row c = 4 L + q: lane L of lo[q], hi[q].
      const int c = kC0 + i;
      const uint8_t* lo = lo_bytes + 64 * (c % 4) + 16 * (c / 4);
      const uint8_t* hi = hi_bytes + 64 * (c % 4) + 16 * (c / 4);
      __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) {
        s0 = _mm512_dpbusd_epi32(s0, Broadcast4(lo + 4 * g), xq[g]);
        s1 = _mm512_dpbusd_epi32(s1, Broadcast4(hi + 4 * g), xq[g + 4]);
      }
      __m512i sumi = _mm512_add_epi32(s0, s1);
      if constexpr (kOffset != 0) sumi = _mm512_sub_epi32(sumi, offset);
      __m512 mw = _mm512_setzero_ps();
      if constexpr (kHasMin) mw = _mm512_set1_ps(p.m[c]);
      acc[i] = _mm512_add_ps(acc[i], Scale(_mm512_set1_ps(p.d[c]), dx, sumi, mw, sx));
    }
  }

 private:
  // A packed block's quants as unsigned bytes with the weight rows as lanes: lo[g] lane j holds
  // row j's elements [4 g, 4 g + 4), hi[g] elements [16 + 4 g, 20 + 4 g).
  struct PackedLanes {
    __m512i lo[4], hi[4];
  };
  [[gnu::always_inline]] static PackedLanes UnpackPacked(const std::byte* packed) {
    PackedLanes w;
    if constexpr (kQuants == Quants::kBytes) {
      const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
#pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) {
        w.lo[g] = _mm512_xor_si512(Load(packed + 64 * g), flip);
        w.hi[g] = _mm512_xor_si512(Load(packed + 64 * (4 + g)), flip);
      }
      return w;
    }
    const __m512i low4 = _mm512_set1_epi8(0x0F);
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) {
      const __m512i bytes = Load(packed + 64 * g);
      w.lo[g] = _mm512_and_si512(bytes, low4);
      w.hi[g] = _mm512_and_si512(_mm512_srli_epi16(bytes, 4), low4);
    }
    if constexpr (kQuants == Quants::kIq4Nl || kQuants == Quants::kMxfp4) {
      const __m512i table = UnsignedTable<kQuants>();
#pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) {
        w.lo[g] = _mm512_shuffle_epi8(table, w.lo[g]);
        w.hi[g] = _mm512_shuffle_epi8(table, w.hi[g]);
      }
    }
    if constexpr (kQuants == Quants::kNibblesFifthBit) {
      // Element e's fifth bit is bit e % 8 of byte e / 8 of the row's qh: copy that byte to the
      // four bytes of each lane, and test byte t for bit (4 g + t) % 8.
      const __m512i qh = Load(packed + Pack::kQhOffset);
      const __m512i sixteen = _mm512_set1_epi8(16);
      const __m512i bit[2] = {_mm512_set1_epi32(0x08040201), _mm512_set1_epi32(0x80402010)};
      // Byte k of each int32 lane of `within` is the lane's first byte index in its 128 bits.
      const __m512i within = _mm512_set4_epi32(0x0C0C0C0C, 0x08080808, 0x04040404, 0);
#pragma GCC unroll 4
      for (int byte = 0; byte < 4; ++byte) {
        const __m512i spread =
            _mm512_shuffle_epi8(qh, _mm512_add_epi8(within, _mm512_set1_epi8(byte)));
#pragma GCC unroll 2
        for (int half = 0; half < 2; ++half) {
          // Elements [8 byte + 4 half, + 4): group 2 (byte % 2) + half of lo (byte < 2) or hi.
          const int g = 2 * (byte % 2) + half;
          __m512i& q = byte < 2 ? w.lo[g] : w.hi[g];
          q = _mm512_mask_add_epi8(q, _mm512_test_epi8_mask(spread, bit[half]), q, sixteen);
        }
      }
    }
    return w;
  }

  // (dw * dx) * float(sumi), plus mw * sx with a min (the reference's term).
  static __m512 Scale(__m512 dw, __m512 dx, __m512i sumi, __m512 mw, __m512 sx) {
    __m512 term = _mm512_mul_ps(_mm512_mul_ps(dw, dx), _mm512_cvtepi32_ps(sumi));
    if constexpr (kHasMin) term = _mm512_add_ps(term, _mm512_mul_ps(mw, sx));
    return term;
  }
};

// Fills panel `out` from block b of the sixteen rows (Q8_0 or Q8_1, kQ8_1).
template <bool kQ8_1>
void BuildPanelQ8(const std::byte* const* rows, int64_t b, PanelQ8& out) {
  using Block = std::conditional_t<kQ8_1, BlockQ8_1, BlockQ8_0>;
  for (int i = 0; i < kPanelRows; ++i) {
    const Block& x = reinterpret_cast<const Block*>(rows[i])[b];
    for (int g = 0; g < 8; ++g) std::memcpy(out.qs[g] + 4 * i, x.qs + 4 * g, 4);
    out.d[i] = Half(x.d);
    if constexpr (kQ8_1) {
      out.s[i] = Half(x.s);
    } else {
      int32_t sum = 0;
      for (int l = 0; l < 32; ++l) sum += x.qs[l];
      out.sum[i] = sum;
    }
  }
}

}  // namespace
}  // namespace uc::kernels::avx512

#endif  // defined(__x86_64__)
