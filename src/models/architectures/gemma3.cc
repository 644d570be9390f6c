// Gemma 3 (text; the 270M/1B checkpoints, and the language model of the larger ones): the
// Gemma 2 layer (gemma2.cc: sandwich norms, (1 + w) weights, scaled embeddings, GELU-tanh)
// with an RMSNorm over every q and k head before RoPE, no soft-capping, and five sliding
// layers per global one whose RoPE base is rope_local_base_freq (10000, unscaled) while the
// global layers use rope_theta (1e6) with any rope_scaling.
#include "models/architecture.h"

namespace uc::models {
namespace {

// Gemma 3's default theta for the local (sliding) layers.
constexpr float kLocalTheta = 10000.0f;

Status ReadGemma3Extras(const nlohmann::json& json, const std::string& source,
                        ModelConfig& config) {
  UC_RETURN_IF_ERROR(ReadGemmaHfExtras(json, source, /*default_pattern=*/6, config));
  config.qk_norm = true;
  config.rope_local_theta = kLocalTheta;
  UC_RETURN_IF_ERROR(
      ReadOptionalFloat(json, source, "rope_local_base_freq", config.rope_local_theta));
  // transformers 5 layout: rope_parameters {"sliding_attention": {"rope_theta": ...}, ...}.
  if (json.contains("rope_parameters") && json["rope_parameters"].is_object() &&
      json["rope_parameters"].contains("sliding_attention") &&
      json["rope_parameters"]["sliding_attention"].is_object()) {
    UC_RETURN_IF_ERROR(ReadOptionalFloat(json["rope_parameters"]["sliding_attention"],
                                         source + ": rope_parameters.sliding_attention",
                                         "rope_theta", config.rope_local_theta));
  }
  return OkStatus();
}

Status ReadGemma3Gguf(const io::GgufFile& file, const std::string& gguf_arch, ModelConfig& config) {
  UC_RETURN_IF_ERROR(ReadGemmaGgufExtras(file, gguf_arch, /*pattern=*/6, config));
  config.qk_norm = true;
  config.rope_local_theta = kLocalTheta;
  return ReadOptionalGgufFloat(file, gguf_arch + ".rope.freq_base_swa", config.rope_local_theta);
}

}  // namespace

const Architecture kGemma3Architecture = {
    .hf_class = "Gemma3ForCausalLM",
    .gguf_arch = "gemma3",
    .gguf_rope_style = kernels::RopeStyle::kHalf,
    .read_hf_extras = ReadGemma3Extras,
    .read_gguf_extras = ReadGemma3Gguf,
    .gguf_sandwich_names = true,
};

}  // namespace uc::models
