// File: dtype.h
// -----------------------------------------------------------------------------
// Element types of tensors, including GGUF block-quantized types, and scalar conversions.
// Block-quantized types store rows as a sequence of fixed-size blocks (ggml layout, little
// endian): a row of `n` elements takes n / DTypeBlockSize() blocks of DTypeBlockBytes() bytes.
// "f16" fields are IEEE binary16 bits; every product below is one F32 multiply, rounded, in the
// order written (the order of gguf-py's `gguf.quants.dequantize`, which results match bit for
// bit). The block structs are ggml's block_* structs field for field.
//
// 32-element blocks. "Nibble order": element j (j < 16) is the low nibble of qs[j], element
// j + 16 the high nibble.
//   Q8_0   34 B: f16 d, int8 qs[32];                      x = d * q
//   Q4_0   18 B: f16 d, qs[16] nibbles;                   x = d * (nibble - 8)
//   Q4_1   20 B: f16 d, f16 m, qs[16] nibbles;            x = d * nibble + m
//   Q5_0   22 B: f16 d, qh[4], qs[16] nibbles;            x = d * (q - 16)
//   Q5_1   24 B: f16 d, f16 m, qh[4], qs[16] nibbles;     x = d * q + m
//          q = nibble | (bit j of qh, a little-endian uint32) << 4 for element j
//   IQ4_NL 18 B: f16 d, qs[16] nibbles;                   x = d * kIq4NlValues[nibble]
//   MXFP4  17 B: uint8 e (E8M0), qs[16] nibbles;          x = E8M0Half(e) * kMxfp4Values[nibble]
//          E8M0Half(e) = 2^(e - 128) exactly (half the block's power-of-two scale 2^(e - 127),
//          since the table holds the FP4 E2M1 values doubled); every product is exact
//
// 256-element super-blocks ("K-quants"), split into sub-blocks of 16 or 32 elements that each
// have an integer scale (and min) applied to the super-block's f16 d (and dmin). Element e of
// the super-block is in 32-element group g = e / 32 at l = e % 32; ">> s & m" picks bits.
//   Q2_K   84 B: uint8 scales[16], qs[64], f16 d, f16 dmin. Per 16 elements i = e / 16:
//          dl = d * (scales[i] & 15), ml = dmin * (scales[i] >> 4);
//          q = qs[32 (g / 4) + l] >> 2 (g % 4) & 3; x = dl * q - ml
//   Q3_K  110 B: uint8 hmask[32], qs[64], scales[12], f16 d. Sixteen 6-bit scales s stored
//          as s + 32 (Q3KScale unpacks s), per 16 elements: dl = d * s;
//          q = (qs[32 (g / 4) + l] >> 2 (g % 4) & 3) - (hmask[l] >> g & 1 ? 0 : 4); x = dl * q
//   Q4_K  144 B: f16 d, f16 dmin, scales[12], qs[128]. Eight 6-bit (scale, min) pairs
//          (KScaleMin), per 32 elements: dl = d * scale, ml = dmin * min;
//          q = qs[32 (g / 2) + l] >> 4 (g % 2) & 15; x = dl * q - ml
//   Q5_K  176 B: f16 d, f16 dmin, scales[12], qh[32], qs[128]. As Q4_K with
//          q |= (qh[l] >> g & 1) << 4
//   Q6_K  210 B: ql[128], qh[64], int8 scales[16], f16 d. Per 16 elements dl = d * scales[i];
//          half h = e / 128, r = (e % 128) / 32: q = (ql[64 h + 32 (r % 2) + l] >> 4 (r / 2) & 15
//          | (qh[32 h + l] >> 2 r & 3) << 4) - 32; x = dl * q
//   Q8_K  292 B: f32 d, int8 qs[256], int16 bsums[16] (sum of each 16 qs); x = d * q.
//          llama.cpp's type for activations in integer dot products, rarely for weights.
//
// BlockQ8_1 (36 B: f16 d, f16 s = d * sum(qs), int8 qs[32]) is not a DType: it exists only as
// the activation format of the integer MatMul against Q4_1 / Q5_1 weights (ggml's block_q8_1).
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace uc {

// Values are in-memory only (never stored); new types go at the end.
enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kQ8_0,
  kQ4_0,
  kQ4_1,
  kI32,
  kQ5_0,
  kQ5_1,
  kIQ4_NL,
  kQ2_K,
  kQ3_K,
  kQ4_K,
  kQ5_K,
  kQ6_K,
  kQ8_K,
  kMXFP4,
};

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
struct BlockQ5_0 {
  uint16_t d;     // f16
  uint8_t qh[4];  // bit j: high bit of element j (a little-endian uint32; bytes keep 2-alignment)
  uint8_t qs[16];
};
struct BlockQ5_1 {
  uint16_t d;  // f16
  uint16_t m;  // f16
  uint8_t qh[4];
  uint8_t qs[16];
};
struct BlockIQ4_NL {
  uint16_t d;  // f16
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20);
struct BlockQ8_1 {
  uint16_t d;  // f16
  uint16_t s;  // f16: d * sum(qs)
  int8_t qs[32];
};
static_assert(sizeof(BlockQ5_0) == 22 && sizeof(BlockQ5_1) == 24 && sizeof(BlockIQ4_NL) == 18);
static_assert(sizeof(BlockQ8_1) == 36);
struct BlockMXFP4 {
  uint8_t e;  // E8M0: the block scale 2^(e - 127)
  uint8_t qs[16];
};
static_assert(sizeof(BlockMXFP4) == 17);

