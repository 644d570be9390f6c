// AVX2 MatMul for 16-bit float weights multiplied exactly, on CPUs without the AVX-512 kernels:
// F16 at any precision, BF16 at any precision (no AVX512_BF16 here). Each weight converts to F32
// exactly in a register (vcvtph2ps; a BF16 is the top half of its F32), so the products are those
// of the F32 GEMM.
//
// Layout (PackHalf, once at load). Panels of 16 weight rows: element kk of a panel's 16 rows is
// one 32-byte line, the lines of kk = 0, 1, ... back to back (a panel is k * 32 contiguous bytes)
// and the panels too, so the whole matrix is one stream. Rows past n are zero. F16 lines hold the
// rows in order; BF16 lines hold row c (c < 8) in word 2 c and row 8 + c in word 2 c + 1, so one
// shift and one mask widen a line to rows 0-7 and 8-15 (LoadBf16).
//
// Order. Every output element is one F32 FMA chain over kk = 0, 1, ..., k - 1 starting from zero,
// acc = fma(x[kk], w[kk], acc), whatever m, the panels beside it or the thread count (a k block
// ends by storing the partial sum to y and the next reloads it, which rounds nothing). That is
// the order of avx2::MatMulTiled (gemm_avx2.cc), which multiplies stored rows, and of
// avx512::MatMulHalf: packed and stored weights give the same bits, and every m does (batch
// invariant by construction), at both kernel levels.
//
// Kernels. Prefill (m > kStreamRows): groups of kPanelsPerGroup panels under blocks of six x rows
// and k blocks of kKc, a 6x16 micro-kernel (twelve accumulators, two weight vectors, one
// broadcast: fifteen of the sixteen ymm registers). Decode (m <= kStreamRows): each thread streams
// its panels in passes over all m rows, one to four panels at once (four for one row, two for two
// or three, one for four to six), so eight or more independent chains hide the FMA latency.
//
// Measured on a 2-core AMD EPYC with AVX2 and no AVX-512, a busy host (medians of interleaved
// rounds), against avx2::MatMulBatchInvariant, which these weights took before under the default
// batch invariance: kernels_benchmark BM_MatMulInvariant on TinyLlama's MLP shape (w: [5632,
// 2048]), F16 / BF16, one thread: 512 tokens 3.9x / 3.4x, 64 tokens 2.8x / 4.0x, one token 3.2x /
// 3.5x (decode reads the packed panels at or above the rate of the read-bandwidth probe); two
// threads 2.2-3.1x. `undercurrent bench` on the 1.1B shape (batch 1, 128-token prompt): prefill
// 2.1-2.8x (F16) and 2.5-3.2x (BF16), decode 1.4-2.1x. Widening each group's k block to F32 once
// for all the x row blocks (as gemm_avx2.cc does) measured 0-12% slower than widening every line
// in the micro-kernel, and was not kept.
//
// Everything here but the entry points is in an anonymous namespace, for the reason
// matmul_int8_avx512.cc gives.
#if defined(__x86_64__)

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <utility>

#include "base/check.h"
#include "kernels/cpu/cpu_kernels.h"

namespace uc::kernels::avx2 {
namespace {

constexpr int kNr = 16;                 // weight rows (output columns) per panel: two vectors
constexpr int kMr = 6;                  // x rows per prefill micro-kernel call
constexpr int64_t kKc = 256;            // k per prefill block: an 8 KiB panel slice
constexpr int64_t kPanelsPerGroup = 8;  // panels sharing one block of x rows (64 KiB in L2)
constexpr int kStreamRows = 6;          // up to this many x rows, decode streams the panels
constexpr int64_t kStreamKc = 1024;     // k per decode block: x rows' slice stays in L1
constexpr int kMaxStreamPanels = 4;     // panels streamed at once

// A 32-byte line (16 weights, 16-bit) to F32 vectors: w[0] rows 0-7, w[1] rows 8-15.
struct LoadF16 {
  [[gnu::always_inline]] static void Load(const uint16_t* p, __m256* w) {
    w[0] = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(p)));
    w[1] = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(p + 8)));
  }
};
struct LoadBf16 {
  [[gnu::always_inline]] static void Load(const uint16_t* p, __m256* w) {
    const __m256i v = _mm256_load_si256(reinterpret_cast<const __m256i*>(p));
    w[0] = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    w[1] =
        _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))));
  }
};

