#include "kernels/reference.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <numbers>
#include <string>
#include <vector>

#include "base/check.h"
#include "tensor/quants.h"

namespace uc::kernels::reference {
namespace {

std::vector<float> Row(const Tensor& t, int64_t r) {
  std::vector<float> out(static_cast<size_t>(t.dim(-1)));
  DequantizeRow(t.dtype(), t.row(r), out.data(), t.dim(-1));
  return out;
}

template <typename Block>
const Block& As(const std::byte* p) {
  return *reinterpret_cast<const Block*>(p);
}

int Nibble(const uint8_t* qs, int e) { return e < 16 ? qs[e] & 0xF : qs[e - 16] >> 4; }

int FifthBit(const uint8_t* qh, int e) { return (qh[e / 8] >> (e % 8)) & 1; }

// The integer value of element e of weight block `block` (what the scales multiply).
int QuantAt(DType dtype, const std::byte* block, int e) {
  const int g = e / 32, l = e % 32;
  switch (dtype) {
    case DType::kQ8_0:
      return As<BlockQ8_0>(block).qs[e];
    case DType::kQ4_0:
      return Nibble(As<BlockQ4_0>(block).qs, e) - 8;
    case DType::kQ4_1:
      return Nibble(As<BlockQ4_1>(block).qs, e);
    case DType::kQ5_0:
      return (Nibble(As<BlockQ5_0>(block).qs, e) | FifthBit(As<BlockQ5_0>(block).qh, e) << 4) - 16;
    case DType::kQ5_1:
      return Nibble(As<BlockQ5_1>(block).qs, e) | FifthBit(As<BlockQ5_1>(block).qh, e) << 4;
    case DType::kIQ4_NL:
      return kIq4NlValues[Nibble(As<BlockIQ4_NL>(block).qs, e)];
    case DType::kMXFP4:
      return kMxfp4Values[Nibble(As<BlockMXFP4>(block).qs, e)];
    case DType::kQ2_K:
      return (As<BlockQ2_K>(block).qs[32 * (g / 4) + l] >> (2 * (g % 4))) & 3;
    case DType::kQ3_K: {
      const BlockQ3_K& x = As<BlockQ3_K>(block);
      const int low = (x.qs[32 * (g / 4) + l] >> (2 * (g % 4))) & 3;
      return (x.hmask[l] >> g) & 1 ? low : low - 4;
    }
    case DType::kQ4_K:
      return (As<BlockQ4_K>(block).qs[32 * (g / 2) + l] >> (4 * (g % 2))) & 0xF;
    case DType::kQ5_K: {
      const BlockQ5_K& x = As<BlockQ5_K>(block);
      return ((x.qs[32 * (g / 2) + l] >> (4 * (g % 2))) & 0xF) | ((x.qh[l] >> g) & 1) << 4;
    }
    case DType::kQ6_K: {
      const BlockQ6_K& x = As<BlockQ6_K>(block);
      const int h = e / 128, r = (e % 128) / 32;
      const int low = (x.ql[64 * h + 32 * (r % 2) + l] >> (4 * (r / 2))) & 0xF;
      return (low | ((x.qh[32 * h + l] >> (2 * r)) & 3) << 4) - 32;
    }
    case DType::kQ8_K: {
      int8_t q;
      std::memcpy(&q, block + offsetof(BlockQ8_K, qs) + e, 1);
      return q;
    }
    default:
      UC_CHECK(false, "reference::MatMulInt8: %s is not quantized", DTypeName(dtype).data());
  }
  return 0;
}

// K-quants: the integer scale and min of the sub-block holding element e.
void SubBlockScaleMin(DType dtype, const std::byte* block, int e, int* scale, int* min) {
  *min = 0;
  uint8_t sc = 0, mn = 0;
  switch (dtype) {
    case DType::kQ2_K:
      *scale = As<BlockQ2_K>(block).scales[e / 16] & 0xF;
      *min = As<BlockQ2_K>(block).scales[e / 16] >> 4;
      return;
    case DType::kQ3_K:
      *scale = Q3KScale(As<BlockQ3_K>(block).scales, e / 16);
      return;
    case DType::kQ4_K:
    case DType::kQ5_K:  // same scales field
      KScaleMin(dtype == DType::kQ4_K ? As<BlockQ4_K>(block).scales : As<BlockQ5_K>(block).scales,
                e / 32, &sc, &mn);
      *scale = sc;
      *min = mn;
      return;
    case DType::kQ6_K:
      *scale = As<BlockQ6_K>(block).scales[e / 16];
      return;
    default:  // Q8_K
      *scale = 1;
  }
}

// The F32 weight scale and, where there is one, min / dmin of a block.
void BlockScales(DType dtype, const std::byte* block, float* d, float* m) {
  *m = 0.0f;
  switch (dtype) {
    case DType::kQ4_1:
      *m = F16ToF32(As<BlockQ4_1>(block).m);
      break;
    case DType::kQ5_1:
      *m = F16ToF32(As<BlockQ5_1>(block).m);
      break;
    case DType::kQ2_K:
      *d = F16ToF32(As<BlockQ2_K>(block).d);
      *m = F16ToF32(As<BlockQ2_K>(block).dmin);
      return;
    case DType::kQ3_K:
      *d = F16ToF32(As<BlockQ3_K>(block).d);
      return;
    case DType::kQ4_K:
      *d = F16ToF32(As<BlockQ4_K>(block).d);
      *m = F16ToF32(As<BlockQ4_K>(block).dmin);
      return;
    case DType::kQ5_K:
      *d = F16ToF32(As<BlockQ5_K>(block).d);
      *m = F16ToF32(As<BlockQ5_K>(block).dmin);
      return;
    case DType::kQ6_K:
      *d = F16ToF32(As<BlockQ6_K>(block).d);
      return;
    case DType::kQ8_K:
      std::memcpy(d, block + offsetof(BlockQ8_K, d), sizeof(float));
      return;
    case DType::kMXFP4:
      *d = E8M0HalfToF32(As<BlockMXFP4>(block).e);
      return;
    default:
      break;
  }
  uint16_t half;  // the other 32-element types all start with their f16 d
  std::memcpy(&half, block, sizeof(half));
  *d = F16ToF32(half);
}

// The F32 term of one weight block against one activation block (see reference.h).
float Int8Term(DType dtype, const std::byte* wb, const std::byte* xb) {
  float d, m;
  BlockScales(dtype, wb, &d, &m);
  if (DTypeBlockSize(dtype) == 32) {
    const bool q8_1 = dtype == DType::kQ4_1 || dtype == DType::kQ5_1;
    const int8_t* qx = q8_1 ? As<BlockQ8_1>(xb).qs : As<BlockQ8_0>(xb).qs;
    int32_t sumi = 0;
    for (int e = 0; e < 32; ++e) sumi += QuantAt(dtype, wb, e) * qx[e];
    const float dx = F16ToF32(q8_1 ? As<BlockQ8_1>(xb).d : As<BlockQ8_0>(xb).d);
    const float term = (d * dx) * static_cast<float>(sumi);
    if (!q8_1) return term;
    return term + m * F16ToF32(As<BlockQ8_1>(xb).s);
  }
  const BlockQ8_K& y = As<BlockQ8_K>(xb);
  int32_t sumi = 0, summin = 0;
  for (int i = 0; i < 16; ++i) {
    int scale, min;
    SubBlockScaleMin(dtype, wb, 16 * i, &scale, &min);
    int32_t sub = 0;
    for (int e = 16 * i; e < 16 * i + 16; ++e) sub += QuantAt(dtype, wb, e) * y.qs[e];
    sumi += scale * sub;
    summin += min * y.bsums[i];
  }
  const float term = (y.d * d) * static_cast<float>(sumi);
  const bool has_min = dtype == DType::kQ2_K || dtype == DType::kQ4_K || dtype == DType::kQ5_K;
  return has_min ? term - (y.d * m) * static_cast<float>(summin) : term;
}

}  // namespace

void MatMulBf16(const Tensor& x, const Tensor& w, Tensor& y) {
  const int64_t m = x.dim(0), k = x.dim(1), n = w.dim(0);
  UC_CHECK(w.dim(1) == k && y.dim(0) == m && y.dim(1) == n && w.dtype() == DType::kBF16,
           "reference::MatMulBf16: bad shapes or dtype");
  for (int64_t i = 0; i < m; ++i) {
    const float* xi = x.data<float>() + i * k;
    for (int64_t j = 0; j < n; ++j) {
      const auto* wj = reinterpret_cast<const uint16_t*>(w.row(j));
      // Element c's exact product, 0 past k. (Computed in place: GCC 12's loop vectorizer
      // miscompiled this loop reading from vectors filled with the rounded rows.)
      auto product = [&](int64_t c) {
        return c < k ? Bf16ToF32(F32ToBf16(xi[c])) * Bf16ToF32(wj[c]) : 0.0f;
      };
      float acc = 0.0f;
      for (int64_t p = 0; p < (k + 1) / 2; ++p) {
        const float odd = product(2 * p + 1);
        const float even = product(2 * p);
        acc = (acc + odd) + even;
      }
      y.data<float>()[i * n + j] = acc;
    }
  }
}

namespace {

// Group g of a row of `dtype`: codes q[0, size), dl and nml as MatMulExactGrouped defines them.
// Returns the group size.
int ExactGroup(DType dtype, const std::byte* row, int64_t g, float* q, float* dl, float* nml) {
  switch (dtype) {
    case DType::kQ8_0: {
      const auto* b = reinterpret_cast<const BlockQ8_0*>(row) + g;
      for (int l = 0; l < 32; ++l) q[l] = static_cast<float>(b->qs[l]);
      *dl = F16ToF32(b->d);
      *nml = 0.0f;
      return 32;
    }
    case DType::kQ4_0:
    case DType::kQ4_1: {
      const bool q4_1 = dtype == DType::kQ4_1;
      const uint8_t* qs;
      if (q4_1) {
        const auto* b = reinterpret_cast<const BlockQ4_1*>(row) + g;
        qs = b->qs;
        *dl = F16ToF32(b->d);
        *nml = F16ToF32(b->m);
      } else {
        const auto* b = reinterpret_cast<const BlockQ4_0*>(row) + g;
        qs = b->qs;
        *dl = F16ToF32(b->d);
        *nml = *dl * -8.0f;
      }
      for (int l = 0; l < 16; ++l) {
        q[l] = static_cast<float>(qs[l] & 15);
        q[l + 16] = static_cast<float>(qs[l] >> 4);
      }
      return 32;
    }
    case DType::kQ5_0:
    case DType::kQ5_1: {
      const uint8_t *qs, *qh;
      if (dtype == DType::kQ5_1) {
        const auto* b = reinterpret_cast<const BlockQ5_1*>(row) + g;
        qs = b->qs, qh = b->qh;
        *dl = F16ToF32(b->d);
        *nml = F16ToF32(b->m);
      } else {
        const auto* b = reinterpret_cast<const BlockQ5_0*>(row) + g;
        qs = b->qs, qh = b->qh;
        *dl = F16ToF32(b->d);
        *nml = *dl * -16.0f;
      }
      for (int l = 0; l < 32; ++l) {
        const int low = l < 16 ? qs[l] & 15 : qs[l - 16] >> 4;
        q[l] = static_cast<float>(low | (((qh[l / 8] >> (l % 8)) & 1) << 4));
      }
      return 32;
    }
    case DType::kQ4_K:
    case DType::kQ5_K: {
      const int64_t sb = g / 8;
      const int gi = static_cast<int>(g % 8);
      const uint8_t *scales, *qs, *qh = nullptr;
      uint16_t d, dmin;
      if (dtype == DType::kQ5_K) {
        const auto* b = reinterpret_cast<const BlockQ5_K*>(row) + sb;
        scales = b->scales, qs = b->qs, qh = b->qh, d = b->d, dmin = b->dmin;
      } else {
        const auto* b = reinterpret_cast<const BlockQ4_K*>(row) + sb;
        scales = b->scales, qs = b->qs, d = b->d, dmin = b->dmin;
      }
      uint8_t scale, min;
      KScaleMin(scales, gi, &scale, &min);
      for (int l = 0; l < 32; ++l) {
        int code = (qs[32 * (gi / 2) + l] >> (4 * (gi % 2))) & 15;
        if (qh != nullptr) code |= ((qh[l] >> gi) & 1) << 4;
        q[l] = static_cast<float>(code);
      }
      *dl = F16ToF32(d) * static_cast<float>(scale);
      *nml = (0.0f - F16ToF32(dmin)) * static_cast<float>(min);
      return 32;
    }
    case DType::kQ6_K: {
      const auto* b = reinterpret_cast<const BlockQ6_K*>(row) + g / 16;
      const int i = static_cast<int>(g % 16);
      for (int j = 0; j < 16; ++j) {
        const int e = 16 * i + j;
        const int h = e / 128, r = (e % 128) / 32, l = e % 32;
        const int code = ((b->ql[64 * h + 32 * (r % 2) + l] >> (4 * (r / 2))) & 15) |
                         (((b->qh[32 * h + l] >> (2 * r)) & 3) << 4);
        q[j] = static_cast<float>(code);
      }
      *dl = F16ToF32(b->d) * static_cast<float>(b->scales[i]);
      *nml = *dl * -32.0f;
      return 16;
    }
    case DType::kMXFP4: {
      const auto* b = reinterpret_cast<const BlockMXFP4*>(row) + g;
      for (int l = 0; l < 16; ++l) {
        q[l] = static_cast<float>(kMxfp4Values[b->qs[l] & 15] + 12);
        q[l + 16] = static_cast<float>(kMxfp4Values[b->qs[l] >> 4] + 12);
      }
      *dl = E8M0HalfToF32(b->e);
      *nml = *dl * -12.0f;
      return 32;
    }
    default:
      UC_CHECK(false, "reference::MatMulExactGrouped: no grouped form for %s",
               std::string(DTypeName(dtype)).c_str());
      return 0;
  }
}

}  // namespace

bool HasExactGrouped(DType dtype) {
  switch (dtype) {
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kMXFP4:
      return true;
    default:
      return false;
  }
}

void MatMulExactGrouped(const Tensor& x, const Tensor& w, Tensor& y) {
  const int64_t m = x.dim(0), k = x.dim(1), n = w.dim(0);
  UC_CHECK(w.dim(1) == k && y.dim(0) == m && y.dim(1) == n && HasExactGrouped(w.dtype()),
           "reference::MatMulExactGrouped: bad shapes or dtype");
  const int group = w.dtype() == DType::kQ6_K ? 16 : 32;
  std::vector<float> q(32);
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = 0; i < m; ++i) {
      const float* xi = x.data<float>() + i * k;
      float acc = 0.0f;
      for (int64_t g = 0; g < k / group; ++g) {
        float dl = 0.0f, nml = 0.0f;
        ExactGroup(w.dtype(), w.row(j), g, q.data(), &dl, &nml);
        float p = 0.0f, s = 0.0f;
        for (int l = 0; l < group; ++l) {
          p = std::fma(xi[g * group + l], q[l], p);
          s += xi[g * group + l];
        }
        acc = std::fma(dl, p, acc);
        acc = std::fma(nml, s, acc);
      }
      y.data<float>()[i * n + j] = acc;
    }
  }
}

