// File: matmul_test_util.h
// -----------------------------------------------------------------------------
// What the MatMul tests share (test-only, header-only): random activations and the exact
// comparison of two F32 tensors.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>

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

}  // namespace uc::kernels::testing
