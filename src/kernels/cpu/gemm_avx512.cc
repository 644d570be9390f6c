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

// GCC 12's AVX-512 headers start some intrinsics from `__m512i __Y = __Y;`, which
// -Wuninitialized reports wherever they are inlined (GCC bug 105593).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "base/check.h"
#include "kernels/cpu/cpu_kernels.h"

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
  const __mmask16 m0 = static_cast<__mmask16>(cols >= 16 ? 0xFFFF : (1u << cols) - 1);
  const __mmask16 m1 = static_cast<__mmask16>(cols >= 32   ? 0xFFFF
                                              : cols <= 16 ? 0
                                                           : (1u << (cols - 16)) - 1);
  __m512 acc[MR][2];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
    if (accumulate) {
      acc[r][0] = _mm512_maskz_loadu_ps(m0, y + r * ldy);
      acc[r][1] = _mm512_maskz_loadu_ps(m1, y + r * ldy + 16);
    } else {
      acc[r][0] = _mm512_setzero_ps();
      acc[r][1] = _mm512_setzero_ps();
    }
  }
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
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
    _mm512_mask_storeu_ps(y + r * ldy, m0, acc[r][0]);
    _mm512_mask_storeu_ps(y + r * ldy + 16, m1, acc[r][1]);
  }
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

// Asks for weight rows [j0, j0 + rows) x [k0, k0 + kc) to be brought into L2 (packing walks
// each row in short k blocks, which the hardware prefetcher does not follow).
void PrefetchWeights(const MatMulArgs& a, int64_t j0, int64_t rows, int64_t k0, int64_t kc) {
  const int64_t offset = DTypeRowBytes(a.w_dtype, k0);
  const int64_t bytes = DTypeRowBytes(a.w_dtype, kc);
  for (int64_t r = 0; r < rows; ++r) {
    const char* p = reinterpret_cast<const char*>(a.w + (j0 + r) * a.w_row_bytes + offset);
    for (int64_t b = 0; b < bytes; b += 64) _mm_prefetch(p + b, _MM_HINT_T1);
    _mm_prefetch(p + bytes - 1, _MM_HINT_T1);
  }
}

// The weights TiledRange packs after block (group g, k0): the next k block of the same group,
// or the first block of the next group.
void PrefetchNextBlock(const MatMulArgs& a, int64_t g, int64_t tiles, int64_t k0, int64_t t_end) {
  if (k0 + kKc < a.k) {
    const int64_t rows = std::min(tiles * kNr, a.n - g * kNr);
    PrefetchWeights(a, g * kNr, rows, k0 + kKc, std::min(kKc, a.k - k0 - kKc));
  } else if (g + kTilesPerGroup < t_end) {
    const int64_t next = g + kTilesPerGroup;
    const int64_t rows = std::min(std::min(kTilesPerGroup, t_end - next) * kNr, a.n - next * kNr);
    PrefetchWeights(a, next * kNr, rows, 0, std::min(kKc, a.k));
  }
}

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
      PrefetchNextBlock(a, g, tiles, k0, t_end);
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
  ParallelFor(
      pool, num_tiles, [&](int64_t begin, int64_t end) { TiledRange(args, begin, end); },
      std::max<int64_t>(1, MinRowsPerChunk(args.m * args.k) / kNr));
}

}  // namespace uc::kernels::avx512

#endif  // defined(__x86_64__)