void MatMulInt8(const Tensor& x, const Tensor& w, Tensor& y) {
  const int64_t m = x.dim(0), k = x.dim(1), n = w.dim(0);
  UC_CHECK(w.dim(1) == k && y.dim(0) == m && y.dim(1) == n && DTypeIsQuantized(w.dtype()),
           "reference::MatMulInt8: bad shapes or dtype");
  const DType dtype = w.dtype();
  const bool super_blocks = DTypeBlockSize(dtype) == kQK_K;
  const bool q8_1 = dtype == DType::kQ4_1 || dtype == DType::kQ5_1;
  const int64_t blocks = k / DTypeBlockSize(dtype);
  const size_t x_block_bytes = super_blocks ? sizeof(BlockQ8_K)
                               : q8_1       ? sizeof(BlockQ8_1)
                                            : sizeof(BlockQ8_0);
  std::vector<BlockQ8_K> storage(static_cast<size_t>(blocks) * x_block_bytes / sizeof(BlockQ8_K) +
                                 1);  // aligned for the float in BlockQ8_K
  auto* xq = reinterpret_cast<std::byte*>(storage.data());
  for (int64_t i = 0; i < m; ++i) {
    const float* row = x.data<float>() + i * k;
    if (super_blocks) {
      QuantizeActivationsQ8_K(row, blocks, reinterpret_cast<BlockQ8_K*>(xq));
    } else if (q8_1) {
      QuantizeActivationsQ8_1(row, blocks, reinterpret_cast<BlockQ8_1*>(xq));
    } else {
      QuantizeActivationsQ8_0(row, blocks, reinterpret_cast<BlockQ8_0*>(xq));
    }
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (int64_t b = 0; b < blocks; ++b) {
        acc = acc + Int8Term(dtype, w.row(j) + b * DTypeBlockBytes(dtype),
                             xq + static_cast<size_t>(b) * x_block_bytes);
      }
      y.data<float>()[i * n + j] = acc;
    }
  }
}

