#include "tensor/tensor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
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

// A long-lived buffer (forward workspace, KV cache): zero-filled, 64-byte aligned, the size the
// shape needs; large enough ones sit on 2 MiB boundaries (huge pages where the OS grants them),
// and the storage outlives the first handle through its copies.
TEST(TensorTest, ZerosLongLivedIsZeroedAlignedAndOwned) {
  for (const int64_t rows : {int64_t{3}, int64_t{4096}}) {
    Tensor copy;
    {
      Tensor t = Tensor::ZerosLongLived({rows, 1000}, DType::kF32);
      ASSERT_EQ(t.nbytes(), rows * 1000 * 4);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % 64, 0u);
      if (t.nbytes() >= (int64_t{4} << 20)) {
        EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % (uintptr_t{2} << 20), 0u);
      }
      const float* v = t.data<float>();
      for (int64_t i = 0; i < t.numel(); ++i) ASSERT_EQ(v[i], 0.0f) << i;
      t.data<float>()[t.numel() - 1] = 7.0f;
      copy = t;
    }
    EXPECT_EQ(copy.data<float>()[copy.numel() - 1], 7.0f);
  }
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

// Hand-packed K-quant and 5-bit blocks (the full check against gguf-py is quant_kernels_test).
TEST(TensorTest, DequantizeKQuantsAnd5Bit) {
  BlockQ4_K q4k{};
  q4k.d = F32ToF16(1.0f);
  q4k.dmin = F32ToF16(0.5f);
  q4k.scales[1] = 2;     // group 1: scale 2
  q4k.scales[5] = 3;     // group 1: min 3
  q4k.scales[8] = 0x41;  // group 4: scale 1, min 4 (low 4 bits)
  q4k.qs[0] = 0x53;      // element 0: 3 (group 0), element 32: 5 (group 1)
  q4k.qs[64] = 0x07;     // element 128 (group 4): 7
  std::vector<float> out(256);
  DequantizeRow(DType::kQ4_K, &q4k, out.data(), 256);
  EXPECT_EQ(out[0], 0.0f);    // scale 0, min 0
  EXPECT_EQ(out[32], 8.5f);   // 1 * 2 * 5 - 0.5 * 3
  EXPECT_EQ(out[128], 5.0f);  // 1 * 1 * 7 - 0.5 * 4

  BlockQ6_K q6k{};
  q6k.d = F32ToF16(0.25f);
  q6k.scales[0] = -4;
  q6k.scales[15] = 8;
  q6k.ql[0] = 0x0f;    // element 0: low 15
  q6k.qh[0] = 0x02;    // element 0: high 2 -> q = 15 + 32 - 32 = 15
  q6k.ql[127] = 0xf0;  // element 255 (h 1, r 3, l 31): low 15
  q6k.qh[63] = 0xc0;   // high 3 -> q = 15 + 48 - 32 = 31
  DequantizeRow(DType::kQ6_K, &q6k, out.data(), 256);
  EXPECT_EQ(out[0], -15.0f);   // 0.25 * -4 * 15
  EXPECT_EQ(out[1], 32.0f);    // 0.25 * -4 * (0 - 32)
  EXPECT_EQ(out[255], 62.0f);  // 0.25 * 8 * 31

  BlockQ5_0 q50{};
  q50.d = F32ToF16(2.0f);
  q50.qh[2] = 0x01;  // element 16 has its fifth bit
  q50.qs[0] = 0x3f;  // element 0: 15, element 16: 3 | 16
  DequantizeRow(DType::kQ5_0, &q50, out.data(), 32);
  EXPECT_EQ(out[0], -2.0f);  // 2 * (15 - 16)
  EXPECT_EQ(out[16], 6.0f);  // 2 * (19 - 16)
  EXPECT_EQ(out[1], -32.0f);

  Tensor t = Tensor::Zeros({2, 32}, DType::kIQ4_NL);
  t.data<BlockIQ4_NL>()[1].d = F32ToF16(0.5f);
  t.data<BlockIQ4_NL>()[1].qs[15] = 0xf0;  // element 15: value 0 (-127), element 31: 15 (113)
  const std::vector<float> values = t.ToFloatVector();
  EXPECT_EQ(values[32 + 15], -63.5f);
  EXPECT_EQ(values[32 + 31], 56.5f);
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
