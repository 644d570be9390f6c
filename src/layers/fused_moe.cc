#include "layers/fused_moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/ops.h"

namespace uc::layers {
namespace {

Status Annotated(const Status& status, const std::string& what) {
  return status.ok() ? status : status.Annotate(what);
}

struct ExpertLayers {
  MergedColumnParallelLinear gate_up;
  RowParallelLinear down;
};

StatusOr<ExpertLayers> LoadExpert(const std::string& name, const ExpertWeights& w,
                                  int64_t hidden_size, distributed::GroupCoordinator& tp) {
  if (w.gate.rank() != 2 || w.up.rank() != 2 || w.down.rank() != 2 ||
      w.gate.shape() != w.up.shape() || w.gate.dim(1) != hidden_size ||
      w.down.dim(0) != hidden_size || w.down.dim(1) != w.gate.dim(0)) {
    return InvalidArgumentError(
        name + ": gate " + ShapeToString(w.gate.shape()) + ", up " + ShapeToString(w.up.shape()) +
        " and down " + ShapeToString(w.down.shape()) + " do not form an expert of hidden_size " +
        std::to_string(hidden_size));
  }
  ExpertLayers layers;
  const Tensor gate_up[] = {w.gate, w.up};
  const Tensor biases[] = {w.gate_bias, w.up_bias};
  const bool has_bias = w.gate_bias.defined();
  if (has_bias != w.up_bias.defined() || has_bias != w.down_bias.defined() ||
      (has_bias && (w.down_bias.rank() != 1 || w.down_bias.dim(0) != hidden_size))) {
    return InvalidArgumentError(name + ": gate, up and down biases must all be given, down's [" +
                                std::to_string(hidden_size) + "]");
  }
  // The intermediate dimension splits in whole blocks of down's type (gate/up take the same rows).
  const int64_t unit = DTypeBlockSize(w.down.dtype());
  auto merged = MergedColumnParallelLinear::Load(
      gate_up, has_bias ? std::span<const Tensor>(biases) : std::span<const Tensor>(), tp, unit);
  UC_RETURN_IF_ERROR(Annotated(merged.status(), name + " gate/up (intermediate size)"));
  layers.gate_up = std::move(merged).value();
  auto down =
      RowParallelLinear::Load(w.down, Tensor(), tp, {.reduce_results = false, .split_unit = unit});
  UC_RETURN_IF_ERROR(Annotated(down.status(), name + " down"));
  layers.down = std::move(down).value();
  return layers;
}

// The first rows x cols floats of an F32 buffer, as a [rows, cols] tensor.
Tensor Prefix(Tensor& buffer, int64_t rows, int64_t cols) {
  return Tensor::Borrow(buffer.raw(), {rows, cols}, DType::kF32);
}

}  // namespace

MoeBuffers::MoeBuffers(int64_t max_tokens, const FusedMoe& moe) {
  const int64_t h = moe.hidden_size(), e = moe.num_experts();
  const int64_t inter =
      std::max(moe.intermediate_size_per_partition(), moe.shared_intermediate_size_per_partition());
  const int64_t slots = std::max(max_tokens, std::min(max_tokens * moe.top_k(), kMaxParallelSlots));
  router_logits = Tensor::ZerosLongLived({max_tokens, e}, DType::kF32);
  expert_weights = Tensor::ZerosLongLived({max_tokens, e}, DType::kF32);
  rows = Tensor::ZerosLongLived({slots, h}, DType::kF32);
  gate = Tensor::ZerosLongLived({slots, inter}, DType::kF32);
  up = Tensor::ZerosLongLived({slots, inter}, DType::kF32);
  expert_out = Tensor::ZerosLongLived({slots, h}, DType::kF32);
  shared_scale = Tensor::ZerosLongLived({max_tokens, 1}, DType::kF32);
}

StatusOr<FusedMoe> FusedMoe::Load(const std::string& name, const Tensor& router,
                                  std::span<const ExpertWeights> experts, int top_k,
                                  bool renormalize, const ExpertWeights* shared,
                                  const Tensor& shared_gate, distributed::GroupCoordinator& tp,
                                  const MoeOptions& options) {
  const int64_t num_experts = static_cast<int64_t>(experts.size());
  if (router.rank() != 2 || router.dim(0) != num_experts || num_experts == 0) {
    return InvalidArgumentError(name + ": router " + ShapeToString(router.shape()) +
                                " must be [num_experts=" + std::to_string(num_experts) +
                                ", hidden_size]");
  }
  if (top_k < 1 || top_k > num_experts) {
    return InvalidArgumentError(name + ": num_experts_per_tok " + std::to_string(top_k) +
                                " must be in [1, " + std::to_string(num_experts) + "]");
  }
  const int64_t h = router.dim(1);
  FusedMoe moe;
  if (options.router_bias.defined() &&
      (options.router_bias.rank() != 1 || options.router_bias.dim(0) != num_experts)) {
    return InvalidArgumentError(name + ": router bias " +
                                ShapeToString(options.router_bias.shape()) + " must be [" +
                                std::to_string(num_experts) + "]");
  }
  if (!(options.swiglu_limit >= 0.0f)) {
    return InvalidArgumentError(name + ": swiglu_limit must not be negative");
  }
  moe.router_ = Linear(router, options.router_bias);
  moe.top_k_ = top_k;
  moe.renormalize_ = renormalize;
  moe.topk_then_softmax_ = options.topk_then_softmax;
  moe.swiglu_limit_ = options.swiglu_limit;
  moe.swiglu_alpha_ = options.swiglu_alpha;
  moe.tp_group_ = &tp;
  moe.num_experts_ = static_cast<int>(num_experts);
  moe.expert_parallel_ = options.expert_parallel && tp.world_size() > 1;
  if (moe.expert_parallel_) {
    moe.whole_group_ = std::make_shared<distributed::GroupCoordinator>(
        std::vector<int>{tp.rank()}, tp.rank(), tp.local_rank(), nullptr, "expert");
  }
  moe.gate_up_.resize(static_cast<size_t>(num_experts));
  moe.down_.resize(static_cast<size_t>(num_experts));
  bool first = true, biased = false;
  for (int64_t e = 0; e < num_experts; ++e) {
    if (!HoldsExpert(static_cast<int>(e), tp, moe.expert_parallel_)) continue;
    const std::string what = name + " expert " + std::to_string(e);
    UC_ASSIGN_OR_RETURN(
        ExpertLayers layers,
        LoadExpert(what, experts[e], h, moe.expert_parallel_ ? *moe.whole_group_ : tp));
    const int64_t inter = layers.gate_up.output_size_per_partition(0);
    if (!first && inter != moe.expert_intermediate_) {
      return InvalidArgumentError(what + " has another share of the intermediate size than " +
                                  "the experts before it (another size, or a down type with " +
                                  "other blocks)");
    }
    const bool has_bias = experts[e].down_bias.defined();
    if (!first && has_bias != biased) {
      return InvalidArgumentError(name + ": some experts have biases and some do not");
    }
    first = false;
    biased = has_bias;
    moe.expert_intermediate_ = inter;
    moe.gate_up_[e] = std::move(layers.gate_up);
    moe.down_[e] = std::move(layers.down);
    if (has_bias) {
      // Added once over the group: by the expert's owner, or by TP rank 0 of the slices.
      if (moe.down_bias_.empty()) moe.down_bias_.resize(static_cast<size_t>(num_experts));
      moe.down_bias_[e] = moe.expert_parallel_ || tp.rank_in_group() == 0
                              ? experts[e].down_bias.ToFloatVector()
                              : std::vector<float>(static_cast<size_t>(h), 0.0f);
    }
  }
  if (shared != nullptr) {
    UC_ASSIGN_OR_RETURN(ExpertLayers layers, LoadExpert(name + " shared expert", *shared, h, tp));
    moe.shared_gate_up_ = std::move(layers.gate_up);
    moe.shared_down_ = std::move(layers.down);
    if (shared_gate.rank() != 2 || shared_gate.dim(0) != 1 || shared_gate.dim(1) != h) {
      return InvalidArgumentError(name + ": shared_expert_gate " +
                                  ShapeToString(shared_gate.shape()) + " must be [1, " +
                                  std::to_string(h) + "]");
    }
    moe.shared_expert_gate_ = Linear(shared_gate, Tensor());
  }
  return moe;
}

int64_t FusedMoe::shared_intermediate_size_per_partition() const {
  return shared_gate_up_.num_outputs() == 0 ? 0 : shared_gate_up_.output_size_per_partition(0);
}

int64_t FusedMoe::bytes_per_token() const {
  if (!defined()) return 0;
  const auto expert_bytes = [](const MergedColumnParallelLinear& gate_up,
                               const RowParallelLinear& down) {
    return gate_up.weight(0).nbytes() + gate_up.weight(1).nbytes() + down.weight().nbytes();
  };
  int64_t bytes = router_.weight().nbytes();
  for (int e = 0; e < num_experts_; ++e) {
    if (!runs_expert(e)) continue;
    // top_k slices, or top_k / tp whole experts on average (the first this rank holds).
    bytes += top_k_ * expert_bytes(gate_up_[e], down_[e]) /
             (expert_parallel_ ? tp_group_->world_size() : 1);
    break;
  }
  if (shared_gate_up_.num_outputs() > 0) {
    bytes += expert_bytes(shared_gate_up_, shared_down_) + shared_expert_gate_.weight().nbytes();
  }
  return bytes;
}

void FusedMoe::set_matmul(const kernels::MatMulOptions& options) {
  router_.set_matmul(options);
  for (int e = 0; e < num_experts_; ++e) {
    if (!runs_expert(e)) continue;
    gate_up_[e].set_matmul(options);
    down_[e].set_matmul(options);
  }
  if (shared_gate_up_.num_outputs() > 0) {
    shared_gate_up_.set_matmul(options);
    shared_down_.set_matmul(options);
    shared_expert_gate_.set_matmul(options);
  }
}

void FusedMoe::RunExpert(int expert, const Tensor& x, std::span<const int32_t> rows, int64_t slot,
                         MoeBuffers& buffers, ThreadPool* pool) const {
  const int64_t n = static_cast<int64_t>(rows.size());
  const int64_t h = hidden_size();
  const int64_t inter = intermediate_size_per_partition();
  Tensor gathered = buffers.rows.Slice(slot, slot + n);  // [n, hidden_size]
  for (int64_t j = 0; j < n; ++j) {
    std::memcpy(gathered.row(j), x.row(rows[j]), static_cast<size_t>(h) * sizeof(float));
  }
  Tensor gate = Prefix(buffers.gate, slot + n, inter).Slice(slot, slot + n);  // [n, inter / tp]
  Tensor up = Prefix(buffers.up, slot + n, inter).Slice(slot, slot + n);
  gate_up_[expert].Forward(gathered, gate, up, pool);
  if (swiglu_limit_ > 0.0f) {  // gpt-oss: (clamp(up) + 1) · g · sigmoid(alpha g), g = min(gate, l)
    float* g = gate.data<float>();
    const float* u = up.data<float>();
    const float limit = swiglu_limit_, alpha = swiglu_alpha_;
    for (int64_t k = 0; k < n * inter; ++k) {
      const float gk = std::min(g[k], limit);
      const float uk = std::clamp(u[k], -limit, limit);
      g[k] = (uk + 1.0f) * (gk * (1.0f / (1.0f + std::exp(-(gk * alpha)))));
    }
  } else {
    kernels::SiluAndMul(gate, up, gate, pool);
  }
  Tensor y = buffers.expert_out.Slice(slot, slot + n);  // [n, hidden_size]
  down_[expert].Forward(gate, y, pool);
}

void FusedMoe::AddExpert(int expert, std::span<const int32_t> rows, int64_t slot,
                         const MoeBuffers& buffers, Tensor& out) const {
  const int64_t h = hidden_size(), e = num_experts();
  const float* weights = buffers.expert_weights.data<float>();
  const float* bias = down_bias_.empty() ? nullptr : down_bias_[expert].data();
  for (size_t j = 0; j < rows.size(); ++j) {
    const float w = weights[int64_t{rows[j]} * e + expert];
    const float* src = buffers.expert_out.data<float>() + (slot + static_cast<int64_t>(j)) * h;
    float* dst = out.data<float>() + int64_t{rows[j]} * h;
    if (bias != nullptr) {
      for (int64_t k = 0; k < h; ++k) dst[k] += (src[k] + bias[k]) * w;
    } else {
      for (int64_t k = 0; k < h; ++k) dst[k] += src[k] * w;
    }
  }
}

void FusedMoe::Route(const float* row, float* w, std::vector<float>& probs,
                     std::vector<int32_t>& order) const {
  const int64_t e = num_experts();
  for (int64_t j = 0; j < e; ++j) order[j] = static_cast<int32_t>(j);
  if (topk_then_softmax_) {  // gpt-oss: the top_k logits, then softmax over those k
    std::partial_sort(
        order.begin(), order.begin() + top_k_, order.end(),
        [&](int32_t a, int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
    const float max = row[order[0]];
    float sum = 0.0f;
    for (int k = 0; k < top_k_; ++k) sum += probs[k] = std::exp(row[order[k]] - max);
    for (int k = 0; k < top_k_; ++k) w[order[k]] = probs[k] / sum;
    return;
  }
  const float max = *std::max_element(row, row + e);
  float sum = 0.0f;
  for (int64_t j = 0; j < e; ++j) sum += probs[j] = std::exp(row[j] - max);
  for (float& p : probs) p /= sum;
  std::partial_sort(order.begin(), order.begin() + top_k_, order.end(), [&](int32_t a, int32_t b) {
    return probs[a] > probs[b] || (probs[a] == probs[b] && a < b);
  });
  float chosen = 0.0f;
  for (int k = 0; k < top_k_; ++k) chosen += probs[order[k]];
  for (int k = 0; k < top_k_; ++k) {
    w[order[k]] = renormalize_ ? probs[order[k]] / chosen : probs[order[k]];
  }
}

void FusedMoe::Forward(const Tensor& x, MoeBuffers& buffers, Tensor& out, ThreadPool* pool) const {
  const int64_t m = x.dim(0), e = num_experts();
  Tensor logits = buffers.router_logits.Slice(0, m);  // [m, num_experts]
  router_.Forward(x, logits, pool);
  // Routing: softmax over all experts (as transformers, in float), the top_k by probability.
  Tensor weights = buffers.expert_weights.Slice(0, m);  // [m, num_experts]
  std::memset(weights.raw(), 0, static_cast<size_t>(weights.nbytes()));
  std::vector<std::vector<int32_t>> tokens(static_cast<size_t>(e));  // expert -> rows, ascending
  std::vector<float> probs(static_cast<size_t>(e));
  std::vector<int32_t> order(static_cast<size_t>(e));
  for (int64_t i = 0; i < m; ++i) {
    Route(logits.data<float>() + i * e, weights.data<float>() + i * e, probs, order);
    for (int k = 0; k < top_k_; ++k) tokens[order[k]].push_back(static_cast<int32_t>(i));
  }
  std::memset(out.raw(), 0, static_cast<size_t>(out.nbytes()));
  std::vector<int> active;  // this rank's experts with tokens, ascending
  for (int expert = 0; expert < e; ++expert) {
    if (!tokens[expert].empty() && runs_expert(expert)) active.push_back(expert);
  }
  const int64_t pairs = m * top_k_;
  if (pool != nullptr && pool->num_threads() > 1 && pairs <= kMaxParallelSlots &&
      pairs <= buffers.rows.dim(0) && static_cast<int>(active.size()) >= pool->num_threads()) {
    // Side by side: expert i's rows start at slot[i]; each runs on one thread (the pool's nested
    // calls run inline), then the outputs are added in ascending expert order as below.
    std::vector<int64_t> slot(active.size() + 1, 0);
    for (size_t i = 0; i < active.size(); ++i) {
      slot[i + 1] = slot[i] + static_cast<int64_t>(tokens[active[i]].size());
    }
    pool->ParallelForDynamic(
        static_cast<int64_t>(active.size()),
        [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) {
            RunExpert(active[i], x, tokens[active[i]], slot[i], buffers, nullptr);
          }
        },
        1);
    for (size_t i = 0; i < active.size(); ++i) {
      AddExpert(active[i], tokens[active[i]], slot[i], buffers, out);
    }
  } else {
    for (int expert : active) {
      RunExpert(expert, x, tokens[expert], 0, buffers, pool);
      AddExpert(expert, tokens[expert], 0, buffers, out);
    }
  }
  if (shared_gate_up_.num_outputs() > 0) {  // out += sigmoid(shared_gate · x) · shared(x)
    const int64_t h = hidden_size(), inter = shared_intermediate_size_per_partition();
    Tensor gate = Prefix(buffers.gate, m, inter);
    Tensor up = Prefix(buffers.up, m, inter);
    shared_gate_up_.Forward(x, gate, up, pool);
    kernels::SiluAndMul(gate, up, gate, pool);
    Tensor y = buffers.expert_out.Slice(0, m);
    shared_down_.Forward(gate, y, pool);
    Tensor scale = buffers.shared_scale.Slice(0, m);
    shared_expert_gate_.Forward(x, scale, pool);
    for (int64_t i = 0; i < m; ++i) {
      const float s = 1.0f / (1.0f + std::exp(-scale.data<float>()[i]));
      const float* src = y.data<float>() + i * h;
      float* dst = out.data<float>() + i * h;
      for (int64_t k = 0; k < h; ++k) dst[k] += s * src[k];
    }
  }
  if (tp_group_->world_size() > 1) tp_group_->AllReduce(out);
}

}  // namespace uc::layers
