#include "tensor/tensor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace uc {
namespace {

TEST(TensorTest, EmptyShapeAndBytes) {
  Tensor t = Tensor::Zeros({3, 64}, DType::kQ4_1);
  EXPECT_EQ(t.rank(), 2);
  EXPECT_EQ(t.dim(-1), 64);
  EXPECT_EQ(t.numel(), 192);
  EXPECT_EQ(t.row_bytes(), 40);
  EXPECT_EQ(t.nbytes(), 120);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % 64, 0u);
}

TEST(TensorTest, SliceAndReshapeAlias) {
  Tensor t = Tensor::FromVector({0, 1, 2, 3, 4, 5}, {3, 2});
  Tensor mid = t.Slice(1, 2);
  EXPECT_EQ(mid.shape(), (Shape{1, 2}));
  EXPECT_EQ(mid.data<float>()[0], 2.0f);
  mid.data<float>()[1] = 42.0f;
  EXPECT_EQ(t.data<float>()[3], 42.0f);
  Tensor flat = t.Reshape({6});
  EXPECT_EQ(flat.data<float>()[3], 42.0f);
  Tensor copy = t.Clone();
  copy.data<float>()[0] = -1.0f;
  EXPECT_EQ(t.data<float>()[0], 0.0f);
}

TEST(TensorTest, DequantizeQ4_1AndQ8_0) {
  BlockQ4_1 q41{};
  q41.d = F32ToF16(0.5f);
  q41.m = F32ToF16(-1.0f);
  for (int j = 0; j < 16; ++j) q41.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  float out[32];
  DequantizeRow(DType::kQ4_1, &q41, out, 32);
  EXPECT_FLOAT_EQ(out[0], -1.0f);
  EXPECT_FLOAT_EQ(out[3], 0.5f);
  EXPECT_FLOAT_EQ(out[16], 6.5f);  // high nibble 15

  BlockQ8_0 q8{};
  q8.d = F32ToF16(0.25f);
  for (int j = 0; j < 32; ++j) q8.qs[j] = static_cast<int8_t>(j - 16);
  DequantizeRow(DType::kQ8_0, &q8, out, 32);
  EXPECT_FLOAT_EQ(out[0], -4.0f);
  EXPECT_FLOAT_EQ(out[31], 3.75f);

  BlockQ4_0 q40{};
  q40.d = F32ToF16(2.0f);
  for (int j = 0; j < 16; ++j) q40.qs[j] = 0x80;  // low 0 -> -8, high 8 -> 0
  DequantizeRow(DType::kQ4_0, &q40, out, 32);
  EXPECT_FLOAT_EQ(out[0], -16.0f);
  EXPECT_FLOAT_EQ(out[16], 0.0f);
}

TEST(TensorTest, QuantizeThenDequantizeIsClose) {
  std::vector<float> x(64);
  for (int i = 0; i < 64; ++i) x[i] = std::sin(0.37f * i) * (i % 7 + 1) * 0.1f;
  float amax = 0.0f;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  struct Case {
    DType dtype;
    float tol;  // as a fraction of max|x|
  };
  for (const Case c : {Case{DType::kF16, 1e-3f}, Case{DType::kBF16, 8e-3f},
                       Case{DType::kQ8_0, 1.0f / 127 * 0.51f + 1e-3f},
                       Case{DType::kQ4_0, 1.0f / 8 * 0.51f + 1e-3f},
                       Case{DType::kQ4_1, 2.0f / 15 * 0.51f + 1e-3f}}) {
    std::vector<std::byte> packed(DTypeRowBytes(c.dtype, 64));
    QuantizeRow(c.dtype, x.data(), packed.data(), 64);
    std::vector<float> back(64);
    DequantizeRow(c.dtype, packed.data(), back.data(), 64);
    for (int i = 0; i < 64; ++i) {
      EXPECT_NEAR(back[i], x[i], c.tol * amax) << DTypeName(c.dtype) << " element " << i;
    }
  }
}

}  // namespace
}  // namespace uc
