// File: layers_test_util.h
// -----------------------------------------------------------------------------
// Random tensors for the parallel-layer tests: F32 values in [-1, 1) from a fixed seed, and
// weights in any dtype made by quantizing them; the tests' closeness check.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "tensor/tensor.h"

namespace uc::layers::testing {

inline Tensor RandomF32(Shape shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(ShapeNumel(shape)));
  for (float& x : v) x = dist(rng);
  return Tensor::FromVector(v, std::move(shape));
}

// A [rows, cols] tensor in `dtype` (quantized from random F32 values).
inline Tensor RandomWeight(int64_t rows, int64_t cols, DType dtype, uint32_t seed) {
  const Tensor f = RandomF32({rows, cols}, seed);
  if (dtype == DType::kF32) return f;
  Tensor w = Tensor::Empty({rows, cols}, dtype);
  for (int64_t i = 0; i < rows; ++i) QuantizeRow(dtype, f.data<float>() + i * cols, w.row(i), cols);
  return w;
}

// max |got - want| <= 1e-5 * max(1, max |want|).
inline void ExpectClose(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  float scale = 1.0f, err = 0.0f;
  for (size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, std::fabs(want[i]));
    err = std::max(err, std::fabs(got[i] - want[i]));
  }
  EXPECT_LE(err, 1e-5f * scale);
}

}  // namespace uc::layers::testing
