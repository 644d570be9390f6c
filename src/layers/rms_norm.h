// File: rms_norm.h
// -----------------------------------------------------------------------------
// RmsNorm: y = x / sqrt(mean(x²) + eps) * weight, per row. Immutable after construction.
#pragma once

#include "base/thread_pool.h"
#include "tensor/tensor.h"

namespace uc::layers {

class RmsNorm {
 public:
  RmsNorm() = default;
  RmsNorm(Tensor weight, float eps);  // weight: [hidden_size]

  // x, out: [m, hidden_size] F32; out may alias x. `pool`: see kernels::RmsNorm.
  void Forward(const Tensor& x, Tensor& out, ThreadPool* pool = nullptr) const;
  const Tensor& weight() const { return weight_; }

 private:
  Tensor weight_;  // [hidden_size]
  float eps_ = 1e-5f;
};

}  // namespace uc::layers
