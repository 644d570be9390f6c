// OLMoE (OlmoeForCausalLM): the Llama decoder with q and k RMS-normed over each token's whole
// projection (weights [q_size] and [kv_size], as OLMo-2) and a mixture-of-experts MLP whose
// routing weights are the softmax over all experts, not renormalised over the chosen
// (norm_topk_prob false in the published models). clip_qkv is not supported.
#include "models/architecture.h"

namespace uc::models {
namespace {

Status ReadOlmoeExtras(const nlohmann::json& json, const std::string& source, ModelConfig& config) {
  config.qk_norm = true;
  config.qk_norm_full_width = true;
  if (json.contains("attention_bias") && json["attention_bias"].is_boolean()) {
    config.attention_bias = json["attention_bias"].get<bool>();
    config.o_proj_bias = config.attention_bias;
  }
  if (json.contains("clip_qkv") && !json["clip_qkv"].is_null()) {
    return UnimplementedError(source + ": clip_qkv " + json["clip_qkv"].dump() +
                              " is not supported (null only)");
  }
  return ReadMoeHfExtras(json, source, "num_experts", config);
}

// llama.cpp's "olmoe": full-width q/k norms, no renormalisation.
Status ReadOlmoeGguf(const io::GgufFile& file, const std::string& arch, ModelConfig& config) {
  config.qk_norm = true;
  config.qk_norm_full_width = true;
  return ReadMoeGgufExtras(file, arch, /*renormalize=*/false, config);
}

}  // namespace

const Architecture kOlmoeArchitecture = {
    .hf_class = "OlmoeForCausalLM",
    .gguf_arch = "olmoe",
    .gguf_rope_style = kernels::RopeStyle::kHalf,
    .read_hf_extras = ReadOlmoeExtras,
    .read_gguf_extras = ReadOlmoeGguf,
};

}  // namespace uc::models
