#include "tensor/tensor.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>

#include "base/huge_pages.h"
#include "tensor/quants.h"

namespace uc {

std::string ShapeToString(const Shape& shape) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << "]";
  return out.str();
}

int64_t ShapeNumel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t Tensor::BytesFor(const Shape& shape, DType dtype) {
  if (shape.empty()) return DTypeBlockBytes(dtype);
  const int64_t last = shape.back();
  if (last == 0) return 0;
  return ShapeNumel(shape) / last * DTypeRowBytes(dtype, last);
}

Tensor Tensor::Empty(Shape shape, DType dtype) {
  const int64_t bytes = BytesFor(shape, dtype);
  const size_t alloc = static_cast<size_t>((bytes + 63) / 64 * 64 + 64);
  void* ptr = std::aligned_alloc(64, alloc);
  UC_CHECK(ptr != nullptr, "out of memory allocating %lld bytes", static_cast<long long>(bytes));
  std::shared_ptr<const void> owner(ptr, [](const void* p) { std::free(const_cast<void*>(p)); });
  return Tensor(ptr, std::move(shape), dtype, std::move(owner));
}

Tensor Tensor::Zeros(Shape shape, DType dtype) {
  Tensor t = Empty(std::move(shape), dtype);
  std::memset(t.data_, 0, static_cast<size_t>(t.nbytes()));
  return t;
}

Tensor Tensor::ZerosLongLived(Shape shape, DType dtype) {
  const int64_t bytes = BytesFor(shape, dtype);
  // Padded like Empty (kernels may read a vector past the last row's end).
  auto buffer = std::make_shared<HugePageBuffer>(static_cast<size_t>((bytes + 63) / 64 * 64 + 64));
  void* data = buffer->data();
  return Tensor(data, std::move(shape), dtype, std::shared_ptr<const void>(buffer, data));
}

Tensor Tensor::Borrow(const void* data, Shape shape, DType dtype,
                      std::shared_ptr<const void> owner) {
  return Tensor(const_cast<void*>(data), std::move(shape), dtype, std::move(owner));
}

Tensor Tensor::FromVector(const std::vector<float>& values, Shape shape) {
  UC_CHECK(ShapeNumel(shape) == static_cast<int64_t>(values.size()),
           "FromVector: %zu values for shape %s", values.size(), ShapeToString(shape).c_str());
  Tensor t = Empty(std::move(shape), DType::kF32);
  std::memcpy(t.data_, values.data(), values.size() * sizeof(float));
  return t;
}

int64_t Tensor::dim(int i) const {
  const int r = rank();
  if (i < 0) i += r;
  UC_CHECK(i >= 0 && i < r, "dim %d out of range for shape %s", i, ShapeToString(shape_).c_str());
  return shape_[i];
}

int64_t Tensor::num_rows() const {
  UC_CHECK(rank() >= 1, "num_rows() of a scalar");
  return shape_.back() == 0 ? 0 : numel() / shape_.back();
}

Tensor Tensor::Slice(int64_t begin, int64_t end) const {
  UC_CHECK(rank() >= 1 && 0 <= begin && begin <= end && end <= shape_[0],
           "Slice [%lld, %lld) of shape %s", static_cast<long long>(begin),
           static_cast<long long>(end), ShapeToString(shape_).c_str());
  Shape inner(shape_.begin() + 1, shape_.end());
  const int64_t stride = BytesFor(inner, dtype_);
  Shape out = shape_;
  out[0] = end - begin;
  return Tensor(static_cast<std::byte*>(data_) + begin * stride, std::move(out), dtype_, owner_);
}

Tensor Tensor::Reshape(Shape shape) const {
  UC_CHECK(ShapeNumel(shape) == numel(), "Reshape %s -> %s changes the element count",
           ShapeToString(shape_).c_str(), ShapeToString(shape).c_str());
  if (DTypeIsQuantized(dtype_)) {
    UC_CHECK(!shape.empty() && shape.back() % DTypeBlockSize(dtype_) == 0,
             "Reshape of a quantized tensor must keep whole blocks per row");
  }
  return Tensor(data_, std::move(shape), dtype_, owner_);
}

Tensor Tensor::Clone() const {
  Tensor t = Empty(shape_, dtype_);
  std::memcpy(t.data_, data_, static_cast<size_t>(nbytes()));
  return t;
}

std::vector<float> Tensor::ToFloatVector() const {
  std::vector<float> out(static_cast<size_t>(numel()));
  if (dtype_ == DType::kI32) {
    const int32_t* src = data<int32_t>();
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(src[i]);
    return out;
  }
  const int64_t cols = rank() == 0 ? 1 : shape_.back();
  const int64_t rows = rank() == 0 ? 1 : num_rows();
  for (int64_t r = 0; r < rows; ++r) {
    DequantizeRow(dtype_, rank() == 0 ? data_ : row(r), out.data() + r * cols, cols);
  }
  return out;
}