// The 16 values an IQ4_NL nibble stands for (ggml's kvalues_iq4nl).
inline constexpr int8_t kIq4NlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

// The 16 values an MXFP4 nibble stands for: the FP4 E2M1 values doubled (ggml's kvalues_mxfp4;
// bit 3 the sign).
inline constexpr int8_t kMxfp4Values[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                            0, -1, -2, -3, -4, -6, -8, -12};

// 2^(e - 128) as an F32 (subnormal for e < 2): the scale an MXFP4 block's kMxfp4Values are
// multiplied by (ggml's GGML_E8M0_TO_FP32_HALF).
inline float E8M0HalfToF32(uint8_t e) {
  const uint32_t bits = e < 2 ? uint32_t{0x00200000} << e : (uint32_t{e} - 1) << 23;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// Elements per K-quant super-block (ggml's QK_K).
inline constexpr int kQK_K = 256;

struct BlockQ2_K {
  uint8_t scales[16];  // low nibble: scale, high nibble: min, per 16 elements
  uint8_t qs[64];      // 2-bit quants
  uint16_t d;          // f16, for the scales
  uint16_t dmin;       // f16, for the mins
};
struct BlockQ3_K {
  uint8_t hmask[32];   // high bit of each quant (set: no -4 offset)
  uint8_t qs[64];      // low 2 bits of each quant
  uint8_t scales[12];  // sixteen 6-bit scales (Q3KScale)
  uint16_t d;          // f16
};
struct BlockQ4_K {
  uint16_t d;          // f16, for the scales
  uint16_t dmin;       // f16, for the mins
  uint8_t scales[12];  // eight 6-bit scales and mins (KScaleMin)
  uint8_t qs[128];     // 4-bit quants
};
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[32];  // fifth bit of each quant
  uint8_t qs[128];
};
struct BlockQ6_K {
  uint8_t ql[128];    // low 4 bits of each quant
  uint8_t qh[64];     // high 2 bits
  int8_t scales[16];  // per 16 elements
  uint16_t d;         // f16
};
struct BlockQ8_K {
  float d;
  int8_t qs[256];
  int16_t bsums[16];  // sum of each group of 16 qs
};
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110 && sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210 && sizeof(BlockQ8_K) == 292);

// Scale and min of 32-element group g (0..7) of a Q4_K / Q5_K block, from the 12 packed bytes:
// bytes 0-3 hold scales 0-3 (low 6 bits) and the top 2 bits of scales 4-7, bytes 4-7 the same
// for mins, bytes 8-11 the low 4 bits of scale 4-7 (low nibble) and min 4-7 (high nibble).
// ggml's get_scale_min_k4.
inline void KScaleMin(const uint8_t* scales, int g, uint8_t* scale, uint8_t* min) {
  if (g < 4) {
    *scale = scales[g] & 63;
    *min = scales[g + 4] & 63;
  } else {
    *scale = static_cast<uint8_t>((scales[g + 4] & 0xF) | ((scales[g - 4] >> 6) << 4));
    *min = static_cast<uint8_t>((scales[g + 4] >> 4) | ((scales[g] >> 6) << 4));
  }
}

// Signed scale of 16-element group i (0..15) of a Q3_K block, in [-32, 31]: low 4 bits from
// byte i % 8 (low nibble for i < 8, else high), high 2 bits from byte 8 + i % 4, at bit 2 (i / 4).
inline int Q3KScale(const uint8_t* scales, int i) {
  const int low = (scales[i % 8] >> (i < 8 ? 0 : 4)) & 0xF;
  const int high = (scales[8 + i % 4] >> (2 * (i / 4))) & 3;
  return (low | (high << 4)) - 32;
}

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
