// AVX2 integer MatMul. The x rows are quantized once per call; the weights, in ggml's block
// layout as stored, are walked in tiles of eight rows, and each block of a tile is unpacked once
// (int8_blocks_avx2.h, int8_kquants_avx2.h) for all the x rows of a pass:
//   - groups of eight x rows, for the types with a panel kernel, are interleaved into panels
//     once per call, and each weight row of the tile is dotted with a whole panel (lane = x
//     row), which needs no horizontal sums: the prefill shape;
//   - the other x rows (the m % 8 left over, every row of the decode shape, and all rows of
//     Q8_0, IQ4_NL, MXFP4 and Q8_K) are dotted with the tile (lane = weight row); a lone such
//     row (decode) takes K::FusedTerm where the format has one (all but Q8_K), which unpacks
//     each block in registers instead of preparing the tile first.
// Each output adds its block terms alone, in block order, with the reference's operations, so
// the result does not depend on m, on which of the two shapes a row goes through, on the thread
// count, or on the path (portable or AVX2).
//
// Activations, not weights, are rearranged: the weights need no repacking at load time and stay
// shared with the exact path and EmbeddingLookup. Q8_0 and MXFP4 are the exceptions where a
// model packs them (PackInt8, at --matmul int8): each tile of eight rows in one stream, a block's
// eight scales side by side and each row's (row pair's) codes in one aligned line
// (int8::PackedTile), which takes the scale gather (and MXFP4's unaligned pair loads) out of their
// decode (MXFP4 1.5x per matmul on a Zen EPYC, kernels_benchmark's MatMulPrecision level 4
// against 1). The quantized rows and their panels
// (about 2.5 bytes per element of x) live in thread-local buffers of the calling thread, kept
// between calls.
#if defined(__x86_64__)

#include <algorithm>
#include <cstring>
#include <vector>

#include "base/check.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/matmul/int8_blocks_avx2.h"
#include "kernels/cpu/matmul/int8_kquants_avx2.h"
#include "kernels/cpu/simd_avx2.h"

namespace uc::kernels::avx2 {
namespace {

using int8::kPanelRows;
using int8::kTileRows;

// x rows per pass over a tile's blocks; their accumulators stay in L1 (2 KiB).
constexpr int64_t kRowsPerPass = 64;

// Calls fn(Kernel{}) with the kernel of a quantized weight dtype.
template <typename Fn>
void VisitKernel(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kQ8_0:
      return fn(int8::SignedBlocks<BlockQ8_0, false>{});
    case DType::kIQ4_NL:
      return fn(int8::SignedBlocks<BlockIQ4_NL, true>{});
    case DType::kMXFP4:
      return fn(int8::SignedBlocks<BlockMXFP4, true>{});
    case DType::kQ4_0:
      return fn(int8::UnsignedBlocks<BlockQ4_0, 8, false, false>{});
    case DType::kQ5_0:
      return fn(int8::UnsignedBlocks<BlockQ5_0, 16, false, true>{});
    case DType::kQ4_1:
      return fn(int8::UnsignedBlocks<BlockQ4_1, 0, true, false>{});
    case DType::kQ5_1:
      return fn(int8::UnsignedBlocks<BlockQ5_1, 0, true, true>{});
    case DType::kQ2_K:
      return fn(int8::Q2KBlocks{});
    case DType::kQ3_K:
      return fn(int8::Q3KBlocks{});
    case DType::kQ4_K:
      return fn(int8::Q4KBlocks{});
    case DType::kQ5_K:
      return fn(int8::Q5KBlocks{});
    case DType::kQ6_K:
      return fn(int8::Q6KBlocks{});
    case DType::kQ8_K:
      return fn(int8::Q8KBlocks{});
    default:
      UC_CHECK(false, "MatMulInt8: %s is not quantized", DTypeName(dtype).data());
  }
}

// The quantized activations of one call.
struct QuantizedX {
  const std::byte* rows;  // [m] rows of row_bytes
  int64_t row_bytes;
  int64_t block_bytes;
  int64_t blocks;
  const int32_t* sums;  // [m, blocks] sum of each block's quants (rows past the panels), or null
  const void* panels;   // [panel_rows / 8, blocks] panels of rows [0, panel_rows), or null
  int64_t panel_rows;   // a multiple of 8
};

// 32 bytes, 32-byte aligned: the unit of the panel buffer.
struct alignas(32) Bytes32 {
  std::byte bytes[32];
};

// Asks for bytes [begin, end) to be brought into L1.
void PrefetchBytes(const std::byte* begin, const std::byte* end) {
  for (const std::byte* p = begin; p < end; p += 64) PrefetchT0(p);
}

// y rows [i0, i0 + 8) x columns [j0, j0 + cols) from acc[c] (lane i = row i0 + i, column j0 + c).
void StorePanel(__m256* acc, int64_t cols, float* y, int64_t n) {
  __m256i r[kTileRows];
  for (int c = 0; c < kTileRows; ++c) r[c] = _mm256_castps_si256(acc[c]);
  int8::Transpose8x8(r);
  const __m256i mask = TailMask(cols);
  for (int i = 0; i < kPanelRows; ++i) {
    if (cols == kTileRows) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i * n), r[i]);
    } else {
      _mm256_maskstore_ps(y + i * n, mask, _mm256_castsi256_ps(r[i]));
    }
  }
}