void MatMul(const Tensor& x, const Tensor& w, Tensor& y) {
  const int64_t m = x.dim(0), k = x.dim(1), n = w.dim(0);
  UC_CHECK(w.dim(1) == k && y.dim(0) == m && y.dim(1) == n, "reference::MatMul: bad shapes");
  const float* xs = x.data<float>();
  for (int64_t j = 0; j < n; ++j) {
    const std::vector<float> wj = Row(w, j);
    for (int64_t i = 0; i < m; ++i) {
      double sum = 0.0;
      for (int64_t l = 0; l < k; ++l) sum += double{xs[i * k + l]} * wj[l];
      y.data<float>()[i * n + j] = static_cast<float>(sum);
    }
  }
}

void AddBias(const Tensor& bias, Tensor& y) {
  const std::vector<float> b = bias.ToFloatVector();
  const int64_t n = y.dim(1);
  for (int64_t i = 0; i < y.numel(); ++i) y.data<float>()[i] += b[i % n];
}

void AddInPlace(const Tensor& x, Tensor& y) {
  for (int64_t i = 0; i < y.numel(); ++i) y.data<float>()[i] += x.data<float>()[i];
}

void RmsNorm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) {
  const int64_t m = x.dim(0), h = x.dim(1);
  const std::vector<float> w = weight.ToFloatVector();
  for (int64_t i = 0; i < m; ++i) {
    const float* row = x.data<float>() + i * h;
    double ss = 0.0;
    for (int64_t j = 0; j < h; ++j) ss += double{row[j]} * row[j];
    const double scale = 1.0 / std::sqrt(ss / static_cast<double>(h) + eps);
    for (int64_t j = 0; j < h; ++j) {
      out.data<float>()[i * h + j] = static_cast<float>(row[j] * scale * w[j]);
    }
  }
}

