// File: gated_mlp.h
// -----------------------------------------------------------------------------
// Feed-forward block, tensor-parallel: gated (SwiGLU, or GeGLU with GELU-tanh for Gemma:
// down(act(gate(x)) * up(x))) or plain (GPT-2, GPT-NeoX: down(act(up(x) + b_up)) + b_down). The
// input projections are split by output rows (MergedColumnParallelLinear with one or two
// segments), down by input columns (RowParallelLinear, all-reduced, its bias added once), so this
// rank computes its slice of the intermediate dimension and the output is whole on every rank.
// Per-call buffers live in MlpBuffers. Immutable after construction.
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

// The activation: SiLU, GELU with PyTorch's tanh approximation, or the exact (erf) GELU.
enum class MlpActivation { kSilu, kGeluTanh, kGelu };

class GatedMlp {
 public:
  GatedMlp() = default;
  // gate_up_proj: segments gate and up, [intermediate / tp, hidden] each (gated), or the one
  // segment up (plain); down_proj: [hidden, intermediate / tp], reducing its results.
  // REQUIRES: a gated MLP's activation is kSilu or kGeluTanh, a plain one's kGelu or kGeluTanh.
  GatedMlp(MergedColumnParallelLinear gate_up_proj, RowParallelLinear down_proj,
           MlpActivation activation = MlpActivation::kSilu);

  // x: [m, hidden] -> out: [m, hidden], F32.
  void Forward(const Tensor& x, MlpBuffers& buffers, Tensor& out, ThreadPool* pool) const;

 private:
  MergedColumnParallelLinear gate_up_proj_;
  RowParallelLinear down_proj_;
  MlpActivation activation_ = MlpActivation::kSilu;
};

}  // namespace uc::layers
