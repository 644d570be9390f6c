#include "tensor/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace uc {
namespace {

TEST(DTypeTest, BlockGeometry) {
  EXPECT_EQ(DTypeRowBytes(DType::kF32, 10), 40);
  EXPECT_EQ(DTypeRowBytes(DType::kBF16, 10), 20);
  EXPECT_EQ(DTypeRowBytes(DType::kQ8_0, 64), 68);
  EXPECT_EQ(DTypeRowBytes(DType::kQ4_0, 64), 36);
  EXPECT_EQ(DTypeRowBytes(DType::kQ4_1, 96), 60);
  EXPECT_TRUE(DTypeIsQuantized(DType::kQ4_1));
  EXPECT_FALSE(DTypeIsQuantized(DType::kBF16));
  EXPECT_FALSE(DTypeIsQuantized(DType::kI32));
}

// ggml's block sizes and bytes (GGML_QUANT_SIZES) and names.
TEST(DTypeTest, GgmlBlockTypes) {
  const struct {
    DType dtype;
    const char* name;
    int64_t block_size;
    int64_t block_bytes;
  } kTypes[] = {{DType::kQ5_0, "Q5_0", 32, 22},     {DType::kQ5_1, "Q5_1", 32, 24},
                {DType::kIQ4_NL, "IQ4_NL", 32, 18}, {DType::kQ2_K, "Q2_K", 256, 84},
                {DType::kQ3_K, "Q3_K", 256, 110},   {DType::kQ4_K, "Q4_K", 256, 144},
                {DType::kQ5_K, "Q5_K", 256, 176},   {DType::kQ6_K, "Q6_K", 256, 210},
                {DType::kQ8_K, "Q8_K", 256, 292},   {DType::kMXFP4, "MXFP4", 32, 17}};
  for (const auto& t : kTypes) {
    EXPECT_EQ(DTypeName(t.dtype), t.name);
    EXPECT_TRUE(DTypeIsQuantized(t.dtype)) << t.name;
    EXPECT_EQ(DTypeBlockSize(t.dtype), t.block_size) << t.name;
    EXPECT_EQ(DTypeBlockBytes(t.dtype), t.block_bytes) << t.name;
    EXPECT_EQ(DTypeRowBytes(t.dtype, 2 * t.block_size), 2 * t.block_bytes) << t.name;
  }
}

// The 6-bit scale packings against hand-packed bytes.
TEST(DTypeTest, KQuantScaleUnpacking) {
  uint8_t q4k[12];
  const uint8_t scales[8] = {1, 2, 3, 63, 40, 17, 0, 33};
  const uint8_t mins[8] = {5, 62, 7, 8, 50, 1, 63, 12};
  for (int g = 0; g < 4; ++g) {
    q4k[g] = static_cast<uint8_t>(scales[g] | (scales[g + 4] >> 4) << 6);
    q4k[g + 4] = static_cast<uint8_t>(mins[g] | (mins[g + 4] >> 4) << 6);
    q4k[g + 8] = static_cast<uint8_t>((scales[g + 4] & 15) | (mins[g + 4] & 15) << 4);
  }
  for (int g = 0; g < 8; ++g) {
    uint8_t scale = 0, min = 0;
    KScaleMin(q4k, g, &scale, &min);
    EXPECT_EQ(scale, scales[g]) << g;
    EXPECT_EQ(min, mins[g]) << g;
  }
  uint8_t q3k[12] = {};
  for (int i = 0; i < 16; ++i) {
    const int value = (i * 7 + 3) % 64;  // stored as scale + 32
    q3k[i % 8] |= static_cast<uint8_t>((value & 15) << (i < 8 ? 0 : 4));
    q3k[8 + i % 4] |= static_cast<uint8_t>((value >> 4) << (2 * (i / 4)));
  }
  for (int i = 0; i < 16; ++i) EXPECT_EQ(Q3KScale(q3k, i), (i * 7 + 3) % 64 - 32) << i;
}

// Known encodings (IEEE 754 binary16 tables).
TEST(DTypeTest, F16KnownValues) {
  EXPECT_EQ(F32ToF16(1.0f), 0x3c00);
  EXPECT_EQ(F32ToF16(-2.0f), 0xc000);
  EXPECT_EQ(F32ToF16(65504.0f), 0x7bff);
  EXPECT_EQ(F32ToF16(1e6f), 0x7c00);
  EXPECT_EQ(F32ToF16(5.960464477539063e-08f), 0x0001);  // smallest subnormal
  EXPECT_EQ(F32ToF16(0.333333343f), 0x3555);
  EXPECT_FLOAT_EQ(F16ToF32(0x3555), 0.333251953125f);
  EXPECT_FLOAT_EQ(F16ToF32(0x0001), 5.960464477539063e-08f);
  EXPECT_FLOAT_EQ(F16ToF32(0x03ff), 6.097555160522461e-05f);
  EXPECT_TRUE(std::isinf(F16ToF32(0x7c00)));
  EXPECT_TRUE(std::isnan(F16ToF32(F32ToF16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(DTypeTest, F16RoundTripsEveryFiniteValue) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00) continue;  // inf / NaN
    EXPECT_EQ(F32ToF16(F16ToF32(static_cast<uint16_t>(h))), h) << std::hex << h;
  }
}

TEST(DTypeTest, Bf16RoundsToNearestEven) {
  EXPECT_EQ(F32ToBf16(1.0f), 0x3f80);
  EXPECT_FLOAT_EQ(Bf16ToF32(0x3f80), 1.0f);
  // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1.0078125: ties to even (1.0).
  EXPECT_EQ(F32ToBf16(1.00390625f), 0x3f80);
  EXPECT_EQ(F32ToBf16(1.01171875f), 0x3f82);  // halfway, rounds up to even
  for (uint32_t h = 0; h < 0x10000; h += 7) {
    if ((h & 0x7f80) == 0x7f80) continue;
    EXPECT_EQ(F32ToBf16(Bf16ToF32(static_cast<uint16_t>(h))), h);
  }
}

}  // namespace
}  // namespace uc
