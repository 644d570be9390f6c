#include "models/model_config.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace uc::models {
namespace {

Status FieldError(const std::string& source, const char* field, const std::string& what) {
  return InvalidArgumentError(source + ": " + field + " " + what);
}

Status RequirePositive(const std::string& source, const char* field, int value) {
  if (value > 0) return OkStatus();
  return FieldError(source, field, "must be positive, got " + std::to_string(value));
}

// Positive and at most `max`: sizes far past any real model are refused before anything is
// allocated for them (a config stating 10^9 layers must be an error, not a bad_alloc).
Status RequireSize(const std::string& source, const char* field, int value, int max) {
  UC_RETURN_IF_ERROR(RequirePositive(source, field, value));
  if (value <= max) return OkStatus();
  return FieldError(source, field,
                    "is " + std::to_string(value) + ", more than the " + std::to_string(max) +
                        " any supported model has; the file is damaged or not a model's");
}

}  // namespace

Status ModelConfig::Validate(const std::string& source) const {
  UC_RETURN_IF_ERROR(RequireSize(source, "hidden_size", hidden_size, kMaxHiddenSize));
  UC_RETURN_IF_ERROR(
      RequireSize(source, "intermediate_size", intermediate_size, kMaxIntermediateSize));
  UC_RETURN_IF_ERROR(RequireSize(source, "num_hidden_layers", num_hidden_layers, kMaxLayers));
  UC_RETURN_IF_ERROR(RequireSize(source, "num_attention_heads", num_attention_heads, kMaxHeads));
  UC_RETURN_IF_ERROR(RequireSize(source, "num_key_value_heads", num_key_value_heads, kMaxHeads));
  UC_RETURN_IF_ERROR(RequireSize(source, "head_dim", head_dim, kMaxHeadDim));
  UC_RETURN_IF_ERROR(RequireSize(source, "vocab_size", vocab_size, kMaxVocabSize));
  UC_RETURN_IF_ERROR(RequireSize(source, "max_position_embeddings", max_position_embeddings,
                                 kMaxPositionEmbeddings));
  if (num_attention_heads % num_key_value_heads != 0) {
    return FieldError(source, "num_key_value_heads",
                      std::to_string(num_key_value_heads) +
                          " does not divide num_attention_heads " +
                          std::to_string(num_attention_heads));
  }
  if (!learned_positions && (rotary_dim <= 0 || rotary_dim > head_dim || rotary_dim % 2 != 0)) {
    return FieldError(source, "rotary_dim",
                      std::to_string(rotary_dim) +
                          " must be even and in (0, head_dim=" + std::to_string(head_dim) + "]");
  }
  if (!(rms_norm_eps > 0.0f) || !std::isfinite(rms_norm_eps)) {
    return FieldError(source, "rms_norm_eps", "must be a positive number");
  }
  if (!(rope_theta > 0.0f) || !std::isfinite(rope_theta)) {
    return FieldError(source, "rope_theta", "must be a positive number");
  }
  if (!rope_scaling.type.empty() && rope_scaling.type != "llama3" &&
      rope_scaling.type != "linear" && rope_scaling.type != "yarn" &&
      rope_scaling.type != "default") {
    return UnimplementedError(source + ": rope_scaling.rope_type '" + rope_scaling.type +
                              "' is not supported (supported: llama3, linear, yarn)");
  }
  if (rope_scaling.type == "yarn" && rope_scaling.original_max_position_embeddings <= 0) {
    return FieldError(source, "rope_scaling.original_max_position_embeddings", "must be positive");
  }
  if (!rope_scaling.type.empty() && !(rope_scaling.factor > 0.0f)) {
    return FieldError(source, "rope_scaling.factor", "must be positive");
  }
  if (!rope_freq_factors.empty() && static_cast<int>(rope_freq_factors.size()) != rotary_dim / 2) {
    return FieldError(source, "rope_freqs",
                      "has " + std::to_string(rope_freq_factors.size()) + " entries, expected " +
                          std::to_string(rotary_dim / 2));
  }
  if (sliding_window < 0) return FieldError(source, "sliding_window", "must not be negative");
  if (!sliding_layers.empty() && static_cast<int>(sliding_layers.size()) != num_hidden_layers) {
    return FieldError(source, "layer_types",
                      "has " + std::to_string(sliding_layers.size()) + " entries for " +
                          std::to_string(num_hidden_layers) + " layers");
  }
  const auto non_negative = [](float v) { return std::isfinite(v) && v >= 0.0f; };
  if (!non_negative(rope_local_theta)) {
    return FieldError(source, "rope_local_base_freq", "must be a positive number");
  }
  if (!non_negative(attention_scale)) {
    return FieldError(source, "query_pre_attn_scalar", "must be a positive number");
  }
  if (!non_negative(attn_logit_softcapping)) {
    return FieldError(source, "attn_logit_softcapping", "must be a positive number or null");
  }
  if (!non_negative(final_logit_softcapping)) {
    return FieldError(source, "final_logit_softcapping", "must be a positive number or null");
  }
  if (!(embedding_multiplier > 0.0f) || !std::isfinite(embedding_multiplier)) {
    return FieldError(source, "embedding multiplier", "must be a positive number");
  }
  return ValidateMoe(source);
}

