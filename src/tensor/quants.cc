// Each function follows gguf-py's numpy dequantizer step by step: scales are F32 products
// computed once per sub-block (d * scale, dmin * min), then each element is one product and, for
// the types with a min, one subtraction. Kept as separate statements so that no compiler fuses
// them into an FMA (the library is also built with -ffp-contract=off), which would change the
// last bit.
#include "tensor/quants.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace uc {
namespace {

// Bit j of a Q5_0 / Q5_1 block's qh, a little-endian uint32.
uint32_t HighBits(const uint8_t* qh) {
  return static_cast<uint32_t>(qh[0]) | static_cast<uint32_t>(qh[1]) << 8 |
         static_cast<uint32_t>(qh[2]) << 16 | static_cast<uint32_t>(qh[3]) << 24;
}

// Quant j (0..31) of a 5-bit block: nibble j of qs (nibble order) with bit j of qh on top.
int Quant5(const uint8_t* qs, uint32_t qh, int j) {
  const int nibble = j < 16 ? qs[j] & 0xF : qs[j - 16] >> 4;
  return nibble | static_cast<int>((qh >> j) & 1) << 4;
}

// Round to nearest, ties to even, as ggml's nearest_int: adding 1.5 * 2^23 leaves the rounded
// integer in the low mantissa bits. REQUIRES: |v| < 2^22.
int NearestInt(float v) {
  const float shifted = v + 12582912.0f;
  int32_t bits;
  std::memcpy(&bits, &shifted, sizeof(bits));
  return (bits & 0x007fffff) - 0x00400000;
}

// The F32 d = max |x| / 127 of a Q8_0 / Q8_1 block of 32 floats (0 for a tiny block).
float Q8Scale(const float* x) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  return amax < kActivationTinyMax ? 0.0f : amax / 127.0f;
}

// x = (dl * q) - ml over one sub-block of `count` quants.
void ScaleMin(float dl, float ml, const int* q, int count, float* dst) {
  for (int l = 0; l < count; ++l) {
    const float scaled = dl * static_cast<float>(q[l]);
    dst[l] = scaled - ml;
  }
}

}  // namespace

void DequantizeQ5_0(const BlockQ5_0* blocks, int64_t num_blocks, float* dst) {
  for (int64_t b = 0; b < num_blocks; ++b, dst += 32) {
    const float d = F16ToF32(blocks[b].d);
    const uint32_t qh = HighBits(blocks[b].qh);
    for (int j = 0; j < 32; ++j) {
      dst[j] = d * static_cast<float>(Quant5(blocks[b].qs, qh, j) - 16);
    }
  }
}

void DequantizeQ5_1(const BlockQ5_1* blocks, int64_t num_blocks, float* dst) {
  for (int64_t b = 0; b < num_blocks; ++b, dst += 32) {
    const float d = F16ToF32(blocks[b].d);
    const float m = F16ToF32(blocks[b].m);
    const uint32_t qh = HighBits(blocks[b].qh);
    for (int j = 0; j < 32; ++j) {
      const float scaled = d * static_cast<float>(Quant5(blocks[b].qs, qh, j));
      dst[j] = scaled + m;
    }
  }
}

void DequantizeIQ4_NL(const BlockIQ4_NL* blocks, int64_t num_blocks, float* dst) {
  for (int64_t b = 0; b < num_blocks; ++b, dst += 32) {
    const float d = F16ToF32(blocks[b].d);
    for (int j = 0; j < 16; ++j) {
      dst[j] = d * static_cast<float>(kIq4NlValues[blocks[b].qs[j] & 0xF]);
      dst[j + 16] = d * static_cast<float>(kIq4NlValues[blocks[b].qs[j] >> 4]);
    }
  }
}

void DequantizeQ2_K(const BlockQ2_K* blocks, int64_t num_blocks, float* dst) {
  for (int64_t b = 0; b < num_blocks; ++b, dst += kQK_K) {
    const BlockQ2_K& x = blocks[b];
    const float d = F16ToF32(x.d);
    const float dmin = F16ToF32(x.dmin);
    for (int i = 0; i < 16; ++i) {  // 16-element groups
      const int g = i / 2;          // 32-element group
      const uint8_t* qs = x.qs + 32 * (g / 4) + 16 * (i % 2);
      int q[16];
      for (int l = 0; l < 16; ++l) q[l] = (qs[l] >> (2 * (g % 4))) & 3;
      const float dl = d * static_cast<float>(x.scales[i] & 0xF);
      const float ml = dmin * static_cast<float>(x.scales[i] >> 4);
      ScaleMin(dl, ml, q, 16, dst + 16 * i);
    }
  }
}

void DequantizeQ3_K(const BlockQ3_K* blocks, int64_t num_blocks, float* dst) {
  for (int64_t b = 0; b < num_blocks; ++b, dst += kQK_K) {
    const BlockQ3_K& x = blocks[b];
    const float d = F16ToF32(x.d);
    for (int i = 0; i < 16; ++i) {
      const int g = i / 2;
      const float dl = d * static_cast<float>(Q3KScale(x.scales, i));
      for (int l = 16 * (i % 2); l < 16 * (i % 2) + 16; ++l) {
        const int low = (x.qs[32 * (g / 4) + l] >> (2 * (g % 4))) & 3;
        const int q = low - ((x.hmask[l] >> g) & 1 ? 0 : 4);
        dst[32 * g + l] = dl * static_cast<float>(q);
      }
    }
  }
}

