// File: fused_moe.h
// -----------------------------------------------------------------------------
// FusedMoe (vLLM's name): a mixture-of-experts feed-forward block, tensor-parallel.
//   router_logits = x · routerᵀ                                   [m, num_experts], replicated
//   p = softmax(router_logits); the top_k experts of each token by p (lower index first on a tie)
//   weights = p of the chosen, divided by their sum when `renormalize`
//   out = Σ_chosen weight_e · down_e(silu(gate_e(x)) · up_e(x))
//       (+ sigmoid(shared_expert_gate · x) · shared_expert(x) where there is a shared expert)
// gpt-oss's variant (MoeOptions): the router has a bias; the top_k are taken by logit and weighted
// by the softmax over those k logits only; every expert's gate/up/down carry biases and its
// activation is the clamped SwiGLU (gate = min(gate, limit), up = clamp(up, ±limit),
// act = (up + 1) · gate · sigmoid(alpha · gate)).
// Computed the way llama.cpp's mul_mat_id and vLLM's fused kernels do: the batch's tokens are
// grouped by expert and each active expert runs one matmul over only its own tokens; each token's
// expert outputs are added in ascending expert order, so a row's result does not depend on the
// rest of the batch (given batch-invariant matmuls). A small batch (decode: at most
// kMaxParallelSlots token-expert pairs) routed to at least as many experts as the pool has
// threads runs its experts side by side, one thread each, instead of each expert's small
// matmuls split over the threads one after another (three fork-joins per expert: most of a
// decode step on a 2-core machine); the outputs are added afterwards in the same expert order,
// so the bits are the same either way.
//
// Tensor parallelism (vLLM's FusedMoE layout): every expert's (and the shared expert's)
// intermediate dimension is split over the TP ranks — gate/up by rows, down by columns — so each
// rank holds a slice of every expert; the partial sums of the whole block (routed and shared)
// are all-reduced once at the end of Forward, so `out` is whole on every rank before any tap sees
// it. The router is replicated: router logits and weights are identical on every rank.
//
// Expert parallelism (MoeOptions::expert_parallel, vLLM's --enable-expert-parallel): each TP rank
// holds whole experts instead — expert e on rank e mod tp (ExpertOwner; round robin) — and runs
// only its own experts, each over all of the batch's tokens routed to it. The activations are
// already whole on every rank (the attention's all-reduce), so no tokens travel: the block ends
// in the same one all-reduce of `out`, before any tap. The shared expert stays sliced over the
// ranks. A rank reads top_k / tp experts a token on average rather than a 1/tp slice of all
// top_k, in fewer and larger matmuls, and no expert's intermediate size needs to split.
//
// Immutable after construction (set_matmul aside); per-call buffers live in MoeBuffers.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "base/thread_pool.h"
#include "layers/parallel_linear.h"

namespace uc::layers {

// The full checkpoint tensors of one gated expert.
struct ExpertWeights {
  Tensor gate;  // [intermediate_size, hidden_size]
  Tensor up;    // [intermediate_size, hidden_size]
  Tensor down;  // [hidden_size, intermediate_size]
  // Biases ([intermediate_size], [intermediate_size], [hidden_size]); all undefined or all set.
  Tensor gate_bias, up_bias, down_bias;
};

// What gpt-oss changes (the defaults are the Qwen/OLMoE/Mixtral block).
struct MoeOptions {
  Tensor router_bias;              // [num_experts] or undefined
  bool topk_then_softmax = false;  // softmax over the chosen logits (renormalize is then moot)
  float swiglu_limit = 0.0f;       // > 0: the clamped SwiGLU with swiglu_alpha
  float swiglu_alpha = 1.702f;
  // Whole experts per TP rank (see the file comment); Load then reads only this rank's experts
  // (the others may be left undefined in `experts`).
  bool expert_parallel = false;
};

class FusedMoe;

// Token-expert pairs of a batch whose experts may run side by side (see above).
inline constexpr int64_t kMaxParallelSlots = 64;

// Per-call buffers of one block. The per-expert ones have a row per token-expert pair the
// side-by-side experts can take (`slots` = max(max_tokens, min(max_tokens top_k,
// kMaxParallelSlots))): each active expert uses rows [its first pair, + its tokens).
struct MoeBuffers {
  MoeBuffers() = default;
  MoeBuffers(int64_t max_tokens, const FusedMoe& moe);
  Tensor router_logits;   // [max_tokens, num_experts]
  Tensor expert_weights;  // [max_tokens, num_experts], zero off each token's top-k
  Tensor rows;            // [slots, hidden_size]  the experts' tokens, gathered
  Tensor gate, up;        // [slots, max(intermediate per partition)]
  Tensor expert_out;      // [slots, hidden_size]  the experts' (partial) outputs
  Tensor shared_scale;    // [max_tokens, 1]       shared_expert_gate · x
};

class FusedMoe {
 public:
  FusedMoe() = default;
  // router: [num_experts, hidden_size] (any dtype Linear takes); experts: num_experts of them,
  // each [moe_intermediate_size, hidden_size] gate and up and [hidden_size, ...] down; shared:
  // null, or the shared expert with shared_gate [1, hidden_size]. InvalidArgument (naming
  // `name` and the expert) unless shapes agree, 1 <= top_k <= num_experts and every
  // intermediate size divides over the TP group on quantization-block boundaries.
  static StatusOr<FusedMoe> Load(const std::string& name, const Tensor& router,
                                 std::span<const ExpertWeights> experts, int top_k,
                                 bool renormalize, const ExpertWeights* shared,
                                 const Tensor& shared_gate, distributed::GroupCoordinator& tp,
                                 const MoeOptions& options = MoeOptions());

