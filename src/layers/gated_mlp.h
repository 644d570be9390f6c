// File: gated_mlp.h
// -----------------------------------------------------------------------------
// SwiGLU feed-forward block: down(silu(gate(x)) * up(x)). Holds weight views; per-call buffers
// live in MlpBuffers. Immutable after construction.
#pragma once

#include "base/thread_pool.h"
#include "layers/linear.h"

namespace uc::layers {

struct MlpBuffers {
  MlpBuffers() = default;
  MlpBuffers(int64_t max_tokens, int64_t intermediate_size);
  Tensor gate;  // [max_tokens, intermediate_size]
  Tensor up;    // [max_tokens, intermediate_size]
};

class GatedMlp {
 public:
  GatedMlp() = default;
  // gate_proj, up_proj: [intermediate, hidden]; down_proj: [hidden, intermediate].
  GatedMlp(Linear gate_proj, Linear up_proj, Linear down_proj);

  // x: [m, hidden] -> out: [m, hidden], F32.
  void Forward(const Tensor& x, MlpBuffers& buffers, Tensor& out, ThreadPool* pool) const;

 private:
  Linear gate_proj_, up_proj_, down_proj_;
};

}  // namespace uc::layers
