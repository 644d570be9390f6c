#include "layers/linear.h"

#include "kernels/ops.h"

namespace uc::layers {

Linear::Linear(Tensor weight, Tensor bias) : weight_(std::move(weight)), bias_(std::move(bias)) {
  UC_CHECK(weight_.rank() == 2, "Linear weight must be 2-D, got %s",
           ShapeToString(weight_.shape()).c_str());
  if (has_bias()) {
    UC_CHECK(bias_.rank() == 1 && bias_.dim(0) == weight_.dim(0),
             "Linear bias %s does not match weight %s", ShapeToString(bias_.shape()).c_str(),
             ShapeToString(weight_.shape()).c_str());
  }
}

void Linear::set_matmul(const kernels::MatMulOptions& options) {
  matmul_ = options;
  packed_ = weight_.defined() ? kernels::PackedWeight::Pack(weight_, options) : nullptr;
}

void Linear::Forward(const Tensor& x, Tensor& y, ThreadPool* pool) const {
  if (packed_ != nullptr) {
    kernels::MatMul(x, *packed_, y, pool);
  } else {
    kernels::MatMul(x, weight_, y, pool, matmul_);
  }
  if (has_bias()) kernels::AddBias(bias_, y);
}

}  // namespace uc::layers
