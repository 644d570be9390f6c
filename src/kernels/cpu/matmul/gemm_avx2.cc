// AVX2 MatMul, prefill path (many x rows). Compute-bound, so the layout follows the classic
// GEMM recipe: weight rows are decoded to F32 once per (tile, k block) into a thread-local panel,
// transposed so 16 consecutive output columns are one 64-byte line per k, and a 6x16 micro-kernel
// keeps 12 accumulators in registers: per k step two panel loads and six broadcasts of x feed
// twelve FMAs. Groups of eight tiles share one x panel, which then stays in L1.
#if defined(__x86_64__)

#include <algorithm>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/simd_avx2.h"

namespace uc::kernels::avx2 {
namespace {

constexpr int kNr = 16;           // output columns (weight rows) per tile: two vectors
constexpr int kMr = 6;            // x rows per micro-kernel call
constexpr int64_t kKc = kPackKc;  // k per packed tile: 16 KiB of F32, a multiple of 32
constexpr int64_t kTilesPerGroup = 8;

// dst[i * dst_stride + c] = src[c * src_stride + i] for an 8x8 block (c < 8, i < 8).
void Transpose8x8(const float* src, int64_t src_stride, float* dst, int64_t dst_stride) {
  __m256 r[8];
#pragma GCC unroll 16
  for (int c = 0; c < 8; ++c) r[c] = _mm256_loadu_ps(src + c * src_stride);
  __m256 t[8];
#pragma GCC unroll 16
  for (int c = 0; c < 8; c += 2) {
    t[c] = _mm256_unpacklo_ps(r[c], r[c + 1]);
    t[c + 1] = _mm256_unpackhi_ps(r[c], r[c + 1]);
  }
  __m256 s[8];
#pragma GCC unroll 16
  for (int c = 0; c < 8; c += 4) {
    s[c] = _mm256_shuffle_ps(t[c], t[c + 2], 0x44);
    s[c + 1] = _mm256_shuffle_ps(t[c], t[c + 2], 0xee);
    s[c + 2] = _mm256_shuffle_ps(t[c + 1], t[c + 3], 0x44);
    s[c + 3] = _mm256_shuffle_ps(t[c + 1], t[c + 3], 0xee);
  }
#pragma GCC unroll 16
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(dst + i * dst_stride, _mm256_permute2f128_ps(s[i], s[i + 4], 0x20));
    _mm256_storeu_ps(dst + (i + 4) * dst_stride, _mm256_permute2f128_ps(s[i], s[i + 4], 0x31));
  }
}

// Decodes weight rows [j0, j0 + cols) x [k0, k0 + kc) into packed[kk * nr + c]; columns past
// `cols` are zero. `rows` is scratch of nr * kPackKc floats. REQUIRES: nr % 8 == 0.
template <typename D>
void PackTile(const MatMulArgs& a, int64_t j0, int cols, int64_t k0, int64_t kc, int nr,
              float* rows, float* packed) {
  const int64_t offset = DTypeRowBytes(a.w_dtype, k0);
  for (int c = 0; c < nr; ++c) {
    if (c < cols) {
      DecodeRow<D>(a.w + (j0 + c) * a.w_row_bytes + offset, kc, rows + c * kPackKc);
    } else {
      std::fill_n(rows + c * kPackKc, kc, 0.0f);
    }
  }
  const int64_t kc8 = kc / 8 * 8;
  for (int64_t kk = 0; kk < kc8; kk += 8) {
    for (int c8 = 0; c8 < nr; c8 += 8) {
      Transpose8x8(rows + c8 * kPackKc + kk, kPackKc, packed + kk * nr + c8, nr);
    }
  }
  for (int64_t kk = kc8; kk < kc; ++kk) {
    for (int c = 0; c < nr; ++c) packed[kk * nr + c] = rows[c * kPackKc + kk];
  }
}

// Asks for weight rows [j0, j0 + rows) x [k0, k0 + kc) to be brought into L2. Packing walks
// each row in short k blocks, a pattern the hardware prefetcher does not follow, so the next
// block is requested while the micro-kernels work on the current one.
void PrefetchWeights(const MatMulArgs& a, int64_t j0, int64_t rows, int64_t k0, int64_t kc) {
  const int64_t offset = DTypeRowBytes(a.w_dtype, k0);
  const int64_t bytes = DTypeRowBytes(a.w_dtype, kc);
  for (int64_t r = 0; r < rows; ++r) {
    const char* p = reinterpret_cast<const char*>(a.w + (j0 + r) * a.w_row_bytes + offset);
    for (int64_t b = 0; b < bytes; b += 64) PrefetchT1(p + b);
    PrefetchT1(p + bytes - 1);
  }
}

// y[r, 0..cols) (+)= x[r, 0..kc) · panel for r < MR; accumulates when `accumulate`.
template <int MR>
void MicroKernel(const float* x, int64_t ldx, const float* packed, int64_t kc, float* y,
                 int64_t ldy, int cols, bool accumulate) {
  alignas(32) float edge[MR][kNr];  // staging for a partial tile (cols < 16)
  const bool full = cols == kNr;
  __m256 acc[MR][2];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
    const float* src = y + r * ldy;
    if (!full) {
      std::fill_n(edge[r], kNr, 0.0f);
      if (accumulate) std::copy_n(src, cols, edge[r]);
      src = edge[r];
    }
    acc[r][0] = accumulate || !full ? _mm256_loadu_ps(src) : _mm256_setzero_ps();
    acc[r][1] = accumulate || !full ? _mm256_loadu_ps(src + 8) : _mm256_setzero_ps();
  }
  for (int64_t kk = 0; kk < kc; ++kk) {
    const __m256 w0 = _mm256_load_ps(packed + kk * kNr);
    const __m256 w1 = _mm256_load_ps(packed + kk * kNr + 8);
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const __m256 xb = _mm256_broadcast_ss(x + r * ldx + kk);
      acc[r][0] = _mm256_fmadd_ps(xb, w0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(xb, w1, acc[r][1]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
    float* dst = full ? y + r * ldy : edge[r];
    _mm256_storeu_ps(dst, acc[r][0]);
    _mm256_storeu_ps(dst + 8, acc[r][1]);
    if (!full) std::copy_n(edge[r], cols, y + r * ldy);
  }
}

using MicroKernelFn = void (*)(const float*, int64_t, const float*, int64_t, float*, int64_t, int,
                               bool);
// Indexed by the number of x rows, 1..kMr.
constexpr MicroKernelFn kMicroKernels[kMr + 1] = {nullptr,        MicroKernel<1>, MicroKernel<2>,
                                                  MicroKernel<3>, MicroKernel<4>, MicroKernel<5>,
                                                  MicroKernel<6>};

struct Panels {
  std::vector<float> rows;    // kNr * kKc decode scratch
  std::vector<float> packed;  // kTilesPerGroup tiles of kKc * kNr, 32-byte aligned
  float* tile(int64_t t) {
    auto base = reinterpret_cast<uintptr_t>(packed.data());
    return reinterpret_cast<float*>((base + 31) / 32 * 32) + t * kKc * kNr;
  }
};

// Computes output columns [t_begin * 16, t_end * 16) ∩ [0, n).
template <typename D>
void TiledRange(const MatMulArgs& a, int64_t t_begin, int64_t t_end) {
  thread_local Panels panels;
  panels.rows.resize(kNr * kPackKc);
  panels.packed.resize(kTilesPerGroup * kKc * kNr + 8);
  for (int64_t g = t_begin; g < t_end; g += kTilesPerGroup) {
    const int64_t tiles = std::min(kTilesPerGroup, t_end - g);
    for (int64_t k0 = 0; k0 < a.k; k0 += kKc) {
      const int64_t kc = std::min(kKc, a.k - k0);
      for (int64_t t = 0; t < tiles; ++t) {
        const int64_t j0 = (g + t) * kNr;
        const int cols = static_cast<int>(std::min<int64_t>(kNr, a.n - j0));
        PackTile<D>(a, j0, cols, k0, kc, kNr, panels.rows.data(), panels.tile(t));
      }
      PrefetchNextPackBlock(a, g, tiles, k0, t_end, kNr, kTilesPerGroup);
      for (int64_t i0 = 0; i0 < a.m; i0 += kMr) {
        const int64_t rows = std::min<int64_t>(kMr, a.m - i0);
        for (int64_t t = 0; t < tiles; ++t) {
          const int64_t j0 = (g + t) * kNr;
          const int cols = static_cast<int>(std::min<int64_t>(kNr, a.n - j0));
          kMicroKernels[rows](a.x + i0 * a.k + k0, a.k, panels.tile(t), kc, a.y + i0 * a.n + j0,
                              a.n, cols, k0 > 0);
        }
      }
    }
  }
}

}  // namespace

void PrefetchNextPackBlock(const MatMulArgs& a, int64_t g, int64_t tiles, int64_t k0, int64_t t_end,
                           int nr, int64_t tiles_per_group) {
  if (k0 + kPackKc < a.k) {
    const int64_t rows = std::min(tiles * nr, a.n - g * nr);
    PrefetchWeights(a, g * nr, rows, k0 + kPackKc, std::min(kPackKc, a.k - k0 - kPackKc));
  } else if (g + tiles_per_group < t_end) {
    const int64_t next = g + tiles_per_group;
    const int64_t rows = std::min(std::min(tiles_per_group, t_end - next) * nr, a.n - next * nr);
    PrefetchWeights(a, next * nr, rows, 0, std::min(kPackKc, a.k));
  }
}

void PackTileF32(const MatMulArgs& a, int64_t j0, int cols, int64_t k0, int64_t kc, int nr,
                 float* scratch, float* packed) {
  VisitDecoder(a.w_dtype, [&](auto decoder) {
    PackTile<decltype(decoder)>(a, j0, cols, k0, kc, nr, scratch, packed);
  });
}

void MatMulTiled(const MatMulArgs& args, ThreadPool* pool) {
  const int64_t num_tiles = (args.n + kNr - 1) / kNr;
  VisitDecoder(args.w_dtype, [&](auto decoder) {
    using D = decltype(decoder);
    // Tiles are independent (any grouping gives the same bits): chunks from a shared counter.
    ParallelForDynamic(
        pool, num_tiles, [&](int64_t begin, int64_t end) { TiledRange<D>(args, begin, end); },
        std::max<int64_t>(1, MinRowsPerChunk(args.m * args.k) / kNr));
  });
}

}  // namespace uc::kernels::avx2

#endif  // defined(__x86_64__)
