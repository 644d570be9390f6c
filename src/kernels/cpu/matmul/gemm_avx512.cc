// AVX-512 MatMul, prefill path: gemm_avx2.cc's recipe at twice the width. Weight rows are
// decoded to F32 once per (tile, k block) into a thread-local panel by avx2::PackTileF32 (the
// decoders are AVX2 code), transposed so 32 consecutive output columns are two 64-byte lines
// per k, and a 12x32 micro-kernel keeps 24 accumulators in registers: per k step two panel
// loads and twelve broadcasts of x feed twenty-four FMAs. Groups of four tiles (128 columns)
// share one x panel, which then stays in L1.
//
// Every output element is the same FMA chain over k, in blocks of kPackKc, as in
// avx2::MatMulTiled, so the two give the same bits.
//
// Everything here but MatMulTiled is in an anonymous namespace, for the reason
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

#include "base/check.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/matmul/tile_avx512.h"

namespace uc::kernels::avx512 {
namespace {

constexpr int kNr = 32;  // output columns (weight rows) per tile: two vectors
constexpr int kMr = 12;  // x rows per micro-kernel call
constexpr int64_t kKc = avx2::kPackKc;
constexpr int64_t kTilesPerGroup = 4;

// y[r, 0..cols) (+)= x[r, 0..kc) · panel for r < MR; accumulates when `accumulate`.
template <int MR>
void MicroKernel(const float* x, int64_t ldx, const float* packed, int64_t kc, float* y,
                 int64_t ldy, int cols, bool accumulate) {
  const TileMasks masks = MasksForColumns(cols);
  __m512 acc[MR][2];
  LoadTile<MR>(acc, y, ldy, masks, accumulate);
  for (int64_t kk = 0; kk < kc; ++kk) {
    const __m512 w0 = _mm512_load_ps(packed + kk * kNr);
    const __m512 w1 = _mm512_load_ps(packed + kk * kNr + 16);
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const __m512 xb = _mm512_set1_ps(x[r * ldx + kk]);
      acc[r][0] = _mm512_fmadd_ps(xb, w0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(xb, w1, acc[r][1]);
    }
  }
  StoreTile<MR>(acc, y, ldy, masks);
}

using MicroKernelFn = void (*)(const float*, int64_t, const float*, int64_t, float*, int64_t, int,
                               bool);
// Indexed by the number of x rows, 1..kMr.
constexpr MicroKernelFn kMicroKernels[kMr + 1] = {
    nullptr,         MicroKernel<1>,  MicroKernel<2>, MicroKernel<3>, MicroKernel<4>,
    MicroKernel<5>,  MicroKernel<6>,  MicroKernel<7>, MicroKernel<8>, MicroKernel<9>,
    MicroKernel<10>, MicroKernel<11>, MicroKernel<12>};

// Thread-local scratch, 64-byte aligned: the decode rows and the packed tiles of one group.
class Panels {
 public:
  Panels() = default;
  Panels(const Panels&) = delete;
  Panels& operator=(const Panels&) = delete;
  ~Panels() { std::free(data_); }
  float* rows() { return Data(); }
  float* tile(int64_t t) { return Data() + kNr * kKc + t * kKc * kNr; }

 private:
  float* Data() {
    if (data_ == nullptr) {
      data_ = static_cast<float*>(
          std::aligned_alloc(64, sizeof(float) * (kNr * kKc) * (1 + kTilesPerGroup)));
      UC_CHECK(data_ != nullptr, "MatMul: out of memory");
    }
    return data_;
  }
  float* data_ = nullptr;
};

// Computes output columns [t_begin * 32, t_end * 32) ∩ [0, n).
void TiledRange(const MatMulArgs& a, int64_t t_begin, int64_t t_end) {
  thread_local Panels panels;
  for (int64_t g = t_begin; g < t_end; g += kTilesPerGroup) {
    const int64_t tiles = std::min(kTilesPerGroup, t_end - g);
    for (int64_t k0 = 0; k0 < a.k; k0 += kKc) {
      const int64_t kc = std::min(kKc, a.k - k0);
      for (int64_t t = 0; t < tiles; ++t) {
        const int64_t j0 = (g + t) * kNr;
        const int cols = static_cast<int>(std::min<int64_t>(kNr, a.n - j0));
        avx2::PackTileF32(a, j0, cols, k0, kc, kNr, panels.rows(), panels.tile(t));
      }
      avx2::PrefetchNextPackBlock(a, g, tiles, k0, t_end, kNr, kTilesPerGroup);
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

void MatMulTiled(const MatMulArgs& args, ThreadPool* pool) {
  const int64_t num_tiles = (args.n + kNr - 1) / kNr;
  // Tiles are independent (any grouping gives the same bits): chunks from a shared counter.
  ParallelForDynamic(
      pool, num_tiles, [&](int64_t begin, int64_t end) { TiledRange(args, begin, end); },
      std::max<int64_t>(1, MinRowsPerChunk(args.m * args.k) / kNr));
}

}  // namespace uc::kernels::avx512

#endif  // defined(__x86_64__)
