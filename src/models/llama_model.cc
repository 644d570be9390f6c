#include "models/llama_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "io/tensor_source.h"
#include "kernels/ops.h"
#include "models/moe_weights.h"

namespace uc::models {
namespace {

// Loads full checkpoint tensors by Hugging Face name, checking shape and dtype.
class WeightLoader {
 public:
  explicit WeightLoader(const io::TensorSource& source) : source_(source) {}

  StatusOr<Tensor> Matrix(const std::string& name, int64_t rows, int64_t cols) const {
    return io::GetWithShape(source_, name, {rows, cols});
  }
  // Norm weights and biases: plain float dtypes only. `present` false gives an empty tensor.
  StatusOr<Tensor> Vector(const std::string& name, int64_t size, bool present = true) const {
    if (!present) return Tensor();
    UC_ASSIGN_OR_RETURN(Tensor t, io::GetWithShape(source_, name, {size}));
    if (DTypeIsQuantized(t.dtype()) || t.dtype() == DType::kI32) {
      return InvalidArgumentError(source_.Describe() + ": tensor '" + name + "' has dtype " +
                                  std::string(DTypeName(t.dtype())) +
                                  ", expected F32, F16 or BF16");
    }
    return t;
  }
  // An RMSNorm weight; with plus_one (Hugging Face Gemma files store w for a scale of 1 + w)
  // an owned F32 copy of 1 + w, computed in F32 as the reference implementation does.
  StatusOr<Tensor> Norm(const std::string& name, int64_t size, bool plus_one) const {
    UC_ASSIGN_OR_RETURN(Tensor w, Vector(name, size));
    if (!plus_one) return w;
    std::vector<float> values = w.ToFloatVector();
    for (float& v : values) v = 1.0f + v;
    return Tensor::FromVector(values, {size});
  }