void DequantizeRow(DType dtype, const void* src, float* dst, int64_t n) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::kF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = F16ToF32(s[i]);
      return;
    }
    case DType::kBF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToF32(s[i]);
      return;
    }
    case DType::kQ8_0: {
      const BlockQ8_0* b = static_cast<const BlockQ8_0*>(src);
      for (int64_t k = 0; k < n / 32; ++k) {
        const float d = F16ToF32(b[k].d);
        for (int j = 0; j < 32; ++j) dst[k * 32 + j] = d * static_cast<float>(b[k].qs[j]);
      }
      return;
    }
    case DType::kQ4_0: {
      const BlockQ4_0* b = static_cast<const BlockQ4_0*>(src);
      for (int64_t k = 0; k < n / 32; ++k) {
        const float d = F16ToF32(b[k].d);
        for (int j = 0; j < 16; ++j) {
          dst[k * 32 + j] = d * static_cast<float>((b[k].qs[j] & 0x0f) - 8);
          dst[k * 32 + j + 16] = d * static_cast<float>((b[k].qs[j] >> 4) - 8);
        }
      }
      return;
    }
    case DType::kQ4_1: {
      const BlockQ4_1* b = static_cast<const BlockQ4_1*>(src);
      for (int64_t k = 0; k < n / 32; ++k) {
        const float d = F16ToF32(b[k].d);
        const float m = F16ToF32(b[k].m);
        for (int j = 0; j < 16; ++j) {
          dst[k * 32 + j] = d * static_cast<float>(b[k].qs[j] & 0x0f) + m;
          dst[k * 32 + j + 16] = d * static_cast<float>(b[k].qs[j] >> 4) + m;
        }
      }
      return;
    }
    case DType::kQ5_0:
      DequantizeQ5_0(static_cast<const BlockQ5_0*>(src), n / 32, dst);
      return;
    case DType::kQ5_1:
      DequantizeQ5_1(static_cast<const BlockQ5_1*>(src), n / 32, dst);
      return;
    case DType::kIQ4_NL:
      DequantizeIQ4_NL(static_cast<const BlockIQ4_NL*>(src), n / 32, dst);
      return;
    case DType::kMXFP4:
      DequantizeMXFP4(static_cast<const BlockMXFP4*>(src), n / 32, dst);
      return;
    case DType::kQ2_K:
      DequantizeQ2_K(static_cast<const BlockQ2_K*>(src), n / kQK_K, dst);
      return;
    case DType::kQ3_K:
      DequantizeQ3_K(static_cast<const BlockQ3_K*>(src), n / kQK_K, dst);
      return;
    case DType::kQ4_K:
      DequantizeQ4_K(static_cast<const BlockQ4_K*>(src), n / kQK_K, dst);
      return;
    case DType::kQ5_K:
      DequantizeQ5_K(static_cast<const BlockQ5_K*>(src), n / kQK_K, dst);
      return;
    case DType::kQ6_K:
      DequantizeQ6_K(static_cast<const BlockQ6_K*>(src), n / kQK_K, dst);
      return;
    case DType::kQ8_K:
      DequantizeQ8_K(static_cast<const BlockQ8_K*>(src), n / kQK_K, dst);
      return;
    case DType::kI32:
      break;
  }
  UC_CHECK(false, "DequantizeRow: unsupported dtype %s", DTypeName(dtype).data());
}

namespace {

void QuantizeQ8_0(const float* x, BlockQ8_0* b) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  b->d = F32ToF16(d);
  for (int j = 0; j < 32; ++j) b->qs[j] = static_cast<int8_t>(std::lround(x[j] * id));
}

void QuantizeQ4_0(const float* x, BlockQ4_0* b) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < 32; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  const float d = max / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  b->d = F32ToF16(d);
  for (int j = 0; j < 16; ++j) {
    const int lo = std::min(15, static_cast<int>(x[j] * id + 8.5f));
    const int hi = std::min(15, static_cast<int>(x[j + 16] * id + 8.5f));
    b->qs[j] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

void QuantizeQ4_1(const float* x, BlockQ4_1* b) {
  float min = x[0], max = x[0];
  for (int j = 1; j < 32; ++j) {
    min = std::min(min, x[j]);
    max = std::max(max, x[j]);
  }
  const float d = (max - min) / 15.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  b->d = F32ToF16(d);
  b->m = F32ToF16(min);
  for (int j = 0; j < 16; ++j) {
    const int lo = std::min(15, static_cast<int>((x[j] - min) * id + 0.5f));
    const int hi = std::min(15, static_cast<int>((x[j + 16] - min) * id + 0.5f));
    b->qs[j] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

}  // namespace

void QuantizeRow(DType dtype, const float* src, void* dst, int64_t n) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(dst)[i] = F32ToF16(src[i]);
      return;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(dst)[i] = F32ToBf16(src[i]);
      return;
    case DType::kQ8_0:
      for (int64_t k = 0; k < n / 32; ++k)
        QuantizeQ8_0(src + 32 * k, static_cast<BlockQ8_0*>(dst) + k);
      return;
    case DType::kQ4_0:
      for (int64_t k = 0; k < n / 32; ++k)
        QuantizeQ4_0(src + 32 * k, static_cast<BlockQ4_0*>(dst) + k);
      return;
    case DType::kQ4_1:
      for (int64_t k = 0; k < n / 32; ++k)
        QuantizeQ4_1(src + 32 * k, static_cast<BlockQ4_1*>(dst) + k);
      return;
    case DType::kQ5_0:
      QuantizeQ5_0(src, n / 32, static_cast<BlockQ5_0*>(dst));
      return;
    case DType::kQ5_1:
      QuantizeQ5_1(src, n / 32, static_cast<BlockQ5_1*>(dst));
      return;
    case DType::kQ4_K:
      QuantizeQ4_K(src, n / kQK_K, static_cast<BlockQ4_K*>(dst));
      return;
    case DType::kQ5_K:
      QuantizeQ5_K(src, n / kQK_K, static_cast<BlockQ5_K*>(dst));
      return;
    case DType::kQ6_K:
      QuantizeQ6_K(src, n / kQK_K, static_cast<BlockQ6_K*>(dst));
      return;
    case DType::kI32:
    case DType::kIQ4_NL:
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ8_K:
    case DType::kMXFP4:
      break;
  }
  UC_CHECK(false, "QuantizeRow: unsupported dtype %s", DTypeName(dtype).data());
}

}  // namespace uc
