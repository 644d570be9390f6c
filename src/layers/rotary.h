// File: rotary.h
// -----------------------------------------------------------------------------
// Rotary position embedding for query and key heads. The inverse frequencies (with any
// Llama-3 / linear scaling already applied) come from the model config; the pairing style
// follows the checkpoint's q/k row order (interleaved for llama2.c/GGUF "llama", rotate_half
// for Hugging Face). Immutable after construction.
#pragma once

#include <span>
#include <vector>

#include "kernels/ops.h"

namespace uc::layers {

class Rotary {
 public:
  Rotary() = default;
  Rotary(std::vector<float> inv_freq, int head_dim, kernels::RopeStyle style);

  // In place on x [m, num_heads * head_dim]; token i is at positions[i]. `pool`: see
  // kernels::Rope.
  void Forward(std::span<const int32_t> positions, int num_heads, Tensor& x,
               ThreadPool* pool = nullptr) const;

 private:
  std::vector<float> inv_freq_;  // [rotary_dim / 2]
  int head_dim_ = 0;
  kernels::RopeStyle style_ = kernels::RopeStyle::kHalf;
};

}  // namespace uc::layers