// Lane mask with the first `count` lanes set (count clamped to [0, 8]).
__m256i Lanes(int count) {
  const int c = std::clamp(count, 0, 8);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(c), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// y[r, t * 16 + c] (+)= x[r, 0..kc) · panel t's lines [0, kc), for r < MR, t < NT, and columns
// t * 16 + c < cols (REQUIRES: cols > (NT - 1) * 16); panel t's line kk is at panel + t *
// panel_stride + kk * 16 (elements). Accumulates into y when `accumulate`.
template <typename L, int MR, int NT>
void MicroKernel(const float* x, int64_t ldx, const uint16_t* panel, int64_t panel_stride,
                 int64_t kc, float* y, int64_t ldy, int cols, bool accumulate) {
  __m256 acc[NT][MR][2];
  // Only the last panel can be partial.
  const int last_cols = cols - (NT - 1) * kNr;
  const bool full = last_cols >= kNr;
  const __m256i mask0 = Lanes(last_cols);
  const __m256i mask1 = Lanes(last_cols - 8);
#pragma GCC unroll 4
  for (int t = 0; t < NT; ++t) {
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const float* src = y + r * ldy + t * kNr;
      if (!accumulate) {
        acc[t][r][0] = _mm256_setzero_ps();
        acc[t][r][1] = _mm256_setzero_ps();
      } else if (t < NT - 1 || full) {
        acc[t][r][0] = _mm256_loadu_ps(src);
        acc[t][r][1] = _mm256_loadu_ps(src + 8);
      } else {
        acc[t][r][0] = _mm256_maskload_ps(src, mask0);
        acc[t][r][1] = _mm256_maskload_ps(src + 8, mask1);
      }
    }
  }
  for (int64_t kk = 0; kk < kc; ++kk) {
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) {
      __m256 w[2];
      L::Load(panel + t * panel_stride + kk * kNr, w);
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) {
        const __m256 xb = _mm256_broadcast_ss(x + r * ldx + kk);
        acc[t][r][0] = _mm256_fmadd_ps(xb, w[0], acc[t][r][0]);
        acc[t][r][1] = _mm256_fmadd_ps(xb, w[1], acc[t][r][1]);
      }
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < NT; ++t) {
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      float* dst = y + r * ldy + t * kNr;
      if (t < NT - 1 || full) {
        _mm256_storeu_ps(dst, acc[t][r][0]);
        _mm256_storeu_ps(dst + 8, acc[t][r][1]);
      } else {
        _mm256_maskstore_ps(dst, mask0, acc[t][r][0]);
        _mm256_maskstore_ps(dst + 8, mask1, acc[t][r][1]);
      }
    }
  }
}

using MicroKernelFn = void (*)(const float*, int64_t, const uint16_t*, int64_t, int64_t, float*,
                               int64_t, int, bool);

// kernels[MR] = MicroKernel<L, MR, NT> for MR in 1..kMax.
template <typename L, int NT, int... kRows>
constexpr auto KernelTable(std::integer_sequence<int, kRows...>) {
  return std::array<MicroKernelFn, sizeof...(kRows) + 1>{nullptr, MicroKernel<L, kRows + 1, NT>...};
}
template <typename L>
struct Kernels {
  static constexpr auto k1 = KernelTable<L, 1>(std::make_integer_sequence<int, kMr>());
  static constexpr auto k2 = KernelTable<L, 2>(std::make_integer_sequence<int, 3>());
  static constexpr auto k4 = KernelTable<L, 4>(std::make_integer_sequence<int, 1>());
  // The micro-kernel over `panels` panels (1, 2 or 4) and `rows` x rows.
  static MicroKernelFn Get(int panels, int rows) {
    return panels == 4 ? k4[rows] : panels == 2 ? k2[rows] : k1[rows];
  }
};

