// File: matmul_test_util.h
// -----------------------------------------------------------------------------
// What the MatMul tests share (test-only, header-only): random activations, the exact comparison
// of two F32 tensors, and the checks of a packed copy and of the exact F32 MatMul.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>

#include "kernels/ops.h"
#include "kernels/reference.h"
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

// got within `tolerance` of reference::MatMul(x, w) (double precision) elementwise.
inline void ExpectNearReference(const Tensor& got, const Tensor& x, const Tensor& w,
                                double tolerance, const std::string& what) {
  Tensor want = Tensor::Empty({x.dim(0), w.dim(0)}, DType::kF32);
  reference::MatMul(x, w, want);
  for (int64_t i = 0; i < want.numel(); ++i) {
    EXPECT_NEAR(got.data<float>()[i], want.data<float>()[i], tolerance) << what << " element " << i;
  }
}

}  // namespace uc::kernels::testing
