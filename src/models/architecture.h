// File: architecture.h
// -----------------------------------------------------------------------------
// What differs between the Llama-family architectures we run. Each architecture lives in its
// own file under models/architectures/ and describes itself with one Architecture value; the
// decoder (llama_model.h) is shared and reads only ModelConfig. Adding an architecture means
// adding a file and a line to the registry in architecture.cc.
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "base/status.h"
#include "io/gguf/gguf.h"
#include "io/tensor_source.h"
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
  // Reads what the architecture's GGUF files say beyond the common "<arch>.*" keys, or what
  // llama.cpp hard-codes for it (Gemma's layer pattern); `config` already holds the common
  // fields. Null: nothing more.
  Status (*read_gguf_extras)(const io::GgufFile& file, const std::string& gguf_arch,
                             ModelConfig& config) = nullptr;
  // GGUF names post_attention_layernorm "post_attention_norm" (a sandwich norm) rather than
  // "ffn_norm" (the pre-MLP norm of Llama-style layers).
  bool gguf_sandwich_names = false;
  // Rewrites the architecture's own config.json keys into the common ones before anything is
  // read (GPT-2's n_embd -> hidden_size). Null: the file uses them already.
  Status (*normalize_hf_json)(nlohmann::json& json, const std::string& source) = nullptr;
  // Presents the checkpoint's tensors under the decoder's names ("model.layers.N.self_attn.
  // qkv_proj.weight", ...), converting layouts where they differ (GPT-2's transposed Conv1D
  // weights, GPT-NeoX's per-head q/k/v rows). `config` is the validated config. Null: the files
  // use the decoder's names.
  std::shared_ptr<const io::TensorSource> (*hf_tensors)(
      std::shared_ptr<const io::TensorSource> file, const ModelConfig& config) = nullptr;
};

const Architecture* FindArchitectureByHfClass(std::string_view hf_class);
const Architecture* FindArchitectureByGguf(std::string_view gguf_arch);
// "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM", for error messages.
std::string SupportedArchitectureNames();
// "llama, qwen2, qwen3, phi3, gemma2, gemma3": the general.architecture values we load.
std::string SupportedGgufArchitectureNames();

extern const Architecture kLlamaArchitecture;
extern const Architecture kMistralArchitecture;
extern const Architecture kQwen2Architecture;
extern const Architecture kQwen3Architecture;
extern const Architecture kPhi3Architecture;
extern const Architecture kGemma2Architecture;
extern const Architecture kGemma3Architecture;
extern const Architecture kGpt2Architecture;
extern const Architecture kGptNeoXArchitecture;
extern const Architecture kOlmo2Architecture;
extern const Architecture kQwen2MoeArchitecture;
extern const Architecture kQwen3MoeArchitecture;
extern const Architecture kOlmoeArchitecture;
extern const Architecture kMixtralArchitecture;
extern const Architecture kGptOssArchitecture;

// The mixture-of-experts fields of config.json (num_experts under `num_experts_key`,
// num_experts_per_tok, moe_intermediate_size (default intermediate_size),
// shared_expert_intermediate_size, norm_topk_prob, decoder_sparse_step, mlp_only_layers).
Status ReadMoeHfExtras(const nlohmann::json& json, const std::string& source,
                       const char* num_experts_key, ModelConfig& config);

// The same fields from a GGUF file in llama.cpp's keys ("<arch>.expert_count",
// ".expert_used_count", ".expert_feed_forward_length" (default feed_forward_length),
// ".expert_shared_feed_forward_length", ".expert_weights_norm" (default `renormalize`, what
// llama.cpp hard-codes for the family)); layers without "blk.N.ffn_gate_inp.weight" stay dense.
Status ReadMoeGgufExtras(const io::GgufFile& file, const std::string& gguf_arch, bool renormalize,
                         ModelConfig& config);

// Mistral's config.json fields (an optional positive sliding_window), shared with Mixtral.
Status ReadMistralHfExtras(const nlohmann::json& json, const std::string& source,
                           ModelConfig& config);

// Shared by the Gemma 2 and Gemma 3 files: the family's config.json fields (sandwich norms,
// (1 + w) norm weights, sqrt(hidden) embedding scale, query_pre_attn_scalar, soft-capping,
// sliding window and its layer pattern; `default_pattern`: every Nth layer is global).
Status ReadGemmaHfExtras(const nlohmann::json& json, const std::string& source, int default_pattern,
                         ModelConfig& config);
// The same from GGUF metadata, with llama.cpp's layer pattern for the family.
Status ReadGemmaGgufExtras(const io::GgufFile& file, const std::string& gguf_arch, int pattern,
                           ModelConfig& config);
// Which layers slide (config.sliding_layers, sized num_hidden_layers): config.json's
// layer_types when given, else every `default_pattern`th layer (1-based) is global
// (sliding_window_pattern overrides the pattern).
Status ReadLayerTypes(const nlohmann::json& json, const std::string& source, int default_pattern,
                      ModelConfig& config);
// Reads an optional positive float field (null or absent: `out` unchanged).
Status ReadOptionalFloat(const nlohmann::json& json, const std::string& source, const char* key,
                         float& out);
// A TensorSource presenting `file` under the decoder's names: `convert(file, name)` returns the
// tensor the decoder calls `name` (a view of the file, or a converted copy), or NotFound.
// Has() runs the conversion; the decoder asks it only of tensors it will read anyway.
class ConvertedTensors : public io::TensorSource {
 public:
  using Convert = std::function<StatusOr<Tensor>(const io::TensorSource&, std::string_view)>;
  ConvertedTensors(std::shared_ptr<const io::TensorSource> file, Convert convert)
      : file_(std::move(file)), convert_(std::move(convert)) {}
  bool Has(std::string_view name) const override { return convert_(*file_, name).ok(); }
  StatusOr<Tensor> Get(std::string_view name) const override { return convert_(*file_, name); }
  std::vector<std::string> TensorNames() const override { return file_->TensorNames(); }
  std::string Describe() const override { return file_->Describe(); }

 private:
  std::shared_ptr<const io::TensorSource> file_;
  Convert convert_;
};

// Splits "model.layers.N.rest" into (N, rest); false for other names.
bool SplitLayerName(std::string_view name, int& layer, std::string_view& rest);
// [rows, cols] -> [cols, rows] as F32 (Hugging Face Conv1D stores [in, out]).
StatusOr<Tensor> TransposedF32(const Tensor& t);

// Reads an optional float GGUF key (absent: `out` unchanged).
Status ReadOptionalGgufFloat(const io::GgufFile& file, const std::string& key, float& out);

}  // namespace uc::models