// Whether K can read a packed tile (Q8_0's and MXFP4's, written by PackInt8), its type, and
// whether it does here.
template <typename K>
constexpr bool kReadsTile = requires {
  requires K::kHasTile;
};
template <typename K>
struct TileOf {
  using type = int8::PackedTile<BlockQ8_0>;  // a stand-in: never read
};
template <typename K>
requires kReadsTile<K>
struct TileOf<K> {
  using type = typename K::Tile;
};
template <typename K>
bool HasTile(const MatMulArgs& a) {
  return kReadsTile<K> && a.w_packed != nullptr;
}

// Outputs of tiles [t_begin, t_end): columns [8 t, 8 t + 8) ∩ [0, n).
template <typename K>
void TileRange(const MatMulArgs& a, const QuantizedX& x, int64_t t_begin, int64_t t_end) {
  using Panel = typename K::Panel;
  typename K::Prep prep;
  __m256 acc[kRowsPerPass];
  const auto* panels = static_cast<const Panel*>(x.panels);
  for (int64_t t = t_begin; t < t_end; ++t) {
    const int64_t j0 = t * kTileRows;
    const int64_t cols = std::min<int64_t>(kTileRows, a.n - j0);
    // Lanes past n repeat the last row; their results are dropped.
    const std::byte* rows[kTileRows];
    for (int c = 0; c < kTileRows; ++c) {
      rows[c] = a.w + std::min<int64_t>(j0 + c, a.n - 1) * a.w_row_bytes;
    }
    // The packed tile, where there is one (HasTile<K>()): then the kernel reads nothing else.
    using Tile = typename TileOf<K>::type;
    const int64_t tile_bytes = Tile::Bytes(x.blocks);
    const Tile tile{a.w_packed != nullptr ? a.w_packed + t * tile_bytes : nullptr, x.blocks};
    // The tile reads eight rows side by side, a pattern the hardware prefetcher does not follow;
    // the next tile (the next eight rows, contiguous) is requested a share per block instead.
    const std::byte* next = a.w + std::min(j0 + kTileRows, a.n) * a.w_row_bytes;
    const std::byte* next_end = a.w + std::min(j0 + 2 * kTileRows, a.n) * a.w_row_bytes;
    int64_t share = kTileRows * a.w_row_bytes / x.blocks;
    if (HasTile<K>(a)) {
      next = tile.base + tile_bytes;
      next_end = j0 + kTileRows < a.n ? next + tile_bytes : next;
      share = (tile_bytes + x.blocks - 1) / x.blocks;
    }
    bool prefetched = false;
    auto prefetch = [&](int64_t b) {
      if (!prefetched && next < next_end) {
        PrefetchBytes(next + b * share, std::min(next + (b + 1) * share, next_end));
      }
    };
    auto prepare = [&](int64_t b) {
      prefetch(b);
      if constexpr (kReadsTile<K>) {
        if (HasTile<K>(a)) return K::PrepareTile(tile, b, prep);
      }
      K::Prepare(rows, b, prep);
    };
    // x row i's outputs of the tile, through K::FusedTerm.
    auto fused_row = [&](int64_t i) {
      __m256 sum = _mm256_setzero_ps();
      if constexpr (K::kHasFusedTerm) {
        const std::byte* xr = x.rows + i * x.row_bytes;
        for (int64_t b = 0; b < x.blocks; ++b) {
          prefetch(b);
          const int32_t x_sum = K::kNeedsSums ? x.sums[i * x.blocks + b] : 0;
          const std::byte* xb = xr + b * x.block_bytes;
          if constexpr (kReadsTile<K>) {
            if (HasTile<K>(a)) {
              sum = _mm256_add_ps(sum, K::FusedTermTile(tile, b, xb, x_sum));
              continue;
            }
          }
          sum = _mm256_add_ps(sum, K::FusedTerm(rows, b, xb, x_sum));
        }
      }
      return sum;
    };
    // Panels: acc[8 g + c] = column j0 + c of panel g's eight rows.
    for (int64_t i0 = 0; i0 < x.panel_rows; i0 += kRowsPerPass) {
      const int64_t groups = std::min(kRowsPerPass, x.panel_rows - i0) / kPanelRows;
      for (int64_t r = 0; r < groups * kTileRows; ++r) acc[r] = _mm256_setzero_ps();
      for (int64_t b = 0; b < x.blocks; ++b) {
        prepare(b);
        for (int64_t g = 0; g < groups; ++g) {
          const Panel& panel = panels[(i0 / kPanelRows + g) * x.blocks + b];
          K::PanelTerms(prep, static_cast<int>(cols), panel, acc + g * kTileRows);
        }
      }
      prefetched = true;
      for (int64_t g = 0; g < groups; ++g) {
        StorePanel(acc + g * kTileRows, cols, a.y + (i0 + g * kPanelRows) * a.n + j0, a.n);
      }
    }
    // Single rows: acc[r] = row i0 + r of columns j0..j0 + 7.
    for (int64_t i0 = x.panel_rows; i0 < a.m; i0 += kRowsPerPass) {
      const int64_t count = std::min(kRowsPerPass, a.m - i0);
      // A lone row has nothing to share an unpacked block with: it stays in registers.
      const bool fused = K::kHasFusedTerm && count == 1;
      if (fused) acc[0] = fused_row(i0);
      for (int64_t r = 0; r < count && !fused; ++r) acc[r] = _mm256_setzero_ps();
      for (int64_t b = 0; b < x.blocks && !fused; ++b) {
        prepare(b);
        const std::byte* xb = x.rows + i0 * x.row_bytes + b * x.block_bytes;
        for (int64_t r = 0; r < count; ++r) {
          const int32_t sum = K::kNeedsSums ? x.sums[(i0 + r) * x.blocks + b] : 0;
          acc[r] = _mm256_add_ps(acc[r], K::Term(prep, xb + r * x.row_bytes, sum));
        }
      }
      prefetched = true;
      for (int64_t r = 0; r < count; ++r) {
        float* out = a.y + (i0 + r) * a.n + j0;
        if (cols == kTileRows) {
          _mm256_storeu_ps(out, acc[r]);
        } else {
          _mm256_maskstore_ps(out, TailMask(cols), acc[r]);
        }
      }
    }
  }
}

