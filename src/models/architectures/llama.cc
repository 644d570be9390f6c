// Llama 1/2/3 (and Llama-3 rope_scaling, read by the common config code): pre-norm decoder,
// RMSNorm, RoPE, grouped-query attention, SwiGLU MLP; optional q/k/v/o biases
// ("attention_bias"). llama.cpp writes GGUF "llama" with q/k rows in the original interleaved
// order; with "llama.expert_count" the file is a Mixtral.
#include "models/architecture.h"

namespace uc::models {
namespace {

Status ReadLlamaExtras(const nlohmann::json& json, const std::string& source, ModelConfig& config) {
  if (json.contains("attention_bias") && json["attention_bias"].is_boolean()) {
    config.attention_bias = json["attention_bias"].get<bool>();
    config.o_proj_bias = config.attention_bias;
  }
  if (json.contains("mlp_bias") && json["mlp_bias"].is_boolean() && json["mlp_bias"].get<bool>()) {
    return UnimplementedError(source + ": mlp_bias=true is not supported");
  }
  return OkStatus();
}

// llama.cpp writes Mixtral as "llama" with experts ("llama.expert_count"); the chosen experts'
// weights are renormalised, as Mixtral's are.
Status ReadLlamaGguf(const io::GgufFile& file, const std::string& arch, ModelConfig& config) {
  if (file.Find(arch + ".expert_count") == nullptr) return OkStatus();
  config.architecture = std::string(kMixtralArchitecture.hf_class);
  return ReadMoeGgufExtras(file, arch, /*renormalize=*/true, config);
}

}  // namespace

const Architecture kLlamaArchitecture = {
    .hf_class = "LlamaForCausalLM",
    .gguf_arch = "llama",
    .gguf_rope_style = kernels::RopeStyle::kInterleaved,
    .read_hf_extras = ReadLlamaExtras,
    .read_gguf_extras = ReadLlamaGguf,
};

}  // namespace uc::models
