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
// Q6_K 32, and 128 for the signed Q8_0, IQ4_NL, MXFP4 and Q8_K), so that _mm512_dpbusd_epi32
// (unsigned bytes times the signed activation bytes, four products added into an int32 lane, no
// saturation) gives exact block sums; the offset comes back out with the activation block sums
// (Q8_0's sum of quants, Q8_K's bsums). In decode the K-quants' sub-block scales multiply int16
// sums of _mm512_maddubs_epi16 (unsigned quants at most 63, so pairs of products stay below 2^15,
// as in int8_blocks_avx2.h) through _mm512_dpwssd_epi32. Block sums are exact integers, and each
// output adds its block terms alone, in block order, with the reference's F32 operations, so the
// bits do not depend on m, on the shape a row goes through, on the thread count or on the path.
//
// Files: int8_blocks32_avx512.h has the 32-element types' kernels, int8_kquants_avx512.h the
// K-quants', int8_common_avx512.h what both use; this file has the drivers (tile ranges, the
// activations' quantization, the thread split) and the packing.
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
#include "kernels/cpu/matmul/int8_blocks32_avx512.h"
#include "kernels/cpu/matmul/int8_common_avx512.h"
#include "kernels/cpu/matmul/int8_kquants_avx512.h"
#include "kernels/cpu/scratch.h"
#include "kernels/dispatch.h"
#include "tensor/dtype.h"

namespace uc::kernels::avx512 {
namespace {

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
    case DType::kMXFP4:
      return fn(Blocks32<BlockMXFP4, Quants::kMxfp4, 128, false>{});
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
// time (K::PackedLaneTerms), one contiguous stream of weights per thread. kLinearPrefetch
// (AMD): no software prefetch, the hardware's alone; with PackedTile::Prefetch's (L2, 12 KiB
// ahead) Q8_0 decode per matmul ran 1.28x slower and Q4_1 1.25x at one thread on a Zen 4, the
// other types here level (kernels_benchmark BM_MatMulPrecision tokens:1, medians of 5 in five
// interleaved rounds; Q8_0 at two threads 1.1x). Otherwise PackedTile::Prefetch's share of the
// next tile.
template <typename K, bool kLinearPrefetch>
void PackedRowTileRange(const MatMulArgs& a, const QuantizedX& x, int64_t t_begin, int64_t t_end) {
  __m512 acc[kPanelRows];
  for (int64_t t = t_begin; t < t_end; ++t) {
    const PackedTile<K> tile(a, t, x.blocks);
    const int64_t j0 = t * kTileRows;
    for (int64_t r = 0; r < a.m; ++r) acc[r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < x.blocks; ++b) {
      if constexpr (!kLinearPrefetch) tile.template Prefetch<false>(b, x.blocks);
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
