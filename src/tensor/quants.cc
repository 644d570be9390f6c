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

// ggml's GROUP_MAX_EPS: a group whose largest |x| is below this quantizes to zeros.
constexpr float kGroupMaxEps = 1e-15f;

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

// ggml's make_qkx2_quants: the scale and (negated) min of `n` values x with weights w, quants
// in [0, nmax] into L. Starts from min(x, 0) .. max(x) and tries nstep + 1 other scales
// (rmin + rdelta * is + nmax) / (max - min), each refit by weighted least squares, keeping the
// one with the smallest weighted squared error. *the_min receives -min.
float MakeQkx2Quants(int n, int nmax, const float* x, const float* w, uint8_t* L, float* the_min,
                     uint8_t* Laux, float rmin, float rdelta, int nstep) {
  float min = x[0];
  float max = x[0];
  float sum_w = w[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    sum_w += w[i];
    const float wx = w[i] * x[i];
    sum_x += wx;
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *the_min = -min;
    return 0.0f;
  }
  const float fmax = static_cast<float>(nmax);
  float iscale = fmax / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = NearestInt(iscale * (x[i] - min));
    L[i] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    const float scaled = scale * static_cast<float>(L[i]);
    const float shifted = scaled + min;
    const float diff = shifted - x[i];
    const float sq = diff * diff;
    const float err = w[i] * sq;
    best_error += err;
  }
  for (int is = 0; is <= nstep; ++is) {
    const float step = rdelta * static_cast<float>(is);
    const float r = rmin + step;
    iscale = (r + fmax) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::max(0, std::min(nmax, NearestInt(iscale * (x[i] - min))));
      Laux[i] = static_cast<uint8_t>(l);
      const float fl = static_cast<float>(l);
      const float wl = w[i] * fl;
      sum_l += wl;
      const float wll = wl * fl;
      sum_l2 += wll;
      const float wlx = wl * x[i];
      sum_xl += wlx;
    }
    const float p1 = sum_w * sum_l2;
    const float p2 = sum_l * sum_l;
    const float D = p1 - p2;
    if (D > 0) {
      const float a1 = sum_w * sum_xl;
      const float a2 = sum_x * sum_l;
      float this_scale = (a1 - a2) / D;
      const float b1 = sum_l2 * sum_x;
      const float b2 = sum_l * sum_xl;
      float this_min = (b1 - b2) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        const float scaled = this_scale * static_cast<float>(Laux[i]);
        const float shifted = scaled + this_min;
        const float diff = shifted - x[i];
        const float sq = diff * diff;
        const float err = w[i] * sq;
        cur_error += err;
      }
      if (cur_error < best_error) {
        for (int i = 0; i < n; ++i) L[i] = Laux[i];
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

// ggml's make_qx_quants with rmse_type 1 (weights x^2) and no importance weights: a signed
// scale for `n` values, quants in [-nmax, nmax) stored + nmax into L. Tries 18 scales around
// -nmax / max and keeps the best weighted least-squares fit.
float MakeQxQuants(int n, int nmax, const float* x, int8_t* L) {
  float max = 0;
  float amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.0f;
  }
  float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0;
  float suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = std::max(-nmax, std::min(nmax - 1, NearestInt(iscale * x[i])));
    L[i] = static_cast<int8_t>(l + nmax);
    const float fl = static_cast<float>(l);
    const float w = x[i] * x[i];
    const float wx = w * x[i];
    const float wxl = wx * fl;
    sumlx += wxl;
    const float wl = w * fl;
    const float wll = wl * fl;
    suml2 += wll;
  }
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    const float step = 0.1f * static_cast<float>(is);
    const float num = static_cast<float>(nmax) + step;
    iscale = -num / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::max(-nmax, std::min(nmax - 1, NearestInt(iscale * x[i])));
      const float fl = static_cast<float>(l);
      const float w = x[i] * x[i];
      const float wx = w * x[i];
      const float wxl = wx * fl;
      sumlx += wxl;
      const float wl = w * fl;
      const float wll = wl * fl;
      suml2 += wll;
    }
    const float lhs = sumlx * sumlx;
    const float rhs = best * suml2;
    if (suml2 > 0 && lhs > rhs) {
      for (int i = 0; i < n; ++i) {
        const int l = std::max(-nmax, std::min(nmax - 1, NearestInt(iscale * x[i])));
        L[i] = static_cast<int8_t>(nmax + l);
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Packs eight 6-bit (scale, min) pairs as KScaleMin reads them.
void PackKScales(const uint8_t* ls, const uint8_t* lm, uint8_t* scales) {
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      scales[j] = ls[j];
      scales[j + 4] = lm[j];
    } else {
      scales[j + 4] = static_cast<uint8_t>((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
      scales[j - 4] |= static_cast<uint8_t>((ls[j] >> 4) << 6);
      scales[j] |= static_cast<uint8_t>((lm[j] >> 4) << 6);
    }
  }
}

// The common part of the Q4_K and Q5_K reference quantizers: fits the eight sub-blocks of one
// super-block x[0, 256), writes d, dmin and scales, and returns the final quants (in [0, nmax])
// in L.
void QuantizeKScaleMin(const float* x, int nmax, float rmin, int nstep, uint16_t* d_out,
                       uint16_t* dmin_out, uint8_t* scales_out, uint8_t* L) {
  uint8_t Laux[32];
  float weights[32];
  float mins[8];
  float scales[8];
  float max_scale = 0;
  float max_min = 0;
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) {
      const float sq = xs[l] * xs[l];
      sum_x2 += sq;
    }
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(xs[l]);
    scales[j] =
        MakeQkx2Quants(32, nmax, xs, weights, L + 32 * j, &mins[j], Laux, rmin, 0.1f, nstep);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  uint8_t ls[8], lm[8];
  for (int j = 0; j < 8; ++j) {
    ls[j] = std::min<uint8_t>(63, static_cast<uint8_t>(NearestInt(inv_scale * scales[j])));
    lm[j] = std::min<uint8_t>(63, static_cast<uint8_t>(NearestInt(inv_min * mins[j])));
  }
  PackKScales(ls, lm, scales_out);
  *d_out = F32ToF16(max_scale / 63.0f);
  *dmin_out = F32ToF16(max_min / 63.0f);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    KScaleMin(scales_out, j, &sc, &m);
    const float d = F16ToF32(*d_out) * static_cast<float>(sc);
    if (d == 0.0f) continue;
    const float dm = F16ToF32(*dmin_out) * static_cast<float>(m);
    for (int ii = 0; ii < 32; ++ii) {
      const float shifted = x[32 * j + ii] + dm;
      const int l = NearestInt(shifted / d);
      L[32 * j + ii] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    }
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

void DequantizeMXFP4(const BlockMXFP4* blocks, int64_t num_blocks, float* dst) {
  for (int64_t b = 0; b < num_blocks; ++b, dst += 32) {
    const float d = E8M0HalfToF32(blocks[b].e);
    for (int j = 0; j < 16; ++j) {
      dst[j] = d * static_cast<float>(kMxfp4Values[blocks[b].qs[j] & 0xF]);
      dst[j + 16] = d * static_cast<float>(kMxfp4Values[blocks[b].qs[j] >> 4]);
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

void QuantizeQ5_0(const float* x, int64_t num_blocks, BlockQ5_0* dst) {
  for (int64_t b = 0; b < num_blocks; ++b, x += 32) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; ++j) {
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -16;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    dst[b].d = F32ToF16(d);
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
      const float x0 = x[j] * id;
      const float x1 = x[j + 16] * id;
      const int q0 = std::min(31, static_cast<int>(static_cast<int8_t>(x0 + 16.5f)));
      const int q1 = std::min(31, static_cast<int>(static_cast<int8_t>(x1 + 16.5f)));
      const uint8_t xi0 = static_cast<uint8_t>(q0);
      const uint8_t xi1 = static_cast<uint8_t>(q1);
      dst[b].qs[j] = static_cast<uint8_t>((xi0 & 0x0F) | ((xi1 & 0x0F) << 4));
      qh |= static_cast<uint32_t>((xi0 & 0x10u) >> 4) << j;
      qh |= static_cast<uint32_t>((xi1 & 0x10u) >> 4) << (j + 16);
    }
    for (int k = 0; k < 4; ++k) dst[b].qh[k] = static_cast<uint8_t>(qh >> (8 * k));
  }
}

void QuantizeQ5_1(const float* x, int64_t num_blocks, BlockQ5_1* dst) {
  for (int64_t b = 0; b < num_blocks; ++b, x += 32) {
    float min = x[0], max = x[0];
    for (int j = 1; j < 32; ++j) {
      if (x[j] < min) min = x[j];
      if (x[j] > max) max = x[j];
    }
    const float d = (max - min) / 31;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    dst[b].d = F32ToF16(d);
    dst[b].m = F32ToF16(min);
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
      const float x0 = (x[j] - min) * id;
      const float x1 = (x[j + 16] - min) * id;
      const uint8_t xi0 = static_cast<uint8_t>(x0 + 0.5f);
      const uint8_t xi1 = static_cast<uint8_t>(x1 + 0.5f);
      dst[b].qs[j] = static_cast<uint8_t>((xi0 & 0x0F) | ((xi1 & 0x0F) << 4));
      qh |= static_cast<uint32_t>((xi0 & 0x10u) >> 4) << j;
      qh |= static_cast<uint32_t>((xi1 & 0x10u) >> 4) << (j + 16);
    }
    for (int k = 0; k < 4; ++k) dst[b].qh[k] = static_cast<uint8_t>(qh >> (8 * k));
  }
}

void QuantizeQ4_K(const float* x, int64_t num_blocks, BlockQ4_K* dst) {
  uint8_t L[kQK_K];
  for (int64_t b = 0; b < num_blocks; ++b, x += kQK_K) {
    BlockQ4_K& y = dst[b];
    std::memset(&y, 0, sizeof(y));
    QuantizeKScaleMin(x, 15, -1.0f, 20, &y.d, &y.dmin, y.scales, L);
    uint8_t* q = y.qs;
    for (int j = 0; j < kQK_K; j += 64, q += 32) {
      for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
    }
  }
}

void QuantizeQ5_K(const float* x, int64_t num_blocks, BlockQ5_K* dst) {
  uint8_t L[kQK_K];
  for (int64_t b = 0; b < num_blocks; ++b, x += kQK_K) {
    BlockQ5_K& y = dst[b];
    std::memset(&y, 0, sizeof(y));
    QuantizeKScaleMin(x, 31, -0.5f, 15, &y.d, &y.dmin, y.scales, L);
    uint8_t* ql = y.qs;
    uint8_t m1 = 1, m2 = 2;
    for (int n = 0; n < kQK_K; n += 64, ql += 32) {
      for (int j = 0; j < 32; ++j) {
        int l1 = L[n + j];
        if (l1 > 15) {
          l1 -= 16;
          y.qh[j] |= m1;
        }
        int l2 = L[n + j + 32];
        if (l2 > 15) {
          l2 -= 16;
          y.qh[j] |= m2;
        }
        ql[j] = static_cast<uint8_t>(l1 | (l2 << 4));
      }
      m1 = static_cast<uint8_t>(m1 << 2);
      m2 = static_cast<uint8_t>(m2 << 2);
    }
  }
}

void QuantizeQ6_K(const float* x, int64_t num_blocks, BlockQ6_K* dst) {
  int8_t L[kQK_K];
  float scales[kQK_K / 16];
  for (int64_t b = 0; b < num_blocks; ++b, x += kQK_K) {
    BlockQ6_K& y = dst[b];
    float max_scale = 0;
    float max_abs_scale = 0;
    for (int ib = 0; ib < kQK_K / 16; ++ib) {
      scales[ib] = MakeQxQuants(16, 32, x + 16 * ib, L + 16 * ib);
      const float abs_scale = std::fabs(scales[ib]);
      if (abs_scale > max_abs_scale) {
        max_abs_scale = abs_scale;
        max_scale = scales[ib];
      }
    }
    std::memset(&y, 0, sizeof(y));
    if (max_abs_scale < kGroupMaxEps) {
      y.d = F32ToF16(0.0f);
      continue;
    }
    const float iscale = -128.0f / max_scale;
    y.d = F32ToF16(1 / iscale);
    for (int ib = 0; ib < kQK_K / 16; ++ib) {
      y.scales[ib] = static_cast<int8_t>(std::min(127, NearestInt(iscale * scales[ib])));
    }
    for (int j = 0; j < kQK_K / 16; ++j) {
      const float d = F16ToF32(y.d) * static_cast<float>(y.scales[j]);
      if (d == 0.0f) continue;
      for (int ii = 0; ii < 16; ++ii) {
        const int l = std::max(-32, std::min(31, NearestInt(x[16 * j + ii] / d)));
        L[16 * j + ii] = static_cast<int8_t>(l + 32);
      }
    }
    uint8_t* ql = y.ql;
    uint8_t* qh = y.qh;
    for (int j = 0; j < kQK_K; j += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; ++l) {
        const int q1 = L[j + l] & 0xF;
        const int q2 = L[j + l + 32] & 0xF;
        const int q3 = L[j + l + 64] & 0xF;
        const int q4 = L[j + l + 96] & 0xF;
        ql[l] = static_cast<uint8_t>(q1 | (q3 << 4));
        ql[l + 32] = static_cast<uint8_t>(q2 | (q4 << 4));
        qh[l] = static_cast<uint8_t>((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
                                     ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
      }
    }
  }
}

}  // namespace uc
