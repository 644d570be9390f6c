// AVX-512 MatMul for 16-bit float weights multiplied exactly: F16 at any precision, BF16 at
// MatMulPrecision::kExact (and at kInt8 on CPUs without AVX512_BF16). Each weight converts to F32
// exactly in a register (vcvtph2ps; a BF16 is the top half of its F32), so the products are
// those of the F32 GEMM.
//
// Layout (PackHalf, once at load). Tiles of 32 weight rows, in pairs: element kk of a pair's 64
// rows is one 128-byte line (tile 2p's 32 elements, then tile 2p + 1's), the lines of kk = 0, 1,
// ... back to back, so a pair is one contiguous run of k * 128 bytes and the whole matrix one
// stream. Each tile reads every other 64-byte half of its pair's lines. Rows past n are zero.
// Within a half line F16 rows are in order and BF16 rows c and 16 + c share a dword (LoadBf16).
//
// Order. Every output element is one F32 FMA chain over kk = 0, 1, ..., k - 1 starting from zero,
// acc = fma(x[kk], w[kk], acc), whatever m, the tiles beside it or the thread count (a k block
// ends by storing the partial sum to y and the next reloads it, which rounds nothing). That is
// gemm_avx512.cc's order, so packed and stored weights give the same bits, and every m does:
// batch invariant by construction.
//
// Kernels. Prefill (m > kMr or unpacked): groups of four tiles under blocks of twelve x rows and
// k blocks of kKc, a 12x32 micro-kernel (twenty-four accumulators; per kk one 64-byte half line
// converted to two vectors and twelve broadcasts of x); a tile's sibling reads the other halves
// of the same lines right after it, from cache. Decode (m <= kMr): each thread streams its pairs
// whole, both tiles at once (in passes of up to six x rows), so one contiguous stream feeds four
// or more independent chains that hide the FMA latency (two streams per thread, one per tile,
// read 4-12% slower in the decode benchmark on a Zen 4); x is read as broadcasts (4 bytes per 64
// bytes of weights, where a row-by-row dot product reads two bytes of F32 x per byte of F16 weights
// and loses L1 to it when k is large).
//
// The prefill micro-kernel runs at about 79% of the FMA peak `llm_bench --compute-only` measures
// (Zen 4, one thread, kernels_benchmark BM_MatMulPrefill). Measured there and not kept: the
// broadcasts folded into the FMAs ({1to16} memory operands) 6% slower; a 6x64 kernel on both
// tiles of a pair (half the broadcasts, twice the conversions per FMA) level.
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
#include <utility>

#include "base/check.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/matmul/tile_avx512.h"

namespace uc::kernels::avx512 {
namespace {

constexpr int kNr = 32;                 // weight rows (output columns) per tile: two vectors
constexpr int kMr = 12;                 // x rows per micro-kernel call
constexpr int64_t kKc = 256;            // k per block in the prefill kernel: a 16 KiB tile slice
constexpr int64_t kTilesPerGroup = 4;   // tiles sharing one block of x rows
constexpr int64_t kPairLine = 2 * kNr;  // elements per line of a pair of tiles
constexpr int kStreamRows = 6;          // x rows per streaming pass over a pair (29 registers)

// A tile's 64-byte half line (32 weights, 16-bit) to F32 vectors: w[0] rows 0-15, w[1] rows 16-31.
// F16 lines hold the rows in order. BF16 lines hold row c (c < 16) in word 2 c and row 16 + c in
// word 2 c + 1 (PackTile), so that a BF16 is already the top half of its F32 in one
// vector and the bottom half of the other: a shift and a mask widen the line (where two
// vpmovzxwd and two shifts did: on a Sapphire Rapids-class Xeon, `undercurrent bench` on the
// 1.1B shape in BF16, decode 1.10-1.19x faster at one thread and 1.12-1.21x at two, prefill
// median 1.05x (0.90-1.16x); three and two interleaved rounds).
struct LoadF16 {
  [[gnu::always_inline]] static void Load(const uint16_t* p, __m512* w) {
    w[0] = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(p)));
    w[1] = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(p + 16)));
  }
};
struct LoadBf16 {
  [[gnu::always_inline]] static void Load(const uint16_t* p, __m512* w) {
    const __m512i v = _mm512_load_si512(p);
    w[0] = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
    w[1] =
        _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
  }
};

