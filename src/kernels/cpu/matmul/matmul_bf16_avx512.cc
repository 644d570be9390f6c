// AVX-512 BF16 MatMul: BF16 weights at MatMulPrecision::kInt8. Each x row is rounded to BF16
// (round to nearest even, as llama.cpp's CPU backend does for BF16 weights) and vdpbf16ps adds
// two exact products to an F32 lane per instruction: twice the multiply-adds of an F32 FMA.
//
// Layout. Weights are read in tiles of 32 rows with k in pairs: panel dword p * 32 + c is row c's
// elements 2p and 2p + 1 (zero past the row's end and past n). PackBf16 writes the whole matrix
// that way once, at load (each tile's pairs back to back); without it, each (tile, k block) is
// packed into a thread-local panel per call.
//
// Order. Every output element is one F32 lane that takes the pairs p = 0, 1, 2, ... in turn, one
// vdpbf16ps each, whatever m, the tile's neighbours or the thread count; a k block ends by
// storing the partial sum to y and the next reloads it, which rounds nothing. So a row's results
// are bit-identical alone or in any batch (batch invariant by construction), packed or not.
//
// Kernel: a 12x32 micro-kernel keeps 24 accumulators in registers; per pair two panel loads and
// twelve dword broadcasts of x feed twenty-four vdpbf16ps. Prefill groups four tiles under one
// block of x rows, as gemm_avx512.cc does; decode (m <= 12) on packed weights streams each tile
// whole, so a thread reads one contiguous run of memory. At 128 rows it runs at about 84% of the
// vdpbf16ps peak `llm_bench --compute-only` measures (Zen 4, one thread, kernels_benchmark
// BM_MatMulPrecision dtype:8 level:3); k blocks of 64 to 512 pairs, groups of 2 to 8 tiles and
// the broadcasts folded into vdpbf16ps ({1to16}) all measured level.
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
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "base/check.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/matmul/tile_avx512.h"
#include "kernels/cpu/scratch.h"

namespace uc::kernels::avx512 {
namespace {

constexpr int kNr = 32;                   // weight rows (output columns) per tile: two vectors
constexpr int kMr = 12;                   // x rows per micro-kernel call
constexpr int64_t kKcPairs = 256;         // pairs per k block: a 32 KiB panel per tile
constexpr int64_t kTilesPerGroup = 4;     // tiles sharing one block of x rows
constexpr int64_t kPrefetchBytes = 1024;  // how far ahead decode asks for the stream, into L2

int64_t Pairs(int64_t k) { return (k + 1) / 2; }

// Pair p of stored BF16 row `row` of k elements (element k - 1 and a zero when 2p + 1 == k).
uint32_t RowPair(const std::byte* row, int64_t k, int64_t p) {
  if (2 * p + 1 < k) {
    uint32_t v;
    std::memcpy(&v, row + 4 * p, sizeof(v));
    return v;
  }
  uint16_t h;
  std::memcpy(&h, row + 4 * p, sizeof(h));
  return h;
}

// panel[p * 32 + c] = pair p0 + p of weight row j0 + c, for p < pc and c < 32 (zero for c >=
// cols).
void PackPanel(const MatMulArgs& a, int64_t j0, int cols, int64_t p0, int64_t pc, uint32_t* panel) {
  for (int c = 0; c < kNr; ++c) {
    if (c >= cols) {
      for (int64_t p = 0; p < pc; ++p) panel[p * kNr + c] = 0;
      continue;
    }
    const std::byte* row = a.w + (j0 + c) * a.w_row_bytes;
    for (int64_t p = 0; p < pc; ++p) panel[p * kNr + c] = RowPair(row, a.k, p0 + p);
  }
}

// y[r, 0..cols) (+)= x[r, pairs 0..pc) · panel for r < MR; accumulates when `accumulate`. x rows
// are BF16 pairs, ldx pairs apart. When `prefetch`, asks for the panel kPrefetchBytes ahead.
template <int MR, bool kPrefetch>
void MicroKernel(const uint32_t* x, int64_t ldx, const uint32_t* panel, int64_t pc, float* y,
                 int64_t ldy, int cols, bool accumulate) {
  const TileMasks masks = MasksForColumns(cols);
  __m512 acc[MR][2];
  LoadTile<MR>(acc, y, ldy, masks, accumulate);
  for (int64_t p = 0; p < pc; ++p) {
    const uint32_t* w = panel + p * kNr;
    if constexpr (kPrefetch) {
      _mm_prefetch(reinterpret_cast<const char*>(w) + kPrefetchBytes, _MM_HINT_T1);
      _mm_prefetch(reinterpret_cast<const char*>(w) + kPrefetchBytes + 64, _MM_HINT_T1);
    }
    const auto w0 = reinterpret_cast<__m512bh>(_mm512_load_si512(w));
    const auto w1 = reinterpret_cast<__m512bh>(_mm512_load_si512(w + 16));
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const auto xb =
          reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(x[r * ldx + p])));
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], w0, xb);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], w1, xb);
    }
  }
  StoreTile<MR>(acc, y, ldy, masks);
}

