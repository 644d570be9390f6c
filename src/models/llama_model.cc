#include "models/llama_model.h"

#include <cmath>

#include "io/tensor_source.h"
#include "kernels/ops.h"

namespace uc::models {
namespace {

// Loads tensors by Hugging Face name, checking shape and dtype, and totals their bytes.
class WeightLoader {
 public:
  explicit WeightLoader(const io::TensorSource& source) : source_(source) {}

  StatusOr<Tensor> Matrix(const std::string& name, int64_t rows, int64_t cols) {
    UC_ASSIGN_OR_RETURN(Tensor t, io::GetWithShape(source_, name, {rows, cols}));
    bytes_ += t.nbytes();
    return t;
  }
  // Norm weights and biases: plain float dtypes only.
  StatusOr<Tensor> Vector(const std::string& name, int64_t size) {
    UC_ASSIGN_OR_RETURN(Tensor t, io::GetWithShape(source_, name, {size}));
    if (DTypeIsQuantized(t.dtype()) || t.dtype() == DType::kI32) {
      return InvalidArgumentError(source_.Describe() + ": tensor '" + name + "' has dtype " +
                                  std::string(DTypeName(t.dtype())) +
                                  ", expected F32, F16 or BF16");
    }
    bytes_ += t.nbytes();
    return t;
  }
  StatusOr<layers::Linear> Linear(const std::string& prefix, int64_t out, int64_t in, bool bias) {
    UC_ASSIGN_OR_RETURN(Tensor w, Matrix(prefix + ".weight", out, in));
    Tensor b;
    if (bias) {
      UC_ASSIGN_OR_RETURN(b, Vector(prefix + ".bias", out));
    }
    return layers::Linear(std::move(w), std::move(b));
  }
  int64_t bytes() const { return bytes_; }

 private:
  const io::TensorSource& source_;
  int64_t bytes_ = 0;
};

StatusOr<DecoderLayer> LoadLayer(const ModelConfig& c, int index, WeightLoader& loader) {
  const std::string p = "model.layers." + std::to_string(index) + ".";
  const int64_t h = c.hidden_size;
  UC_ASSIGN_OR_RETURN(Tensor in_norm, loader.Vector(p + "input_layernorm.weight", h));
  UC_ASSIGN_OR_RETURN(auto q,
                      loader.Linear(p + "self_attn.q_proj", c.q_size(), h, c.attention_bias));
  UC_ASSIGN_OR_RETURN(auto k,
                      loader.Linear(p + "self_attn.k_proj", c.kv_size(), h, c.attention_bias));
  UC_ASSIGN_OR_RETURN(auto v,
                      loader.Linear(p + "self_attn.v_proj", c.kv_size(), h, c.attention_bias));
  UC_ASSIGN_OR_RETURN(auto o, loader.Linear(p + "self_attn.o_proj", h, c.q_size(), c.o_proj_bias));
  UC_ASSIGN_OR_RETURN(Tensor post_norm, loader.Vector(p + "post_attention_layernorm.weight", h));
  const int64_t inter = c.intermediate_size;
  UC_ASSIGN_OR_RETURN(auto gate, loader.Linear(p + "mlp.gate_proj", inter, h, false));
  UC_ASSIGN_OR_RETURN(auto up, loader.Linear(p + "mlp.up_proj", inter, h, false));
  UC_ASSIGN_OR_RETURN(auto down, loader.Linear(p + "mlp.down_proj", h, inter, false));
  const kernels::AttentionShape shape{
      .num_heads = c.num_attention_heads,
      .num_kv_heads = c.num_key_value_heads,
      .head_dim = c.head_dim,
      .scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim)),
  };
  layers::Rotary rotary(c.RopeInvFreq(), c.head_dim, c.rope_style);
  layers::Attention attention(std::move(q), std::move(k), std::move(v), std::move(o),
                              std::move(rotary), shape);
  layers::GatedMlp mlp(std::move(gate), std::move(up), std::move(down));
  return DecoderLayer(index, layers::RmsNorm(std::move(in_norm), c.rms_norm_eps),
                      std::move(attention), layers::RmsNorm(std::move(post_norm), c.rms_norm_eps),
                      std::move(mlp));
}

}  // namespace

Activations::Activations(int64_t max_tokens, const ModelConfig& c)
    : max_tokens(max_tokens),
      residual(Tensor::Empty({max_tokens, c.hidden_size}, DType::kF32)),
      normed(Tensor::Empty({max_tokens, c.hidden_size}, DType::kF32)),
      block_out(Tensor::Empty({max_tokens, c.hidden_size}, DType::kF32)),
      attention(max_tokens, c.q_size(), c.kv_size()),
      mlp(max_tokens, c.intermediate_size) {}

DecoderLayer::DecoderLayer(int layer_index, layers::RmsNorm input_layernorm,
                           layers::Attention attention, layers::RmsNorm post_attention_layernorm,
                           layers::GatedMlp mlp)
    : layer_index_(layer_index),
      input_layernorm_(std::move(input_layernorm)),
      attention_(std::move(attention)),
      post_attention_layernorm_(std::move(post_attention_layernorm)),
      mlp_(std::move(mlp)) {}

