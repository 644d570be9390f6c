// File: linear.h
// -----------------------------------------------------------------------------
// Linear: y = x·Wᵀ (+ b) with W kept in its stored dtype (F32/F16/BF16/Q8_0/Q4_0/Q4_1) and
// converted inside the matmul kernel. Holds views into the checkpoint mapping; copying a Linear
// is cheap. Immutable after construction, so Forward may run concurrently on distinct outputs.
#pragma once

#include "base/thread_pool.h"
#include "tensor/tensor.h"

namespace uc::layers {

class Linear {
 public:
  Linear() = default;
  // weight: [output_size, input_size]; bias: [output_size] or undefined (Tensor()).
  Linear(Tensor weight, Tensor bias);

  int64_t input_size() const { return weight_.dim(1); }
  int64_t output_size() const { return weight_.dim(0); }
  const Tensor& weight() const { return weight_; }
  bool has_bias() const { return bias_.numel() > 0 && bias_.raw() != nullptr; }

  // x: [m, input_size] F32 -> y: [m, output_size] F32 (preallocated).
  void Forward(const Tensor& x, Tensor& y, ThreadPool* pool) const;

 private:
  Tensor weight_;  // [output_size, input_size]
  Tensor bias_;    // [output_size] or undefined
};

}  // namespace uc::layers