using MicroKernelFn = void (*)(const uint32_t*, int64_t, const uint32_t*, int64_t, float*, int64_t,
                               int, bool);
// Indexed by the number of x rows, 1..kMr.
template <bool kPrefetch>
constexpr MicroKernelFn kMicroKernels[kMr + 1] = {nullptr,
                                                  MicroKernel<1, kPrefetch>,
                                                  MicroKernel<2, kPrefetch>,
                                                  MicroKernel<3, kPrefetch>,
                                                  MicroKernel<4, kPrefetch>,
                                                  MicroKernel<5, kPrefetch>,
                                                  MicroKernel<6, kPrefetch>,
                                                  MicroKernel<7, kPrefetch>,
                                                  MicroKernel<8, kPrefetch>,
                                                  MicroKernel<9, kPrefetch>,
                                                  MicroKernel<10, kPrefetch>,
                                                  MicroKernel<11, kPrefetch>,
                                                  MicroKernel<12, kPrefetch>};

// x[m, k] as BF16 pairs, `ldx` pairs per row (zero past k).
struct Bf16Rows {
  const uint32_t* data;
  int64_t ldx;
};

// Rows [begin, end) of x rounded to BF16 into out (ldx pairs per row).
void ConvertRows(const MatMulArgs& a, int64_t begin, int64_t end, int64_t ldx, uint32_t* out) {
  for (int64_t i = begin; i < end; ++i) {
    const float* src = a.x + i * a.k;
    auto* dst = reinterpret_cast<uint16_t*>(out + i * ldx);
    for (int64_t c = 0; c < 2 * ldx; c += 32) {
      const int64_t left = a.k - c;
      const auto lo_mask = static_cast<__mmask16>(left >= 16  ? 0xFFFF
                                                  : left <= 0 ? 0
                                                              : (1u << left) - 1);
      const auto hi_mask = static_cast<__mmask16>(left >= 32   ? 0xFFFF
                                                  : left <= 16 ? 0
                                                               : (1u << (left - 16)) - 1);
      const __m512 lo = _mm512_maskz_loadu_ps(lo_mask, src + c);
      const __m512 hi = _mm512_maskz_loadu_ps(hi_mask, src + c + 16);
      const __m512i v = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
      const int64_t room = 2 * ldx - c;  // elements of the row's padded length left
      const auto store_mask =
          static_cast<__mmask32>(room >= 32 ? 0xFFFFFFFFu : (uint32_t{1} << room) - 1);
      _mm512_mask_storeu_epi16(dst + c, store_mask, v);
    }
  }
}

// Output columns [t_begin * 32, t_end * 32) ∩ [0, n), packed weights streamed tile by tile
// (decode: all m rows in one micro-kernel call per tile).
void StreamTiles(const MatMulArgs& a, const Bf16Rows& x, int64_t t_begin, int64_t t_end) {
  const int64_t pairs = Pairs(a.k);
  const auto* packed = reinterpret_cast<const uint32_t*>(a.w_packed);
  for (int64_t t = t_begin; t < t_end; ++t) {
    const int64_t j0 = t * kNr;
    const int cols = static_cast<int>(std::min<int64_t>(kNr, a.n - j0));
    kMicroKernels<true>[a.m](x.data, x.ldx, packed + t * pairs * kNr, pairs, a.y + j0, a.n, cols,
                             false);
  }
}

