// AVX-512 VNNI integer MatMul (AVX-512 F/BW/VL/DQ + VNNI), bit-identical to cpu::MatMulInt8
// and avx2::MatMulInt8. The design is matmul_int8_avx2.cc's at twice the width: the x rows are
// quantized once per call (by avx2::QuantizeActivations); the weights, in ggml's block layout as
// stored, are walked in tiles of sixteen rows:
//   - with m >= 16 (prefill, batched decode), the 32-element types interleave groups of sixteen
//     x rows into panels once per call, and dot each weight row of the tile with a whole panel
//     (lane = x row; four-byte groups of the weight row are broadcast): every block of a tile
//     is unpacked once for all the x rows, in L1-sized chunks, and eight weight rows run at a
//     time with their accumulators in registers (ChunkTileRange). The K-quants unpack each
//     super-block of a tile once per pass of 128 x rows with the weight rows as lanes (KLanes:
//     each four-byte group of the sixteen rows one vector, the sub-block scales vectors too),
//     which four x rows at a time meet with their groups broadcast (LaneTileRange): no panels,
//     no transpose of the outputs, each weight vector loaded once per four rows;
//   - the other x rows of the 32-element types (the m % 16 left over) and every row of the
//     decode shape (m < 16, where each block is unpacked into registers as it streams by) are
//     dotted with the tile (lane = weight row), with a horizontal sum per block. In the decode
//     shape Q4_K, Q5_K and Q6_K unpack each row's super-block into registers in element order,
//     with a scale per int32 lane, and prefetch the tile's next block into L1 (KRowTileRange);
//   - weights packed once at load (PackInt8, kernels::PackedWeight: every type here but Q2_K,
//     Q3_K and Q8_K) hold each tile's blocks with their fields interleaved across the sixteen
//     rows (each four-byte group of the rows one vector), so the weight rows as lanes are a few
//     shifts and masks away, and each thread reads one contiguous stream. The K-quants: up to
//     four x rows take each super-block straight from its bytes in registers (PackedLaneTerms;
//     decode 1.5-1.9x faster than KRowTileRange at one thread), more build KLanes from it
//     without the transpose (LaneTileRange with PackedTile). The 32-element types: below
//     sixteen x rows, four at a time take each block straight from its bytes (PackedRowTileRange:
//     Q4_0 and Q4_1 decode 1.4-1.9x faster than RowTileRange, Q8_0 level at one thread and 1.2x
//     at two), with sixteen or more a 4x4 transpose in 128-bit lanes gives Prepare's layout for
//     the panels (ChunkTileRange with PackedTile).
//
// Every weight quant is unpacked to an unsigned byte u = q + offset (Q4_0 8, Q5_0 16, Q3_K 4,
// Q6_K 32, and 128 for the signed Q8_0, IQ4_NL and Q8_K), so that _mm512_dpbusd_epi32 (unsigned
// bytes times the signed activation bytes, four products added into an int32 lane, no
// saturation) gives exact block sums; the offset comes back out with the activation block sums
// (Q8_0's sum of quants, Q8_K's bsums). In decode the K-quants' sub-block scales multiply int16
// sums of _mm512_maddubs_epi16 (unsigned quants at most 63, so pairs of products stay below 2^15,
// as in int8_blocks_avx2.h) through _mm512_dpwssd_epi32. Block sums are exact integers, and each
// output adds its block terms alone, in block order, with the reference's F32 operations, so the
// bits do not depend on m, on the shape a row goes through, on the thread count or on the path.
//
// Everything here but MatMulInt8 is in an anonymous namespace: inline functions shared with
// other translation units would be emitted here with AVX-512 instructions and could be the
// copy the linker keeps, which CPUs without AVX-512 cannot run. For the same reason the scratch
// buffers are plain malloc'ed memory rather than std::vector.
#if defined(__x86_64__)

// clang-format off
// First, before <immintrin.h> (see the header).
#include "kernels/cpu/avx512_gcc_workaround.h"  // NOLINT(build/include_order)
#include <immintrin.h>
// clang-format on

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <type_traits>
#include <utility>

#include "base/check.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/scratch.h"
#include "kernels/dispatch.h"
#include "tensor/dtype.h"

namespace uc::kernels::avx512 {
namespace {

constexpr int kTileRows = 16;   // weight rows per tile: one per int32 / F32 lane
constexpr int kPanelRows = 16;  // x rows per panel: one per lane

// ---------------------------------------------------------------------------------------------
// Helpers.

__m512i Load(const void* p) { return _mm512_loadu_si512(p); }
__m256i Load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
__m128i Load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
void Store256(void* p, __m256i v) { _mm256_storeu_si256(static_cast<__m256i*>(p), v); }

float Half(uint16_t h) { return _cvtsh_ss(h); }

uint16_t LoadU16(const std::byte* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// Sixteen f16 at p, as F32.
__m512 HalvesAt(const std::byte* p) { return _mm512_cvtph_ps(Load256(p)); }

// Interleaves field [offset, offset + bytes) of the sixteen blocks src[j] into dst: four-byte
// groups (bytes % 4 == 0) as vectors, or a two-byte field as an array of sixteen.
void InterleaveField(const std::byte* const* src, size_t offset, size_t bytes, std::byte* dst) {
  const size_t unit = bytes == 2 ? 2 : 4;
  for (size_t i = 0; i < bytes / unit; ++i) {
    for (int j = 0; j < kTileRows; ++j) {
      std::memcpy(dst + (i * kTileRows + j) * unit, src[j] + offset + i * unit, unit);
    }
  }
}

// The four bytes at p in every int32 lane.
__m512i Broadcast4(const void* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return _mm512_set1_epi32(v);
}

// acc + dpbusd(w, the four bytes at p in every lane), the bytes as the instruction's embedded
// broadcast ({1to16}): GCC 12 loads them with a separate vpbroadcastd.
[[gnu::always_inline]] inline __m512i DpbusdBroadcast(__m512i acc, __m512i w, const void* p) {
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*static_cast<const int32_t*>(p)));
  return acc;
}

// The same for dpwssd (int16 pairs).
[[gnu::always_inline]] inline __m512i DpwssdBroadcast(__m512i acc, __m512i w, const void* p) {
  asm("vpdpwssd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*static_cast<const int32_t*>(p)));
  return acc;
}

// The 16 bytes at a, b, c, d in 128-bit lanes 0, 1, 2, 3.
__m512i Lanes(const void* a, const void* b, const void* c, const void* d) {
  __m512i v = _mm512_castsi128_si512(Load128(a));
  v = _mm512_inserti32x4(v, Load128(b), 1);
  v = _mm512_inserti32x4(v, Load128(c), 2);
  return _mm512_inserti32x4(v, Load128(d), 3);
}

// The f16 at byte `offset` of each of the sixteen rows, as F32, gathered in registers (sixteen
// 2-byte stores read back by one 32-byte load stall store forwarding: Q4_0 decode 1.3x slower).
[[gnu::always_inline]] inline void GatherF16(const std::byte* const* rows, int64_t offset,
                                             float* out) {
  auto at = [&](int j) { return static_cast<short>(LoadU16(rows[j] + offset)); };
  const __m128i lo = _mm_setr_epi16(at(0), at(1), at(2), at(3), at(4), at(5), at(6), at(7));
  const __m128i hi = _mm_setr_epi16(at(8), at(9), at(10), at(11), at(12), at(13), at(14), at(15));
  _mm512_store_ps(out, _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1)));
}