// Sum of the 32 quants of each Q8_0 block of x rows [begin, end).
void BlockSums(const std::byte* rows, int64_t row_bytes, int64_t blocks, int64_t begin, int64_t end,
               int32_t* sums) {
  for (int64_t i = begin; i < end; ++i) {
    const auto* x = reinterpret_cast<const BlockQ8_0*>(rows + i * row_bytes);
    for (int64_t b = 0; b < blocks; ++b) {
      const __m256i wide = _mm256_madd_epi16(
          _mm256_maddubs_epi16(_mm256_set1_epi8(1), int8::Load(x[b].qs)), _mm256_set1_epi16(1));
      __m128i s = _mm_add_epi32(_mm256_castsi256_si128(wide), _mm256_extracti128_si256(wide, 1));
      s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
      s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
      sums[i * blocks + b] = _mm_cvtsi128_si32(s);
    }
  }
}

// Panels of x row groups [begin, end) (rows 8 g .. 8 g + 7 of group g).
template <typename Panel>
void BuildPanels(ActivationFormat format, const QuantizedX& x, int64_t begin, int64_t end,
                 Panel* panels) {
  for (int64_t g = begin; g < end; ++g) {
    const std::byte* rows[kPanelRows];
    for (int i = 0; i < kPanelRows; ++i) rows[i] = x.rows + (g * kPanelRows + i) * x.row_bytes;
    for (int64_t b = 0; b < x.blocks; ++b) {
      Panel& out = panels[g * x.blocks + b];
      if constexpr (std::is_same_v<Panel, int8::PanelQ8K>) {
        int8::BuildPanelQ8K(rows, b, out);
      } else if (format == ActivationFormat::kQ8_1) {
        int8::BuildPanelQ8<true>(rows, b, out);
      } else {
        int8::BuildPanelQ8<false>(rows, b, out);
      }
    }
  }
}

}  // namespace

// Calls fn(PackedTile<Block>{}) for the dtypes with a packed tile; false for the others.
template <typename Fn>
bool VisitTile(DType dtype, Fn&& fn) {
  if (dtype == DType::kQ8_0) return fn(int8::PackedTile<BlockQ8_0>{}), true;
  if (dtype == DType::kMXFP4) return fn(int8::PackedTile<BlockMXFP4>{}), true;
  return false;
}

int64_t PackedInt8Bytes(DType dtype, int64_t n, int64_t k) {
  if (n <= 0 || k <= 0 || k % DTypeBlockSize(dtype) != 0) return 0;
  int64_t bytes = 0;
  VisitTile(dtype, [&](auto tile) {
    bytes = (n + kTileRows - 1) / kTileRows * decltype(tile)::Bytes(k / DTypeBlockSize(dtype));
  });
  return bytes;
}

