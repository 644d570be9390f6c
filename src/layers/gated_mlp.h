// File: gated_mlp.h
// -----------------------------------------------------------------------------
// Gated feed-forward block (SwiGLU, or GeGLU with GELU-tanh for Gemma), tensor-parallel: gate
// and up are split by output rows (MergedColumnParallelLinear), down by input columns
// (RowParallelLinear, all-reduced), so this rank computes down(act(gate(x)) * up(x)) over its
// slice of the intermediate dimension and the output is whole on every rank. Per-call buffers live
// in MlpBuffers. Immutable after construction.
#pragma once

#include "base/thread_pool.h"
#include "layers/parallel_linear.h"

namespace uc::layers {

struct MlpBuffers {
  MlpBuffers() = default;
  MlpBuffers(int64_t max_tokens, int64_t intermediate_size_per_partition);
  Tensor gate;  // [max_tokens, intermediate_size_per_partition]
  Tensor up;    // [max_tokens, intermediate_size_per_partition]
};

class GatedMlp {
 public:
  GatedMlp() = default;
  // gate_up_proj: segments gate and up, [intermediate / tp, hidden] each; down_proj:
  // [hidden, intermediate / tp], reducing its results.
  GatedMlp(MergedColumnParallelLinear gate_up_proj, RowParallelLinear down_proj,
           bool gelu_tanh = false);

  // x: [m, hidden] -> out: [m, hidden], F32.
  void Forward(const Tensor& x, MlpBuffers& buffers, Tensor& out, ThreadPool* pool) const;

 private:
  MergedColumnParallelLinear gate_up_proj_;
  RowParallelLinear down_proj_;
  bool gelu_tanh_ = false;  // act = GELU (tanh approximation) instead of SiLU
};

}  // namespace uc::layers