// Per 128-bit lane: [a 0+2, b 0+2, a 1+3, b 1+3] (int32 lanes).
__m512i AddInterleaved(__m512i a, __m512i b) {
  return _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
}

// Per 128-bit lane: [a 0+1, b 0+1, a 2+3, b 2+3] of int32 pairs, for a, b from AddInterleaved.
__m512i AddInterleaved64(__m512i a, __m512i b) {
  return _mm512_add_epi32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
}

// [a.0 + a.1, a.2 + a.3, b.0 + b.1, b.2 + b.3] of 128-bit lanes.
__m512i AddLanePairs(__m512i a, __m512i b) {
  return _mm512_add_epi32(_mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                          _mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
}

// Lane 4 L + q = the sum of 128-bit lane L of v[q] (q < 4).
__m512i SumQuads(const __m512i* v) {
  return AddInterleaved64(AddInterleaved(v[0], v[1]), AddInterleaved(v[2], v[3]));
}

// Lane j = the sum of the sixteen int32 lanes of v[j].
__m512i SumEach(const __m512i* v) {
  __m512i u[4];
#pragma GCC unroll 4
  for (int g = 0; g < 4; ++g) {
    // 128-bit lane L of u[g]: rows 4 g .. 4 g + 3, summed over their lane L.
    u[g] = AddInterleaved64(AddInterleaved(v[4 * g], v[4 * g + 1]),
                            AddInterleaved(v[4 * g + 2], v[4 * g + 3]));
  }
  return AddLanePairs(AddLanePairs(u[0], u[1]), AddLanePairs(u[2], u[3]));
}

// Lane j = the sum of row j's eight int32 lanes, from v[p] = [row 2p's eight | row 2p + 1's].
__m512i SumPairedRows(const __m512i* v) {
  const __m512i a = AddInterleaved64(AddInterleaved(v[0], v[1]), AddInterleaved(v[2], v[3]));
  const __m512i b = AddInterleaved64(AddInterleaved(v[4], v[5]), AddInterleaved(v[6], v[7]));
  // Rows 0, 2, 4, 6 | 1, 3, 5, 7 | 8, 10, 12, 14 | 9, 11, 13, 15.
  const __m512i sums = AddLanePairs(a, b);
  return _mm512_permutexvar_epi32(
      _mm512_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15), sums);
}

// v[i] lane c = v[c] lane i before (a 16x16 transpose in registers): at each stage s = 8, 4,
// 2, 1, rows j and j + s ((j & s) == 0) swap their off-diagonal s x s blocks. Inlined: called,
// it passes v through memory (ToLanes, and so the K-quants at 16 x rows, 1.1-1.2x slower).
[[gnu::always_inline]] inline void Transpose16x16(__m512* v) {
#pragma GCC unroll 4
  for (int s = 8; s >= 1; s /= 2) {
    alignas(64) int32_t lo[16], hi[16];
    for (int l = 0; l < 16; ++l) {
      lo[l] = (l & s) == 0 ? l : 16 + (l - s);
      hi[l] = (l & s) == 0 ? l + s : 16 + l;
    }
    const __m512i idx_lo = _mm512_load_si512(lo), idx_hi = _mm512_load_si512(hi);
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) {
      if ((j & s) != 0) continue;
      const __m512 a = v[j], b = v[j + s];
      v[j] = _mm512_permutex2var_ps(a, idx_lo, b);
      v[j + s] = _mm512_permutex2var_ps(a, idx_hi, b);
    }
  }
}

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
  kBytes,            // Q8_0: q + 128
};

// kIq4NlValues + 128, as unsigned bytes.
alignas(16) constexpr uint8_t kIq4NlUnsigned[16] = {1,   24,  45,  63,  79,  93,  106, 118,
                                                    129, 141, 153, 166, 181, 197, 217, 241};