// How far ahead (bytes) and into which cache the decode stream asks for each tile's lines.
// Prefetching into L1 evicts the x rows and lines still in use on a 32 KiB L1 (as for the int8
// tiles, matmul_int8_avx512.cc); L2 keeps the stream ahead of the loads.
constexpr int64_t kPrefetchBytes = 1024;

// y[r, t * 32 + c] (+)= x[r, 0..kc) · tile t's lines [0, kc), for r < MR, t < NT, and columns
// t * 32 + c < cols (REQUIRES: cols > (NT - 1) * 32); tile t's line kk is at panel + t *
// tile_stride + kk * kPairLine (elements). Accumulates into y when `accumulate`. When kPrefetch,
// asks for each line kPrefetchBytes ahead.
template <typename L, int MR, int NT, bool kPrefetch>
void MicroKernel(const float* x, int64_t ldx, const uint16_t* panel, int64_t tile_stride,
                 int64_t kc, float* y, int64_t ldy, int cols, bool accumulate) {
  TileMasks masks[NT];
  __m512 acc[NT][MR][2];
#pragma GCC unroll 4
  for (int t = 0; t < NT; ++t) {
    masks[t] = MasksForColumns(std::min(cols - t * kNr, kNr));
    LoadTile<MR>(acc[t], y + t * kNr, ldy, masks[t], accumulate);
  }
  for (int64_t kk = 0; kk < kc; ++kk) {
    __m512 w[NT][2];
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) {
      const uint16_t* line = panel + t * tile_stride + kk * kPairLine;
      if constexpr (kPrefetch) {
        _mm_prefetch(reinterpret_cast<const char*>(line) + kPrefetchBytes, _MM_HINT_T1);
      }
      L::Load(line, w[t]);
    }
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const __m512 xb = _mm512_set1_ps(x[r * ldx + kk]);
#pragma GCC unroll 4
      for (int t = 0; t < NT; ++t) {
        acc[t][r][0] = _mm512_fmadd_ps(xb, w[t][0], acc[t][r][0]);
        acc[t][r][1] = _mm512_fmadd_ps(xb, w[t][1], acc[t][r][1]);
      }
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < NT; ++t) StoreTile<MR>(acc[t], y + t * kNr, ldy, masks[t]);
}

using MicroKernelFn = void (*)(const float*, int64_t, const uint16_t*, int64_t, int64_t, float*,
                               int64_t, int, bool);

// kernels[MR] = MicroKernel<L, MR, NT, kPrefetch> for MR in 1..kMax.
template <typename L, int NT, bool kPrefetch, int... kRows>
constexpr auto KernelTable(std::integer_sequence<int, kRows...>) {
  return std::array<MicroKernelFn, sizeof...(kRows) + 1>{
      nullptr, MicroKernel<L, kRows + 1, NT, kPrefetch>...};
}
template <typename L>
struct Kernels {
  // Prefill: one tile, up to kMr rows, no prefetch (the tile slice is in L1/L2 already).
  static constexpr auto kTiled = KernelTable<L, 1, false>(std::make_integer_sequence<int, kMr>());
  // Decode: a pair of tiles, or the last tile alone, and up to kStreamRows rows, streaming.
  static constexpr auto kStream1 =
      KernelTable<L, 1, true>(std::make_integer_sequence<int, kStreamRows>());
  static constexpr auto kStream2 =
      KernelTable<L, 2, true>(std::make_integer_sequence<int, kStreamRows>());
};

// Where tile t's line 0 is: its pair's lines, then its half of each.
const uint16_t* TileLines(const MatMulArgs& a, int64_t t) {
  return reinterpret_cast<const uint16_t*>(a.w_packed) + (t / 2) * a.k * kPairLine + (t % 2) * kNr;
}

int Columns(const MatMulArgs& a, int64_t j0, int64_t tiles) {
  return static_cast<int>(std::min<int64_t>(tiles * kNr, a.n - j0));
}

// x rows [i0, i0 + rows) times lines [k0, k0 + kc) of the pair (or last tile) at tile t into y,
// streaming (rows <= kStreamRows).
template <typename L>
void StreamPass(const MatMulArgs& a, int64_t t, int tiles, int64_t i0, int rows, int64_t k0,
                int64_t kc) {
  const int64_t j0 = t * kNr;
  const auto& kernels = tiles == 2 ? Kernels<L>::kStream2 : Kernels<L>::kStream1;
  kernels[rows](a.x + i0 * a.k + k0, a.k, TileLines(a, t) + k0 * kPairLine, kNr, kc,
                a.y + i0 * a.n + j0, a.n, Columns(a, j0, tiles), k0 > 0);
}