Status ModelConfig::ValidateMoe(const std::string& source) const {
  if (num_experts < 0) return FieldError(source, "num_experts", "must not be negative");
  if (num_experts == 0) return OkStatus();
  UC_RETURN_IF_ERROR(RequireSize(source, "num_experts", num_experts, kMaxExperts));
  if (hidden_act != Activation::kSilu || !gated_mlp || parallel_residual) {
    return UnimplementedError(source + ": experts are SiLU-gated MLPs in a sequential block here");
  }
  UC_RETURN_IF_ERROR(RequireSize(source, "num_experts_per_tok", num_experts_per_tok, num_experts));
  if (!(swiglu_limit >= 0.0f) || !std::isfinite(swiglu_limit) || !std::isfinite(swiglu_alpha)) {
    return FieldError(source, "swiglu_limit", "must be a finite non-negative number");
  }
  UC_RETURN_IF_ERROR(
      RequireSize(source, "moe_intermediate_size", moe_intermediate_size, kMaxIntermediateSize));
  if (shared_expert_intermediate_size < 0 ||
      shared_expert_intermediate_size > kMaxIntermediateSize) {
    return FieldError(source, "shared_expert_intermediate_size",
                      "must be in [0, " + std::to_string(kMaxIntermediateSize) + "]");
  }
  UC_RETURN_IF_ERROR(
      RequireSize(source, "decoder_sparse_step", decoder_sparse_step, num_hidden_layers));
  for (const int layer : mlp_only_layers) {
    if (layer < 0 || layer >= num_hidden_layers) {
      return FieldError(source, "mlp_only_layers",
                        "names layer " + std::to_string(layer) + " of a model with " +
                            std::to_string(num_hidden_layers) + " layers");
    }
  }
  return OkStatus();
}

bool ModelConfig::IsMoeLayer(int layer) const {
  if (num_experts <= 0 || (layer + 1) % decoder_sparse_step != 0) return false;
  return std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) == mlp_only_layers.end();
}

int ModelConfig::LayerWindow(int layer) const {
  if (sliding_window <= 0) return 0;
  if (sliding_layers.empty()) return sliding_window;
  return sliding_layers[layer] ? sliding_window : 0;
}

int ModelConfig::MaxWindow() const {
  int max_window = 0;
  for (int layer = 0; layer < num_hidden_layers; ++layer) {
    const int window = LayerWindow(layer);
    if (window == 0) return 0;
    max_window = std::max(max_window, window);
  }
  return max_window;
}

float ModelConfig::AttentionScale() const {
  return attention_scale > 0.0f ? attention_scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
}

float ModelConfig::RopeAttentionFactor() const {
  if (rope_scaling.type != "yarn") return 1.0f;
  if (rope_scaling.attention_factor > 0.0f) return rope_scaling.attention_factor;
  if (rope_scaling.factor <= 1.0f) return 1.0f;
  return static_cast<float>(0.1 * std::log(double{rope_scaling.factor}) + 1.0);
}