// The packed layout of a 32-element block type (PackInt8), for Blocks32: block b of a tile's
// sixteen rows at (t * blocks + b) * kBytes, each four-byte group of qs one 64-byte vector (lane
// j: row j's four bytes), qh (Q5_0, Q5_1) one vector (lane j: row j's 32 bits), d and m arrays
// of the sixteen rows' f16. As many bytes as sixteen blocks.
template <typename B, bool kQh, bool kMin>
struct Pack32 {
  static constexpr bool kPacked = true;
  static constexpr bool kNextIntoL1 = false;  // PackedTile::Prefetch
  using Block = B;
  static constexpr size_t kQsBytes = sizeof(B::qs);  // 16 (nibbles) or 32 (Q8_0)
  static constexpr size_t kQhOffset = kQsBytes * kTileRows;
  static constexpr size_t kDOffset = kQhOffset + (kQh ? 4 * kTileRows : 0);
  static constexpr size_t kMOffset = kDOffset + 2 * kTileRows;
  static constexpr size_t kBytes = kTileRows * sizeof(B);
  static_assert(kMOffset + (kMin ? 2 * kTileRows : 0) == kBytes);
  static void Interleave(const std::byte* const* src, std::byte* dst) {
    InterleaveField(src, offsetof(B, qs), kQsBytes, dst);
    if constexpr (kQh) InterleaveField(src, offsetof(B, qh), 4, dst + kQhOffset);
    InterleaveField(src, offsetof(B, d), 2, dst + kDOffset);
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
        if constexpr (kQuants == Quants::kIq4Nl) {
          const __m512i table = _mm512_broadcast_i32x4(Load128(kIq4NlUnsigned));
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
    GatherF16(rows, block + offsetof(Block, d), p.d);
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
    _mm512_store_ps(p.d, HalvesAt(packed + Pack::kDOffset));
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
    const __m512 dw = HalvesAt(packed + Pack::kDOffset);
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
    if constexpr (kQuants == Quants::kIq4Nl) {
      const __m512i table = _mm512_broadcast_i32x4(Load128(kIq4NlUnsigned));
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

// ---------------------------------------------------------------------------------------------
// The driver.

// Calls fn(Kernel{}) with the kernel of a quantized weight dtype.
template <typename Fn>
void VisitKernel(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kQ8_0:
      return fn(Blocks32<BlockQ8_0, Quants::kBytes, 128, false>{});
    case DType::kIQ4_NL:
      return fn(Blocks32<BlockIQ4_NL, Quants::kIq4Nl, 128, false>{});
    case DType::kQ4_0:
      return fn(Blocks32<BlockQ4_0, Quants::kNibbles, 8, false>{});
    case DType::kQ5_0:
      return fn(Blocks32<BlockQ5_0, Quants::kNibblesFifthBit, 16, false>{});
    case DType::kQ4_1:
      return fn(Blocks32<BlockQ4_1, Quants::kNibbles, 0, true>{});
    case DType::kQ5_1:
      return fn(Blocks32<BlockQ5_1, Quants::kNibblesFifthBit, 0, true>{});
    case DType::kQ2_K:
      return fn(Q2KBlocks{});
    case DType::kQ3_K:
      return fn(Q3KBlocks{});
    case DType::kQ4_K:
      return fn(Q4KBlocks{});
    case DType::kQ5_K:
      return fn(Q5KBlocks{});
    case DType::kQ6_K:
      return fn(Q6KBlocks{});
    case DType::kQ8_K:
      return fn(Q8KBlocks{});
    default:
      UC_CHECK(false, "MatMulInt8: dtype %d is not quantized", static_cast<int>(dtype));
  }
}

// The quantized activations of one call.
constexpr int64_t kChunksPerSuperBlock = kQK_K / 32;

struct QuantizedX {
  const std::byte* rows;  // [m] rows of row_bytes
  int64_t row_bytes;
  int64_t block_bytes;
  int64_t blocks;
  const int32_t* sums;  // [m, blocks] sum of each block's quants (rows past the panels), or null
  // [m, blocks, kChunksPerSuperBlock] the sum of each 32-element chunk's quants (its two bsums)
  // for the K-quants with kPairScale (KLaneTerms), or null.
  const int16_t* chunk_sums;
  const void* panels;  // [panel_rows / 16, blocks] panels of rows [0, panel_rows), or null
  int64_t panel_rows;  // a multiple of 16
};

// Prefetches that the compiler keeps: GCC takes _mm_prefetch for free of side effects and
// deletes a loop that only prefetches (C++ loops may be assumed to finish).
void PrefetchToL1(const void* p) {
  asm volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(p)));
}
void PrefetchToL2(const void* p) {
  asm volatile("prefetcht1 %0" : : "m"(*static_cast<const char*>(p)));
}

// y rows [i0, i0 + 16) x columns [j0, j0 + cols) from acc[c] (lane i = row i0 + i, column
// j0 + c): transposed in registers (a transpose through memory stalls on store forwarding).
void StorePanel(const __m512* acc, int64_t cols, float* y, int64_t n) {
  __m512 v[kTileRows];
#pragma GCC unroll 16
  for (int c = 0; c < kTileRows; ++c) v[c] = acc[c];
  TransposeOutOfLine(v);
  const __mmask16 mask = static_cast<__mmask16>((1u << cols) - 1);
#pragma GCC unroll 16
  for (int i = 0; i < kPanelRows; ++i) _mm512_mask_storeu_ps(y + i * n, mask, v[i]);
}

// Adds the terms of `blocks` blocks, in block order, to columns [kC0, kC0 + K::kPanelCols) of
// one panel's sums, io[kC0 ..], with the accumulators in registers over the blocks.
template <typename K, int kC0>
[[gnu::always_inline]] inline void PanelColumns(const typename K::Prep* preps, int64_t blocks,
                                                const typename K::Panel* panels, __m512* io) {
  constexpr int kCols = K::kPanelCols;
  __m512 acc[kCols];
#pragma GCC unroll 16
  for (int c = 0; c < kCols; ++c) acc[c] = io[kC0 + c];
  for (int64_t b = 0; b < blocks; ++b) {
    K::template PanelTerms<kC0, kCols>(preps[b], panels[b], acc);
  }
#pragma GCC unroll 16
  for (int c = 0; c < kCols; ++c) io[kC0 + c] = acc[c];
}

template <typename K, int... kPart>
void PanelParts(const typename K::Prep* preps, int64_t blocks, const typename K::Panel* panels,
                __m512* io, std::integer_sequence<int, kPart...> /*parts*/) {
  (PanelColumns<K, kPart * K::kPanelCols>(preps, blocks, panels, io), ...);
}

// All sixteen columns of one panel (a column past n repeats the last row; StorePanel drops it).
template <typename K>
void PanelTile(const typename K::Prep* preps, int64_t blocks, const typename K::Panel* panels,
               __m512* io) {
  static_assert(kTileRows % K::kPanelCols == 0);
  PanelParts<K>(preps, blocks, panels, io,
                std::make_integer_sequence<int, kTileRows / K::kPanelCols>{});
}

// The sixteen weight rows of tile t (rows past n repeat the last row) and the bytes of the next
// tile.
struct TileRows {
  const std::byte* rows[kTileRows];
  const std::byte* next;
  const std::byte* next_end;

  TileRows(const MatMulArgs& a, int64_t t) {
    const int64_t j0 = t * kTileRows;
    for (int c = 0; c < kTileRows; ++c) {
      rows[c] = a.w + std::min<int64_t>(j0 + c, a.n - 1) * a.w_row_bytes;
    }
    next = a.w + std::min(j0 + kTileRows, a.n) * a.w_row_bytes;
    next_end = a.w + std::min(j0 + 2 * kTileRows, a.n) * a.w_row_bytes;
  }

  // Asks for share `part` of `parts` of the next tile (contiguous) to be brought into L2. Into
  // L1 instead: on Intel a whole tile ahead (up to 34 KiB at k = 2048) would crowd the current
  // one out; on a Zen 4 (32 KiB L1) decode from the stored rows was slower by 1.5-2.5x for Q4_K
  // and Q6_K and 1.1-1.2x for Q3_K, level for Q4_0 (kernels_benchmark BM_MatMulPrecision
  // level 2), as for the packed tiles (PackedTile::Prefetch).
  void PrefetchNext(int64_t part, int64_t parts) const {
    const int64_t share = (next_end - next + parts - 1) / parts;
    const std::byte* end = next + std::min((part + 1) * share, next_end - next);
    for (const std::byte* p = next + part * share; p < end; p += 64) PrefetchToL2(p);
  }

