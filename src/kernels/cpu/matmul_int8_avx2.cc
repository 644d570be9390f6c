// AVX2 integer MatMul. The x rows are quantized once per call; the weights are walked in tiles
// of eight rows, each output column of the tile one F32 lane. For every block, the tile's eight
// weight blocks are unpacked once (int8_blocks_avx2.h) and dotted with up to kRowsPerPass x rows,
// so decode (m = 1) streams each weight byte once and prefill reuses each unpacked block across
// 64 rows. Each lane adds its block terms alone, in block order, so the result does not depend
// on m, on the thread count or on the tile a row lands in, and equals the portable path bit for
// bit.
//
// The weights keep ggml's block layout (no repacking at load time): the scale gathers across
// eight rows (GatherF16) and the K-quant scale unpacking are paid once per block per pass.
#if defined(__x86_64__)

#include <algorithm>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/int8_blocks_avx2.h"
#include "kernels/cpu/simd_avx2.h"

namespace uc::kernels::avx2 {
namespace {

using int8::kTileRows;

// x rows per pass over a tile's blocks: their accumulators stay in L1 (2 KiB).
constexpr int64_t kRowsPerPass = 64;

// The quantized activations of one call.
struct QuantizedX {
  const std::byte* rows;  // [m] rows of row_bytes
  int64_t row_bytes;
  int64_t block_bytes;
  const int32_t* sums;  // [m, blocks] sum of each block's quants, when the kernel needs them
  int64_t blocks;
};

// Outputs of tiles [t_begin, t_end): columns [8 t, 8 t + 8) ∩ [0, n).
template <typename K>
void TileRange(const MatMulArgs& a, const QuantizedX& x, int64_t t_begin, int64_t t_end) {
  typename K::Prep prep;
  __m256 acc[kRowsPerPass];
  for (int64_t t = t_begin; t < t_end; ++t) {
    const int64_t j0 = t * kTileRows;
    const int64_t cols = std::min<int64_t>(kTileRows, a.n - j0);
    // Lanes past n repeat the last row; their results are dropped.
    const std::byte* rows[kTileRows];
    for (int c = 0; c < kTileRows; ++c) {
      rows[c] = a.w + std::min<int64_t>(j0 + c, a.n - 1) * a.w_row_bytes;
    }
    for (int64_t i0 = 0; i0 < a.m; i0 += kRowsPerPass) {
      const int64_t count = std::min(kRowsPerPass, a.m - i0);
      for (int64_t r = 0; r < count; ++r) acc[r] = _mm256_setzero_ps();
      for (int64_t b = 0; b < x.blocks; ++b) {
        K::Prepare(rows, b, prep);
        const std::byte* xb = x.rows + i0 * x.row_bytes + b * x.block_bytes;
        for (int64_t r = 0; r < count; ++r) {
          const int32_t sum = K::kNeedsSums ? x.sums[(i0 + r) * x.blocks + b] : 0;
          acc[r] = _mm256_add_ps(acc[r], K::Term(prep, xb + r * x.row_bytes, sum));
        }
      }
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
      const __m256i wide =
          _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), int8::LoadBytes(x[b].qs)),
                            _mm256_set1_epi16(1));
      __m128i s = _mm_add_epi32(_mm256_castsi256_si128(wide), _mm256_extracti128_si256(wide, 1));
      s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
      s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
      sums[i * blocks + b] = _mm_cvtsi128_si32(s);
    }
  }
}

}  // namespace

void MatMulInt8(const MatMulArgs& args, ThreadPool* pool) {
  const ActivationFormat format = Int8ActivationFormat(args.w_dtype);
  QuantizedX x;
  x.row_bytes = ActivationRowBytes(format, args.k);
  x.blocks = args.k / ActivationBlockSize(format);
  x.block_bytes = x.row_bytes / x.blocks;
  // The calling thread's buffers; the workers only see the pointers.
  thread_local std::vector<uint32_t> buffer;  // 4-byte aligned for BlockQ8_K's float d
  thread_local std::vector<int32_t> sums;
  buffer.resize(static_cast<size_t>((args.m * x.row_bytes + 3) / 4));
  std::byte* const xq = reinterpret_cast<std::byte*>(buffer.data());
  bool needs_sums = false;
  int8::VisitInt8Kernel(args.w_dtype,
                        [&](auto kernel) { needs_sums = decltype(kernel)::kNeedsSums; });
  if (needs_sums) sums.resize(static_cast<size_t>(args.m * x.blocks));
  int32_t* const block_sums = needs_sums ? sums.data() : nullptr;
  x.rows = xq;
  x.sums = block_sums;
  ParallelFor(
      pool, args.m,
      [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          QuantizeActivations(format, args.x + i * args.k, args.k, xq + i * x.row_bytes);
        }
        if (needs_sums) BlockSums(xq, x.row_bytes, x.blocks, begin, end, block_sums);
      },
      MinRowsPerChunk(args.k));
  const int64_t num_tiles = (args.n + kTileRows - 1) / kTileRows;
  int8::VisitInt8Kernel(args.w_dtype, [&](auto kernel) {
    using K = decltype(kernel);
    ParallelFor(
        pool, num_tiles, [&](int64_t begin, int64_t end) { TileRange<K>(args, x, begin, end); },
        std::max<int64_t>(1, MinRowsPerChunk(args.m * args.k) / kTileRows));
  });
}

}  // namespace uc::kernels::avx2

#endif  // defined(__x86_64__)