// Panels a decode pass streams at once for m x rows: eight or more accumulator chains within the
// sixteen registers.
int StreamPanels(int64_t m) { return m == 1 ? kMaxStreamPanels : m <= 3 ? 2 : 1; }

const uint16_t* PanelLines(const MatMulArgs& a, int64_t p) {
  return reinterpret_cast<const uint16_t*>(a.w_packed) + p * a.k * kNr;
}

int Columns(const MatMulArgs& a, int64_t j0, int64_t panels) {
  return static_cast<int>(std::min<int64_t>(panels * kNr, a.n - j0));
}

// Output columns [p_begin * 16, p_end * 16) ∩ [0, n), m <= kStreamRows: each k block of every
// run of StreamPanels(m) panels in one pass over all x rows.
template <typename L>
void StreamPanelRange(const MatMulArgs& a, int64_t p_begin, int64_t p_end) {
  const int rows = static_cast<int>(a.m);
  const int64_t run = StreamPanels(a.m);
  for (int64_t p = p_begin; p < p_end; p += run) {
    const int panels = static_cast<int>(std::min(run, p_end - p));
    const int64_t j0 = p * kNr;
    const int cols = Columns(a, j0, panels);
    const uint16_t* lines = PanelLines(a, p);
    for (int64_t k0 = 0; k0 < a.k; k0 += kStreamKc) {
      const int64_t kc = std::min(kStreamKc, a.k - k0);
      if (panels == run) {
        Kernels<L>::Get(panels, rows)(a.x + k0, a.k, lines + k0 * kNr, a.k * kNr, kc, a.y + j0, a.n,
                                      cols, k0 > 0);
      } else {  // the run's last panels, one at a time
        for (int q = 0; q < panels; ++q) {
          Kernels<L>::k1[rows](a.x + k0, a.k, lines + q * a.k * kNr + k0 * kNr, a.k * kNr, kc,
                               a.y + j0 + q * kNr, a.n, Columns(a, j0 + q * kNr, 1), k0 > 0);
        }
      }
    }
  }
}

// Output columns [p_begin * 16, p_end * 16) ∩ [0, n) in groups of panels and k blocks.
template <typename L>
void TiledPanelRange(const MatMulArgs& a, int64_t p_begin, int64_t p_end) {
  for (int64_t g = p_begin; g < p_end; g += kPanelsPerGroup) {
    const int64_t panels = std::min(kPanelsPerGroup, p_end - g);
    for (int64_t k0 = 0; k0 < a.k; k0 += kKc) {
      const int64_t kc = std::min(kKc, a.k - k0);
      for (int64_t i0 = 0; i0 < a.m; i0 += kMr) {
        const int64_t rows = std::min<int64_t>(kMr, a.m - i0);
        for (int64_t p = g; p < g + panels; ++p) {
          const int64_t j0 = p * kNr;
          Kernels<L>::k1[rows](a.x + i0 * a.k + k0, a.k, PanelLines(a, p) + k0 * kNr, a.k * kNr, kc,
                               a.y + i0 * a.n + j0, a.n, Columns(a, j0, 1), k0 > 0);
        }
      }
    }
  }
}

template <typename L>
void Run(const MatMulArgs& args, ThreadPool* pool) {
  const int64_t num_panels = (args.n + kNr - 1) / kNr;
  const bool stream = args.m <= kStreamRows;
  // Threads take chunks of whole runs (decode) from a shared counter, so a thread the system
  // holds back leaves its panels to the others.
  const int64_t run = stream ? StreamPanels(args.m) : 1;
  const int64_t num_runs = (num_panels + run - 1) / run;
  const int64_t min_runs = std::max<int64_t>(1, MinRowsPerChunk(args.m * args.k) / (run * kNr));
  ParallelForDynamic(
      pool, num_runs,
      [&](int64_t begin, int64_t end) {
        const int64_t p_end = std::min(end * run, num_panels);
        if (stream) {
          StreamPanelRange<L>(args, begin * run, p_end);
        } else {
          TiledPanelRange<L>(args, begin * run, p_end);
        }
      },
      min_runs);
}

