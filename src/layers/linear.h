// File: linear.h
// -----------------------------------------------------------------------------
// Linear: y = x·Wᵀ (+ b) with W kept in its stored dtype (a float or ggml block type) and
// converted inside the matmul kernel, exactly or through 8-bit activations (precision(); see
// kernels::MatMulPrecision). Holds views into the checkpoint mapping; copying a Linear
// is cheap. Immutable after construction, so Forward may run concurrently on distinct outputs.
#pragma once

#include <memory>
#include <span>

#include "base/thread_pool.h"
#include "kernels/ops.h"
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
  // How Forward multiplies (precision for a quantized weight, batch invariance); kExact and
  // fastest by default. Set before Forward runs: where the CPU's kernel for `options` has a
  // layout of its own (kernels::PackedWeight), the weight is packed into it here, once.
  const kernels::MatMulOptions& matmul() const { return matmul_; }
  void set_matmul(const kernels::MatMulOptions& options);
  // The packed copy Forward reads, or null (it reads weight()).
  const kernels::PackedWeight* packed() const { return packed_.get(); }

  // x: [m, input_size] F32 -> y: [m, output_size] F32 (preallocated).
  void Forward(const Tensor& x, Tensor& y, ThreadPool* pool) const;

  // layers[i]->Forward(x, *ys[i], pool) for every i, bit for bit, through kernels::MatMulMany:
  // x is prepared once for all of them where the kernel allows (q/k/v, gate/up).
  // REQUIRES: layers.size() == ys.size() <= 8.
  static void ForwardMany(const Tensor& x, std::span<const Linear* const> layers,
                          std::span<Tensor* const> ys, ThreadPool* pool);

 private:
  Tensor weight_;  // [output_size, input_size]
  Tensor bias_;    // [output_size] or undefined
  kernels::MatMulOptions matmul_;
  std::shared_ptr<const kernels::PackedWeight> packed_;  // shared by copies of the layer
};

}  // namespace uc::layers
