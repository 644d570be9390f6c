// File: dtype.h
// -----------------------------------------------------------------------------
// Element types of tensors, including GGUF block-quantized types, and scalar conversions.
// Block-quantized types store rows as a sequence of fixed-size blocks (GGUF layout, little
// endian): a row of `n` elements takes n / BlockSize() blocks of BlockBytes() bytes each.
//   Q8_0: 32 elements = f16 scale d, int8 q[32];            x = d * q
//   Q4_0: 32 elements = f16 scale d, uint8 qs[16];          x = d * (nibble - 8)
//   Q4_1: 32 elements = f16 scale d, f16 min m, uint8 qs[16]; x = d * nibble + m
// Nibble order: element j (j < 16) is the low nibble of qs[j], element j + 16 the high nibble.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace uc {

enum class DType : uint8_t { kF32, kF16, kBF16, kQ8_0, kQ4_0, kQ4_1, kI32 };

std::string_view DTypeName(DType dtype);
// Elements per block (1 for plain types).
int64_t DTypeBlockSize(DType dtype);
// Bytes per block (the element size for plain types).
int64_t DTypeBlockBytes(DType dtype);
bool DTypeIsQuantized(DType dtype);
// Bytes taken by `n` consecutive elements. REQUIRES: n % DTypeBlockSize(dtype) == 0.
int64_t DTypeRowBytes(DType dtype, int64_t n);

struct BlockQ8_0 {
  uint16_t d;  // f16
  int8_t qs[32];
};
struct BlockQ4_0 {
  uint16_t d;  // f16
  uint8_t qs[16];
};
struct BlockQ4_1 {
  uint16_t d;  // f16
  uint16_t m;  // f16
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20);

inline float Bf16ToF32(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// Round to nearest even; NaN stays NaN.
inline uint16_t F32ToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float F16ToF32(uint16_t h);
uint16_t F32ToF16(float f);  // round to nearest even

}  // namespace uc
