// Qwen2: the Llama decoder with biases on the q, k and v projections (never on o_proj),
// usually tied embeddings, and rotate_half RoPE in both Hugging Face and GGUF ("neox") files.
// Its sliding window is off unless "use_sliding_window" is true.
#include "models/architecture.h"

namespace uc::models {
namespace {

Status ReadQwen2Extras(const nlohmann::json& json, const std::string& source, ModelConfig& config) {
  config.attention_bias = true;
  const bool use_window = json.contains("use_sliding_window") &&
                          json["use_sliding_window"].is_boolean() &&
                          json["use_sliding_window"].get<bool>();
  if (use_window) {
    return UnimplementedError(source +
                              ": use_sliding_window=true (per-layer windows) is not supported");
  }
  return OkStatus();
}

}  // namespace

const Architecture kQwen2Architecture = {
    .hf_class = "Qwen2ForCausalLM",
    .gguf_arch = "qwen2",
    .gguf_rope_style = kernels::RopeStyle::kHalf,
    .read_hf_extras = ReadQwen2Extras,
};

}  // namespace uc::models
