// Phi-3 (mini/medium, 4k and 128k share the decoder): the Llama decoder with q/k/v fused into
// one "qkv_proj" (rows q, then k, then v) and gate/up fused into "gate_up_proj" (rows gate, then
// up); the loader splits them into views, so the weights are used in place. GGUF "phi3" keeps
// them fused too (attn_qkv, ffn_up of 2 * intermediate rows). rotate_half RoPE ("neox");
// an optional sliding window over every layer. The 128k variants' "longrope" scaling is not
// supported (Validate names it).
#include <cmath>

#include "models/architecture.h"

namespace uc::models {
namespace {

Status ReadPhi3Extras(const nlohmann::json& json, const std::string& source, ModelConfig& config) {
  config.fused_qkv = true;
  config.fused_gate_up = true;
  if (json.contains("sliding_window") && json["sliding_window"].is_number_integer()) {
    const int window = json["sliding_window"].get<int>();
    if (window <= 0) {
      return InvalidArgumentError(source + ": sliding_window must be positive or null, got " +
                                  std::to_string(window));
    }
    config.sliding_window = window;
  }
  if (json.contains("partial_rotary_factor") && json["partial_rotary_factor"].is_number()) {
    const double factor = json["partial_rotary_factor"].get<double>();
    if (!(factor > 0.0 && factor <= 1.0)) {
      return InvalidArgumentError(source + ": partial_rotary_factor must be in (0, 1]");
    }
    config.rotary_dim = static_cast<int>(std::lround(config.head_dim * factor));
  }
  return OkStatus();
}

Status ReadPhi3Gguf(const io::GgufFile& file, const std::string& gguf_arch, ModelConfig& config) {
  config.fused_qkv = true;
  config.fused_gate_up = true;
  if (file.Find(gguf_arch + ".attention.sliding_window") != nullptr) {
    UC_ASSIGN_OR_RETURN(int64_t window, file.GetInt(gguf_arch + ".attention.sliding_window"));
    if (window < 0 || window > kMaxPositionEmbeddings) {
      return InvalidArgumentError(
          file.path() + ": " + gguf_arch +
          ".attention.sliding_window is out of range: " + std::to_string(window));
    }
    config.sliding_window = static_cast<int>(window);
  }
  return OkStatus();
}

}  // namespace

const Architecture kPhi3Architecture = {
    .hf_class = "Phi3ForCausalLM",
    .gguf_arch = "phi3",
    .gguf_rope_style = kernels::RopeStyle::kHalf,
    .read_hf_extras = ReadPhi3Extras,
    .read_gguf_extras = ReadPhi3Gguf,
};

}  // namespace uc::models