void DecoderLayer::Tap(const ForwardContext& ctx, Site site, const Tensor& value) const {
  const TapPoint point{layer_index_, site};
  if (ctx.hooks != nullptr && ctx.hooks->Wants(point)) {
    ctx.hooks->Observe(point, ctx.positions, value);
  }
}

// Pre-norm attention, then pre-norm SwiGLU MLP; each adds into the residual stream.
void DecoderLayer::Forward(const ForwardContext& ctx, Activations& act, int64_t m) const {
  Tensor residual = act.residual.Slice(0, m);    // [m, hidden_size]
  Tensor normed = act.normed.Slice(0, m);        // [m, hidden_size]
  Tensor block_out = act.block_out.Slice(0, m);  // [m, hidden_size]
  input_layernorm_.Forward(residual, normed);
  attention_.Forward(normed, ctx.positions, ctx.cache->layers[layer_index_], act.attention,
                     block_out, ctx.pool);
  Tap(ctx, Site::kAttnOut, block_out);
  kernels::AddInPlace(block_out, residual);
  post_attention_layernorm_.Forward(residual, normed);
  mlp_.Forward(normed, act.mlp, block_out, ctx.pool);
  Tap(ctx, Site::kMlpOut, block_out);
  kernels::AddInPlace(block_out, residual);
  Tap(ctx, Site::kResidPost, residual);
}

StatusOr<std::unique_ptr<CausalLM>> CausalLM::Load(const Checkpoint& checkpoint) {
  const ModelConfig& c = checkpoint.config;
  WeightLoader loader(*checkpoint.tensors);
  std::unique_ptr<CausalLM> model(new CausalLM());
  model->config_ = c;
  UC_ASSIGN_OR_RETURN(Tensor embed,
                      loader.Matrix("model.embed_tokens.weight", c.vocab_size, c.hidden_size));
  model->embed_tokens_ = layers::Embedding(embed);
  model->layers_.reserve(c.num_hidden_layers);
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    UC_ASSIGN_OR_RETURN(DecoderLayer layer, LoadLayer(c, i, loader));
    model->layers_.push_back(std::move(layer));
  }
  UC_ASSIGN_OR_RETURN(Tensor norm, loader.Vector("model.norm.weight", c.hidden_size));
  model->norm_ = layers::RmsNorm(std::move(norm), c.rms_norm_eps);
  if (!c.tie_word_embeddings || checkpoint.tensors->Has("lm_head.weight")) {
    UC_ASSIGN_OR_RETURN(Tensor head, loader.Matrix("lm_head.weight", c.vocab_size, c.hidden_size));
    model->lm_head_ = layers::Linear(std::move(head), Tensor());
  } else {
    model->lm_head_ = layers::Linear(embed, Tensor());
  }
  model->weight_bytes_ = loader.bytes();
  return model;
}

KvCache CausalLM::NewKvCache(int capacity) const {
  KvCache cache;
  cache.capacity = capacity;
  cache.layers.reserve(config_.num_hidden_layers);
  for (int i = 0; i < config_.num_hidden_layers; ++i) {
    cache.layers.push_back({Tensor::Zeros({capacity, config_.kv_size()}, DType::kF32),
                            Tensor::Zeros({capacity, config_.kv_size()}, DType::kF32)});
  }
  return cache;
}

Activations& CausalLM::ActivationsFor(int64_t m) {
  if (activations_ == nullptr || activations_->max_tokens < m) {
    activations_ = std::make_unique<Activations>(m, config_);
  }
  return *activations_;
}

void CausalLM::Forward(std::span<const int32_t> ids, std::span<const int32_t> positions,
                       KvCache& cache, bool all_logits, Tensor& logits, ThreadPool* pool,
                       ForwardHooks* hooks) {
  const int64_t m = static_cast<int64_t>(ids.size());
  UC_CHECK(m >= 1 && positions.size() == ids.size(), "Forward: %lld ids, %zu positions",
           static_cast<long long>(m), positions.size());
  UC_CHECK(logits.dim(0) == (all_logits ? m : 1) && logits.dim(1) == config_.vocab_size,
           "Forward: logits shape %s", ShapeToString(logits.shape()).c_str());
  Activations& act = ActivationsFor(m);
  Tensor residual = act.residual.Slice(0, m);
  embed_tokens_.Forward(ids, residual);
  const ForwardContext ctx{positions, &cache, hooks, pool};
  for (const DecoderLayer& layer : layers_) layer.Forward(ctx, act, m);
  const int64_t first = all_logits ? 0 : m - 1;
  Tensor last = act.residual.Slice(first, m);
  Tensor normed = act.normed.Slice(first, m);
  norm_.Forward(last, normed);
  const TapPoint final_point{config_.num_hidden_layers, Site::kFinalNorm};
  if (hooks != nullptr && hooks->Wants(final_point)) {
    hooks->Observe(final_point, positions.subspan(first), normed);
  }
  lm_head_.Forward(normed, logits, pool);
}

}  // namespace uc::models