// Output columns [t_begin * 32, t_end * 32) ∩ [0, n), each pair streamed whole (m <= kMr), both
// its tiles at once. Up to kStreamRows rows take one pass over the whole pair; more rows take
// k blocks of kKc lines (32 KiB of a pair), each streamed by the first row group and read from
// cache by the next. REQUIRES: t_begin even.
template <typename L>
void StreamTiles(const MatMulArgs& a, int64_t t_begin, int64_t t_end) {
  const int64_t kc = a.m <= kStreamRows ? a.k : kKc;
  for (int64_t t = t_begin; t < t_end; t += 2) {
    const int tiles = t + 2 <= t_end ? 2 : 1;  // an odd number of tiles: the last one alone
    for (int64_t k0 = 0; k0 < a.k; k0 += kc) {
      for (int64_t i0 = 0; i0 < a.m; i0 += kStreamRows) {
        const int rows = static_cast<int>(std::min<int64_t>(kStreamRows, a.m - i0));
        StreamPass<L>(a, t, tiles, i0, rows, k0, std::min(kc, a.k - k0));
      }
    }
  }
}

// Output columns [t_begin * 32, t_end * 32) ∩ [0, n) in groups of tiles and k blocks.
template <typename L>
void TiledRange(const MatMulArgs& a, int64_t t_begin, int64_t t_end) {
  for (int64_t g = t_begin; g < t_end; g += kTilesPerGroup) {
    const int64_t tiles = std::min(kTilesPerGroup, t_end - g);
    for (int64_t k0 = 0; k0 < a.k; k0 += kKc) {
      const int64_t kc = std::min(kKc, a.k - k0);
      for (int64_t i0 = 0; i0 < a.m; i0 += kMr) {
        const int64_t rows = std::min<int64_t>(kMr, a.m - i0);
        for (int64_t t = g; t < g + tiles; ++t) {
          const int64_t j0 = t * kNr;
          Kernels<L>::kTiled[rows](a.x + i0 * a.k + k0, a.k, TileLines(a, t) + k0 * kPairLine, kNr,
                                   kc, a.y + i0 * a.n + j0, a.n, Columns(a, j0, 1), k0 > 0);
        }
      }
    }
  }
}

template <typename L>
void Run(const MatMulArgs& args, ThreadPool* pool) {
  const int64_t num_tiles = (args.n + kNr - 1) / kNr;
  const bool stream = args.m <= kMr;
  // Threads take whole pairs, so a pair's two halves are read by one thread, in one stream; they
  // take chunks of pairs from a shared counter, so a thread the system holds back (a busy host
  // core) leaves its pairs to the others: F16 decode at 2 threads 1.08x faster (median of 6
  // interleaved `undercurrent bench` rounds on a noisy Zen 4 host) than halves fixed per thread.
  const int64_t min_pairs = std::max<int64_t>(1, MinRowsPerChunk(args.m * args.k) / (2 * kNr));
  ParallelForDynamic(
      pool, (num_tiles + 1) / 2,
      [&](int64_t begin, int64_t end) {
        const int64_t t_end = std::min(2 * end, num_tiles);
        if (stream) {
          StreamTiles<L>(args, 2 * begin, t_end);
        } else {
          TiledRange<L>(args, 2 * begin, t_end);
        }
      },
      min_pairs);
}