  // Asks for bytes [begin, begin + kBytes) of each of the sixteen rows to be brought into L1:
  // rows read side by side are sixteen streams, more than the L1 prefetcher follows (measured:
  // 1.3-1.5x faster K-quant decode; no gain for the 32-element formats, whose blocks are
  // smaller).
  template <int64_t kBytes>
  void PrefetchL1(int64_t begin) const {
    for (int j = 0; j < kTileRows; ++j) {
      const std::byte* first = rows[j] + begin;
      for (int64_t byte = 0; byte < kBytes; byte += 64) PrefetchToL1(first + byte);
      if constexpr (kBytes % 64 != 1) PrefetchToL1(first + kBytes - 1);
    }
  }
};

// acc[r] += the term of block b of x row first + r against the unpacked block, r < count.
template <typename K>
[[gnu::always_inline]] inline void AddRowTerms(const typename K::Prep& prep, const QuantizedX& x,
                                               int64_t b, int64_t first, int64_t count,
                                               __m512* acc) {
  const std::byte* xb = x.rows + first * x.row_bytes + b * x.block_bytes;
  for (int64_t r = 0; r < count; ++r) {
    const int32_t sum = K::kNeedsSums ? x.sums[(first + r) * x.blocks + b] : 0;
    acc[r] = _mm512_add_ps(acc[r], K::Term(prep, xb + r * x.row_bytes, sum));
  }
}

// y rows [first, first + count), columns [j0, j0 + cols), from acc[r] (lane c = column j0 + c).
void StoreRows(const __m512* acc, int64_t first, int64_t count, int64_t j0, int64_t cols, float* y,
               int64_t n) {
  const __mmask16 mask = static_cast<__mmask16>((1u << cols) - 1);
  for (int64_t r = 0; r < count; ++r) _mm512_mask_storeu_ps(y + (first + r) * n + j0, mask, acc[r]);
}

// Tiles [t_begin, t_end) without panels (m < 16: decode): each block of a tile is unpacked into
// registers and dotted with the x rows at once, weights streamed. Prepare, Term and AddRowTerms
// are forced inline: GCC at -O2 called them, passing the unpacked block through memory (Q4_0 and
// Q8_0 decode 1.35-1.5x slower on an AMD EPYC). kLinearPrefetch: as KRowTileRange's.
template <typename K, bool kLinearPrefetch>
void RowTileRange(const MatMulArgs& a, const QuantizedX& x, int64_t t_begin, int64_t t_end) {
  alignas(64) typename K::Prep prep;
  __m512 acc[kPanelRows];
  for (int64_t t = t_begin; t < t_end; ++t) {
    const TileRows tile(a, t);
    const int64_t j0 = t * kTileRows;
    for (int64_t r = 0; r < a.m; ++r) acc[r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < x.blocks; ++b) {
      // Sixteen rows read side by side are sixteen streams, which the hardware prefetchers of
      // an AMD EPYC do not follow: there Q4_0 and Q8_0 decode are 2-3x faster with the next
      // tile prefetched in address order (ahead of the AVX2 path's eight-row tiles instead of
      // 1.5-2x behind them; into L1 or L2 made no difference). On an Intel Xeon a prefetch
      // into L2 gained nothing or cost a little.
      if constexpr (kLinearPrefetch) tile.PrefetchNext(b, x.blocks);
      K::Prepare(tile.rows, b, prep);
      AddRowTerms<K>(prep, x, b, 0, a.m, acc);
    }
    StoreRows(acc, 0, a.m, j0, std::min<int64_t>(kTileRows, a.n - j0), a.y, a.n);
  }
}

// The packed layout of kernel K (K::Pack), or NoPack.
template <typename K, typename = void>
struct PackOf {
  using type = NoPack;
};
template <typename K>
struct PackOf<K, std::void_t<typename K::Pack>> {
  using type = typename K::Pack;
};

// The super-blocks of tile t as stored: each is unpacked row by row and transposed into lanes.
template <typename K>
struct StoredTile {
  TileRows tile;
  StoredTile(const MatMulArgs& a, int64_t t, int64_t /*blocks*/) : tile(a, t) {}
  static constexpr bool kDirect = false;
  const std::byte* block(int64_t /*b*/) const { return nullptr; }
  void Lanes(int64_t b, KPrep& prep, KLanes& lanes) const {
    K::PrepareLanes(tile.rows, b, prep, lanes);
  }
  void Prepare(int64_t b, typename K::Prep& prep) const { K::Prepare(tile.rows, b, prep); }
  // kLinearPrefetch (AMD): share `part` of the next tile into L2; otherwise none (measured level).
  template <bool kLinearPrefetch>
  void Prefetch(int64_t part, int64_t parts, bool /*direct*/ = false) const {
    if constexpr (kLinearPrefetch) tile.PrefetchNext(part, parts);
  }
};

// The super-blocks of tile t packed (PackInt8): one contiguous stream of KLanes' contents.
template <typename K>
struct PackedTile {
  using P = typename PackOf<K>::type;
  const std::byte* tile;
  const std::byte* next;
  const std::byte* next_end;
  PackedTile(const MatMulArgs& a, int64_t t, int64_t blocks) {
    const int64_t tile_bytes = blocks * static_cast<int64_t>(P::kBytes);
    const int64_t tiles = (a.n + kTileRows - 1) / kTileRows;
    tile = a.w_packed + t * tile_bytes;
    next = tile + tile_bytes;
    next_end = t + 1 < tiles ? next + tile_bytes : next;
  }
  static constexpr bool kDirect = true;  // K::PackedLaneTerms reads block(b) itself
  const std::byte* block(int64_t b) const { return tile + b * static_cast<int64_t>(P::kBytes); }
  void Lanes(int64_t b, KPrep& /*prep*/, KLanes& lanes) const { K::PackedLanes(block(b), lanes); }
  void Prepare(int64_t b, typename K::Prep& prep) const { K::PreparePacked(block(b), prep); }
  // kLinearPrefetch (AMD): the bytes kAheadBytes past block `part` into L2: the packed tiles
  // are one contiguous run, whose hardware prefetch alone left Q4_K and Q6_K decode 2.4-3.9x
  // slower (Zen 5; Q6_K 3x on Zen 4). A share of the next tile per block, as StoredTile does,
  // measured 1.02-1.15x slower for Q4_0 and Q4_K at one and two threads, and Q6_K within the
  // noise either way (4 KiB ahead: faster at two threads, slower at one). Into L1 instead of L2
  // (prefetcht0, as before): Q4_K decode, which reads each qs vector twice, 1.7-2x slower on a
  // Zen 4 with a 32 KiB L1 (kernels_benchmark BM_MatMulPrecision, 1 thread: 11-13 against 21-24
  // GB/s of weights); Q4_0 and Q6_K level or slower; batches of 16 1.05-1.3x slower.
  // P::kNextIntoL1 (Q4_K, Q5_K) and `direct` (the x rows meet the block straight from its
  // bytes, PackedRowTerms): also the next super-block, from L2 into L1 (a short distance, unlike
  // the 12 KiB above): decode 1.05-1.2x faster at one and two threads (Zen 4, kernels_benchmark
  // BM_MatMulPrecision tokens:1, medians of 12 interleaved rounds); at 16 rows (KLanes passes)
  // 1.04-1.08x slower, hence `direct`; Q6_K 1.2-1.5x slower with it, the 32-element types level.
  // Otherwise a share `part` of `parts` of the next tile into L2.
  template <bool kLinearPrefetch>
  void Prefetch(int64_t part, int64_t parts, bool direct = false) const {
    if constexpr (kLinearPrefetch) {
      constexpr int64_t kAheadBytes = 12 * 1024;
      const std::byte* first = block(part) + kAheadBytes;
      for (size_t q = 0; q < P::kBytes; q += 64) PrefetchToL2(first + q);
      if (P::kNextIntoL1 && direct) {
        const std::byte* next_block = block(part + 1);
        for (size_t q = 0; q < P::kBytes; q += 64) PrefetchToL1(next_block + q);
      }
    } else {
      const int64_t share = (next_end - next + parts - 1) / parts;
      const std::byte* end = next + std::min((part + 1) * share, next_end - next);
      for (const std::byte* p = next + part * share; p < end; p += 64) PrefetchToL2(p);
    }
  }
};

// Tiles [t_begin, t_end) with panels, for kernels whose panel terms keep their accumulators in
// registers (K::kUsesPanels): each tile's blocks are unpacked once for all the x rows,
// K::kChunkBlocks at a time (the unpacked chunk and one panel's chunk stay in L1 while every
// panel passes); each panel's sums wait in `sums` (this thread's scratch) between chunks.
// kLinearPrefetch: as RowTileRange's (with sixteen x rows, the batched decode of sixteen
// sequences, the weights stream as in decode).
template <typename K, template <typename> class Source, bool kLinearPrefetch>
void ChunkTileRange(const MatMulArgs& a, const QuantizedX& x, int64_t t_begin, int64_t t_end) {
  using Panel = typename K::Panel;
  using Prep = typename K::Prep;
  const int64_t groups = x.panel_rows / kPanelRows;
  const int64_t count = a.m - x.panel_rows;  // rows past the panels, fewer than sixteen
  thread_local cpu::ThreadScratch prep_buffer, sums_buffer;
  auto* const preps = reinterpret_cast<Prep*>(prep_buffer.Get(K::kChunkBlocks * sizeof(Prep)));
  // sums[16 g + c]: panel g's column c (lane i = x row 16 g + i); then sums[16 groups + r]: row
  // panel_rows + r's sixteen columns.
  auto* const sums = reinterpret_cast<__m512*>(
      sums_buffer.Get(static_cast<size_t>(groups * kTileRows + count) * sizeof(__m512)));
  const auto* panels = static_cast<const Panel*>(x.panels);
  for (int64_t t = t_begin; t < t_end; ++t) {
    const int64_t j0 = t * kTileRows;
    const int64_t cols = std::min<int64_t>(kTileRows, a.n - j0);
    const Source<K> tile(a, t, x.blocks);
    for (int64_t i = 0; i < groups * kTileRows + count; ++i) sums[i] = _mm512_setzero_ps();
    for (int64_t b0 = 0; b0 < x.blocks; b0 += K::kChunkBlocks) {
      const int64_t chunk = std::min(K::kChunkBlocks, x.blocks - b0);
      for (int64_t b = b0; b < b0 + chunk; ++b) {
        tile.template Prefetch<kLinearPrefetch>(b, x.blocks);
        tile.Prepare(b, preps[b - b0]);
      }
      for (int64_t g = 0; g < groups; ++g) {
        PanelTile<K>(preps, chunk, panels + g * x.blocks + b0, sums + g * kTileRows);
      }
      for (int64_t b = b0; b < b0 + chunk; ++b) {
        AddRowTerms<K>(preps[b - b0], x, b, x.panel_rows, count, sums + groups * kTileRows);
      }
    }
    for (int64_t g = 0; g < groups; ++g) {
      StorePanel(sums + g * kTileRows, cols, a.y + g * kPanelRows * a.n + j0, a.n);
    }
    StoreRows(sums + groups * kTileRows, x.panel_rows, count, j0, cols, a.y, a.n);
  }
}

// Tiles [t_begin, t_end) of a K-quant for m >= 16, or for any m when the weights are packed:
// each super-block of a tile is brought into lanes (KLanes) once per pass of kRowsPerPass x
// rows, which take it four rows at a time (KLaneTerms), their accumulators in L1 between blocks
// (1.3-1.4x faster than the panel loop it replaces at 128 rows, 1.2x at 16; four rows at a time
// measured level with five or six). Source: StoredTile or PackedTile. Stored weights are
// unpacked and transposed for each pass, which costs more than the row kernel's unpacking at
// m = 1 (Q4_K decode 1.2-1.4x slower: KRowTileRange); packed ones only unpack nibbles and scales.
// kLinearPrefetch: Source::Prefetch's, during the first pass.
// acc[r] += the terms of x rows r < rows (at most 4) against packed super-block `packed`.
template <typename K>
void PackedRowTerms(const std::byte* packed, const std::byte* xb, int64_t x_stride,
                    const int16_t* cs, int64_t cs_stride, int64_t rows, __m512* acc) {
  switch (rows) {
    case 4:
      return K::template PackedLaneTerms<4>(packed, xb, x_stride, cs, cs_stride, acc);
    case 3:
      return K::template PackedLaneTerms<3>(packed, xb, x_stride, cs, cs_stride, acc);
    case 2:
      return K::template PackedLaneTerms<2>(packed, xb, x_stride, cs, cs_stride, acc);
    default:
      return K::template PackedLaneTerms<1>(packed, xb, x_stride, cs, cs_stride, acc);
  }
}

template <typename K, template <typename> class Source, bool kLinearPrefetch>
void LaneTileRange(const MatMulArgs& a, const QuantizedX& x, int64_t t_begin, int64_t t_end) {
  constexpr int64_t kRowsPerPass = 128;
  constexpr int kR = 4;
  // Up to this many x rows meet a packed super-block straight from its bytes (no KLanes).
  constexpr int64_t kDirectRows = 4;
  alignas(64) KPrep prep;
  alignas(64) KLanes lanes;
  __m512 acc[kRowsPerPass];
  for (int64_t t = t_begin; t < t_end; ++t) {
    const int64_t j0 = t * kTileRows;
    const int64_t cols = std::min<int64_t>(kTileRows, a.n - j0);
    const Source<K> tile(a, t, x.blocks);
    for (int64_t i0 = 0; i0 < a.m; i0 += kRowsPerPass) {
      const int64_t rows = std::min(kRowsPerPass, a.m - i0);
      for (int64_t r = 0; r < rows; ++r) acc[r] = _mm512_setzero_ps();
      for (int64_t b = 0; b < x.blocks; ++b) {
        if (i0 == 0) tile.template Prefetch<kLinearPrefetch>(b, x.blocks, rows <= kDirectRows);
        const std::byte* xb = x.rows + i0 * x.row_bytes + b * x.block_bytes;
        // Row i's chunk sums at cs + (i - i0) * cs_stride (kPairScale kernels only).
        const int64_t cs_stride = x.blocks * kChunksPerSuperBlock;
        const int16_t* const cs = x.chunk_sums == nullptr
                                      ? nullptr
                                      : x.chunk_sums + i0 * cs_stride + b * kChunksPerSuperBlock;
        if constexpr (Source<K>::kDirect) {
          if (rows <= kDirectRows) {
            PackedRowTerms<K>(tile.block(b), xb, x.row_bytes, cs, cs_stride, rows, acc);
            continue;
          }
        }
        tile.Lanes(b, prep, lanes);
        auto cs_at = [&](int64_t r) { return cs == nullptr ? nullptr : cs + r * cs_stride; };
        int64_t r = 0;
        for (; r + kR <= rows; r += kR) {
          K::template LaneTerms<kR>(lanes, xb + r * x.row_bytes, x.row_bytes, cs_at(r), cs_stride,
                                    acc + r);
        }
        const std::byte* xr = xb + r * x.row_bytes;
        switch (rows - r) {
          case 3:
            K::template LaneTerms<3>(lanes, xr, x.row_bytes, cs_at(r), cs_stride, acc + r);
            break;
          case 2:
            K::template LaneTerms<2>(lanes, xr, x.row_bytes, cs_at(r), cs_stride, acc + r);
            break;
          case 1:
            K::template LaneTerms<1>(lanes, xr, x.row_bytes, cs_at(r), cs_stride, acc + r);
            break;
          default:
            break;
        }
      }
      StoreRows(acc, i0, rows, j0, cols, a.y, a.n);
    }
  }
}

// Tiles [t_begin, t_end) of a packed 32-element type without panels (m < 16: decode): each
// block is unpacked into registers with the weight rows as lanes and meets the x rows four at a
// time (K::PackedLaneTerms), one contiguous stream of weights per thread. kLinearPrefetch: as
// PackedTile::Prefetch's.
template <typename K, bool kLinearPrefetch>
void PackedRowTileRange(const MatMulArgs& a, const QuantizedX& x, int64_t t_begin, int64_t t_end) {
  __m512 acc[kPanelRows];
  for (int64_t t = t_begin; t < t_end; ++t) {
    const PackedTile<K> tile(a, t, x.blocks);
    const int64_t j0 = t * kTileRows;
    for (int64_t r = 0; r < a.m; ++r) acc[r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < x.blocks; ++b) {
      tile.template Prefetch<kLinearPrefetch>(b, x.blocks);
      const std::byte* block = tile.block(b);
      const std::byte* xb = x.rows + b * x.block_bytes;
      // Row r's block sums; only the types with an offset have them (x.sums is null otherwise).
      auto sums = [&](int64_t r) -> const int32_t* {
        return K::kNeedsSums ? x.sums + r * x.blocks + b : nullptr;
      };
      int64_t r = 0;
      for (; r + 4 <= a.m; r += 4) {
        K::template PackedLaneTerms<4>(block, xb + r * x.row_bytes, x.row_bytes, sums(r), x.blocks,
                                       acc + r);
      }
      const std::byte* xr = xb + r * x.row_bytes;
      switch (a.m - r) {
        case 3:
          K::template PackedLaneTerms<3>(block, xr, x.row_bytes, sums(r), x.blocks, acc + r);
          break;
        case 2:
          K::template PackedLaneTerms<2>(block, xr, x.row_bytes, sums(r), x.blocks, acc + r);
          break;
        case 1:
          K::template PackedLaneTerms<1>(block, xr, x.row_bytes, sums(r), x.blocks, acc + r);
          break;
        default:
          break;
      }
    }
    StoreRows(acc, 0, a.m, j0, std::min<int64_t>(kTileRows, a.n - j0), a.y, a.n);
  }
}

// Tiles [t_begin, t_end) of a K-quant without panels (m < 16: decode), with its row kernel R:
// each weight row's super-block is unpacked into registers and dotted with every x row; the
// sixteen rows' sums then give one term per x row (lane = weight row), as KTerm's.
// kLinearPrefetch (internal::CpuIsAmd()): only the next tile, in address order, into L1;
// otherwise the next tile into L2 and the next block of each row into L1.
template <typename R, bool kLinearPrefetch>
void KRowTileRange(const MatMulArgs& a, const QuantizedX& x, int64_t t_begin, int64_t t_end) {
  __m512 acc[kPanelRows];
  alignas(64) __m512i sums[kPanelRows][kTileRows];  // [x row][weight row]
  alignas(64) int16_t mins[kTileRows][16];
  alignas(64) float d[kTileRows], dmin[kTileRows];
  constexpr int64_t kBlockBytes = sizeof(typename R::Block);
  for (int64_t t = t_begin; t < t_end; ++t) {
    const TileRows tile(a, t);
    const int64_t j0 = t * kTileRows;
    for (int64_t r = 0; r < a.m; ++r) acc[r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < x.blocks; ++b) {
      // Measured on K-quant decode, Intel Xeon: each of the two prefetches is worth 5-10% (the
      // L1 one more at first). AMD EPYC: the linear prefetch alone is 1.1-1.2x faster for Q4_K
      // at 1 and 2 threads (level for Q6_K) than these two.
      if constexpr (kLinearPrefetch) {
        tile.PrefetchNext(b, x.blocks);
      } else {
        if (b + 1 < x.blocks) tile.PrefetchL1<kBlockBytes>((b + 1) * kBlockBytes);
        tile.PrefetchNext(b, x.blocks);
      }
      const std::byte* xb = x.rows + b * x.block_bytes;
      for (int j = 0; j < kTileRows; ++j) {
        KRow w;
        R::Unpack(tile.rows[j] + b * kBlockBytes, w);
        d[j] = w.d;
        dmin[j] = w.dmin;
        if constexpr (R::kMins == KMins::kMin) Store256(mins[j], w.extra);
        for (int64_t r = 0; r < a.m; ++r) {
          sums[r][j] = KRowSum<R::kMins>(w, BlockAt<BlockQ8_K>(xb + r * x.row_bytes));
        }
      }
      for (int64_t r = 0; r < a.m; ++r) {
        const auto& y = BlockAt<BlockQ8_K>(xb + r * x.row_bytes);
        const __m512 term = KTileTerm<R::kMins>(
            SumEach(sums[r]), y.d, _mm512_broadcast_i64x4(Load256(y.bsums)), d, dmin, mins);
        acc[r] = _mm512_add_ps(acc[r], term);
      }
    }
    StoreRows(acc, 0, a.m, j0, std::min<int64_t>(kTileRows, a.n - j0), a.y, a.n);
  }
}

// Outputs of tiles [t_begin, t_end): columns [16 t, 16 t + 16) ∩ [0, n).
template <typename K>
void TileRange(const MatMulArgs& a, const QuantizedX& x, int64_t t_begin, int64_t t_end) {
  const bool amd = internal::CpuIsAmd();
  if (a.w_packed != nullptr) {
    if constexpr (K::kUsesPanels) {
      if (a.m < kPanelRows) {
        return amd ? PackedRowTileRange<K, true>(a, x, t_begin, t_end)
                   : PackedRowTileRange<K, false>(a, x, t_begin, t_end);
      }
      return amd ? ChunkTileRange<K, PackedTile, true>(a, x, t_begin, t_end)
                 : ChunkTileRange<K, PackedTile, false>(a, x, t_begin, t_end);
    } else if constexpr (PackOf<K>::type::kPacked) {
      return amd ? LaneTileRange<K, PackedTile, true>(a, x, t_begin, t_end)
                 : LaneTileRange<K, PackedTile, false>(a, x, t_begin, t_end);
    }
    UC_CHECK(false, "MatMulInt8: packed weights of a dtype without a packed layout");
  }
  if (a.m < kPanelRows) {
    if constexpr (!std::is_void_v<typename K::RowKernel>) {
      return amd ? KRowTileRange<typename K::RowKernel, true>(a, x, t_begin, t_end)
                 : KRowTileRange<typename K::RowKernel, false>(a, x, t_begin, t_end);
    }
    return amd ? RowTileRange<K, true>(a, x, t_begin, t_end)
               : RowTileRange<K, false>(a, x, t_begin, t_end);
  }
  if constexpr (K::kUsesPanels) {
    amd ? ChunkTileRange<K, StoredTile, true>(a, x, t_begin, t_end)
        : ChunkTileRange<K, StoredTile, false>(a, x, t_begin, t_end);
  } else {
    amd ? LaneTileRange<K, StoredTile, true>(a, x, t_begin, t_end)
        : LaneTileRange<K, StoredTile, false>(a, x, t_begin, t_end);
  }
}

// Whether K's lane kernel takes QuantizedX::chunk_sums (the K-quants with kPairScale).
template <typename K>
constexpr bool UsesChunkSums() {
  if constexpr (requires { K::kPairScale; }) {
    return K::kPairScale;
  } else {
    return false;
  }
}

// QuantizedX::chunk_sums of x rows [begin, end): each Q8_K super-block's bsums added in pairs
// (at most 32 * 127 in magnitude).
void ChunkSums(const std::byte* rows, int64_t row_bytes, int64_t blocks, int64_t begin, int64_t end,
               int16_t* out) {
  for (int64_t i = begin; i < end; ++i) {
    const auto* y = reinterpret_cast<const BlockQ8_K*>(rows + i * row_bytes);
    int16_t* row_out = out + i * blocks * kChunksPerSuperBlock;
    for (int64_t b = 0; b < blocks; ++b) {
      for (int c = 0; c < kChunksPerSuperBlock; ++c) {
        row_out[b * kChunksPerSuperBlock + c] =
            static_cast<int16_t>(y[b].bsums[2 * c] + y[b].bsums[2 * c + 1]);
      }
    }
  }
}

// Sum of the 32 quants of each Q8_0 block of x rows [begin, end).
void BlockSums(const std::byte* rows, int64_t row_bytes, int64_t blocks, int64_t begin, int64_t end,
               int32_t* sums) {
  const __m256i ones = _mm256_set1_epi8(1);
  for (int64_t i = begin; i < end; ++i) {
    const auto* x = reinterpret_cast<const BlockQ8_0*>(rows + i * row_bytes);
    for (int64_t b = 0; b < blocks; ++b) {
      // 1 * q summed four at a time: dpbusd with unsigned ones.
      const __m256i wide = _mm256_dpbusd_epi32(_mm256_setzero_si256(), ones, Load256(x[b].qs));
      sums[i * blocks + b] = _mm512_reduce_add_epi32(_mm512_zextsi256_si512(wide));
    }
  }
}

// Panels of x row groups [begin, end) (rows 16 g .. 16 g + 15 of group g).
template <typename Panel>
void BuildPanels(ActivationFormat format, const QuantizedX& x, int64_t begin, int64_t end,
                 Panel* panels) {
  for (int64_t g = begin; g < end; ++g) {
    const std::byte* rows[kPanelRows];
    for (int i = 0; i < kPanelRows; ++i) rows[i] = x.rows + (g * kPanelRows + i) * x.row_bytes;
    for (int64_t b = 0; b < x.blocks; ++b) {
      Panel& out = panels[g * x.blocks + b];
      if (format == ActivationFormat::kQ8_1) {
        BuildPanelQ8<true>(rows, b, out);
      } else {
        BuildPanelQ8<false>(rows, b, out);
      }
    }
  }
}

}  // namespace

