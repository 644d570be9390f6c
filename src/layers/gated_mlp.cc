#include "layers/gated_mlp.h"

#include "kernels/ops.h"

namespace uc::layers {

MlpBuffers::MlpBuffers(int64_t max_tokens, int64_t intermediate_size)
    : gate(Tensor::ZerosLongLived({max_tokens, intermediate_size}, DType::kF32)),
      up(Tensor::ZerosLongLived({max_tokens, intermediate_size}, DType::kF32)) {}

GatedMlp::GatedMlp(MergedColumnParallelLinear gate_up_proj, RowParallelLinear down_proj,
                   MlpActivation activation)
    : gate_up_proj_(std::move(gate_up_proj)),
      down_proj_(std::move(down_proj)),
      activation_(activation) {
  UC_CHECK(gate_up_proj_.num_outputs() == 2 || gate_up_proj_.num_outputs() == 1,
           "gate_up_proj needs the gate and up segments, or up alone");
  UC_CHECK(gate_up_proj_.num_outputs() == 1 ? activation_ != MlpActivation::kSilu
                                            : activation_ != MlpActivation::kGelu,
           "a gated MLP's activation is SiLU or GELU-tanh, a plain one's GELU or GELU-tanh");
  UC_CHECK(down_proj_.options().reduce_results, "mlp down_proj must reduce its results");
}

void GatedMlp::Forward(const Tensor& x, MlpBuffers& buffers, Tensor& out, ThreadPool* pool) const {
  const int64_t m = x.dim(0);
  Tensor gate = buffers.gate.Slice(0, m);
  Tensor up = buffers.up.Slice(0, m);
  if (gate_up_proj_.num_outputs() == 1) {  // plain: down(act(up(x)))
    Tensor outputs[] = {gate};
    gate_up_proj_.Forward(x, outputs, pool);
    if (activation_ == MlpActivation::kGelu) {
      kernels::Gelu(gate, pool);
    } else {
      kernels::GeluTanh(gate, pool);
    }
    down_proj_.Forward(gate, out, pool);
    return;
  }
  gate_up_proj_.Forward(x, gate, up, pool);
  if (activation_ == MlpActivation::kGeluTanh) {
    kernels::GeluTanhAndMul(gate, up, gate, pool);
  } else {
    kernels::SiluAndMul(gate, up, gate, pool);
  }
  down_proj_.Forward(gate, out, pool);
}

}  // namespace uc::layers
