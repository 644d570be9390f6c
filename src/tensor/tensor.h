// File: tensor.h
// -----------------------------------------------------------------------------
// Tensor: a strided-free, row-major n-d array handle with shared ownership of its storage.
// Copying a Tensor is cheap and aliases the same bytes (like a torch tensor); use Clone() for a
// deep copy. Storage is either owned (64-byte aligned heap memory from Empty/Zeros) or borrowed
// from something that outlives it (a memory-mapped checkpoint), kept alive by a shared_ptr.
//
// Shapes are in elements, outermost first; for block-quantized dtypes the last dimension must
// be a whole number of blocks and `nbytes()` accounts for the block layout. Weights keep their
// stored dtype; kernels convert on the fly.
//
// Thread-compatible: concurrent reads are fine; writers must not race with anything.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "base/check.h"
#include "tensor/dtype.h"

namespace uc {

using Shape = std::vector<int64_t>;
std::string ShapeToString(const Shape& shape);
int64_t ShapeNumel(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;  // empty: rank 0, no storage, defined() == false

  // Uninitialized owned storage.
  static Tensor Empty(Shape shape, DType dtype);
  // Zero-filled owned storage.
  static Tensor Zeros(Shape shape, DType dtype);
  // Zero-filled owned storage for a large buffer that lives as long as the model (its forward
  // workspace, the KV cache): a HugePageBuffer (base/huge_pages.h), 2 MiB pages where the OS
  // grants them, so the kernels that stream through activations take fewer TLB misses. Not for
  // per-step buffers: a huge page's first touch may wait for the kernel to compact memory.
  static Tensor ZerosLongLived(Shape shape, DType dtype);
  // Wraps `data` without copying. `owner` (may be null) keeps the bytes alive.
  // REQUIRES: data points to at least BytesFor(shape, dtype) bytes.
  static Tensor Borrow(const void* data, Shape shape, DType dtype,
                       std::shared_ptr<const void> owner = nullptr);
  // F32 tensor holding a copy of `values`. REQUIRES: ShapeNumel(shape) == values.size().
  static Tensor FromVector(const std::vector<float>& values, Shape shape);
  static int64_t BytesFor(const Shape& shape, DType dtype);

  bool defined() const { return data_ != nullptr || ShapeNumel(shape_) == 0; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  // Size of dimension `i`; negative counts from the end.
  int64_t dim(int i) const;
  int64_t numel() const { return ShapeNumel(shape_); }
  int64_t nbytes() const { return BytesFor(shape_, dtype_); }
  // Bytes of one row (the last dimension). REQUIRES: rank() >= 1.
  int64_t row_bytes() const { return DTypeRowBytes(dtype_, shape_.back()); }
  // Number of rows: numel / last dimension.
  int64_t num_rows() const;

  void* raw() { return data_; }
  const void* raw() const { return data_; }
  template <typename T>
  T* data() {
    return static_cast<T*>(data_);
  }
  template <typename T>
  const T* data() const {
    return static_cast<const T*>(data_);
  }
  // Pointer to row `r` of the tensor viewed as [num_rows, last_dim].
  const std::byte* row(int64_t r) const {
    return static_cast<const std::byte*>(data_) + r * row_bytes();
  }
  std::byte* row(int64_t r) { return static_cast<std::byte*>(data_) + r * row_bytes(); }

  // View of dim-0 indices [begin, end); shares storage.
  Tensor Slice(int64_t begin, int64_t end) const;
  // View with another shape of the same numel; shares storage.
  Tensor Reshape(Shape shape) const;
  // Deep copy into owned storage.
  Tensor Clone() const;
  // Copies the tensor's values into a float vector (dequantizing). For tests and tools.
  std::vector<float> ToFloatVector() const;

 private:
  Tensor(void* data, Shape shape, DType dtype, std::shared_ptr<const void> owner)
      : data_(data), shape_(std::move(shape)), dtype_(dtype), owner_(std::move(owner)) {}

  void* data_ = nullptr;
  Shape shape_;
  DType dtype_ = DType::kF32;
  std::shared_ptr<const void> owner_;
};

// Dequantizes / converts `n` elements of `dtype` starting at `src` into `dst` (scalar code,
// the reference that every optimized kernel is checked against; the types of tensor/quants.h
// match gguf-py bit for bit). REQUIRES: n is a whole number of blocks; dtype is not I32.
void DequantizeRow(DType dtype, const void* src, float* dst, int64_t n);

// Converts `n` floats into `dtype` at `dst` (round to nearest; for block types ggml's reference
// quantizers, byte for byte: Q8_0 d = max|x| / 127; Q4_0 d = x_maxabs / -8; Q4_1 d =
// (max - min) / 15, m = min; Q5_0, Q5_1, Q4_K, Q5_K, Q6_K as tensor/quants.h says). Used by
// `undercurrent quantize`, tools and tests. REQUIRES: n is a whole number of blocks; dtype is
// F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K or Q6_K (IQ4_NL, Q2_K, Q3_K, Q8_K and
// MXFP4 are only read, never written).
void QuantizeRow(DType dtype, const float* src, void* dst, int64_t n);

}  // namespace uc
