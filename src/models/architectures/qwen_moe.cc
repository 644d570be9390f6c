// Qwen2-MoE and Qwen3-MoE: the Qwen2 / Qwen3 decoders (q/k/v biases; per-head q/k norms) whose
// MLPs are mixtures of experts: "mlp.gate" the router, "mlp.experts.E.{gate,up,down}_proj" the
// experts, top num_experts_per_tok of the softmax over all experts, renormalised when
// norm_topk_prob; Qwen2-MoE adds a shared expert ("mlp.shared_expert.*") scaled by
// sigmoid("mlp.shared_expert_gate" · x). mlp_only_layers / decoder_sparse_step keep some
// layers dense. rotate_half RoPE. GGUF: llama.cpp's "qwen2moe" / "qwen3moe" (experts stacked
// in blk.N.ffn_{gate,up,down}_exps, the shared expert in *_shexp).
#include "models/architecture.h"

namespace uc::models {
namespace {

Status RejectSlidingWindow(const nlohmann::json& json, const std::string& source) {
  if (json.contains("use_sliding_window") && json["use_sliding_window"].is_boolean() &&
      json["use_sliding_window"].get<bool>()) {
    return UnimplementedError(source +
                              ": use_sliding_window=true (Qwen's max_window_layers pattern) is not "
                              "supported");
  }
  return OkStatus();
}

Status ReadQwen2MoeExtras(const nlohmann::json& json, const std::string& source,
                          ModelConfig& config) {
  config.attention_bias = true;
  if (json.contains("qkv_bias") && json["qkv_bias"].is_boolean()) {
    config.attention_bias = json["qkv_bias"].get<bool>();
  }
  UC_RETURN_IF_ERROR(RejectSlidingWindow(json, source));
  return ReadMoeHfExtras(json, source, "num_experts", config);
}

Status ReadQwen3MoeExtras(const nlohmann::json& json, const std::string& source,
                          ModelConfig& config) {
  config.qk_norm = true;
  if (json.contains("attention_bias") && json["attention_bias"].is_boolean()) {
    config.attention_bias = json["attention_bias"].get<bool>();
  }
  UC_RETURN_IF_ERROR(RejectSlidingWindow(json, source));
  return ReadMoeHfExtras(json, source, "num_experts", config);
}

// llama.cpp renormalises the chosen experts' weights for Qwen3-MoE and not for Qwen2-MoE.
Status ReadQwen2MoeGguf(const io::GgufFile& file, const std::string& arch, ModelConfig& config) {
  return ReadMoeGgufExtras(file, arch, /*renormalize=*/false, config);
}

Status ReadQwen3MoeGguf(const io::GgufFile& file, const std::string& arch, ModelConfig& config) {
  config.qk_norm = true;
  return ReadMoeGgufExtras(file, arch, /*renormalize=*/true, config);
}

}  // namespace

const Architecture kQwen2MoeArchitecture = {
    .hf_class = "Qwen2MoeForCausalLM",
    .gguf_arch = "qwen2moe",
    .gguf_rope_style = kernels::RopeStyle::kHalf,
    .read_hf_extras = ReadQwen2MoeExtras,
    .read_gguf_extras = ReadQwen2MoeGguf,
};

const Architecture kQwen3MoeArchitecture = {
    .hf_class = "Qwen3MoeForCausalLM",
    .gguf_arch = "qwen3moe",
    .gguf_rope_style = kernels::RopeStyle::kHalf,
    .read_hf_extras = ReadQwen3MoeExtras,
    .read_gguf_extras = ReadQwen3MoeGguf,
};

}  // namespace uc::models