 private:
  const io::TensorSource& source_;
};

Status Annotated(const Status& status, const std::string& what) {
  return status.ok() ? status : status.Annotate(what);
}

struct LayerParts {
  layers::QKVParallelLinear qkv;
  layers::RowParallelLinear o_proj;
  layers::MergedColumnParallelLinear gate_up;
  layers::RowParallelLinear down;
  layers::FusedMoe moe;  // a mixture-of-experts layer's MLP (gate_up and down then unused)
  layers::Norm input_norm, post_norm;         // before attention; before the MLP (pre_norms)
  Tensor q_norm, k_norm;                      // qk_norm only: [head_dim]
  Tensor post_attention_norm, post_mlp_norm;  // sandwich_norms only
  Tensor sinks;                               // attention_sinks only: this rank's heads, F32
  int64_t qkv_bytes = 0;                      // this rank's rows of q, k and v
};

// q, k and v: separate tensors, or row ranges of Phi-3's fused qkv_proj (views, no copies).
Status LoadQkvWeights(const ModelConfig& c, const std::string& p, const WeightLoader& w,
                      layers::QKVWeights& qkv) {
  const int64_t h = c.hidden_size;
  if (!c.fused_qkv) {
    UC_ASSIGN_OR_RETURN(qkv.q, w.Matrix(p + "self_attn.q_proj.weight", c.q_size(), h));
    UC_ASSIGN_OR_RETURN(qkv.k, w.Matrix(p + "self_attn.k_proj.weight", c.kv_size(), h));
    UC_ASSIGN_OR_RETURN(qkv.v, w.Matrix(p + "self_attn.v_proj.weight", c.kv_size(), h));
    return OkStatus();
  }
  const int64_t q = c.q_size(), kv = c.kv_size();
  UC_ASSIGN_OR_RETURN(Tensor fused, w.Matrix(p + "self_attn.qkv_proj.weight", q + 2 * kv, h));
  qkv.q = fused.Slice(0, q);
  qkv.k = fused.Slice(q, q + kv);
  qkv.v = fused.Slice(q + kv, q + 2 * kv);
  if (c.attention_bias) {
    UC_ASSIGN_OR_RETURN(Tensor bias, w.Vector(p + "self_attn.qkv_proj.bias", q + 2 * kv));
    qkv.q_bias = bias.Slice(0, q);
    qkv.k_bias = bias.Slice(q, q + kv);
    qkv.v_bias = bias.Slice(q + kv, q + 2 * kv);
  }
  return OkStatus();
}

// gate and up: separate tensors, or the two halves of Phi-3's fused gate_up_proj.
StatusOr<std::pair<Tensor, Tensor>> LoadGateUp(const ModelConfig& c, const std::string& p,
                                               const WeightLoader& w) {
  const int64_t h = c.hidden_size, inter = c.intermediate_size;
  if (!c.fused_gate_up) {
    UC_ASSIGN_OR_RETURN(Tensor gate, w.Matrix(p + "mlp.gate_proj.weight", inter, h));
    UC_ASSIGN_OR_RETURN(Tensor up, w.Matrix(p + "mlp.up_proj.weight", inter, h));
    return std::make_pair(gate, up);
  }
  UC_ASSIGN_OR_RETURN(Tensor fused, w.Matrix(p + "mlp.gate_up_proj.weight", 2 * inter, h));
  return std::make_pair(fused.Slice(0, inter), fused.Slice(inter, 2 * inter));
}

// The norm `name` ("model.norm"): RMSNorm from name.weight, or LayerNorm from name.weight and
// name.bias.
StatusOr<layers::Norm> LoadNorm(const ModelConfig& c, const WeightLoader& w,
                                const std::string& name) {
  UC_ASSIGN_OR_RETURN(Tensor weight,
                      w.Norm(name + ".weight", c.hidden_size, c.norm_weight_plus_one));
  if (c.norm_kind == NormKind::kRms) return layers::Norm::Rms(std::move(weight), c.rms_norm_eps);
  UC_ASSIGN_OR_RETURN(Tensor bias, w.Vector(name + ".bias", c.hidden_size));
  return layers::Norm::Layer(weight, bias, c.rms_norm_eps);
}

// Rows [begin, begin + size) of a 1-D float vector, as an owned F32 tensor.
Tensor F32Slice(const Tensor& v, int64_t begin, int64_t size) {
  const std::vector<float> all = v.ToFloatVector();
  return Tensor::FromVector(std::vector<float>(all.begin() + begin, all.begin() + begin + size),
                            {size});
}

StatusOr<LayerParts> LoadLayerParts(const ModelConfig& c, int index, const io::TensorSource& source,
                                    distributed::GroupCoordinator& tp, bool expert_parallel) {
  const WeightLoader w(source);
  const std::string p = "model.layers." + std::to_string(index) + ".";
  const int64_t h = c.hidden_size, inter = c.intermediate_size;
  const bool plus_one = c.norm_weight_plus_one;
  LayerParts parts;
  if (c.pre_norms) {
    UC_ASSIGN_OR_RETURN(parts.input_norm, LoadNorm(c, w, p + "input_layernorm"));
  }
  if (c.qk_norm && c.qk_norm_full_width) {  // this rank's slices of [q_size] and [kv_size]
    if (c.num_key_value_heads % tp.world_size() != 0) {
      return InvalidArgumentError("num_key_value_heads " + std::to_string(c.num_key_value_heads) +
                                  " is not divisible by tensor_parallel_size " +
                                  std::to_string(tp.world_size()) +
                                  " (a full-width k norm needs whole KV heads on every rank)");
    }
    const int64_t rank = tp.rank_in_group(), n = tp.world_size();
    UC_ASSIGN_OR_RETURN(Tensor q_norm, w.Vector(p + "self_attn.q_norm.weight", c.q_size()));
    UC_ASSIGN_OR_RETURN(Tensor k_norm, w.Vector(p + "self_attn.k_norm.weight", c.kv_size()));
    parts.q_norm = F32Slice(q_norm, rank * (c.q_size() / n), c.q_size() / n);
    parts.k_norm = F32Slice(k_norm, rank * (c.kv_size() / n), c.kv_size() / n);
  } else if (c.qk_norm) {
    UC_ASSIGN_OR_RETURN(parts.q_norm, w.Norm(p + "self_attn.q_norm.weight", c.head_dim, plus_one));
    UC_ASSIGN_OR_RETURN(parts.k_norm, w.Norm(p + "self_attn.k_norm.weight", c.head_dim, plus_one));
  }
  layers::QKVWeights qkv;
  UC_RETURN_IF_ERROR(LoadQkvWeights(c, p, w, qkv));  // with the fused bias, if any
  if (!c.fused_qkv) {
    UC_ASSIGN_OR_RETURN(qkv.q_bias,
                        w.Vector(p + "self_attn.q_proj.bias", c.q_size(), c.attention_bias));
    UC_ASSIGN_OR_RETURN(qkv.k_bias,
                        w.Vector(p + "self_attn.k_proj.bias", c.kv_size(), c.attention_bias));
    UC_ASSIGN_OR_RETURN(qkv.v_bias,
                        w.Vector(p + "self_attn.v_proj.bias", c.kv_size(), c.attention_bias));
  }
  UC_ASSIGN_OR_RETURN(parts.qkv,
                      layers::QKVParallelLinear::Load(qkv, c.head_dim, c.num_attention_heads,
                                                      c.num_key_value_heads, tp));
  if (c.attention_sinks) {
    UC_ASSIGN_OR_RETURN(Tensor sinks, w.Vector(p + "self_attn.sinks", c.num_attention_heads));
    const int64_t heads = parts.qkv.num_heads_per_rank();
    parts.sinks = F32Slice(sinks, tp.rank_in_group() * heads, heads);
  }
  parts.qkv_bytes = qkv.q.row_bytes() * parts.qkv.q_size_per_rank() +
                    2 * qkv.k.row_bytes() * parts.qkv.kv_size_per_rank();
  UC_ASSIGN_OR_RETURN(Tensor o, w.Matrix(p + "self_attn.o_proj.weight", h, c.q_size()));
  UC_ASSIGN_OR_RETURN(Tensor o_bias, w.Vector(p + "self_attn.o_proj.bias", h, c.o_proj_bias));
  auto o_proj = layers::RowParallelLinear::Load(o, o_bias, tp);
  UC_RETURN_IF_ERROR(Annotated(o_proj.status(), p + "self_attn.o_proj.weight"));
  parts.o_proj = std::move(o_proj).value();
  if (c.sandwich_norms) {
    UC_ASSIGN_OR_RETURN(parts.post_attention_norm,
                        w.Norm(p + "post_attention_layernorm.weight", h, plus_one));
    if (c.pre_norms) {
      UC_ASSIGN_OR_RETURN(parts.post_norm, LoadNorm(c, w, p + "pre_feedforward_layernorm"));
    }
    UC_ASSIGN_OR_RETURN(parts.post_mlp_norm,
                        w.Norm(p + "post_feedforward_layernorm.weight", h, plus_one));
  } else {
    UC_ASSIGN_OR_RETURN(parts.post_norm, LoadNorm(c, w, p + "post_attention_layernorm"));
  }
  if (c.IsMoeLayer(index)) {
    UC_ASSIGN_OR_RETURN(parts.moe, LoadMoeBlock(c, index, source, tp, expert_parallel));
    return parts;
  }
  // The checkpoint's tensors (gate/up first, so that a shape error names the first one), then
  // the TP layers: the intermediate dimension splits in whole blocks of down_proj's type, as
  // evenly as they allow (gate/up take the same rows).
  std::vector<Tensor> weights, biases;
  std::string what = p + "mlp.gate_proj/up_proj (intermediate_size)";
  if (c.gated_mlp) {
    UC_ASSIGN_OR_RETURN(auto gate_and_up, LoadGateUp(c, p, w));
    weights = {gate_and_up.first, gate_and_up.second};
  } else {
    UC_ASSIGN_OR_RETURN(Tensor up, w.Matrix(p + "mlp.up_proj.weight", inter, h));
    UC_ASSIGN_OR_RETURN(Tensor up_bias, w.Vector(p + "mlp.up_proj.bias", inter, c.mlp_bias));
    weights = {up};
    biases = {up_bias};
    what = p + "mlp.up_proj (intermediate_size)";
  }
  UC_ASSIGN_OR_RETURN(Tensor down, w.Matrix(p + "mlp.down_proj.weight", h, inter));
  UC_ASSIGN_OR_RETURN(Tensor down_bias, w.Vector(p + "mlp.down_proj.bias", h, c.mlp_bias));
  const int64_t unit = DTypeBlockSize(down.dtype());
  auto merged = layers::MergedColumnParallelLinear::Load(weights, biases, tp, unit);
  UC_RETURN_IF_ERROR(Annotated(merged.status(), what));
  parts.gate_up = std::move(merged).value();
  auto down_proj = layers::RowParallelLinear::Load(down, down_bias, tp, {.split_unit = unit});
  UC_RETURN_IF_ERROR(Annotated(down_proj.status(), p + "mlp.down_proj.weight"));
  parts.down = std::move(down_proj).value();
  return parts;
}

int64_t LayerBytes(const LayerParts& parts) {
  int64_t mlp_in = 0;
  for (int i = 0; i < parts.gate_up.num_outputs(); ++i) mlp_in += parts.gate_up.weight(i).nbytes();
  return parts.qkv_bytes + parts.o_proj.weight().nbytes() + mlp_in + parts.down.weight().nbytes() +
         parts.input_norm.weight().nbytes() + parts.post_norm.weight().nbytes() +
         parts.q_norm.nbytes() + parts.k_norm.nbytes() + parts.post_attention_norm.nbytes() +
         parts.post_mlp_norm.nbytes() + parts.moe.bytes_per_token();
}

}  // namespace

Activations::Activations(int64_t max_tokens, const ModelConfig& c, int64_t q_size_per_rank,
                         int64_t kv_size_per_rank, int64_t intermediate_size_per_partition)
    : max_tokens(max_tokens),
      hidden_states(Tensor::ZerosLongLived({max_tokens, c.hidden_size}, DType::kF32)),
      residual(Tensor::ZerosLongLived({max_tokens, c.hidden_size}, DType::kF32)),
      normed(Tensor::ZerosLongLived({max_tokens, c.hidden_size}, DType::kF32)),
      tap(Tensor::ZerosLongLived({max_tokens, c.hidden_size}, DType::kF32)),
      mlp_out(c.parallel_residual ? Tensor::ZerosLongLived({max_tokens, c.hidden_size}, DType::kF32)
                                  : Tensor()),
      attention(max_tokens, q_size_per_rank, kv_size_per_rank),
      mlp(max_tokens, intermediate_size_per_partition) {}

DecoderLayer::DecoderLayer(int layer_index, layers::Norm input_layernorm,
                           layers::Attention attention, layers::Norm post_attention_layernorm,
                           layers::GatedMlp mlp, SandwichNorms sandwich, bool parallel_residual,
                           layers::FusedMoe moe)
    : layer_index_(layer_index),
      input_layernorm_(std::move(input_layernorm)),
      attention_(std::move(attention)),
      post_attention_layernorm_(std::move(post_attention_layernorm)),
      mlp_(std::move(mlp)),
      sandwich_(std::move(sandwich)),
      parallel_residual_(parallel_residual),
      moe_(std::move(moe)) {
  UC_CHECK(!(parallel_residual_ && moe_.defined()), "a parallel-residual layer with experts");
}

void DecoderLayer::Tap(const ForwardContext& ctx, Site site, const Tensor& value) const {
  const TapPoint point{layer_index_, site};
  if (ctx.hooks != nullptr && ctx.hooks->Wants(point)) {
    ctx.hooks->Observe(point, ctx.positions, value);
  }
}

void DecoderLayer::Steer(const ForwardContext& ctx, Site site, Tensor& block_out,
                         const Tensor& residual) const {
  if (ctx.steering == nullptr) return;
  const int64_t hidden_size = block_out.dim(1);
  for (const SteeringAdd& add : ctx.steering->adds) {
    if (add.layer != layer_index_ || add.site != site) continue;
    const float* __restrict vector = add.vector;
    for (const int32_t row : add.rows) {
      float* __restrict out = block_out.data<float>() + row * hidden_size;
      float scale = add.scale;
      if (add.norm_match) {
        const float* res = residual.data<float>() + row * hidden_size;
        double sum = 0.0;
        for (int64_t j = 0; j < hidden_size; ++j) {
          const double x = static_cast<double>(out[j]) + res[j];
          sum += x * x;
        }
        scale *= static_cast<float>(std::sqrt(sum)) * add.inv_vector_norm;
      }
      for (int64_t j = 0; j < hidden_size; ++j) out[j] += scale * vector[j];
    }
  }
}

// The residual stream after this layer is hidden_states + residual; it is only materialized
// when a probe asks for it.
void DecoderLayer::TapResidual(const ForwardContext& ctx, Activations& act, int64_t m) const {
  const TapPoint point{layer_index_, Site::kResidPost};
  if (ctx.hooks == nullptr || !ctx.hooks->Wants(point)) return;
  Tensor stream = act.tap.Slice(0, m);
  std::memcpy(stream.raw(), act.residual.raw(), static_cast<size_t>(stream.nbytes()));
  kernels::AddInPlace(act.hidden_states.Slice(0, m), stream);
  ctx.hooks->Observe(point, ctx.positions, stream);
}

// Pre-norm attention, then pre-norm MLP; each block's output joins the residual stream at the
// start of the next step (vLLM's fused-residual form). Without a pre-norm (OLMo-2) a block reads
// the stream itself.
void DecoderLayer::Forward(const ForwardContext& ctx, Activations& act, int64_t m) const {
  if (parallel_residual_) return ForwardParallel(ctx, act, m);
  Tensor hidden = act.hidden_states.Slice(0, m);  // [m, hidden_size]
  Tensor residual = act.residual.Slice(0, m);     // [m, hidden_size]
  Tensor normed = act.normed.Slice(0, m);         // [m, hidden_size]
  kernels::AddInPlace(hidden, residual, ctx.pool);
  if (input_layernorm_.defined()) input_layernorm_.Forward(residual, normed, ctx.pool);
  attention_.Forward(input_layernorm_.defined() ? normed : residual, *ctx.attention,
                     ctx.cache->layers[layer_index_], act.attention, hidden, ctx.pool);
  if (sandwich_.enabled()) sandwich_.post_attention.Forward(hidden, hidden, ctx.pool);
  Tap(ctx, Site::kAttnOut, hidden);
  Steer(ctx, Site::kAttnOut, hidden, residual);
  kernels::AddInPlace(hidden, residual, ctx.pool);
  Tap(ctx, Site::kResidMid, residual);  // the stream the MLP reads
  if (post_attention_layernorm_.defined()) {
    post_attention_layernorm_.Forward(residual, normed, ctx.pool);
  }
  const Tensor& mlp_in = post_attention_layernorm_.defined() ? normed : residual;
  if (moe_.defined()) {
    moe_.Forward(mlp_in, act.moe, hidden, ctx.pool);  // all-reduced inside, before any tap
    Tap(ctx, Site::kRouterLogits, act.moe.router_logits.Slice(0, m));
    Tap(ctx, Site::kExpertWeights, act.moe.expert_weights.Slice(0, m));
  } else {
    mlp_.Forward(mlp_in, act.mlp, hidden, ctx.pool);
  }
  if (sandwich_.enabled()) sandwich_.post_mlp.Forward(hidden, hidden, ctx.pool);
  Tap(ctx, Site::kMlpOut, hidden);
  if (steering_.defined()) kernels::AddBias(steering_, hidden);  // joins the residual stream
  Steer(ctx, Site::kMlpOut, hidden, residual);
  Steer(ctx, Site::kResidPost, hidden, residual);
  TapResidual(ctx, act, m);
}

// GPT-NeoX's parallel block: x + attn(ln1(x)) + mlp(ln2(x)). Both blocks read the stream x
// before the layer; hidden_states leaves as attn_out + mlp_out, residual as x.
void DecoderLayer::ForwardParallel(const ForwardContext& ctx, Activations& act, int64_t m) const {
  Tensor hidden = act.hidden_states.Slice(0, m);  // [m, hidden_size]
  Tensor residual = act.residual.Slice(0, m);     // [m, hidden_size]
  Tensor normed = act.normed.Slice(0, m);         // [m, hidden_size]
  Tensor mlp_out = act.mlp_out.Slice(0, m);       // [m, hidden_size]
  kernels::AddInPlace(hidden, residual, ctx.pool);
  input_layernorm_.Forward(residual, normed, ctx.pool);
  attention_.Forward(normed, *ctx.attention, ctx.cache->layers[layer_index_], act.attention, hidden,
                     ctx.pool);
  Tap(ctx, Site::kAttnOut, hidden);
  Steer(ctx, Site::kAttnOut, hidden, residual);
  post_attention_layernorm_.Forward(residual, normed, ctx.pool);
  mlp_.Forward(normed, act.mlp, mlp_out, ctx.pool);
  Tap(ctx, Site::kMlpOut, mlp_out);
  if (steering_.defined()) kernels::AddBias(steering_, mlp_out);
  Steer(ctx, Site::kMlpOut, mlp_out, residual);
  kernels::AddInPlace(mlp_out, hidden, ctx.pool);
  Steer(ctx, Site::kResidPost, hidden, residual);
  TapResidual(ctx, act, m);
}

StatusOr<std::unique_ptr<CausalLM>> CausalLM::Load(const Checkpoint& checkpoint,
                                                   const ParallelContext& parallel,
                                                   const LoadOptions& options) {
  const ModelConfig& c = checkpoint.config;
  UC_CHECK(parallel.tp_group != nullptr, "CausalLM::Load needs a TP group");
  UC_CHECK(0 <= parallel.layer_start && parallel.layer_start < parallel.layer_end &&
               parallel.layer_end <= c.num_hidden_layers,
           "bad stage range [%d, %d)", parallel.layer_start, parallel.layer_end);
  distributed::GroupCoordinator& tp = *parallel.tp_group;
  const WeightLoader w(*checkpoint.tensors);
  std::unique_ptr<CausalLM> model(new CausalLM());
  model->config_ = c;
  model->parallel_ = parallel;
  LayerVectors steering;
  if (!options.steering.empty()) {
    UC_ASSIGN_OR_RETURN(
        steering,
        LoadControlVectors(options.steering, static_cast<int>(c.hidden_size), c.num_hidden_layers));
  }
  int64_t bytes = 0;
  if (parallel.is_first_stage()) {
    UC_ASSIGN_OR_RETURN(Tensor embed,
                        w.Matrix("model.embed_tokens.weight", c.vocab_size, c.hidden_size));
    UC_ASSIGN_OR_RETURN(model->embed_tokens_, layers::VocabParallelEmbedding::Load(embed, tp));
    if (c.learned_positions) {
      UC_ASSIGN_OR_RETURN(
          model->embed_positions_,
          w.Matrix("model.embed_positions.weight", c.max_position_embeddings, c.hidden_size));
    }
  }
  model->layers_.resize(c.num_hidden_layers);
  for (int i = parallel.layer_start; i < parallel.layer_end; ++i) {
    UC_ASSIGN_OR_RETURN(LayerParts parts,
                        LoadLayerParts(c, i, *checkpoint.tensors, tp, options.expert_parallel));
    bytes += LayerBytes(parts);
    parts.qkv.set_matmul(options.matmul());
    parts.o_proj.set_matmul(options.matmul());
    if (parts.moe.defined()) {
      parts.moe.set_matmul(options.matmul());
    } else {
      parts.gate_up.set_matmul(options.matmul());
      parts.down.set_matmul(options.matmul());
      // The largest share: layers whose down_proj types differ may split differently.
      model->intermediate_per_partition_ =
          std::max(model->intermediate_per_partition_, parts.gate_up.output_size_per_partition(0));
    }
    const kernels::AttentionShape shape{
        .num_heads = static_cast<int>(parts.qkv.num_heads_per_rank()),
        .num_kv_heads = static_cast<int>(parts.qkv.num_kv_heads_per_rank()),
        .head_dim = c.head_dim,
        // YaRN scales cos and sin of both q and k by RopeAttentionFactor(): every score by its
        // square.
        .scale = c.AttentionScale() * c.RopeAttentionFactor() * c.RopeAttentionFactor(),
        .window = c.LayerWindow(i),
        .softcap = c.attn_logit_softcapping,
    };
    model->q_size_per_rank_ = parts.qkv.q_size_per_rank();
    model->kv_size_per_rank_ = parts.qkv.kv_size_per_rank();
    layers::Rotary rotary(c.RopeInvFreq(i), c.head_dim, c.rope_style);
    layers::QkNorm qk_norm;
    if (c.qk_norm) {
      qk_norm = {layers::RmsNorm(parts.q_norm, c.rms_norm_eps),
                 layers::RmsNorm(parts.k_norm, c.rms_norm_eps), c.rms_norm_eps,
                 c.qk_norm_full_width ? &tp : nullptr};
    }
    layers::Attention attention(std::move(parts.qkv), std::move(parts.o_proj), std::move(rotary),
                                shape, std::move(qk_norm));
    if (c.attention_sinks) attention.set_sinks(std::move(parts.sinks));
    const layers::MlpActivation activation =
        c.hidden_act == Activation::kGelu       ? layers::MlpActivation::kGelu
        : c.hidden_act == Activation::kGeluTanh ? layers::MlpActivation::kGeluTanh
                                                : layers::MlpActivation::kSilu;
    layers::GatedMlp mlp;
    if (!parts.moe.defined()) {
      mlp = layers::GatedMlp(std::move(parts.gate_up), std::move(parts.down), activation);
    }
    SandwichNorms sandwich;
    if (c.sandwich_norms) {
      sandwich = {layers::RmsNorm(parts.post_attention_norm, c.rms_norm_eps),
                  layers::RmsNorm(parts.post_mlp_norm, c.rms_norm_eps)};
    }
    model->layers_[i].emplace<DecoderLayer>(
        i, std::move(parts.input_norm), std::move(attention), std::move(parts.post_norm),
        std::move(mlp), std::move(sandwich), c.parallel_residual, std::move(parts.moe));
    if (const auto it = steering.find(i); it != steering.end()) {
      Tensor vector = Tensor::Empty({c.hidden_size}, DType::kF32);
      std::copy(it->second.begin(), it->second.end(), vector.data<float>());
      std::get<DecoderLayer>(model->layers_[i]).set_steering(std::move(vector));
    }
  }
  if (parallel.is_last_stage()) {
    UC_ASSIGN_OR_RETURN(model->norm_, LoadNorm(c, w, "model.norm"));
    const bool separate_head = !c.tie_word_embeddings || checkpoint.tensors->Has("lm_head.weight");
    UC_ASSIGN_OR_RETURN(Tensor head,
                        w.Matrix(separate_head ? "lm_head.weight" : "model.embed_tokens.weight",
                                 c.vocab_size, c.hidden_size));
    UC_ASSIGN_OR_RETURN(model->lm_head_,
                        layers::ParallelLmHead::Load(head, tp, /*use_all_gather=*/false));
    model->lm_head_.set_matmul(options.matmul());
    bytes += model->lm_head_.vocab_size() == 0 ? 0 : head.nbytes() / tp.world_size();
  }
  model->weight_bytes_ = bytes;
  return model;
}

StatusOr<std::unique_ptr<CausalLM>> CausalLM::Load(const Checkpoint& checkpoint,
                                                   const LoadOptions& options) {
  auto tp =
      std::make_unique<distributed::GroupCoordinator>(std::vector<int>{0}, 0, 0, nullptr, "tp");
  ParallelContext parallel;
  parallel.tp_group = tp.get();
  parallel.layer_end = checkpoint.config.num_hidden_layers;
  UC_ASSIGN_OR_RETURN(std::unique_ptr<CausalLM> model, Load(checkpoint, parallel, options));
  model->own_tp_group_ = std::move(tp);
  return model;
}

KvCache CausalLM::NewKvCache(int capacity) const { return NewPagedKvCache(1, capacity); }

KvCache CausalLM::NewPagedKvCache(int num_blocks, int block_size) const {
  UC_CHECK(num_blocks >= 1 && block_size >= 1, "KV cache of %d blocks of %d slots", num_blocks,
           block_size);
  KvCache cache;
  cache.num_blocks = num_blocks;
  cache.block_size = block_size;
  cache.layers.resize(config_.num_hidden_layers);
  const int64_t slots = int64_t{num_blocks} * block_size;
  for (int i = parallel_.layer_start; i < parallel_.layer_end; ++i) {
    cache.layers[i] = {Tensor::ZerosLongLived({slots, kv_size_per_rank_}, DType::kF32),
                       Tensor::ZerosLongLived({slots, kv_size_per_rank_}, DType::kF32)};
  }
  return cache;
}

int64_t CausalLM::KvBlockBytes(int block_size) const {
  return int64_t{2} * (parallel_.layer_end - parallel_.layer_start) * block_size *
         kv_size_per_rank_ * static_cast<int64_t>(sizeof(float));
}

Activations& CausalLM::ActivationsFor(int64_t m) {
  if (activations_ == nullptr || activations_->max_tokens < m) {
    activations_ = std::make_unique<Activations>(m, config_, q_size_per_rank_, kv_size_per_rank_,
                                                 intermediate_per_partition_);
    for (int i = parallel_.layer_start; i < parallel_.layer_end; ++i) {
      const layers::FusedMoe& moe = std::get<DecoderLayer>(layers_[i]).moe();
      if (!moe.defined()) continue;
      activations_->moe = layers::MoeBuffers(m, moe);  // every sparse layer has the same shapes
      break;
    }
  }
  return *activations_;
}

bool CausalLM::has_logits() const { return parallel_.is_last_stage() && lm_head_.has_logits(); }

void CausalLM::Forward(const ForwardBatch& batch, KvCache& cache, const IntermediateTensors* input,
                       IntermediateTensors* output, Tensor* logits, ThreadPool* pool,
                       ForwardHooks* hooks) {
  const int64_t m = static_cast<int64_t>(batch.positions.size());
  UC_CHECK(m >= 1, "a forward call with no tokens");
  UC_CHECK(static_cast<int64_t>(batch.slot_mapping.size()) == m, "%zu slots for %lld tokens",
           batch.slot_mapping.size(), static_cast<long long>(m));
  Activations& act = ActivationsFor(m);
  Tensor hidden = act.hidden_states.Slice(0, m);
  Tensor residual = act.residual.Slice(0, m);
  if (parallel_.is_first_stage()) {
    UC_CHECK(static_cast<int64_t>(batch.ids.size()) == m, "%zu ids for %lld positions",
             batch.ids.size(), static_cast<long long>(m));
    embed_tokens_.Forward(batch.ids, hidden);
    if (config_.embedding_multiplier != 1.0f) kernels::Scale(config_.embedding_multiplier, hidden);
    if (embed_positions_.defined()) {  // GPT-2: + the learned embedding of each position
      for (const int32_t p : batch.positions) {
        UC_CHECK(p >= 0 && p < embed_positions_.dim(0),
                 "position %d is past the model's %lld learned positions", p,
                 static_cast<long long>(embed_positions_.dim(0)));
      }
      Tensor pos = act.normed.Slice(0, m);
      kernels::EmbeddingLookup(embed_positions_, batch.positions, pos);
      kernels::AddInPlace(pos, hidden, pool);
    }
    std::memset(residual.raw(), 0, static_cast<size_t>(residual.nbytes()));
  } else {
    UC_CHECK(input != nullptr && input->hidden_states.dim(0) == m && input->residual.dim(0) == m,
             "stage %d needs the previous stage's tensors for %lld tokens", parallel_.pp_rank,
             static_cast<long long>(m));
    std::memcpy(hidden.raw(), input->hidden_states.raw(), static_cast<size_t>(hidden.nbytes()));
    std::memcpy(residual.raw(), input->residual.raw(), static_cast<size_t>(residual.nbytes()));
  }
  const layers::AttentionMetadata meta{batch.positions, batch.slot_mapping, batch.layout};
  const ForwardContext ctx{batch.positions, &meta, &cache, hooks, pool, batch.steering};
  for (int i = parallel_.layer_start; i < parallel_.layer_end; ++i) {
    std::get<DecoderLayer>(layers_[i]).Forward(ctx, act, m);
  }
  if (!parallel_.is_last_stage()) {
    UC_CHECK(output != nullptr, "a non-last stage needs an output");
    output->hidden_states = hidden.Clone();
    output->residual = residual.Clone();
    return;
  }
  Finish(batch, logits, pool, hooks);
}

// Final norm over the residual stream and the LM head, for the rows that want logits. When a
// probe wants the final norm, every row is normed and observed, and the logit rows are picked
// from that (each row's values are the same either way).
void CausalLM::Finish(const ForwardBatch& batch, Tensor* logits, ThreadPool* pool,
                      ForwardHooks* hooks) {
  const int64_t n = static_cast<int64_t>(batch.logit_rows.size());
  const TapPoint final_point{config_.num_hidden_layers, Site::kFinalNorm};
  const bool tap = hooks != nullptr && hooks->Wants(final_point);
  if (n == 0 && !tap) return;
  Activations& act = *activations_;
  const int64_t h = config_.hidden_size;
  const int64_t m = static_cast<int64_t>(batch.positions.size());
  for (int64_t j = 0; j < n; ++j) {
    const int32_t r = batch.logit_rows[j];
    UC_CHECK(r >= 0 && r < m && (j == 0 || r > batch.logit_rows[j - 1]),
             "logit rows must ascend within the batch; row %d", r);
  }
  // stream[j] = residual + hidden of row rows[j]; normed = RMSNorm(stream).
  auto norm_rows = [&](std::span<const int32_t> rows) {
    const int64_t count = static_cast<int64_t>(rows.size());
    Tensor stream = act.tap.Slice(0, count);
    for (int64_t j = 0; j < count; ++j) {
      float* out = stream.data<float>() + j * h;
      const float* res = act.residual.data<float>() + int64_t{rows[j]} * h;
      const float* hid = act.hidden_states.data<float>() + int64_t{rows[j]} * h;
      for (int64_t k = 0; k < h; ++k) out[k] = res[k] + hid[k];
    }
    Tensor normed = act.normed.Slice(0, count);
    norm_.Forward(stream, normed, pool);
    return normed;
  };
  Tensor normed;
  if (tap) {
    std::vector<int32_t> all(static_cast<size_t>(m));
    for (int64_t i = 0; i < m; ++i) all[i] = static_cast<int32_t>(i);
    Tensor every = norm_rows(all);
    hooks->Observe(final_point, batch.positions, every);
    if (n == 0) return;
    normed = act.tap.Slice(0, n);  // the stream is no longer needed: gather the logit rows
    for (int64_t j = 0; j < n; ++j) {
      std::memcpy(normed.row(j), every.row(batch.logit_rows[j]),
                  static_cast<size_t>(h) * sizeof(float));
    }
  } else {
    normed = norm_rows(batch.logit_rows);
  }
  Tensor unused;
  Tensor& out = logits != nullptr ? *logits : unused;
  if (lm_head_.has_logits()) {
    UC_CHECK(logits != nullptr && out.dim(0) == n && out.dim(1) == config_.vocab_size,
             "logits must be [%lld, %d]", static_cast<long long>(n), config_.vocab_size);
  }
  lm_head_.Forward(normed, out, pool);
  if (lm_head_.has_logits() && config_.final_logit_softcapping > 0.0f) {
    kernels::SoftCap(config_.final_logit_softcapping, out);
  }
}

void CausalLM::ForwardStage(std::span<const int32_t> ids, std::span<const int32_t> positions,
                            KvCache& cache, const IntermediateTensors* input,
                            IntermediateTensors* output, LogitsRequest request, Tensor* logits,
                            ThreadPool* pool, ForwardHooks* hooks) {
  UC_CHECK(cache.num_blocks == 1, "ForwardStage runs one sequence in a contiguous cache");
  const int64_t m = static_cast<int64_t>(positions.size());
  std::vector<int32_t> rows;
  if (request == LogitsRequest::kLast) rows.push_back(static_cast<int32_t>(m - 1));
  if (request == LogitsRequest::kAll) {
    for (int64_t i = 0; i < m; ++i) rows.push_back(static_cast<int32_t>(i));
  }
  static constexpr int32_t kOneBlock[1] = {0};
  const std::vector<int32_t> token_seq(static_cast<size_t>(m), 0);
  const ForwardBatch batch{ids, positions, positions,
                           kernels::PagedKvLayout{cache.block_size, 1, kOneBlock, token_seq}, rows};
  Forward(batch, cache, input, output, logits, pool, hooks);
}

void CausalLM::Forward(std::span<const int32_t> ids, std::span<const int32_t> positions,
                       KvCache& cache, bool all_logits, Tensor& logits, ThreadPool* pool,
                       ForwardHooks* hooks) {
  UC_CHECK(parallel_.pp_size == 1, "Forward runs a single-stage model; use ForwardStage");
  ForwardStage(ids, positions, cache, nullptr, nullptr,
               all_logits ? LogitsRequest::kAll : LogitsRequest::kLast, &logits, pool, hooks);
}

}  // namespace uc::models