void MatMulInt8(const MatMulArgs& args, ThreadPool* pool) { MatMulInt8Many({&args, 1}, pool); }

void MatMulInt8Many(std::span<const MatMulArgs> segments, ThreadPool* pool) {
  UC_CHECK(!segments.empty() && segments.size() <= kMaxMatMulSegments,
           "MatMulInt8Many: %zu weights (1 to %d)", segments.size(), kMaxMatMulSegments);
  const MatMulArgs& args = segments[0];
  for (const MatMulArgs& s : segments) {
    UC_CHECK(s.x == args.x && s.m == args.m && s.k == args.k && s.w_dtype == args.w_dtype,
             "MatMulInt8Many: the weights must share x and the dtype");
  }
  const ActivationFormat format = Int8ActivationFormat(args.w_dtype);
  QuantizedX x;
  x.row_bytes = ActivationRowBytes(format, args.k);
  x.blocks = args.k / ActivationBlockSize(format);
  x.block_bytes = x.row_bytes / x.blocks;
  // The calling thread's buffers; the workers only see the pointers.
  thread_local cpu::ThreadScratch rows_buffer, sums_buffer, panel_buffer, chunk_sums_buffer;
  std::byte* const xq = rows_buffer.Get(static_cast<size_t>(args.m * x.row_bytes));
  x.rows = xq;
  VisitKernel(args.w_dtype, [&](auto kernel) {
    using K = decltype(kernel);
    // Panels for the 32-element kernels (m >= 16); the K-quants' LaneTileRange reads the rows.
    x.panel_rows = K::kUsesPanels ? args.m / kPanelRows * kPanelRows : 0;
    int32_t* const sum_data = K::kNeedsSums
                                  ? reinterpret_cast<int32_t*>(sums_buffer.Get(
                                        static_cast<size_t>(args.m * x.blocks) * sizeof(int32_t)))
                                  : nullptr;
    x.sums = sum_data;
    int16_t* const chunk_sum_data =
        UsesChunkSums<K>()
            ? reinterpret_cast<int16_t*>(chunk_sums_buffer.Get(
                  static_cast<size_t>(args.m * x.blocks * kChunksPerSuperBlock) * sizeof(int16_t)))
            : nullptr;
    x.chunk_sums = chunk_sum_data;
    const int64_t groups = x.panel_rows / kPanelRows;
    void* panel_data = nullptr;
    if constexpr (K::kUsesPanels) {
      if (groups > 0) {
        panel_data =
            panel_buffer.Get(static_cast<size_t>(groups * x.blocks) * sizeof(typename K::Panel));
      }
    }
    x.panels = panel_data;
    ParallelFor(
        pool, args.m,
        [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) {
            avx2::QuantizeActivations(format, args.x + i * args.k, args.k, xq + i * x.row_bytes);
          }
          if constexpr (K::kNeedsSums) {
            const int64_t first = std::max(begin, x.panel_rows);
            if (first < end) BlockSums(xq, x.row_bytes, x.blocks, first, end, sum_data);
          }
          if constexpr (UsesChunkSums<K>()) {
            ChunkSums(xq, x.row_bytes, x.blocks, begin, end, chunk_sum_data);
          }
        },
        MinRowsPerChunk(args.k));
    if constexpr (K::kUsesPanels) {
      if (groups > 0) {
        auto* const panels = static_cast<typename K::Panel*>(panel_data);
        ParallelFor(
            pool, groups,
            [&](int64_t begin, int64_t end) { BuildPanels(format, x, begin, end, panels); },
            std::max<int64_t>(1, MinRowsPerChunk(args.k) / kPanelRows));
      }
    }
    // One range over every segment's tiles: segment s holds tiles [first[s], first[s + 1]).
    int64_t first[kMaxMatMulSegments + 1] = {0};
    for (size_t s = 0; s < segments.size(); ++s) {
      first[s + 1] = first[s] + (segments[s].n + kTileRows - 1) / kTileRows;
    }
    ParallelForDynamic(
        pool, first[segments.size()],
        [&](int64_t begin, int64_t end) {
          for (size_t s = 0; s < segments.size(); ++s) {
            const int64_t b = std::max(begin, first[s]), e = std::min(end, first[s + 1]);
            if (b < e) TileRange<K>(segments[s], x, b - first[s], e - first[s]);
          }
        },
        std::max<int64_t>(1, MinRowsPerChunk(args.m * args.k) / kTileRows));
  });
}