  // The TP rank (rank_in_group) that holds expert `expert` whole under expert parallelism.
  static int ExpertOwner(int expert, int tp_size) { return expert % tp_size; }
  // Whether this rank of `tp` needs expert `expert`'s weights: every rank needs a slice of every
  // expert, except under expert parallelism over more than one rank, where only its owner does.
  static bool HoldsExpert(int expert, const distributed::GroupCoordinator& tp,
                          bool expert_parallel) {
    return !expert_parallel || tp.world_size() == 1 ||
           ExpertOwner(expert, tp.world_size()) == tp.rank_in_group();
  }

  bool defined() const { return num_experts_ > 0; }
  int num_experts() const { return num_experts_; }
  bool expert_parallel() const { return expert_parallel_; }
  // Whether this rank computes expert `expert` (all of them without expert parallelism).
  bool runs_expert(int expert) const { return gate_up_[expert].num_outputs() > 0; }
  int top_k() const { return top_k_; }
  int64_t hidden_size() const { return router_.input_size(); }
  // This rank's slice of each expert's intermediate dimension (the whole of it under expert
  // parallelism; 0 on a rank that holds no expert). The shared expert's (0 for none).
  int64_t intermediate_size_per_partition() const { return expert_intermediate_; }
  int64_t shared_intermediate_size_per_partition() const;
  // Bytes of weights one token reads on this rank: the router, top_k experts (top_k / tp whole
  // ones on average under expert parallelism), the shared one.
  int64_t bytes_per_token() const;
  // How the experts multiply quantized weights (Linear::set_matmul); the router follows too.
  void set_matmul(const kernels::MatMulOptions& options);

  // x: [m, hidden_size] F32 -> out: [m, hidden_size] F32, whole (all-reduced) on every rank;
  // buffers.router_logits / expert_weights rows [0, m) hold this call's routing afterwards.
  // REQUIRES: buffers sized for >= m tokens of this block.
  void Forward(const Tensor& x, MoeBuffers& buffers, Tensor& out, ThreadPool* pool) const;

 private:
  // buffers.expert_out rows [slot, slot + rows.size()) = expert(rows of x), the expert's partial
  // sum on this rank (without its down bias), through the same rows of rows / gate / up.
  void RunExpert(int expert, const Tensor& x, std::span<const int32_t> rows, int64_t slot,
                 MoeBuffers& buffers, ThreadPool* pool) const;
  // out[rows] += (RunExpert's rows at `slot` + the down bias) · weight.
  void AddExpert(int expert, std::span<const int32_t> rows, int64_t slot, const MoeBuffers& buffers,
                 Tensor& out) const;

  // buffers.expert_weights[i] from router logits row `logits` (see the file comment).
  void Route(const float* logits, float* weights, std::vector<float>& probs,
             std::vector<int32_t>& order) const;

  Linear router_;  // [num_experts, hidden_size]
  int num_experts_ = 0;
  int top_k_ = 0;
  bool expert_parallel_ = false;
  int64_t expert_intermediate_ = 0;  // intermediate_size_per_partition()
  bool renormalize_ = false;
  bool topk_then_softmax_ = false;
  float swiglu_limit_ = 0.0f;
  float swiglu_alpha_ = 0.0f;
  // [num_experts][hidden_size] down biases, added once over the TP group (the sum is
  // all-reduced): on TP rank 0, or under expert parallelism by the expert's owner; empty
  // without expert biases.
  std::vector<std::vector<float>> down_bias_;
  // [num_experts]: gate, up [I / tp, hidden] (whole [I, hidden] under expert parallelism, and
  // undefined for the experts other ranks hold).
  std::vector<MergedColumnParallelLinear> gate_up_;
  std::vector<RowParallelLinear> down_;  // [num_experts]: [hidden, I / tp] (or I), not reducing
  MergedColumnParallelLinear shared_gate_up_;  // undefined without a shared expert
  RowParallelLinear shared_down_;
  Linear shared_expert_gate_;  // [1, hidden_size]
  distributed::GroupCoordinator* tp_group_ = nullptr;
  // Under expert parallelism, the one-rank group whole experts are loaded with (shared, so that
  // the layers' pointers into it survive copies and moves).
  std::shared_ptr<distributed::GroupCoordinator> whole_group_;
};

}  // namespace uc::layers
