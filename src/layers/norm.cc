#include "layers/norm.h"

#include "kernels/ops.h"

namespace uc::layers {

Norm Norm::Rms(Tensor weight, float eps) {
  UC_CHECK(weight.rank() == 1, "RMSNorm weight must be 1-D");
  Norm norm;
  norm.weight_ = std::move(weight);
  norm.eps_ = eps;
  return norm;
}

Norm Norm::Layer(const Tensor& weight, const Tensor& bias, float eps) {
  UC_CHECK(weight.rank() == 1 && bias.rank() == 1 && weight.dim(0) == bias.dim(0),
           "LayerNorm weight and bias must be 1-D of one size");
  Norm norm;
  norm.weight_ = Tensor::FromVector(weight.ToFloatVector(), {weight.dim(0)});
  norm.bias_ = Tensor::FromVector(bias.ToFloatVector(), {bias.dim(0)});
  norm.eps_ = eps;
  return norm;
}

void Norm::Forward(const Tensor& x, Tensor& out, ThreadPool* pool) const {
  UC_CHECK(defined(), "Forward of an absent norm");
  if (bias_.defined()) {
    kernels::LayerNorm(x, weight_, bias_, eps_, out, pool);
  } else {
    kernels::RmsNorm(x, weight_, eps_, out, pool);
  }
}

}  // namespace uc::layers
