// Qwen3 (dense): the Llama decoder with an RMSNorm over every q and k head before RoPE
// ("q_norm"/"k_norm", GGUF attn_q_norm/attn_k_norm), no q/k/v biases unless attention_bias,
// usually tied embeddings, rotate_half RoPE in both Hugging Face and GGUF ("neox") files.
#include "models/architecture.h"

namespace uc::models {
namespace {

Status ReadQwen3Extras(const nlohmann::json& json, const std::string& source, ModelConfig& config) {
  config.qk_norm = true;
  if (json.contains("attention_bias") && json["attention_bias"].is_boolean()) {
    config.attention_bias = json["attention_bias"].get<bool>();
  }
  const bool use_window = json.contains("use_sliding_window") &&
                          json["use_sliding_window"].is_boolean() &&
                          json["use_sliding_window"].get<bool>();
  if (use_window) {
    return UnimplementedError(source +
                              ": use_sliding_window=true (Qwen's max_window_layers pattern) is not "
                              "supported");
  }
  return OkStatus();
}

Status ReadQwen3Gguf(const io::GgufFile& file, const std::string&, ModelConfig& config) {
  config.qk_norm = true;
  if (!file.Has("blk.0.attn_q_norm.weight")) {
    return InvalidArgumentError(
        file.path() + ": a qwen3 file needs tensor 'blk.0.attn_q_norm.weight' (q/k norms)");
  }
  return OkStatus();
}

}  // namespace

const Architecture kQwen3Architecture = {
    .hf_class = "Qwen3ForCausalLM",
    .gguf_arch = "qwen3",
    .gguf_rope_style = kernels::RopeStyle::kHalf,
    .read_hf_extras = ReadQwen3Extras,
    .read_gguf_extras = ReadQwen3Gguf,
};

}  // namespace uc::models