// Output columns [t_begin * 32, t_end * 32) ∩ [0, n) in groups of tiles and k blocks.
void TiledRange(const MatMulArgs& a, const Bf16Rows& x, int64_t t_begin, int64_t t_end) {
  thread_local cpu::ThreadScratch scratch;
  const int64_t pairs = Pairs(a.k);
  const auto* packed = reinterpret_cast<const uint32_t*>(a.w_packed);
  const uint32_t* panels[kTilesPerGroup];
  for (int64_t g = t_begin; g < t_end; g += kTilesPerGroup) {
    const int64_t tiles = std::min(kTilesPerGroup, t_end - g);
    for (int64_t p0 = 0; p0 < pairs; p0 += kKcPairs) {
      const int64_t pc = std::min(kKcPairs, pairs - p0);
      for (int64_t t = 0; t < tiles; ++t) {
        if (packed != nullptr) {
          panels[t] = packed + ((g + t) * pairs + p0) * kNr;
        } else {
          uint32_t* panel =
              scratch.GetAs<uint32_t>(kTilesPerGroup * kKcPairs * kNr) + t * kKcPairs * kNr;
          const int64_t j0 = (g + t) * kNr;
          PackPanel(a, j0, static_cast<int>(std::min<int64_t>(kNr, a.n - j0)), p0, pc, panel);
          panels[t] = panel;
        }
      }
      for (int64_t i0 = 0; i0 < a.m; i0 += kMr) {
        const int64_t rows = std::min<int64_t>(kMr, a.m - i0);
        for (int64_t t = 0; t < tiles; ++t) {
          const int64_t j0 = (g + t) * kNr;
          const int cols = static_cast<int>(std::min<int64_t>(kNr, a.n - j0));
          kMicroKernels<false>[rows](x.data + i0 * x.ldx + p0, x.ldx, panels[t], pc,
                                     a.y + i0 * a.n + j0, a.n, cols, p0 > 0);
        }
      }
    }
  }
}

}  // namespace

void MatMulBf16(const MatMulArgs& args, ThreadPool* pool) {
  UC_CHECK(args.w_dtype == DType::kBF16, "MatMulBf16: w must be BF16");
  const int64_t ldx = Pairs(args.k);
  // The calling thread's buffer; the workers only see the pointer.
  thread_local cpu::ThreadScratch x_buffer;
  uint32_t* const xb = x_buffer.GetAs<uint32_t>(args.m * ldx);
  ParallelFor(
      pool, args.m, [&](int64_t begin, int64_t end) { ConvertRows(args, begin, end, ldx, xb); },
      MinRowsPerChunk(args.k));
  const Bf16Rows x{xb, ldx};
  const int64_t num_tiles = (args.n + kNr - 1) / kNr;
  const bool stream = args.w_packed != nullptr && args.m <= kMr;
  // Chunks of tiles from a shared counter, as matmul_half_avx512.cc's: the results do not
  // depend on the split, and a thread held back leaves its tiles to the others.
  ParallelForDynamic(
      pool, num_tiles,
      [&](int64_t begin, int64_t end) {
        if (stream) {
          StreamTiles(args, x, begin, end);
        } else {
          TiledRange(args, x, begin, end);
        }
      },
      std::max<int64_t>(1, MinRowsPerChunk(args.m * args.k) / kNr));
}

int64_t PackedBf16Bytes(int64_t n, int64_t k) {
  return (n + kNr - 1) / kNr * Pairs(k) * kNr * static_cast<int64_t>(sizeof(uint32_t));
}

void PackBf16(const MatMulArgs& args, std::byte* out, ThreadPool* pool) {
  UC_CHECK(args.w_dtype == DType::kBF16, "PackBf16: w must be BF16");
  const int64_t pairs = Pairs(args.k);
  auto* const panels = reinterpret_cast<uint32_t*>(out);
  ParallelFor(
      pool, (args.n + kNr - 1) / kNr,
      [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
          const int64_t j0 = t * kNr;
          PackPanel(args, j0, static_cast<int>(std::min<int64_t>(kNr, args.n - j0)), 0, pairs,
                    panels + t * pairs * kNr);
        }
      },
      1);
}

}  // namespace uc::kernels::avx512

#endif  // defined(__x86_64__)