int64_t PackedInt8Bytes(DType dtype, int64_t n, int64_t k) {
  int64_t bytes = 0;
  if (!DTypeIsQuantized(dtype)) return 0;
  VisitKernel(dtype, [&](auto kernel) {
    using P = typename PackOf<decltype(kernel)>::type;
    if constexpr (P::kPacked) {
      const int64_t tiles = (n + kTileRows - 1) / kTileRows;
      bytes = tiles * (k / DTypeBlockSize(dtype)) * static_cast<int64_t>(P::kBytes);
    }
  });
  return bytes;
}

// Tiles [begin, end) of args' weights into out, in packed layout P.
template <typename P>
void PackTiles(const MatMulArgs& args, int64_t begin, int64_t end, std::byte* out) {
  const int64_t blocks = args.k / DTypeBlockSize(args.w_dtype);
  constexpr auto kBlockBytes = static_cast<int64_t>(sizeof(typename P::Block));
  for (int64_t t = begin; t < end; ++t) {
    const TileRows tile(args, t);
    for (int64_t b = 0; b < blocks; ++b) {
      const std::byte* src[kTileRows];
      for (int j = 0; j < kTileRows; ++j) src[j] = tile.rows[j] + b * kBlockBytes;
      P::Interleave(src, out + (t * blocks + b) * static_cast<int64_t>(P::kBytes));
    }
  }
}

void PackInt8(const MatMulArgs& args, std::byte* out, ThreadPool* pool) {
  VisitKernel(args.w_dtype, [&](auto kernel) {
    using P = typename PackOf<decltype(kernel)>::type;
    if constexpr (P::kPacked) {
      ParallelFor(
          pool, (args.n + kTileRows - 1) / kTileRows,
          [&](int64_t begin, int64_t end) { PackTiles<P>(args, begin, end, out); }, 1);
    } else {
      UC_CHECK(false, "PackInt8: %s has no packed layout", DTypeName(args.w_dtype).data());
    }
  });
}

}  // namespace uc::kernels::avx512

#endif  // defined(__x86_64__)
