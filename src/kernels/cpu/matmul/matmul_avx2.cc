// AVX2 MatMul, decode path. Decode is memory-bound: the only goal is to stream each weight byte
// once at full bandwidth, so a weight row is decoded in registers (never written back) and
// FMA'd against up to four x rows with several independent accumulator chains. Q4 rows are
// decoded in a cheaper permuted order, with x permuted to match once per call.
#if defined(__x86_64__)

#include <algorithm>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/simd_avx2.h"

namespace uc::kernels::avx2 {
namespace {

// Accumulator chains per x row in DotRows<D, M>. Each chain sums every fourth (second) group of
// eight k, lane by lane; the chains are added in order and the lanes summed last, so a row's
// result depends on M only through this count.
template <typename D, int M>
constexpr int DotRowsChains() {
  return M <= 2 ? 4 : 2;
}

// out[r] = x[r, :] · row for r < M, x rows k apart.
template <typename D, int M>
void DotRows(const float* x, int64_t k, const std::byte* row, float* out) {
  // One chain per row is latency-bound (4-cycle FMA); M * kChains chains keep the FMA units and
  // the load queue busy.
  constexpr int kChains = DotRowsChains<D, M>();
  __m256 acc[M][kChains];
#pragma GCC unroll 16
  for (int r = 0; r < M; ++r) {
#pragma GCC unroll 16
    for (int c = 0; c < kChains; ++c) acc[r][c] = _mm256_setzero_ps();
  }
  const int64_t k32 = k / 32 * 32;
  const int64_t ahead = PrefetchBytes<D>();
  for (int64_t i = 0; i < k32; i += 32) {
    PrefetchAhead<D>(row, i, ahead);
    __m256 w[4];
    D::Load32(row, i, w);
#pragma GCC unroll 16
    for (int r = 0; r < M; ++r) {
#pragma GCC unroll 16
      for (int v = 0; v < 4; ++v) {
        const __m256 xv = _mm256_loadu_ps(x + r * k + i + 8 * v);
        acc[r][v % kChains] = _mm256_fmadd_ps(w[v], xv, acc[r][v % kChains]);
      }
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < M; ++r) {
    __m256 sum = acc[r][0];
#pragma GCC unroll 16
    for (int c = 1; c < kChains; ++c) sum = _mm256_add_ps(sum, acc[r][c]);
    out[r] = HorizontalSum(sum);
  }
  if constexpr (!D::kQuantized) {
    for (int64_t i = k32; i < k; ++i) {
      const float wi = D::At(row, i);
#pragma GCC unroll 16
      for (int r = 0; r < M; ++r) out[r] += x[r * k + i] * wi;
    }
  }
}

template <typename D>
void StreamRows(const MatMulArgs& a, int64_t n_begin, int64_t n_end) {
  using DotFn = void (*)(const float*, int64_t, const std::byte*, float*);
  constexpr DotFn kDot[5] = {nullptr, DotRows<D, 1>, DotRows<D, 2>, DotRows<D, 3>, DotRows<D, 4>};
  for (int64_t j = n_begin; j < n_end; ++j) {
    const std::byte* row = a.w + j * a.w_row_bytes;
    for (int64_t i0 = 0; i0 < a.m; i0 += 4) {
      const int64_t rows = std::min<int64_t>(4, a.m - i0);
      float out[4];
      kDot[rows](a.x + i0 * a.k, a.k, row, out);
      for (int64_t r = 0; r < rows; ++r) a.y[(i0 + r) * a.n + j] = out[r];
    }
  }
}

// dst[0, k) = the row's elements in the order D::Load32 gives them (quad-swapped or natural),
// so that DotRows<DecodeF32, M> over dst against the matching x performs DotRows<D, M>'s
// multiply-adds in DotRows<D, M>'s order.
template <typename D>
void DecodeInLoadOrder(const std::byte* row, int64_t k, float* dst) {
  const int64_t k32 = k / 32 * 32;
  for (int64_t i = 0; i < k32; i += 32) {
    __m256 w[4];
    D::Load32(row, i, w);
#pragma GCC unroll 16
    for (int v = 0; v < 4; ++v) _mm256_storeu_ps(dst + i + 8 * v, w[v]);
  }
  if constexpr (!D::kQuantized) {
    for (int64_t i = k32; i < k; ++i) dst[i] = D::At(row, i);
  }
}

// The batch-invariant order: every output is DotRows<D, 1>'s (DotRows<D, 2> accumulates each of
// its two rows in the same four chains, so pairs give the same bits). x rows are taken in blocks
// of kInvariantBlockRows that stay in L2 while the weight rows of the range stream past; each
// weight row is decoded once per block into an F32 buffer in Load32's order, and every pair of
// x rows is dotted with the buffer (DotRows<DecodeF32, 2>: the same products, in the same order).
inline constexpr int64_t kInvariantBlockRows = 32;

template <typename D>
void StreamRowsInvariant(const MatMulArgs& a, int64_t n_begin, int64_t n_end) {
  static_assert(DotRowsChains<D, 1>() == DotRowsChains<D, 2>());
  static_assert(DotRowsChains<DecodeF32, 2>() == DotRowsChains<D, 1>());
  thread_local std::vector<float> decoded;
  decoded.resize(static_cast<size_t>(a.k));
  const auto* buffer = reinterpret_cast<const std::byte*>(decoded.data());
  for (int64_t b0 = 0; b0 < a.m; b0 += kInvariantBlockRows) {
    const int64_t b_end = std::min(a.m, b0 + kInvariantBlockRows);
    for (int64_t j = n_begin; j < n_end; ++j) {
      const std::byte* row = a.w + j * a.w_row_bytes;
      if (b_end - b0 == 1) {  // one row: dot it straight from the stored weights
        DotRows<D, 1>(a.x + b0 * a.k, a.k, row, a.y + b0 * a.n + j);
        continue;
      }
      DecodeInLoadOrder<D>(row, a.k, decoded.data());
      int64_t i = b0;
      for (; i + 2 <= b_end; i += 2) {
        float out[2];
        DotRows<DecodeF32, 2>(a.x + i * a.k, a.k, buffer, out);
        a.y[i * a.n + j] = out[0];
        a.y[(i + 1) * a.n + j] = out[1];
      }
      if (i < b_end) DotRows<DecodeF32, 1>(a.x + i * a.k, a.k, buffer, a.y + i * a.n + j);
    }
  }
}

// x[0, count) with quads 1 and 2 of every 16 elements swapped, the order of the quad-swapped
// decoders, in a thread-local buffer. REQUIRES: count % 16 == 0.
const float* SwapQuads(const float* x, int64_t count) {
  thread_local std::vector<float> buffer;
  buffer.resize(static_cast<size_t>(count));
  for (int64_t g = 0; g < count; g += 16) {
    std::copy_n(x + g, 4, buffer.data() + g);
    std::copy_n(x + g + 8, 4, buffer.data() + g + 4);
    std::copy_n(x + g + 4, 4, buffer.data() + g + 8);
    std::copy_n(x + g + 12, 4, buffer.data() + g + 12);
  }
  return buffer.data();
}

template <typename D, bool kInvariant>
void StreamAll(MatMulArgs args, ThreadPool* pool) {
  // x is permuted once per call (m * k floats) so that every weight row decodes cheaply.
  if constexpr (D::kQuadSwapped) args.x = SwapQuads(args.x, args.m * args.k);
  // Chunks of rows from a shared counter (rows are independent): a thread the system holds back
  // leaves its rows to the others.
  ParallelForDynamic(
      pool, args.n,
      [&](int64_t begin, int64_t end) {
        if constexpr (kInvariant) {
          StreamRowsInvariant<D>(args, begin, end);
        } else {
          StreamRows<D>(args, begin, end);
        }
      },
      MinRowsPerChunk(args.m * args.k));
}

template <bool kInvariant>
void Stream(const MatMulArgs& args, ThreadPool* pool) {
  switch (args.w_dtype) {
    case DType::kQ4_0:
      StreamAll<DecodeQ4_0Order<true>, kInvariant>(args, pool);
      break;
    case DType::kQ4_1:
      StreamAll<DecodeQ4_1Order<true>, kInvariant>(args, pool);
      break;
    default:
      VisitDecoder(args.w_dtype,
                   [&](auto decoder) { StreamAll<decltype(decoder), kInvariant>(args, pool); });
  }
}

}  // namespace

void MatMulStreaming(const MatMulArgs& args, ThreadPool* pool) { Stream<false>(args, pool); }

void MatMulBatchInvariant(const MatMulArgs& args, ThreadPool* pool) { Stream<true>(args, pool); }

void MatMul(const MatMulArgs& args, ThreadPool* pool) {
  if (args.m <= kStreamingMaxRows) {
    MatMulStreaming(args, pool);
  } else {
    MatMulTiled(args, pool);
  }
}

}  // namespace uc::kernels::avx2

#endif  // defined(__x86_64__)