std::vector<float> ModelConfig::RopeInvFreq(int layer) const {
  if (rope_local_theta <= 0.0f || LayerWindow(layer) == 0) return RopeInvFreq();
  const int pairs = rotary_dim / 2;
  std::vector<float> inv_freq(pairs);
  for (int j = 0; j < pairs; ++j) {
    inv_freq[j] = 1.0f / std::pow(rope_local_theta, static_cast<float>(2 * j) / rotary_dim);
  }
  return inv_freq;
}

std::vector<float> ModelConfig::RopeInvFreq() const {
  const int pairs = rotary_dim / 2;
  std::vector<float> inv_freq(pairs);
  for (int j = 0; j < pairs; ++j) {
    // Same expression as the reference implementations (float pow of the base).
    inv_freq[j] = 1.0f / std::pow(rope_theta, static_cast<float>(2 * j) / rotary_dim);
  }
  if (rope_scaling.type == "linear") {
    for (float& f : inv_freq) f /= rope_scaling.factor;
  } else if (rope_scaling.type == "yarn") {
    // transformers' _compute_yarn_parameters: the correction range in double, the ramp and the
    // blend in float.
    const double dim = rotary_dim, base = rope_theta;
    const auto correction_dim = [&](double rotations) {
      return dim *
             std::log(rope_scaling.original_max_position_embeddings /
                      (rotations * 2.0 * std::numbers::pi)) /
             (2.0 * std::log(base));
    };
    double low = correction_dim(rope_scaling.beta_fast);
    double high = correction_dim(rope_scaling.beta_slow);
    if (rope_scaling.truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, dim - 1);
    if (low == high) high += 0.001;
    for (int j = 0; j < pairs; ++j) {
      const float ramp = std::clamp(
          (static_cast<float>(j) - static_cast<float>(low)) / static_cast<float>(high - low), 0.0f,
          1.0f);
      const float extrapolation = 1.0f - ramp;
      const float pos_freq = std::pow(rope_theta, static_cast<float>(2 * j) / rotary_dim);
      const float interpolation = 1.0f / (rope_scaling.factor * pos_freq);
      inv_freq[j] = interpolation * (1.0f - extrapolation) + inv_freq[j] * extrapolation;
    }
  } else if (rope_scaling.type == "llama3") {
    const float low_wavelen =
        rope_scaling.original_max_position_embeddings / rope_scaling.low_freq_factor;
    const float high_wavelen =
        rope_scaling.original_max_position_embeddings / rope_scaling.high_freq_factor;
    for (float& f : inv_freq) {
      const float wavelen = 2.0f * std::numbers::pi_v<float> / f;
      if (wavelen < high_wavelen) continue;  // high frequency: unchanged
      if (wavelen > low_wavelen) {
        f /= rope_scaling.factor;
        continue;
      }
      const float smooth =
          (rope_scaling.original_max_position_embeddings / wavelen - rope_scaling.low_freq_factor) /
          (rope_scaling.high_freq_factor - rope_scaling.low_freq_factor);
      f = (1.0f - smooth) * f / rope_scaling.factor + smooth * f;
    }
  }
  for (size_t j = 0; j < rope_freq_factors.size(); ++j) inv_freq[j] /= rope_freq_factors[j];
  return inv_freq;
}

std::string ModelConfig::ModelType() const {
  if (architecture == "MistralForCausalLM") return "mistral";
  if (architecture == "Qwen2ForCausalLM") return "qwen2";
  if (architecture == "Qwen3ForCausalLM") return "qwen3";
  if (architecture == "Phi3ForCausalLM") return "phi3";
  if (architecture == "Gemma2ForCausalLM") return "gemma2";
  if (architecture == "Gemma3ForCausalLM") return "gemma3_text";
  if (architecture == "GPT2LMHeadModel") return "gpt2";
  if (architecture == "GPTNeoXForCausalLM") return "gpt_neox";
  if (architecture == "Olmo2ForCausalLM") return "olmo2";
  if (architecture == "Qwen2MoeForCausalLM") return "qwen2_moe";
  if (architecture == "Qwen3MoeForCausalLM") return "qwen3_moe";
  if (architecture == "OlmoeForCausalLM") return "olmoe";
  if (architecture == "MixtralForCausalLM") return "mixtral";
  if (architecture == "GptOssForCausalLM") return "gpt_oss";
  return "llama";
}

}  // namespace uc::models
