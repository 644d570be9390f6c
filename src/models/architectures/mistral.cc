// Mistral: the Llama decoder with grouped-query attention and an optional sliding attention
// window ("sliding_window"; null in v0.2 and later). llama.cpp converts Mistral checkpoints to
// GGUF "llama", so GGUF files load through the Llama architecture.
#include "models/architecture.h"

namespace uc::models {

Status ReadMistralHfExtras(const nlohmann::json& json, const std::string& source,
                           ModelConfig& config) {
  if (json.contains("sliding_window") && json["sliding_window"].is_number_integer()) {
    const int window = json["sliding_window"].get<int>();
    if (window <= 0) {
      return InvalidArgumentError(source + ": sliding_window must be positive or null, got " +
                                  std::to_string(window));
    }
    config.sliding_window = window;
  }
  return OkStatus();
}

const Architecture kMistralArchitecture = {
    .hf_class = "MistralForCausalLM",
    .gguf_arch = "",
    .gguf_rope_style = kernels::RopeStyle::kInterleaved,
    .read_hf_extras = ReadMistralHfExtras,
};

}  // namespace uc::models
