// Portable integer MatMul (MatMulPrecision::kInt8). Each weight row is unpacked once into the
// int8 value of every element plus its scales, then dotted with every quantized x row. Block
// sums are exact integers; each output adds its block terms in F32, one after the other in
// block order, with the operations reference::MatMulInt8 defines, so the result equals the
// reference (and the AVX2 kernel) bit for bit.
#include <algorithm>
#include <cstring>
#include <vector>

#include "base/check.h"
#include "kernels/cpu/cpu_kernels.h"
#include "tensor/quants.h"

namespace uc::kernels {

ActivationFormat Int8ActivationFormat(DType w_dtype) {
  switch (w_dtype) {
    case DType::kQ4_1:
    case DType::kQ5_1:
      return ActivationFormat::kQ8_1;
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kQ8_K:
      return ActivationFormat::kQ8_K;
    default:
      return ActivationFormat::kQ8_0;
  }
}

int64_t ActivationBlockSize(ActivationFormat format) {
  return format == ActivationFormat::kQ8_K ? kQK_K : 32;
}

int64_t ActivationRowBytes(ActivationFormat format, int64_t k) {
  switch (format) {
    case ActivationFormat::kQ8_0:
      return k / 32 * static_cast<int64_t>(sizeof(BlockQ8_0));
    case ActivationFormat::kQ8_1:
      return k / 32 * static_cast<int64_t>(sizeof(BlockQ8_1));
    case ActivationFormat::kQ8_K:
      return k / kQK_K * static_cast<int64_t>(sizeof(BlockQ8_K));
  }
  return 0;
}

namespace cpu {
namespace {

// One weight row, unpacked.
struct UnpackedRow {
  std::vector<int8_t> q;       // [k] the integer value of each element (Q4_0: nibble - 8, ...)
  std::vector<int16_t> scale;  // [k / 16] K-quants: the integer scale of each 16 elements
  std::vector<int16_t> min;    // [k / 16] Q2_K, Q4_K, Q5_K: the integer min of each 16 elements
  std::vector<float> d;        // [blocks] the F32 scale
  std::vector<float> m;        // [blocks] Q4_1, Q5_1: m; Q2_K, Q4_K, Q5_K: dmin
};

// q[0, 32) = the 32 nibbles of qs in element order (low nibbles first), plus `offset`.
void Nibbles(const uint8_t* qs, int offset, int8_t* q) {
  for (int l = 0; l < 16; ++l) {
    q[l] = static_cast<int8_t>((qs[l] & 0xF) + offset);
    q[l + 16] = static_cast<int8_t>((qs[l] >> 4) + offset);
  }
}

// Adds bit j of the little-endian uint32 at qh, as 16, to q[j].
void FifthBits(const uint8_t* qh, int8_t* q) {
  uint32_t bits;
  std::memcpy(&bits, qh, sizeof(bits));
  for (int j = 0; j < 32; ++j) q[j] = static_cast<int8_t>(q[j] + ((bits >> j) & 1) * 16);
}

template <typename Block>
const Block& BlockAt(const std::byte* row, int64_t b) {
  return reinterpret_cast<const Block*>(row)[b];
}

void Unpack32(DType dtype, const std::byte* row, int64_t b, UnpackedRow& u) {
  int8_t* q = u.q.data() + 32 * b;
  switch (dtype) {
    case DType::kQ8_0: {
      const auto& x = BlockAt<BlockQ8_0>(row, b);
      std::memcpy(q, x.qs, 32);
      u.d[b] = F16ToF32(x.d);
      break;
    }
    case DType::kQ4_0: {
      const auto& x = BlockAt<BlockQ4_0>(row, b);
      Nibbles(x.qs, -8, q);
      u.d[b] = F16ToF32(x.d);
      break;
    }
    case DType::kQ4_1: {
      const auto& x = BlockAt<BlockQ4_1>(row, b);
      Nibbles(x.qs, 0, q);
      u.d[b] = F16ToF32(x.d);
      u.m[b] = F16ToF32(x.m);
      break;
    }
    case DType::kQ5_0: {
      const auto& x = BlockAt<BlockQ5_0>(row, b);
      Nibbles(x.qs, -16, q);
      FifthBits(x.qh, q);
      u.d[b] = F16ToF32(x.d);
      break;
    }
    case DType::kQ5_1: {
      const auto& x = BlockAt<BlockQ5_1>(row, b);
      Nibbles(x.qs, 0, q);
      FifthBits(x.qh, q);
      u.d[b] = F16ToF32(x.d);
      u.m[b] = F16ToF32(x.m);
      break;
    }
    case DType::kIQ4_NL: {
      const auto& x = BlockAt<BlockIQ4_NL>(row, b);
      for (int l = 0; l < 16; ++l) {
        q[l] = kIq4NlValues[x.qs[l] & 0xF];
        q[l + 16] = kIq4NlValues[x.qs[l] >> 4];
      }
      u.d[b] = F16ToF32(x.d);
      break;
    }
    case DType::kMXFP4: {
      const auto& x = BlockAt<BlockMXFP4>(row, b);
      for (int l = 0; l < 16; ++l) {
        q[l] = kMxfp4Values[x.qs[l] & 0xF];
        q[l + 16] = kMxfp4Values[x.qs[l] >> 4];
      }
      u.d[b] = E8M0HalfToF32(x.e);
      break;
    }
    default:
      UC_CHECK(false, "MatMulInt8: %s is not a 32-element block type", DTypeName(dtype).data());
  }
}

// Q4_K and Q5_K (qh: the fifth bits, or null): one scale and min per 32 elements.
template <typename Block>
void UnpackKScaleMin(const Block& x, const uint8_t* qh, int8_t* q, int16_t* scale, int16_t* min,
                     float* d, float* dmin) {
  for (int e = 0; e < kQK_K; ++e) {
    const int g = e / 32, l = e % 32;
    int v = (x.qs[32 * (g / 2) + l] >> (4 * (g % 2))) & 0xF;
    if (qh != nullptr) v |= ((qh[l] >> g) & 1) << 4;
    q[e] = static_cast<int8_t>(v);
  }
  for (int g = 0; g < 8; ++g) {
    uint8_t sc, mn;
    KScaleMin(x.scales, g, &sc, &mn);
    scale[2 * g] = scale[2 * g + 1] = sc;
    min[2 * g] = min[2 * g + 1] = mn;
  }
  *d = F16ToF32(x.d);
  *dmin = F16ToF32(x.dmin);
}

// Element e = 32 g + l of a super-block, sub-block i = e / 16, as in dtype.h.
void UnpackK(DType dtype, const std::byte* row, int64_t b, UnpackedRow& u) {
  int8_t* q = u.q.data() + kQK_K * b;
  int16_t* scale = u.scale.data() + 16 * b;
  int16_t* min = u.min.data() + 16 * b;
  std::fill_n(min, 16, int16_t{0});
  switch (dtype) {
    case DType::kQ2_K: {
      const auto& x = BlockAt<BlockQ2_K>(row, b);
      for (int e = 0; e < kQK_K; ++e) {
        const int g = e / 32, l = e % 32;
        q[e] = static_cast<int8_t>((x.qs[32 * (g / 4) + l] >> (2 * (g % 4))) & 3);
      }
      for (int i = 0; i < 16; ++i) {
        scale[i] = x.scales[i] & 0xF;
        min[i] = x.scales[i] >> 4;
      }
      u.d[b] = F16ToF32(x.d);
      u.m[b] = F16ToF32(x.dmin);
      break;
    }
    case DType::kQ3_K: {
      const auto& x = BlockAt<BlockQ3_K>(row, b);
      for (int e = 0; e < kQK_K; ++e) {
        const int g = e / 32, l = e % 32;
        const int low = (x.qs[32 * (g / 4) + l] >> (2 * (g % 4))) & 3;
        q[e] = static_cast<int8_t>(low - ((x.hmask[l] >> g) & 1 ? 0 : 4));
      }
      for (int i = 0; i < 16; ++i) scale[i] = static_cast<int16_t>(Q3KScale(x.scales, i));
      u.d[b] = F16ToF32(x.d);
      break;
    }
    case DType::kQ4_K:
      UnpackKScaleMin(BlockAt<BlockQ4_K>(row, b), nullptr, q, scale, min, &u.d[b], &u.m[b]);
      break;
    case DType::kQ5_K: {
      const auto& x = BlockAt<BlockQ5_K>(row, b);
      UnpackKScaleMin(x, x.qh, q, scale, min, &u.d[b], &u.m[b]);
      break;
    }
    case DType::kQ6_K: {
      const auto& x = BlockAt<BlockQ6_K>(row, b);
      for (int e = 0; e < kQK_K; ++e) {
        const int h = e / 128, r = (e % 128) / 32, l = e % 32;
        const int low = (x.ql[64 * h + 32 * (r % 2) + l] >> (4 * (r / 2))) & 0xF;
        const int high = (x.qh[32 * h + l] >> (2 * r)) & 3;
        q[e] = static_cast<int8_t>((low | high << 4) - 32);
      }
      for (int i = 0; i < 16; ++i) scale[i] = x.scales[i];
      u.d[b] = F16ToF32(x.d);
      break;
    }
    case DType::kQ8_K: {
      const auto* block = reinterpret_cast<const uint8_t*>(row) + b * sizeof(BlockQ8_K);
      std::memcpy(q, block + offsetof(BlockQ8_K, qs), kQK_K);
      std::fill_n(scale, 16, int16_t{1});
      std::memcpy(&u.d[b], block + offsetof(BlockQ8_K, d), sizeof(float));
      break;
    }
    default:
      UC_CHECK(false, "MatMulInt8: %s is not a K-quant", DTypeName(dtype).data());
  }
}

void Unpack(DType dtype, const std::byte* row, int64_t k, UnpackedRow& u) {
  const int64_t block = DTypeBlockSize(dtype);
  const int64_t blocks = k / block;
  u.q.resize(static_cast<size_t>(k));
  u.d.resize(static_cast<size_t>(blocks));
  u.m.resize(static_cast<size_t>(blocks));
  if (block == kQK_K) {
    u.scale.resize(static_cast<size_t>(k / 16));
    u.min.resize(static_cast<size_t>(k / 16));
    for (int64_t b = 0; b < blocks; ++b) UnpackK(dtype, row, b, u);
  } else {
    for (int64_t b = 0; b < blocks; ++b) Unpack32(dtype, row, b, u);
  }
}

template <int N>
int32_t DotN(const int8_t* a, const int8_t* b) {
  int32_t sum = 0;
  for (int l = 0; l < N; ++l) sum += int32_t{a[l]} * b[l];
  return sum;
}

bool HasMin(DType dtype) {
  return dtype == DType::kQ2_K || dtype == DType::kQ4_K || dtype == DType::kQ5_K;
}

// y = w · x for one unpacked weight row and one quantized x row (the reference's order).
float RowDot(DType dtype, const UnpackedRow& w, const std::byte* xq, int64_t k) {
  float acc = 0.0f;
  switch (Int8ActivationFormat(dtype)) {
    case ActivationFormat::kQ8_0: {
      const auto* x = reinterpret_cast<const BlockQ8_0*>(xq);
      for (int64_t b = 0; b < k / 32; ++b) {
        const int32_t sumi = DotN<32>(w.q.data() + 32 * b, x[b].qs);
        const float scale = w.d[b] * F16ToF32(x[b].d);
        acc = acc + scale * static_cast<float>(sumi);
      }
      break;
    }
    case ActivationFormat::kQ8_1: {
      const auto* x = reinterpret_cast<const BlockQ8_1*>(xq);
      for (int64_t b = 0; b < k / 32; ++b) {
        const int32_t sumi = DotN<32>(w.q.data() + 32 * b, x[b].qs);
        const float scale = w.d[b] * F16ToF32(x[b].d);
        const float term = scale * static_cast<float>(sumi);
        const float min_term = w.m[b] * F16ToF32(x[b].s);
        acc = acc + (term + min_term);
      }
      break;
    }
    case ActivationFormat::kQ8_K: {
      const auto* x = reinterpret_cast<const BlockQ8_K*>(xq);
      const bool has_min = HasMin(dtype);
      for (int64_t b = 0; b < k / kQK_K; ++b) {
        int32_t sumi = 0, summin = 0;
        for (int i = 0; i < 16; ++i) {
          const int64_t e = kQK_K * b + 16 * i;
          sumi += w.scale[e / 16] * DotN<16>(w.q.data() + e, x[b].qs + 16 * i);
          summin += w.min[e / 16] * x[b].bsums[i];
        }
        float term = (x[b].d * w.d[b]) * static_cast<float>(sumi);
        if (has_min) term = term - (x[b].d * w.m[b]) * static_cast<float>(summin);
        acc = acc + term;
      }
      break;
    }
  }
  return acc;
}

void MatMulInt8Rows(const MatMulArgs& a, const std::byte* xq, int64_t xq_row_bytes, int64_t n_begin,
                    int64_t n_end) {
  thread_local UnpackedRow row;
  for (int64_t j = n_begin; j < n_end; ++j) {
    Unpack(a.w_dtype, a.w + j * a.w_row_bytes, a.k, row);
    for (int64_t i = 0; i < a.m; ++i) {
      a.y[i * a.n + j] = RowDot(a.w_dtype, row, xq + i * xq_row_bytes, a.k);
    }
  }
}

}  // namespace

void QuantizeActivations(ActivationFormat format, const float* x, int64_t k, std::byte* dst) {
  switch (format) {
    case ActivationFormat::kQ8_0:
      QuantizeActivationsQ8_0(x, k / 32, reinterpret_cast<BlockQ8_0*>(dst));
      return;
    case ActivationFormat::kQ8_1:
      QuantizeActivationsQ8_1(x, k / 32, reinterpret_cast<BlockQ8_1*>(dst));
      return;
    case ActivationFormat::kQ8_K:
      QuantizeActivationsQ8_K(x, k / kQK_K, reinterpret_cast<BlockQ8_K*>(dst));
      return;
  }
}

void MatMulInt8(const MatMulArgs& args, ThreadPool* pool) {
  const ActivationFormat format = Int8ActivationFormat(args.w_dtype);
  const int64_t row_bytes = ActivationRowBytes(format, args.k);
  thread_local std::vector<uint32_t> buffer;  // 4-byte aligned for BlockQ8_K's float d
  buffer.resize(static_cast<size_t>((args.m * row_bytes + 3) / 4));
  std::byte* xq = reinterpret_cast<std::byte*>(buffer.data());
  ParallelFor(
      pool, args.m,
      [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          QuantizeActivations(format, args.x + i * args.k, args.k, xq + i * row_bytes);
        }
      },
      MinRowsPerChunk(args.k));
  ParallelFor(
      pool, args.n,
      [&](int64_t begin, int64_t end) { MatMulInt8Rows(args, xq, row_bytes, begin, end); },
      MinRowsPerChunk(args.m * args.k));
}

}  // namespace cpu
}  // namespace uc::kernels