// dst[j][i] = src[i][j] for an 8x8 block of 16-bit elements (src[i]: eight elements of row i).
void Transpose8x8Epi16(const __m128i* src, __m128i* dst) {
  __m128i a[8];
  for (int i = 0; i < 4; ++i) {
    a[2 * i] = _mm_unpacklo_epi16(src[2 * i], src[2 * i + 1]);
    a[2 * i + 1] = _mm_unpackhi_epi16(src[2 * i], src[2 * i + 1]);
  }
  // a[2 i] holds columns 0-3 of rows 2 i and 2 i + 1 interleaved, a[2 i + 1] columns 4-7.
  __m128i b[8];
  for (int h = 0; h < 2; ++h) {  // rows 0-3, then 4-7
    const __m128i* q = a + 4 * h;
    b[4 * h + 0] = _mm_unpacklo_epi32(q[0], q[2]);  // columns 0, 1
    b[4 * h + 1] = _mm_unpackhi_epi32(q[0], q[2]);  // columns 2, 3
    b[4 * h + 2] = _mm_unpacklo_epi32(q[1], q[3]);  // columns 4, 5
    b[4 * h + 3] = _mm_unpackhi_epi32(q[1], q[3]);  // columns 6, 7
  }
  for (int c = 0; c < 4; ++c) {
    dst[2 * c] = _mm_unpacklo_epi64(b[c], b[4 + c]);
    dst[2 * c + 1] = _mm_unpackhi_epi64(b[c], b[4 + c]);
  }
}

// Panel p of the packed layout from the stored rows: out[kk * 16 + position of row c] for kk < k,
// c < 16. Blocks of eight elements of the sixteen rows are transposed in registers.
void PackPanel(const MatMulArgs& a, int64_t p, uint16_t* out) {
  const int64_t j0 = p * kNr;
  const int cols = Columns(a, j0, 1);
  const bool bf16 = a.w_dtype == DType::kBF16;
  auto row = [&](int c) { return a.w + (j0 + c) * a.w_row_bytes; };
  int64_t kk = 0;
  for (; kk + 8 <= a.k; kk += 8) {
    __m128i src[16];
    for (int c = 0; c < kNr; ++c) {
      src[c] = c < cols ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(row(c) + kk * 2))
                        : _mm_setzero_si128();
    }
    __m128i lo[8], hi[8];  // lo[j]: element kk + j of rows 0-7; hi[j]: of rows 8-15
    Transpose8x8Epi16(src, lo);
    Transpose8x8Epi16(src + 8, hi);
    for (int j = 0; j < 8; ++j) {
      auto* line = reinterpret_cast<__m128i*>(out + (kk + j) * kNr);
      if (bf16) {
        _mm_store_si128(line, _mm_unpacklo_epi16(lo[j], hi[j]));
        _mm_store_si128(line + 1, _mm_unpackhi_epi16(lo[j], hi[j]));
      } else {
        _mm_store_si128(line, lo[j]);
        _mm_store_si128(line + 1, hi[j]);
      }
    }
  }
  for (; kk < a.k; ++kk) {  // k % 8 elements left, one at a time
    for (int c = 0; c < kNr; ++c) {
      uint16_t v = 0;
      if (c < cols) std::memcpy(&v, row(c) + kk * 2, sizeof(v));
      out[kk * kNr + (bf16 ? 2 * (c % 8) + c / 8 : c)] = v;
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

int64_t PackedHalfBytes(int64_t n, int64_t k) { return (n + kNr - 1) / kNr * k * kNr * 2; }

void PackHalf(const MatMulArgs& args, std::byte* out, ThreadPool* pool) {
  UC_CHECK(args.w_dtype == DType::kF16 || args.w_dtype == DType::kBF16,
           "PackHalf: w must be F16 or BF16");
  auto* const lines = reinterpret_cast<uint16_t*>(out);
  const int64_t panels = (args.n + kNr - 1) / kNr;
  ParallelFor(
      pool, panels,
      [&](int64_t begin, int64_t end) {
        for (int64_t p = begin; p < end; ++p) PackPanel(args, p, lines + p * args.k * kNr);
      },
      1);
}

}  // namespace uc::kernels::avx2

#endif  // defined(__x86_64__)
