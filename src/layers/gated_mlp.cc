#include "layers/gated_mlp.h"

#include "kernels/ops.h"

namespace uc::layers {

MlpBuffers::MlpBuffers(int64_t max_tokens, int64_t intermediate_size)
    : gate(Tensor::Empty({max_tokens, intermediate_size}, DType::kF32)),
      up(Tensor::Empty({max_tokens, intermediate_size}, DType::kF32)) {}

GatedMlp::GatedMlp(MergedColumnParallelLinear gate_up_proj, RowParallelLinear down_proj,
                   bool gelu_tanh)
    : gate_up_proj_(std::move(gate_up_proj)),
      down_proj_(std::move(down_proj)),
      gelu_tanh_(gelu_tanh) {
  UC_CHECK(gate_up_proj_.num_outputs() == 2, "gate_up_proj needs the gate and up segments");
  UC_CHECK(down_proj_.options().reduce_results, "mlp down_proj must reduce its results");
}

void GatedMlp::Forward(const Tensor& x, MlpBuffers& buffers, Tensor& out, ThreadPool* pool) const {
  const int64_t m = x.dim(0);
  Tensor gate = buffers.gate.Slice(0, m);
  Tensor up = buffers.up.Slice(0, m);
  gate_up_proj_.Forward(x, gate, up, pool);
  if (gelu_tanh_) {
    kernels::GeluTanhAndMul(gate, up, gate, pool);
  } else {
    kernels::SiluAndMul(gate, up, gate, pool);
  }
  down_proj_.Forward(gate, out, pool);
}

}  // namespace uc::layers