void LayerNorm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& out) {
  const int64_t m = x.dim(0), h = x.dim(1);
  const std::vector<float> w = weight.ToFloatVector();
  const std::vector<float> b = bias.ToFloatVector();
  for (int64_t i = 0; i < m; ++i) {
    const float* row = x.data<float>() + i * h;
    double mean = 0.0, var = 0.0;
    for (int64_t j = 0; j < h; ++j) mean += row[j];
    mean /= static_cast<double>(h);
    for (int64_t j = 0; j < h; ++j) var += (row[j] - mean) * (row[j] - mean);
    const double scale = 1.0 / std::sqrt(var / static_cast<double>(h) + eps);
    for (int64_t j = 0; j < h; ++j) {
      out.data<float>()[i * h + j] = static_cast<float>((row[j] - mean) * scale * w[j] + b[j]);
    }
  }
}

void GeluTanh(Tensor& x) {
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double z = x.data<float>()[i];
    x.data<float>()[i] = static_cast<float>(
        0.5 * z *
        (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (z + 0.044715 * z * z * z))));
  }
}

void Gelu(Tensor& x) {
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double z = x.data<float>()[i];
    x.data<float>()[i] = static_cast<float>(0.5 * z * (1.0 + std::erf(z / std::sqrt(2.0))));
  }
}

