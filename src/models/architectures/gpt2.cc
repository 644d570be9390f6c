// GPT-2 (GPT2LMHeadModel; GGUF "gpt2"): LayerNorm with a bias in front of both blocks and the
// head, learned absolute positions added to the token embeddings (no RoPE), attention with one
// fused q/k/v projection and biases on it and on the output projection, a plain GELU-tanh MLP
// ("gelu_new") with biases, the LM head tied to the embeddings. Hugging Face stores the linear
// weights as Conv1D, [in, out]: they are presented to the decoder transposed (F32 copies), the
// fused c_attn as self_attn.qkv_proj (rows q, k, v). llama.cpp's converter writes them already
// transposed (attn_qkv, attn_output, ffn_up, ffn_down) and the positions as position_embd.
#include "models/architecture.h"

namespace uc::models {
namespace {

void Rename(nlohmann::json& json, const char* from, const char* to) {
  if (json.contains(from) && !json.contains(to)) json[to] = json[from];
}

Status NormalizeGpt2Json(nlohmann::json& json, const std::string& source) {
  for (const char* key : {"scale_attn_by_inverse_layer_idx", "add_cross_attention"}) {
    if (json.contains(key) && json[key].is_boolean() && json[key].get<bool>()) {
      return UnimplementedError(source + ": " + key + "=true is not supported");
    }
  }
  if (json.contains("scale_attn_weights") && json["scale_attn_weights"] == false) {
    return UnimplementedError(source + ": scale_attn_weights=false is not supported");
  }
  Rename(json, "n_embd", "hidden_size");
  Rename(json, "n_layer", "num_hidden_layers");
  Rename(json, "n_head", "num_attention_heads");
  Rename(json, "n_positions", "max_position_embeddings");
  Rename(json, "layer_norm_epsilon", "rms_norm_eps");
  Rename(json, "activation_function", "hidden_act");
  if (!json.contains("intermediate_size")) {
    if (json.contains("n_inner") && !json["n_inner"].is_null()) {
      json["intermediate_size"] = json["n_inner"];
    } else if (json.contains("hidden_size") && json["hidden_size"].is_number_integer()) {
      json["intermediate_size"] = 4 * json["hidden_size"].get<int>();
    }
  }
  if (!json.contains("tie_word_embeddings")) json["tie_word_embeddings"] = true;
  if (!json.contains("hidden_act")) json["hidden_act"] = "gelu_new";
  return OkStatus();
}

void SetGpt2Shape(ModelConfig& config) {
  config.norm_kind = NormKind::kLayer;
  config.learned_positions = true;
  config.rotary_dim = 0;
  config.gated_mlp = false;
  config.mlp_bias = true;
  config.attention_bias = true;
  config.o_proj_bias = true;
  config.fused_qkv = true;
}

Status ReadGpt2Extras(const nlohmann::json&, const std::string&, ModelConfig& config) {
  SetGpt2Shape(config);
  return OkStatus();
}

Status ReadGpt2Gguf(const io::GgufFile& file, const std::string&, ModelConfig& config) {
  SetGpt2Shape(config);
  config.hidden_act = Activation::kGeluTanh;  // llama.cpp's gpt2 graph: GELU (tanh form)
  if (!file.Has("position_embd.weight")) {
    return InvalidArgumentError(file.path() +
                                ": a gpt2 file needs tensor 'position_embd.weight' (positions)");
  }
  return OkStatus();
}

struct Gpt2Module {
  std::string_view decoder;  // the decoder's module name after "model.layers.N."
  std::string_view hf;       // GPT-2's after "h.N."
  bool conv1d;               // its weight is [in, out]: transposed for the decoder
};

StatusOr<Tensor> ConvertGpt2(const io::TensorSource& file, std::string_view name) {
  const std::string prefix = file.Has("transformer.wte.weight") ? "transformer." : "";
  auto get = [&](const std::string& hf) { return file.Get(prefix + hf); };
  if (name == "model.embed_tokens.weight") return get("wte.weight");
  if (name == "model.embed_positions.weight") return get("wpe.weight");
  if (name == "model.norm.weight") return get("ln_f.weight");
  if (name == "model.norm.bias") return get("ln_f.bias");
  if (name == "lm_head.weight") return file.Get("lm_head.weight");
  int layer = 0;
  std::string_view rest;
  if (!SplitLayerName(name, layer, rest)) return io::TensorNotFoundError(file, name);
  const std::string h = "h." + std::to_string(layer) + ".";
  static constexpr Gpt2Module kModules[] = {
      {"input_layernorm", "ln_1", false},          {"post_attention_layernorm", "ln_2", false},
      {"self_attn.qkv_proj", "attn.c_attn", true}, {"self_attn.o_proj", "attn.c_proj", true},
      {"mlp.up_proj", "mlp.c_fc", true},           {"mlp.down_proj", "mlp.c_proj", true},
  };
  for (const auto& [decoder, hf, conv1d] : kModules) {
    if (rest.substr(0, decoder.size()) != decoder) continue;
    const std::string_view field = rest.substr(decoder.size());  // ".weight" / ".bias"
    if (field != ".weight" && field != ".bias") break;
    const std::string hf_name = h + std::string(hf) + std::string(field);
    UC_ASSIGN_OR_RETURN(Tensor t, get(hf_name));
    if (!conv1d || field != ".weight") return t;
    auto transposed = TransposedF32(t);
    if (!transposed.ok()) return transposed.status().Annotate(file.Describe() + ": " + hf_name);
    return transposed;
  }
  return io::TensorNotFoundError(file, name);
}

std::shared_ptr<const io::TensorSource> Gpt2Tensors(std::shared_ptr<const io::TensorSource> file,
                                                    const ModelConfig&) {
  return std::make_shared<ConvertedTensors>(std::move(file), ConvertGpt2);
}

}  // namespace

const Architecture kGpt2Architecture = {
    .hf_class = "GPT2LMHeadModel",
    .gguf_arch = "gpt2",
    .gguf_rope_style = kernels::RopeStyle::kHalf,
    .read_hf_extras = ReadGpt2Extras,
    .read_gguf_extras = ReadGpt2Gguf,
    .normalize_hf_json = NormalizeGpt2Json,
    .hf_tensors = Gpt2Tensors,
};

}  // namespace uc::models
