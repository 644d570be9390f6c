// Portable MatMul: weight rows are converted to F32 a few at a time into a thread-local tile
// and reused across all x rows, so each weight byte is read once per call.
#include <algorithm>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "tensor/tensor.h"

namespace uc::kernels::cpu {
namespace {

constexpr int64_t kTileRows = 8;

// Eight independent partial sums hide the add latency and let the compiler use SIMD.
float Dot(const float* a, const float* b, int64_t k) {
  float partial[8] = {};
  int64_t i = 0;
  for (; i + 8 <= k; i += 8) {
    for (int j = 0; j < 8; ++j) partial[j] += a[i + j] * b[i + j];
  }
  float tail = 0.0f;
  for (; i < k; ++i) tail += a[i] * b[i];
  return ((partial[0] + partial[1]) + (partial[2] + partial[3])) +
         ((partial[4] + partial[5]) + (partial[6] + partial[7])) + tail;
}

void MatMulRows(const MatMulArgs& a, int64_t n_begin, int64_t n_end) {
  thread_local std::vector<float> tile;
  tile.resize(static_cast<size_t>(kTileRows * a.k));
  for (int64_t j0 = n_begin; j0 < n_end; j0 += kTileRows) {
    const int64_t rows = std::min(kTileRows, n_end - j0);
    for (int64_t r = 0; r < rows; ++r) {
      DequantizeRow(a.w_dtype, a.w + (j0 + r) * a.w_row_bytes, tile.data() + r * a.k, a.k);
    }
    for (int64_t i = 0; i < a.m; ++i) {
      const float* x_row = a.x + i * a.k;
      for (int64_t r = 0; r < rows; ++r) {
        a.y[i * a.n + j0 + r] = Dot(x_row, tile.data() + r * a.k, a.k);
      }
    }
  }
}

}  // namespace

void MatMul(const MatMulArgs& args, ThreadPool* pool) {
  ParallelFor(
      pool, args.n, [&](int64_t begin, int64_t end) { MatMulRows(args, begin, end); },
      MinRowsPerChunk(args.m * args.k));
}

}  // namespace uc::kernels::cpu
