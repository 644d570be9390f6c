// File: norm.h
// -----------------------------------------------------------------------------
// Norm: the per-row normalization a decoder puts in front of its blocks and the LM head, either
// RMSNorm (Llama, Gemma, Qwen, OLMo-2: y = x / sqrt(mean(x²) + eps) * w) or LayerNorm with a bias
// (GPT-2, GPT-NeoX: y = (x - mean) / sqrt(var + eps) * w + b). A default-constructed Norm is
// absent (OLMo-2 has no norm in front of its blocks): defined() is false and Forward must not be
// called. Immutable after construction.
#pragma once

#include "base/thread_pool.h"
#include "layers/rms_norm.h"
#include "tensor/tensor.h"

namespace uc::layers {

class Norm {
 public:
  Norm() = default;
  // weight: [hidden_size], any float dtype.
  static Norm Rms(Tensor weight, float eps);
  // weight, bias: [hidden_size], any float dtype (kept as F32 copies).
  static Norm Layer(const Tensor& weight, const Tensor& bias, float eps);

  bool defined() const { return weight_.defined(); }
  bool is_layer_norm() const { return bias_.defined(); }
  // x, out: [m, hidden_size] F32; out may alias x. REQUIRES: defined().
  void Forward(const Tensor& x, Tensor& out, ThreadPool* pool = nullptr) const;
  const Tensor& weight() const { return weight_; }

 private:
  Tensor weight_;  // [hidden_size]
  Tensor bias_;    // [hidden_size] F32, LayerNorm only
  float eps_ = 1e-5f;
};

}  // namespace uc::layers
