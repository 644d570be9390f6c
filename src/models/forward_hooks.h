// File: forward_hooks.h
// -----------------------------------------------------------------------------
// The tap-point interface through which probes observe the forward pass (the role of ggml's
// eval callback). models/ only calls it; probe/ implements it and is installed from above, so
// there is no dependency cycle. Wants() is asked before anything is copied, so activations no
// one reads cost nothing.
#pragma once

#include <span>
#include <string>

#include "tensor/tensor.h"

namespace uc::models {

enum class Site {
  kAttnOut,    // output of the attention block (after o_proj), before the residual add
  kMlpOut,     // output of the MLP block (after down_proj), before the residual add
  kResidPost,  // residual stream after the layer
  kFinalNorm,  // final RMSNorm output; layer index = num_hidden_layers
};

struct TapPoint {
  int layer = 0;
  Site site = Site::kResidPost;
  bool operator==(const TapPoint&) const = default;
  // Canonical TransformerLens-style name, e.g. "blocks.3.hook_resid_post",
  // "ln_final.hook_normalized".
  std::string ToString() const;
};

class ForwardHooks {
 public:
  virtual ~ForwardHooks() = default;
  // Whether anyone wants `point` in the current step.
  virtual bool Wants(TapPoint point) const = 0;
  // activation: [m, hidden_size] F32, row i belongs to the token at positions[i]. The view is
  // valid only during the call; copy what you keep.
  virtual void Observe(TapPoint point, std::span<const int32_t> positions,
                       const Tensor& activation) = 0;
};

}  // namespace uc::models