void PackInt8(const MatMulArgs& args, std::byte* out, ThreadPool* pool) {
  UC_CHECK(PackedInt8Bytes(args.w_dtype, args.n, args.k) > 0,
           "avx2::PackInt8: no packed layout for %s [%lld, %lld]", DTypeName(args.w_dtype).data(),
           static_cast<long long>(args.n), static_cast<long long>(args.k));
  VisitTile(args.w_dtype, [&](auto stand_in) {
    using Tile = decltype(stand_in);
    const int64_t blocks = args.k / DTypeBlockSize(args.w_dtype);
    const int64_t tile_bytes = Tile::Bytes(blocks);
    const int64_t tiles = (args.n + kTileRows - 1) / kTileRows;
    const int64_t block_bytes = Tile::kScaleBytes + Tile::kCodeBytes;
    ParallelFor(
        pool, tiles,
        [&](int64_t begin, int64_t end) {
          for (int64_t t = begin; t < end; ++t) {
            std::byte* base = out + t * tile_bytes;
            std::memset(base, 0, static_cast<size_t>(tile_bytes));
            const Tile tile{base, blocks};
            const int rows = static_cast<int>(std::min<int64_t>(kTileRows, args.n - t * kTileRows));
            for (int j = 0; j < rows; ++j) {
              const std::byte* row = args.w + (t * kTileRows + j) * args.w_row_bytes;
              for (int64_t b = 0; b < blocks; ++b) {
                // Both blocks are the scale field, then qs.
                const std::byte* block = row + b * block_bytes;
                std::memcpy(const_cast<std::byte*>(tile.scales(b)) + j * Tile::kScaleBytes, block,
                            Tile::kScaleBytes);
                std::memcpy(const_cast<std::byte*>(tile.codes(b, j)), block + Tile::kScaleBytes,
                            Tile::kCodeBytes);
              }
            }
          }
        },
        1);
  });
}

void MatMulInt8(const MatMulArgs& args, ThreadPool* pool) {
  const ActivationFormat format = Int8ActivationFormat(args.w_dtype);
  QuantizedX x;
  x.row_bytes = ActivationRowBytes(format, args.k);
  x.blocks = args.k / ActivationBlockSize(format);
  x.block_bytes = x.row_bytes / x.blocks;
  // The calling thread's buffers; the workers only see the pointers.
  thread_local std::vector<uint32_t> buffer;  // 4-byte aligned for BlockQ8_K's float d
  thread_local std::vector<int32_t> sums;
  thread_local std::vector<Bytes32> panel_buffer;
  buffer.resize(static_cast<size_t>((args.m * x.row_bytes + 3) / 4));
  std::byte* const xq = reinterpret_cast<std::byte*>(buffer.data());
  x.rows = xq;
  VisitKernel(args.w_dtype, [&](auto kernel) {
    using K = decltype(kernel);
    using Panel = typename K::Panel;
    x.panel_rows = K::kHasPanel ? args.m / kPanelRows * kPanelRows : 0;
    if (K::kNeedsSums) sums.resize(static_cast<size_t>(args.m * x.blocks));
    x.sums = sums.data();
    const int64_t groups = x.panel_rows / kPanelRows;
    static_assert(sizeof(Panel) % sizeof(Bytes32) == 0);
    panel_buffer.resize(static_cast<size_t>(groups * x.blocks) * sizeof(Panel) / sizeof(Bytes32));
    auto* const panels = reinterpret_cast<Panel*>(panel_buffer.data());
    x.panels = panels;
    int32_t* const sum_data = sums.data();
    ParallelFor(
        pool, args.m,
        [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) {
            QuantizeActivations(format, args.x + i * args.k, args.k, xq + i * x.row_bytes);
          }
          if constexpr (K::kNeedsSums) {
            const int64_t first = std::max(begin, x.panel_rows);
            if (first < end) BlockSums(xq, x.row_bytes, x.blocks, first, end, sum_data);
          }
        },
        MinRowsPerChunk(args.k));
    if constexpr (K::kHasPanel) {
      ParallelFor(
          pool, groups,
          [&](int64_t begin, int64_t end) { BuildPanels(format, x, begin, end, panels); },
          std::max<int64_t>(1, MinRowsPerChunk(args.k) / kPanelRows));
    }
    const int64_t num_tiles = (args.n + kTileRows - 1) / kTileRows;
    // Tiles are independent: chunks of them from a shared counter, as the AVX-512 kernel takes.
    ParallelForDynamic(
        pool, num_tiles, [&](int64_t begin, int64_t end) { TileRange<K>(args, x, begin, end); },
        std::max<int64_t>(1, MinRowsPerChunk(args.m * args.k) / kTileRows));
  });
}

}  // namespace uc::kernels::avx2

#endif  // defined(__x86_64__)
