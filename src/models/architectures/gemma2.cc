// Gemma 2, and what the Gemma family shares (ReadGemmaHfExtras / ReadGemmaGgufExtras, used by
// gemma3.cc too): four norms per layer — input, post-attention, pre- and post-feedforward — with
// the block outputs normed before they join the residual stream; RMSNorm weights stored as w
// and applied as (1 + w) in Hugging Face files (GGUF stores 1 + w); embeddings scaled by
// sqrt(hidden_size); GELU-tanh gated MLP; attention scores scaled by query_pre_attn_scalar^-0.5;
// sliding-window layers interleaved with global ones. Gemma 2 adds tanh soft-capping of the
// attention scores and of the final logits; its even layers (0, 2, ...) slide.
#include <cmath>

#include "models/architecture.h"

namespace uc::models {
namespace {

Status ReadGemma2Extras(const nlohmann::json& json, const std::string& source,
                        ModelConfig& config) {
  return ReadGemmaHfExtras(json, source, /*default_pattern=*/2, config);
}

Status ReadGemma2Gguf(const io::GgufFile& file, const std::string& gguf_arch, ModelConfig& config) {
  return ReadGemmaGgufExtras(file, gguf_arch, /*pattern=*/2, config);
}

}  // namespace

Status ReadLayerTypes(const nlohmann::json& json, const std::string& source, int pattern,
                      ModelConfig& config) {
  config.sliding_layers.assign(static_cast<size_t>(config.num_hidden_layers), false);
  if (json.contains("layer_types") && json["layer_types"].is_array()) {
    const nlohmann::json& types = json["layer_types"];
    if (types.size() != config.sliding_layers.size()) {
      return InvalidArgumentError(source + ": layer_types has " + std::to_string(types.size()) +
                                  " entries for num_hidden_layers " +
                                  std::to_string(config.num_hidden_layers));
    }
    for (size_t i = 0; i < types.size(); ++i) {
      if (types[i] == "sliding_attention") {
        config.sliding_layers[i] = true;
      } else if (types[i] != "full_attention") {
        return InvalidArgumentError(source + ": layer_types[" + std::to_string(i) + "] is " +
                                    types[i].dump() +
                                    " (expected \"sliding_attention\" or \"full_attention\")");
      }
    }
    return OkStatus();
  }
  for (const char* key : {"sliding_window_pattern", "_sliding_window_pattern"}) {
    if (json.contains(key) && json[key].is_number_integer()) pattern = json[key].get<int>();
  }
  if (pattern <= 0) {
    return InvalidArgumentError(source + ": sliding_window_pattern must be positive");
  }
  for (int i = 0; i < config.num_hidden_layers; ++i) {
    config.sliding_layers[i] = (i + 1) % pattern != 0;
  }
  return OkStatus();
}

Status ReadGemmaHfExtras(const nlohmann::json& json, const std::string& source, int default_pattern,
                         ModelConfig& config) {
  config.norm_weight_plus_one = true;
  config.sandwich_norms = true;
  config.tie_word_embeddings = true;
  config.embedding_multiplier = static_cast<float>(std::sqrt(double{1.0} * config.hidden_size));
  float query_pre_attn_scalar = 0.0f;
  UC_RETURN_IF_ERROR(
      ReadOptionalFloat(json, source, "query_pre_attn_scalar", query_pre_attn_scalar));
  if (query_pre_attn_scalar > 0.0f) {
    config.attention_scale = static_cast<float>(1.0 / std::sqrt(double{query_pre_attn_scalar}));
  }
  UC_RETURN_IF_ERROR(
      ReadOptionalFloat(json, source, "attn_logit_softcapping", config.attn_logit_softcapping));
  UC_RETURN_IF_ERROR(
      ReadOptionalFloat(json, source, "final_logit_softcapping", config.final_logit_softcapping));
  if (json.contains("sliding_window") && json["sliding_window"].is_number_integer()) {
    const int window = json["sliding_window"].get<int>();
    if (window <= 0) {
      return InvalidArgumentError(source + ": sliding_window must be positive, got " +
                                  std::to_string(window));
    }
    config.sliding_window = window;
    UC_RETURN_IF_ERROR(ReadLayerTypes(json, source, default_pattern, config));
  }
  if (json.contains("attention_bias") && json["attention_bias"].is_boolean() &&
      json["attention_bias"].get<bool>()) {
    return UnimplementedError(source + ": attention_bias=true is not supported for Gemma");
  }
  return OkStatus();
}

Status ReadGemmaGgufExtras(const io::GgufFile& file, const std::string& gguf_arch, int pattern,
                           ModelConfig& config) {
  config.sandwich_norms = true;
  config.hidden_act = Activation::kGeluTanh;
  config.embedding_multiplier = static_cast<float>(std::sqrt(double{1.0} * config.hidden_size));
  // llama.cpp: 1 / sqrt(head_dim), except the 27B models (query_pre_attn_scalar =
  // hidden / heads), which it recognizes by their layer count.
  const bool is_27b = (gguf_arch == "gemma2" && config.num_hidden_layers == 46) ||
                      (gguf_arch == "gemma3" && config.num_hidden_layers == 62);
  if (is_27b) {
    config.attention_scale = static_cast<float>(
        1.0 / std::sqrt(double{1.0} * config.hidden_size / config.num_attention_heads));
  }
  UC_RETURN_IF_ERROR(ReadOptionalGgufFloat(file, gguf_arch + ".attn_logit_softcapping",
                                           config.attn_logit_softcapping));
  UC_RETURN_IF_ERROR(ReadOptionalGgufFloat(file, gguf_arch + ".final_logit_softcapping",
                                           config.final_logit_softcapping));
  if (file.Find(gguf_arch + ".attention.sliding_window") != nullptr) {
    UC_ASSIGN_OR_RETURN(int64_t window, file.GetInt(gguf_arch + ".attention.sliding_window"));
    if (window <= 0 || window > kMaxPositionEmbeddings) {
      return InvalidArgumentError(
          file.path() + ": " + gguf_arch +
          ".attention.sliding_window is out of range: " + std::to_string(window));
    }
    config.sliding_window = static_cast<int>(window);
    config.sliding_layers.assign(static_cast<size_t>(config.num_hidden_layers), false);
    for (int i = 0; i < config.num_hidden_layers; ++i) {
      config.sliding_layers[i] = (i + 1) % pattern != 0;
    }
  }
  return OkStatus();
}

const Architecture kGemma2Architecture = {
    .hf_class = "Gemma2ForCausalLM",
    .gguf_arch = "gemma2",
    .gguf_rope_style = kernels::RopeStyle::kHalf,
    .read_hf_extras = ReadGemma2Extras,
    .read_gguf_extras = ReadGemma2Gguf,
    .gguf_sandwich_names = true,
};

}  // namespace uc::models
