#include "models/moe_weights.h"

#include <string>
#include <vector>

namespace uc::models {
namespace {

StatusOr<layers::ExpertWeights> LoadExpert(const io::TensorSource& source, const std::string& p,
                                           int64_t hidden_size, int64_t intermediate_size,
                                           bool bias = false) {
  layers::ExpertWeights w;
  UC_ASSIGN_OR_RETURN(
      w.gate, io::GetWithShape(source, p + "gate_proj.weight", {intermediate_size, hidden_size}));
  UC_ASSIGN_OR_RETURN(
      w.up, io::GetWithShape(source, p + "up_proj.weight", {intermediate_size, hidden_size}));
  UC_ASSIGN_OR_RETURN(
      w.down, io::GetWithShape(source, p + "down_proj.weight", {hidden_size, intermediate_size}));
  if (bias) {
    UC_ASSIGN_OR_RETURN(w.gate_bias,
                        io::GetWithShape(source, p + "gate_proj.bias", {intermediate_size}));
    UC_ASSIGN_OR_RETURN(w.up_bias,
                        io::GetWithShape(source, p + "up_proj.bias", {intermediate_size}));
    UC_ASSIGN_OR_RETURN(w.down_bias, io::GetWithShape(source, p + "down_proj.bias", {hidden_size}));
  }
  return w;
}

}  // namespace

StatusOr<layers::FusedMoe> LoadMoeBlock(const ModelConfig& c, int layer,
                                        const io::TensorSource& source,
                                        distributed::GroupCoordinator& tp, bool expert_parallel) {
  UC_CHECK(c.IsMoeLayer(layer), "layer %d is not a mixture of experts", layer);
  const std::string p = "model.layers." + std::to_string(layer) + ".mlp.";
  const int64_t h = c.hidden_size;
  UC_ASSIGN_OR_RETURN(Tensor router,
                      io::GetWithShape(source, p + "gate.weight", {c.num_experts, h}));
  // Under expert parallelism only this rank's experts are read (the rest stay undefined).
  std::vector<layers::ExpertWeights> experts(static_cast<size_t>(c.num_experts));
  for (int e = 0; e < c.num_experts; ++e) {
    if (!layers::FusedMoe::HoldsExpert(e, tp, expert_parallel)) continue;
    UC_ASSIGN_OR_RETURN(experts[e], LoadExpert(source, p + "experts." + std::to_string(e) + ".", h,
                                               c.moe_intermediate_size, c.expert_bias));
  }
  layers::ExpertWeights shared;
  Tensor shared_gate;
  const bool has_shared = c.shared_expert_intermediate_size > 0;
  if (has_shared) {
    UC_ASSIGN_OR_RETURN(
        shared, LoadExpert(source, p + "shared_expert.", h, c.shared_expert_intermediate_size));
    UC_ASSIGN_OR_RETURN(shared_gate,
                        io::GetWithShape(source, p + "shared_expert_gate.weight", {1, h}));
  }
  layers::MoeOptions options;
  if (c.router_bias) {
    UC_ASSIGN_OR_RETURN(options.router_bias,
                        io::GetWithShape(source, p + "gate.bias", {c.num_experts}));
  }
  options.topk_then_softmax = c.router_topk_then_softmax;
  options.swiglu_limit = c.swiglu_limit;
  options.swiglu_alpha = c.swiglu_alpha;
  options.expert_parallel = expert_parallel;
  return layers::FusedMoe::Load(p.substr(0, p.size() - 1), router, experts, c.num_experts_per_tok,
                                c.norm_topk_prob, has_shared ? &shared : nullptr, shared_gate, tp,
                                options);
}

}  // namespace uc::models
