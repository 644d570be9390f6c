// File: architecture.h
// -----------------------------------------------------------------------------
// What differs between the Llama-family architectures we run. Each architecture lives in its
// own file under models/architectures/ and describes itself with one Architecture value; the
// decoder (llama_model.h) is shared and reads only ModelConfig. Adding an architecture means
// adding a file and a line to the registry in architecture.cc.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "base/status.h"
#include "models/model_config.h"

namespace uc::models {

struct Architecture {
  std::string_view hf_class;   // config.json "architectures"[0]
  std::string_view gguf_arch;  // GGUF general.architecture ("" if none of its own)
  // q/k row order of GGUF files of this architecture (llama.cpp keeps "llama" interleaved).
  kernels::RopeStyle gguf_rope_style;
  // Reads the architecture's own config.json fields (biases, sliding window) into `config`.
  Status (*read_hf_extras)(const nlohmann::json& json, const std::string& source,
                           ModelConfig& config);
};

const Architecture* FindArchitectureByHfClass(std::string_view hf_class);
const Architecture* FindArchitectureByGguf(std::string_view gguf_arch);
// "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM", for error messages.
std::string SupportedArchitectureNames();

extern const Architecture kLlamaArchitecture;
extern const Architecture kMistralArchitecture;
extern const Architecture kQwen2Architecture;

}  // namespace uc::models
