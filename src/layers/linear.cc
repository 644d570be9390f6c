#include "layers/linear.h"

#include "base/file_pages.h"
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
  // Forward reads the packed copy only: the checkpoint's pages need not stay resident too.
  if (packed_ != nullptr) ReleaseFilePages(weight_.raw(), static_cast<size_t>(weight_.nbytes()));
}

void Linear::Forward(const Tensor& x, Tensor& y, ThreadPool* pool) const {
  if (packed_ != nullptr) {
    kernels::MatMul(x, *packed_, y, pool);
  } else {
    kernels::MatMul(x, weight_, y, pool, matmul_);
  }
  if (has_bias()) kernels::AddBias(bias_, y);
}

void Linear::ForwardMany(const Tensor& x, std::span<const Linear* const> layers,
                         std::span<Tensor* const> ys, ThreadPool* pool) {
  constexpr size_t kMax = 8;
  UC_CHECK(layers.size() == ys.size() && layers.size() <= kMax,
           "Linear::ForwardMany: %zu layers for %zu outputs (at most %zu)", layers.size(),
           ys.size(), kMax);
  kernels::MatMulOperand operands[kMax];
  for (size_t i = 0; i < layers.size(); ++i) {
    operands[i] = {&layers[i]->weight_, layers[i]->packed_.get(), layers[i]->matmul_, ys[i]};
  }
  kernels::MatMulMany(x, {operands, layers.size()}, pool);
  for (size_t i = 0; i < layers.size(); ++i) {
    if (layers[i]->has_bias()) kernels::AddBias(layers[i]->bias_, *ys[i]);
  }
}

}  // namespace uc::layers