void DequantizeQ4_K(const BlockQ4_K* blocks, int64_t num_blocks, float* dst) {
  for (int64_t b = 0; b < num_blocks; ++b, dst += kQK_K) {
    const BlockQ4_K& x = blocks[b];
    const float d = F16ToF32(x.d);
    const float dmin = F16ToF32(x.dmin);
    for (int g = 0; g < 8; ++g) {
      uint8_t scale, min;
      KScaleMin(x.scales, g, &scale, &min);
      int q[32];
      for (int l = 0; l < 32; ++l) q[l] = (x.qs[32 * (g / 2) + l] >> (4 * (g % 2))) & 0xF;
      const float dl = d * static_cast<float>(scale);
      const float ml = dmin * static_cast<float>(min);
      ScaleMin(dl, ml, q, 32, dst + 32 * g);
    }
  }
}

void DequantizeQ5_K(const BlockQ5_K* blocks, int64_t num_blocks, float* dst) {
  for (int64_t b = 0; b < num_blocks; ++b, dst += kQK_K) {
    const BlockQ5_K& x = blocks[b];
    const float d = F16ToF32(x.d);
    const float dmin = F16ToF32(x.dmin);
    for (int g = 0; g < 8; ++g) {
      uint8_t scale, min;
      KScaleMin(x.scales, g, &scale, &min);
      int q[32];
      for (int l = 0; l < 32; ++l) {
        q[l] = ((x.qs[32 * (g / 2) + l] >> (4 * (g % 2))) & 0xF) | ((x.qh[l] >> g) & 1) << 4;
      }
      const float dl = d * static_cast<float>(scale);
      const float ml = dmin * static_cast<float>(min);
      ScaleMin(dl, ml, q, 32, dst + 32 * g);
    }
  }
}

void DequantizeQ6_K(const BlockQ6_K* blocks, int64_t num_blocks, float* dst) {
  for (int64_t b = 0; b < num_blocks; ++b, dst += kQK_K) {
    const BlockQ6_K& x = blocks[b];
    const float d = F16ToF32(x.d);
    for (int e = 0; e < kQK_K; ++e) {
      const int h = e / 128, r = (e % 128) / 32, l = e % 32;
      const int low = (x.ql[64 * h + 32 * (r % 2) + l] >> (4 * (r / 2))) & 0xF;
      const int high = (x.qh[32 * h + l] >> (2 * r)) & 3;
      const float dl = d * static_cast<float>(x.scales[e / 16]);
      dst[e] = dl * static_cast<float>((low | high << 4) - 32);
    }
  }
}

void DequantizeQ8_K(const BlockQ8_K* blocks, int64_t num_blocks, float* dst) {
  for (int64_t b = 0; b < num_blocks; ++b, dst += kQK_K) {
    float d;
    std::memcpy(&d, &blocks[b].d, sizeof(d));
    for (int j = 0; j < kQK_K; ++j) dst[j] = d * static_cast<float>(blocks[b].qs[j]);
  }
}

void QuantizeActivationsQ8_0(const float* x, int64_t num_blocks, BlockQ8_0* dst) {
  for (int64_t b = 0; b < num_blocks; ++b, x += 32) {
    const float d = Q8Scale(x);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    dst[b].d = F32ToF16(d);
    for (int j = 0; j < 32; ++j) dst[b].qs[j] = static_cast<int8_t>(std::round(x[j] * id));
  }
}

void QuantizeActivationsQ8_1(const float* x, int64_t num_blocks, BlockQ8_1* dst) {
  for (int64_t b = 0; b < num_blocks; ++b, x += 32) {
    const float d = Q8Scale(x);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    int sum = 0;
    for (int j = 0; j < 32; ++j) {
      dst[b].qs[j] = static_cast<int8_t>(std::round(x[j] * id));
      sum += dst[b].qs[j];
    }
    dst[b].d = F32ToF16(d);
    dst[b].s = F32ToF16(static_cast<float>(sum) * d);
  }
}

void QuantizeActivationsQ8_K(const float* x, int64_t num_blocks, BlockQ8_K* dst) {
  for (int64_t b = 0; b < num_blocks; ++b, x += kQK_K) {
    BlockQ8_K& y = dst[b];
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kQK_K; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    if (amax < kActivationTinyMax) {
      std::memset(&y, 0, sizeof(y));
      continue;
    }
    const float iscale = -127.0f / max;
    for (int j = 0; j < kQK_K; ++j) {
      y.qs[j] = static_cast<int8_t>(std::min(127, NearestInt(iscale * x[j])));
    }
    for (int i = 0; i < kQK_K / 16; ++i) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += y.qs[16 * i + l];
      y.bsums[i] = static_cast<int16_t>(sum);
    }
    y.d = 1.0f / iscale;
  }
}

}  // namespace uc