// Tile t of the packed layout from the stored rows: out[kk * kPairLine + c] for kk < k, c < 32
// (out: its half of its pair's line 0). Two gathers fetch elements (kk, kk + 1) of the 32 rows as
// dwords; one permute pair splits them into lines kk and kk + 1 (about 1.5 s for TinyLlama's 1.1 B
// weights on one Zen 4 core, where element-wise copies took about 3.5 s). REQUIRES: 31 *
// w_row_bytes fits the gather's int32.
void PackTile(const MatMulArgs& a, int64_t t, uint16_t* out) {
  const int64_t j0 = t * kNr;
  const int cols = Columns(a, j0, 1);
  const std::byte* base = a.w + j0 * a.w_row_bytes;
  const __m512i offsets =
      _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                         _mm512_set1_epi32(static_cast<int>(a.w_row_bytes)));
  const __mmask16 lo_rows = static_cast<__mmask16>(cols >= 16 ? 0xFFFF : (1u << cols) - 1);
  const __mmask16 hi_rows = static_cast<__mmask16>(cols >= 32   ? 0xFFFF
                                                   : cols <= 16 ? 0
                                                                : (1u << (cols - 16)) - 1);
  const std::byte* upper = base + 16 * a.w_row_bytes;
  // Word i of the result: the low (even) or high (odd) half of dword i of {lo, hi} (rows in
  // order); BF16 (for LoadBf16): word 2 c that of lo's dword c, word 2 c + 1 that
  // of hi's dword c (rows c and 16 + c side by side).
  alignas(64) static constexpr uint16_t kEven[32] = {0,  2,  4,  6,  8,  10, 12, 14, 16, 18, 20,
                                                     22, 24, 26, 28, 30, 32, 34, 36, 38, 40, 42,
                                                     44, 46, 48, 50, 52, 54, 56, 58, 60, 62};
  alignas(64) static constexpr uint16_t kEvenInterleaved[32] = {
      0,  32, 2,  34, 4,  36, 6,  38, 8,  40, 10, 42, 12, 44, 14, 46,
      16, 48, 18, 50, 20, 52, 22, 54, 24, 56, 26, 58, 28, 60, 30, 62};
  const bool interleaved = a.w_dtype == DType::kBF16;
  const __m512i even = _mm512_load_si512(interleaved ? kEvenInterleaved : kEven);
  const __m512i odd = _mm512_add_epi16(even, _mm512_set1_epi16(1));
  int64_t kk = 0;
  for (; kk + 2 <= a.k; kk += 2) {
    const __m512i lo =
        _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), lo_rows, offsets, base + kk * 2, 1);
    const __m512i hi =
        _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), hi_rows, offsets, upper + kk * 2, 1);
    _mm512_store_si512(out + kk * kPairLine, _mm512_permutex2var_epi16(lo, even, hi));
    _mm512_store_si512(out + (kk + 1) * kPairLine, _mm512_permutex2var_epi16(lo, odd, hi));
  }
  if (kk < a.k) {  // k odd: the last element of each row on its own
    for (int c = 0; c < kNr; ++c) {
      uint16_t v = 0;
      if (c < cols) std::memcpy(&v, base + c * a.w_row_bytes + kk * 2, sizeof(v));
      out[kk * kPairLine + (interleaved ? 2 * (c % 16) + c / 16 : c)] = v;
    }
  }
}

}  // namespace

void MatMulHalf(const MatMulArgs& args, ThreadPool* pool) {
  UC_CHECK(args.w_dtype == DType::kF16 || args.w_dtype == DType::kBF16,
           "MatMulHalf: w must be F16 or BF16");
  if (args.w_packed == nullptr) {
    MatMulTiled(args, pool);  // the same order, from F32 panels converted per call
    return;
  }
  if (args.w_dtype == DType::kF16) {
    Run<LoadF16>(args, pool);
  } else {
    Run<LoadBf16>(args, pool);
  }
}

int64_t PackedHalfBytes(int64_t n, int64_t k) {
  return (n + 2 * kNr - 1) / (2 * kNr) * k * kPairLine * 2;
}

void PackHalf(const MatMulArgs& args, std::byte* out, ThreadPool* pool) {
  UC_CHECK(args.w_dtype == DType::kF16 || args.w_dtype == DType::kBF16,
           "PackHalf: w must be F16 or BF16");
  UC_CHECK(args.w_row_bytes <= INT32_MAX / kNr, "PackHalf: rows of %lld bytes are too long",
           static_cast<long long>(args.w_row_bytes));
  auto* const lines = reinterpret_cast<uint16_t*>(out);
  const int64_t tiles = (args.n + kNr - 1) / kNr;
  // A pair's second tile past n (n <= 32 mod 64) is zeros.
  if (tiles % 2 != 0) {
    uint16_t* last = lines + (tiles / 2) * args.k * kPairLine + kNr;
    for (int64_t kk = 0; kk < args.k; ++kk) std::memset(last + kk * kPairLine, 0, kNr * 2);
  }
  ParallelFor(
      pool, tiles,
      [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
          PackTile(args, t, lines + (t / 2) * args.k * kPairLine + (t % 2) * kNr);
        }
      },
      1);
}

}  // namespace uc::kernels::avx512

#endif  // defined(__x86_64__)
