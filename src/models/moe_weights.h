// File: moe_weights.h
// -----------------------------------------------------------------------------
// Builds the mixture-of-experts block of one decoder layer from a checkpoint under the
// decoder's names ("model.layers.N.mlp.gate.weight" the router [num_experts, hidden_size],
// "mlp.experts.E.{gate,up,down}_proj.weight", "mlp.shared_expert.{gate,up,down}_proj.weight" and
// "mlp.shared_expert_gate.weight" [1, hidden_size] when shared_expert_intermediate_size > 0),
// sliced for this rank of the TP group, or with `expert_parallel` this rank's whole experts
// only (layers/fused_moe.h).
#pragma once

#include "distributed/group_coordinator.h"
#include "io/tensor_source.h"
#include "layers/fused_moe.h"
#include "models/model_config.h"

namespace uc::models {

// REQUIRES: config.IsMoeLayer(layer). Errors name the tensor (missing, wrong shape or dtype) or
// the size that does not divide over tensor_parallel_size.
StatusOr<layers::FusedMoe> LoadMoeBlock(const ModelConfig& config, int layer,
                                        const io::TensorSource& source,
                                        distributed::GroupCoordinator& tp,
                                        bool expert_parallel = false);

}  // namespace uc::models