void Rope(std::span<const int32_t> positions, std::span<const float> inv_freq, int num_heads,
          int head_dim, RopeStyle style, Tensor& x) {
  const int64_t half = static_cast<int64_t>(inv_freq.size());
  for (size_t i = 0; i < positions.size(); ++i) {
    for (int h = 0; h < num_heads; ++h) {
      float* head = x.data<float>() + (static_cast<int64_t>(i) * num_heads + h) * head_dim;
      for (int64_t j = 0; j < half; ++j) {
        const float angle = static_cast<float>(positions[i]) * inv_freq[j];
        const double c = std::cos(angle);  // float overloads: cosf, sinf
        const double s = std::sin(angle);
        float& a = style == RopeStyle::kInterleaved ? head[2 * j] : head[j];
        float& b = style == RopeStyle::kInterleaved ? head[2 * j + 1] : head[j + half];
        const double x0 = a, x1 = b;
        a = static_cast<float>(x0 * c - x1 * s);
        b = static_cast<float>(x0 * s + x1 * c);
      }
    }
  }
}

void SiluAndMul(const Tensor& gate, const Tensor& up, Tensor& out) {
  for (int64_t i = 0; i < out.numel(); ++i) {
    const double g = gate.data<float>()[i];
    out.data<float>()[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * up.data<float>()[i]);
  }
}

void GeluTanhAndMul(const Tensor& gate, const Tensor& up, Tensor& out) {
  for (int64_t i = 0; i < out.numel(); ++i) {
    const double g = gate.data<float>()[i];
    const double inner = std::sqrt(2.0 / std::numbers::pi) * (g + 0.044715 * g * g * g);
    out.data<float>()[i] =
        static_cast<float>(0.5 * g * (1.0 + std::tanh(inner)) * up.data<float>()[i]);
  }
}

