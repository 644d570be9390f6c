#include "layers/rms_norm.h"

#include "kernels/ops.h"

namespace uc::layers {

RmsNorm::RmsNorm(Tensor weight, float eps) : weight_(std::move(weight)), eps_(eps) {
  UC_CHECK(weight_.rank() == 1, "RmsNorm weight must be 1-D");
}

void RmsNorm::Forward(const Tensor& x, Tensor& out, ThreadPool* pool) const {
  kernels::RmsNorm(x, weight_, eps_, out, pool);
}

}  // namespace uc::layers
