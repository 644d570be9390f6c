// GPT-NeoX / Pythia (GPTNeoXForCausalLM; GGUF "gptneox"): LayerNorm with a bias, one fused
// q/k/v projection with biases, RoPE (rotate_half) on the first rotary_pct of each head's
// dimensions, a plain GELU MLP with biases, an untied head, and the parallel residual
// (use_parallel_residual, the default: x + attn(ln1(x)) + mlp(ln2(x))) or the sequential one.
// Hugging Face's query_key_value rows are per head (head 0's q, k, v, then head 1's ...): they
// are presented to the decoder regrouped as q, k, v (an F32 copy), which is how llama.cpp's
// converter writes attn_qkv.
#include <cmath>

#include "models/architecture.h"

namespace uc::models {
namespace {

Status ReadRotaryFraction(const nlohmann::json& json, const std::string& source, double& out) {
  const nlohmann::json* holder = &json;
  const char* key = nullptr;
  for (const char* k : {"rotary_pct", "partial_rotary_factor"}) {
    if (json.contains(k) && !json[k].is_null()) key = k;
  }
  if (key == nullptr && json.contains("rope_parameters") && json["rope_parameters"].is_object() &&
      json["rope_parameters"].contains("partial_rotary_factor")) {
    holder = &json["rope_parameters"];
    key = "partial_rotary_factor";
  }
  if (key == nullptr) return OkStatus();
  const nlohmann::json& v = (*holder)[key];
  if (!v.is_number() || !(v.get<double>() > 0.0 && v.get<double>() <= 1.0)) {
    return InvalidArgumentError(source + ": " + key + " must be a number in (0, 1], got " +
                                v.dump());
  }
  out = v.get<double>();
  return OkStatus();
}

Status NormalizeNeoXJson(nlohmann::json& json, const std::string& source) {
  if (json.contains("layer_norm_eps") && !json.contains("rms_norm_eps")) {
    json["rms_norm_eps"] = json["layer_norm_eps"];
  }
  if (json.contains("rotary_emb_base") && !json.contains("rope_theta")) {
    json["rope_theta"] = json["rotary_emb_base"];
  }
  if (!json.contains("hidden_act")) json["hidden_act"] = "gelu";
  if (json.contains("use_cache") && !json["use_cache"].is_boolean()) {
    return InvalidArgumentError(source + ": use_cache must be a boolean");
  }
  return OkStatus();
}

void SetNeoXShape(ModelConfig& config) {
  config.norm_kind = NormKind::kLayer;
  config.gated_mlp = false;
  config.mlp_bias = true;
  config.attention_bias = true;
  config.o_proj_bias = true;
  config.fused_qkv = true;
  config.parallel_residual = true;
}

Status ReadNeoXExtras(const nlohmann::json& json, const std::string& source, ModelConfig& config) {
  SetNeoXShape(config);
  double fraction = 0.25;  // transformers' default rotary_pct
  UC_RETURN_IF_ERROR(ReadRotaryFraction(json, source, fraction));
  config.rotary_dim = static_cast<int>(config.head_dim * fraction);
  if (json.contains("use_parallel_residual") && json["use_parallel_residual"].is_boolean()) {
    config.parallel_residual = json["use_parallel_residual"].get<bool>();
  }
  if (json.contains("attention_bias") && json["attention_bias"].is_boolean() &&
      !json["attention_bias"].get<bool>()) {
    return UnimplementedError(source + ": attention_bias=false is not supported for GPT-NeoX");
  }
  return OkStatus();
}

Status ReadNeoXGguf(const io::GgufFile& file, const std::string& gguf_arch, ModelConfig& config) {
  SetNeoXShape(config);
  // The file does not say; Pythia's config.json says "gelu" (exact), which transformers runs.
  // llama.cpp's graph uses ggml's tanh-form GELU, an approximation of it.
  config.hidden_act = Activation::kGelu;
  const std::string key = gguf_arch + ".use_parallel_residual";
  if (file.Find(key) != nullptr) {
    UC_ASSIGN_OR_RETURN(config.parallel_residual, file.GetBool(key));
  }
  return OkStatus();
}

// Rows of head h's q, k, v at [3h, 3h + 1, 3h + 2] * head_dim -> q rows, then k, then v.
StatusOr<Tensor> RegroupQkv(const Tensor& t, int num_heads, const std::string& what) {
  if (DTypeIsQuantized(t.dtype()) || t.dtype() == DType::kI32 || t.rank() < 1 || t.rank() > 2 ||
      t.dim(0) % (3 * num_heads) != 0) {
    return InvalidArgumentError(what +
                                ": expected a float [3 * num_heads * head_dim, ...] tensor, " +
                                "got " + ShapeToString(t.shape()));
  }
  const int64_t head_dim = t.dim(0) / (3 * num_heads);
  const int64_t cols = t.rank() == 2 ? t.dim(1) : 1;
  const std::vector<float> in = t.ToFloatVector();
  std::vector<float> out(in.size());
  for (int64_t h = 0; h < num_heads; ++h) {
    for (int64_t part = 0; part < 3; ++part) {
      for (int64_t d = 0; d < head_dim; ++d) {
        const int64_t src = (h * 3 + part) * head_dim + d;
        const int64_t dst = (part * num_heads + h) * head_dim + d;
        std::copy(in.begin() + src * cols, in.begin() + (src + 1) * cols, out.begin() + dst * cols);
      }
    }
  }
  return Tensor::FromVector(out, t.shape());
}

std::shared_ptr<const io::TensorSource> NeoXTensors(std::shared_ptr<const io::TensorSource> file,
                                                    const ModelConfig& config) {
  const int num_heads = config.num_attention_heads;
  auto convert = [num_heads](const io::TensorSource& f, std::string_view name) -> StatusOr<Tensor> {
    if (name == "model.embed_tokens.weight") return f.Get("gpt_neox.embed_in.weight");
    if (name == "model.norm.weight") return f.Get("gpt_neox.final_layer_norm.weight");
    if (name == "model.norm.bias") return f.Get("gpt_neox.final_layer_norm.bias");
    if (name == "lm_head.weight") {  // Pythia's files say embed_out, transformers 5's lm_head
      return f.Has("embed_out.weight") ? f.Get("embed_out.weight") : f.Get("lm_head.weight");
    }
    int layer = 0;
    std::string_view rest;
    if (!SplitLayerName(name, layer, rest)) return io::TensorNotFoundError(f, name);
    const std::string p = "gpt_neox.layers." + std::to_string(layer) + ".";
    static const std::pair<std::string_view, std::string_view> kModules[] = {
        {"input_layernorm", "input_layernorm"},
        {"post_attention_layernorm", "post_attention_layernorm"},
        {"self_attn.qkv_proj", "attention.query_key_value"},
        {"self_attn.o_proj", "attention.dense"},
        {"mlp.up_proj", "mlp.dense_h_to_4h"},
        {"mlp.down_proj", "mlp.dense_4h_to_h"},
    };
    for (const auto& [decoder, hf] : kModules) {
      if (rest.substr(0, decoder.size()) != decoder) continue;
      const std::string_view field = rest.substr(decoder.size());
      if (field != ".weight" && field != ".bias") break;
      const std::string hf_name = p + std::string(hf) + std::string(field);
      UC_ASSIGN_OR_RETURN(Tensor t, f.Get(hf_name));
      if (decoder != "self_attn.qkv_proj") return t;
      return RegroupQkv(t, num_heads, f.Describe() + ": " + hf_name);
    }
    return io::TensorNotFoundError(f, name);
  };
  return std::make_shared<ConvertedTensors>(std::move(file), convert);
}

}  // namespace

const Architecture kGptNeoXArchitecture = {
    .hf_class = "GPTNeoXForCausalLM",
    .gguf_arch = "gptneox",
    .gguf_rope_style = kernels::RopeStyle::kHalf,
    .read_hf_extras = ReadNeoXExtras,
    .read_gguf_extras = ReadNeoXGguf,
    .normalize_hf_json = NormalizeNeoXJson,
    .hf_tensors = NeoXTensors,
};

}  // namespace uc::models