void CausalAttention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                     std::span<const int32_t> positions, const AttentionShape& shape, Tensor& out) {
  const int hd = shape.head_dim;
  const int group = shape.num_heads / shape.num_kv_heads;
  const int64_t kv_stride = int64_t{shape.num_kv_heads} * hd;
  for (size_t i = 0; i < positions.size(); ++i) {
    for (int h = 0; h < shape.num_heads; ++h) {
      const int64_t q_offset = (static_cast<int64_t>(i) * shape.num_heads + h) * hd;
      const float* qh = q.data<float>() + q_offset;
      const int64_t kv_offset = int64_t{h / group} * hd;
      // Scores of positions first..positions[i]; masked positions take no part.
      const int64_t first = shape.FirstPosition(positions[i]);
      std::vector<double> scores(static_cast<size_t>(positions[i] - first) + 1);
      for (size_t t = 0; t < scores.size(); ++t) {
        const float* key = k_cache.data<float>() + (first + t) * kv_stride + kv_offset;
        double dot = 0.0;
        for (int d = 0; d < hd; ++d) dot += double{qh[d]} * key[d];
        scores[t] = dot * shape.scale;
        if (shape.softcap > 0.0f) scores[t] = shape.softcap * std::tanh(scores[t] / shape.softcap);
      }
      double max_score = *std::max_element(scores.begin(), scores.end());
      if (shape.sinks != nullptr) max_score = std::max(max_score, double{shape.sinks[h]});
      double sum = shape.sinks != nullptr ? std::exp(shape.sinks[h] - max_score) : 0.0;
      for (double& s : scores) sum += (s = std::exp(s - max_score));
      for (int d = 0; d < hd; ++d) {
        double acc = 0.0;
        for (size_t t = 0; t < scores.size(); ++t) {
          acc += scores[t] * v_cache.data<float>()[(first + t) * kv_stride + kv_offset + d];
        }
        out.data<float>()[q_offset + d] = static_cast<float>(acc / sum);
      }
    }
  }
}

void PagedAttention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                    const PagedKvLayout& layout, std::span<const int32_t> positions,
                    const AttentionShape& shape, Tensor& out) {
  const int64_t width = k_cache.dim(1);
  const int64_t q_width = q.dim(1);
  for (size_t i = 0; i < positions.size(); ++i) {
    const int64_t len = int64_t{positions[i]} + 1;
    Tensor k = Tensor::Empty({len, width}, DType::kF32);
    Tensor v = Tensor::Empty({len, width}, DType::kF32);
    const int32_t* table = layout.block_tables.data() + layout.token_seq[i] * layout.blocks_per_seq;
    for (int64_t t = 0; t < len; ++t) {
      const int64_t row =
          int64_t{table[t / layout.block_size]} * layout.block_size + t % layout.block_size;
      std::copy_n(k_cache.data<float>() + row * width, width, k.data<float>() + t * width);
      std::copy_n(v_cache.data<float>() + row * width, width, v.data<float>() + t * width);
    }
    Tensor qi = Tensor::Empty({1, q_width}, DType::kF32);
    std::copy_n(q.data<float>() + static_cast<int64_t>(i) * q_width, q_width, qi.data<float>());
    Tensor oi = Tensor::Empty({1, q_width}, DType::kF32);
    const int32_t pos[1] = {positions[i]};
    CausalAttention(qi, k, v, pos, shape, oi);
    std::copy_n(oi.data<float>(), q_width, out.data<float>() + static_cast<int64_t>(i) * q_width);
  }
}

void EmbeddingLookup(const Tensor& table, std::span<const int32_t> ids, Tensor& out) {
  const int64_t h = table.dim(1);
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::vector<float> row = Row(table, ids[i]);
    std::copy(row.begin(), row.end(), out.data<float>() + static_cast<int64_t>(i) * h);
  }
}

void Softmax(Tensor& x) {
  const int64_t n = x.dim(-1);
  for (int64_t r = 0; r < x.num_rows(); ++r) {
    float* row = x.data<float>() + r * n;
    const double max_value = *std::max_element(row, row + n);
    double sum = 0.0;
    for (int64_t j = 0; j < n; ++j) sum += std::exp(row[j] - max_value);
    for (int64_t j = 0; j < n; ++j) row[j] = static_cast<float>(std::exp(row[j] - max_value) / sum);
  }
}

}  // namespace uc::kernels::reference
