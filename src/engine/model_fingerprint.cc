#include "engine/model_fingerprint.h"

#include "base/fingerprint.h"

namespace uc::engine {

nlohmann::json ModelFingerprint(LLMEngine& engine) {
  const models::ModelConfig& c = engine.config();
  nlohmann::json model = {{"architecture", c.architecture},
                          {"hidden_size", c.hidden_size},
                          {"intermediate_size", c.intermediate_size},
                          {"num_hidden_layers", c.num_hidden_layers},
                          {"num_attention_heads", c.num_attention_heads},
                          {"num_key_value_heads", c.num_key_value_heads},
                          {"vocab_size", c.vocab_size},
                          {"tokenizer_vocab_size", engine.tokenizer().vocab_size()},
                          {"max_model_len", engine.max_model_len()}};
  const auto& tensors = engine.deployment().checkpoint().tensors;
  if (tensors != nullptr && tensors->Has("model.norm.weight")) {
    StatusOr<Tensor> norm = tensors->Get("model.norm.weight");
    if (norm.ok()) {
      model["norm_weight_fnv1a64"] = Hex64(
          Fnv1a64({static_cast<const char*>(norm->raw()), static_cast<size_t>(norm->nbytes())}));
    }
  }
  return model;
}

}  // namespace uc::engine
