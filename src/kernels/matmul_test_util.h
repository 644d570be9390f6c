// File: matmul_test_util.h
// -----------------------------------------------------------------------------
// What the MatMul tests share (test-only, header-only): random activations and quantized weights,
// the exact comparison of two F32 tensors, the checks of a packed copy, of row chunks and of the
// exact F32 MatMul, and the note for a kernel this CPU cannot run.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "kernels/reference.h"
#include "tensor/dtype.h"
#include "tensor/tensor.h"

namespace uc::kernels::testing {

// x[m, k] F32, normal(0, stddev) from `seed`.
inline Tensor RandomX(int64_t m, int64_t k, uint32_t seed, float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  Tensor x = Tensor::Empty({m, k}, DType::kF32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = dist(rng);
  return x;
}

// Byte offsets of a block's f16 scale fields (d, then m / dmin when there is one).
inline std::vector<size_t> HalfScaleOffsets(DType dtype) {
  switch (dtype) {
    case DType::kQ4_1:
    case DType::kQ5_1:
      return {0, 2};
    case DType::kQ2_K:
      return {offsetof(BlockQ2_K, d), offsetof(BlockQ2_K, dmin)};
    case DType::kQ3_K:
      return {offsetof(BlockQ3_K, d)};
    case DType::kQ4_K:
    case DType::kQ5_K:
      return {0, 2};
    case DType::kQ6_K:
      return {offsetof(BlockQ6_K, d)};
    case DType::kQ8_K:
    case DType::kMXFP4:
      return {};  // F32 d; MXFP4's E8M0 e
    default:
      return {0};
  }
}

// [n, k] weights of `dtype`: random quant bytes and plausible scales (MXFP4: e in [118, 124]) (for
// K-quants the 6-bit sub-block scales are random too, so they are at most 63 times d).
inline Tensor RandomWeights(int64_t n, int64_t k, DType dtype, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.002f, 0.05f);
  std::uniform_real_distribution<float> offset(-0.2f, 0.2f);
  Tensor w = Tensor::Empty({n, k}, dtype);
  auto* bytes = static_cast<uint8_t*>(w.raw());
  for (int64_t i = 0; i < w.nbytes(); ++i) bytes[i] = static_cast<uint8_t>(byte(rng));
  const int64_t block_bytes = DTypeBlockBytes(dtype);
  const float shrink = DTypeBlockSize(dtype) == 32 ? 1.0f : 8.0f;
  for (int64_t b = 0; b < w.nbytes() / block_bytes; ++b) {
    uint8_t* block = bytes + b * block_bytes;
    const std::vector<size_t> halves = HalfScaleOffsets(dtype);
    for (size_t f = 0; f < halves.size(); ++f) {
      const bool is_m = f == 1 && DTypeBlockSize(dtype) == 32;
      const uint16_t h = F32ToF16(is_m ? offset(rng) : scale(rng) / shrink);
      std::memcpy(block + halves[f], &h, 2);
    }
    if (dtype == DType::kQ8_K) {
      const float d = scale(rng) / 4;
      std::memcpy(block, &d, 4);
    }
    if (dtype == DType::kMXFP4) block[0] = static_cast<uint8_t>(118 + byte(rng) % 7);  // 2^-10..-4
  }
  return w;
}

// got and want F32 of one shape, equal bit for bit; names the first differing elements.
inline void ExpectBitExact(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  int64_t misses = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const float g = got.data<float>()[i], w = want.data<float>()[i];
    if (std::memcmp(&g, &w, sizeof(float)) == 0) continue;
    if (++misses <= 5) ADD_FAILURE() << what << ": element " << i << " got " << g << " want " << w;
  }
  EXPECT_EQ(misses, 0) << what << ": " << misses << " of " << want.numel() << " elements differ";
}

// PackedWeight::Pack(w, options) exists, holds `packed_bytes` bytes, and MatMul(x, packed) gives
// want's bits. When `zero_source`, w's stored bytes are zeroed first: the copy must stand alone.
inline void ExpectPackedBitExact(const Tensor& x, Tensor& w, const MatMulOptions& options,
                                 ThreadPool* pool, const Tensor& want, int64_t packed_bytes,
                                 bool zero_source, const std::string& what) {
  const auto packed = PackedWeight::Pack(w, options, pool);
  ASSERT_NE(packed, nullptr) << what;
  EXPECT_EQ(packed->packed_bytes(), packed_bytes) << what;
  if (zero_source) std::memset(w.row(0), 0, static_cast<size_t>(w.nbytes()));
  Tensor got = Tensor::Empty({x.dim(0), w.dim(0)}, DType::kF32);
  MatMul(x, *packed, got, pool);
  ExpectBitExact(got, want, what + ", packed");
}

// Row chunks of x of each size in `chunks` give `all`'s bits (x times w in one call): the packed
// copy for even sizes, the stored w with `stored` for odd ones (size 3 on one thread, the rest on
// `pool`).
inline void ExpectChunksGiveTheSameBits(const Tensor& x, const Tensor& w,
                                        const PackedWeight& packed, const MatMulOptions& stored,
                                        std::initializer_list<int64_t> chunks, ThreadPool* pool,
                                        const Tensor& all, const std::string& what) {
  const int64_t m = x.dim(0), n = w.dim(0);
  for (int64_t chunk : chunks) {
    for (int64_t i0 = 0; i0 < m; i0 += chunk) {
      const int64_t rows = std::min(chunk, m - i0);
      const Tensor part = x.Slice(i0, i0 + rows);
      Tensor got = Tensor::Empty({rows, n}, DType::kF32);
      if (chunk % 2 == 0) {
        MatMul(part, packed, got, pool);
      } else {
        MatMul(part, w, got, chunk == 3 ? nullptr : pool, stored);
      }
      ExpectBitExact(got, all.Slice(i0, i0 + rows),
                     what + " rows " + std::to_string(i0) + "+" + std::to_string(rows));
    }
  }
}

// got within `tolerance` of reference::MatMul(x, w) (double precision) elementwise.
inline void ExpectNearReference(const Tensor& got, const Tensor& x, const Tensor& w,
                                double tolerance, const std::string& what) {
  Tensor want = Tensor::Empty({x.dim(0), w.dim(0)}, DType::kF32);
  reference::MatMul(x, w, want);
  for (int64_t i = 0; i < want.numel(); ++i) {
    EXPECT_NEAR(got.data<float>()[i], want.data<float>()[i], tolerance) << what << " element " << i;
  }
}

// Prints a note in gtest's style when this CPU cannot run the kernel a test is for (`runs`
// false): the test still passes on the paths the CPU has, and its log names what went unchecked.
// `what`: the missing feature and the kernel, e.g. "CPU lacks X: the Y kernel".
inline void NoteIfUntested(bool runs, const std::string& what) {
  if (!runs) std::printf("[ NOTE     ] %s is NOT tested on this machine\n", what.c_str());
}

}  // namespace uc::kernels::testing
