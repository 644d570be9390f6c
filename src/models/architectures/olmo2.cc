// OLMo-2 (Olmo2ForCausalLM; GGUF "olmo2"): the Llama decoder without the norms in front of its
// blocks; instead each block's output is RMS-normed before it joins the residual stream
// (post_attention_layernorm, post_feedforward_layernorm; GGUF post_attention_norm, post_ffw_norm,
// Gemma's sandwich names), and
// q and k are RMS-normed over each token's whole projection (weights [q_size] and [kv_size],
// not per head) before RoPE (rotate_half in both layouts). Under tensor parallelism the q/k norm
// all-reduces each token's sum of squares.
#include "models/architecture.h"

namespace uc::models {
namespace {

void SetOlmo2Shape(ModelConfig& config) {
  config.qk_norm = true;
  config.qk_norm_full_width = true;
  config.sandwich_norms = true;
  config.pre_norms = false;
}

Status ReadOlmo2Extras(const nlohmann::json& json, const std::string&, ModelConfig& config) {
  SetOlmo2Shape(config);
  if (json.contains("attention_bias") && json["attention_bias"].is_boolean()) {
    config.attention_bias = json["attention_bias"].get<bool>();
    config.o_proj_bias = config.attention_bias;
  }
  return OkStatus();
}

Status ReadOlmo2Gguf(const io::GgufFile& file, const std::string&, ModelConfig& config) {
  SetOlmo2Shape(config);
  if (!file.Has("blk.0.attn_q_norm.weight") || !file.Has("blk.0.post_attention_norm.weight")) {
    return InvalidArgumentError(file.path() +
                                ": an olmo2 file needs tensors 'blk.0.attn_q_norm.weight' and "
                                "'blk.0.post_attention_norm.weight'");
  }
  return OkStatus();
}

}  // namespace

const Architecture kOlmo2Architecture = {
    .hf_class = "Olmo2ForCausalLM",
    .gguf_arch = "olmo2",
    .gguf_rope_style = kernels::RopeStyle::kHalf,
    .read_hf_extras = ReadOlmo2Extras,
    .read_gguf_extras = ReadOlmo2Gguf,
    .gguf_sandwich_names = true,
};

}  // namespace uc::models
