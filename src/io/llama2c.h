// File: llama2c.h
// -----------------------------------------------------------------------------
// Llama2cCheckpoint: a llama2.c "version 0" (legacy) .bin checkpoint, memory-mapped, exposed
// under Hugging Face tensor names so model code loads it like a safetensors checkpoint.
//
// Layout: seven int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len),
// then fp32 arrays, each holding all layers back to back: token embedding [vocab][dim],
// attention norms [L][dim], wq [L][dim][dim], wk [L][kv_dim][dim], wv [L][kv_dim][dim],
// wo [L][dim][dim], FFN norms [L][dim], w1 [L][hidden][dim], w2 [L][dim][hidden],
// w3 [L][hidden][dim], final norm [dim], two unused legacy RoPE tables [seq_len][head_size/2],
// and, only when vocab_size is negative, a separate classifier [vocab][dim].
//
// Names: model.embed_tokens.weight, model.layers.{i}.input_layernorm.weight,
// .self_attn.{q,k,v,o}_proj.weight, .post_attention_layernorm.weight, .mlp.gate_proj.weight
// (w1), .mlp.down_proj.weight (w2), .mlp.up_proj.weight (w3), model.norm.weight, and
// lm_head.weight only with a separate classifier. q/k rows stay in llama2.c order (RoPE on
// adjacent pairs), not the Hugging Face rotate-half order; the model layer handles that.
//
// Open() checks that the header fields are positive, dim % n_heads == 0,
// n_heads % n_kv_heads == 0 and that the file size is exactly what the header implies.
// Immutable after Open(); thread-safe. Tensors borrow the mapping and keep it alive.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "base/status.h"
#include "io/mapped_file.h"
#include "io/tensor_source.h"

namespace uc::io {

// The header, under Hugging Face config names (llama2.c names in comments).
struct Llama2cHeader {
  int64_t hidden_size = 0;              // dim
  int64_t intermediate_size = 0;        // hidden_dim
  int64_t num_hidden_layers = 0;        // n_layers
  int64_t num_attention_heads = 0;      // n_heads
  int64_t num_key_value_heads = 0;      // n_kv_heads
  int64_t vocab_size = 0;               // |vocab_size|
  int64_t max_position_embeddings = 0;  // seq_len
  bool tie_word_embeddings = true;      // vocab_size > 0 in the file

  int64_t head_dim() const { return hidden_size / num_attention_heads; }
};

class Llama2cCheckpoint : public TensorSource {
 public:
  static StatusOr<std::shared_ptr<const Llama2cCheckpoint>> Open(const std::filesystem::path& path);

  const Llama2cHeader& header() const { return header_; }
  const std::string& path() const { return file_->path(); }

  bool Has(std::string_view name) const override;
  StatusOr<Tensor> Get(std::string_view name) const override;
  std::vector<std::string> TensorNames() const override;
  std::string Describe() const override { return file_->path(); }

 private:
  struct Slot {
    uint64_t offset;  // bytes from the start of the file
    Shape shape;
  };

  explicit Llama2cCheckpoint(std::shared_ptr<const MappedFile> file) : file_(std::move(file)) {}
  // Lays out every tensor. REQUIRES: the file size matches the header.
  void BuildSlots();

  std::shared_ptr<const MappedFile> file_;
  Llama2cHeader header_;
  std::map<std::string, Slot, std::less<>> slots_;
};

}  // namespace uc::io
