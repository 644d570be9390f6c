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
