// File: checkpoint.h
// -----------------------------------------------------------------------------
// Opens a model from disk in any supported layout and presents it uniformly: a validated
// ModelConfig plus a TensorSource whose names are Hugging Face names
// ("model.layers.3.self_attn.q_proj.weight"), whatever the file calls them.
//
//   Hugging Face directory: config.json + model.safetensors or model.safetensors.index.json
//                           (+ tokenizer.json / tokenizer.model, generation_config.json)
//   GGUF file (v2/v3):      metadata under "<arch>.*", tensors "blk.N.attn_q.weight", ...
//   llama2.c checkpoint:    "version 0" .bin (+ its tok*.bin tokenizer beside it)
//
// Every error names the file and the field or tensor. Files are memory-mapped; tensors are
// views. A Checkpoint is immutable and can be shared across threads.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "base/status.h"
#include "io/gguf/gguf.h"
#include "io/tensor_source.h"
#include "models/model_config.h"

namespace uc::models {

enum class CheckpointFormat { kHuggingFace, kGguf, kLlama2c };
std::string_view CheckpointFormatName(CheckpointFormat format);

struct Checkpoint {
  CheckpointFormat format = CheckpointFormat::kHuggingFace;
  std::filesystem::path path;  // the directory (HF) or the file (GGUF, llama2.c)
  ModelConfig config;
  std::shared_ptr<const io::TensorSource> tensors;  // Hugging Face tensor names
  std::shared_ptr<const io::GgufFile> gguf;         // set for GGUF (tokenizer metadata)
};

// Detects the layout of `path` (a directory, a .gguf file, or a llama2.c .bin) and opens it.
StatusOr<Checkpoint> OpenCheckpoint(const std::filesystem::path& path);

// The validated ModelConfig of the model at `path` (same layouts and errors as OpenCheckpoint)
// without touching its weights: a Hugging Face directory needs only config.json (plus
// generation_config.json when present), a GGUF file only its metadata, a llama2.c file only
// its header. For tools that describe a model (`undercurrent inspect-model`).
StatusOr<ModelConfig> ReadCheckpointConfig(const std::filesystem::path& path,
                                           CheckpointFormat* format = nullptr);

// Maps a Hugging Face tensor name to its GGUF name ("model.norm.weight" -> "output_norm.weight");
// returns "" for names GGUF does not have. With sandwich_names (Gemma), post_attention_layernorm
// is "post_attention_norm" and pre_feedforward_layernorm is "ffn_norm".
std::string HfToGgufTensorName(std::string_view hf_name);
std::string HfToGgufTensorName(std::string_view hf_name, bool sandwich_names);
// The same for a file of `arch` (with its sandwich names where it has them).
struct Architecture;
std::string HfToGgufTensorName(std::string_view hf_name, const Architecture& arch);

}  // namespace uc::models
