// File: quantize.h
// -----------------------------------------------------------------------------
// Model conversion and quantization behind `undercurrent quantize IN OUT --type T`: reads a
// GGUF file or a Hugging Face directory, dequantizes every tensor to F32 and writes a GGUF file
// whose tensors take the types llama.cpp's llama-quantize would give them for that type (its
// llama_tensor_get_type, replicated: TensorTypeChooser), quantized byte for byte as ggml's
// reference quantizers do (QuantizeRow).
//
//   UC_ASSIGN_OR_RETURN(QuantizeType type, ParseQuantizeType("q4_k_m"));
//   UC_ASSIGN_OR_RETURN(QuantizeReport report, QuantizeModel("in.gguf", "out.gguf", {type}));
//
// GGUF input keeps every metadata key/value and the tensor order; general.file_type becomes
// the llama.cpp ftype of the type and general.quantization_version 2. Hugging Face input is
// supported for the Llama family (LlamaForCausalLM) with a SentencePiece tokenizer.model: the
// metadata and the q/k row order are those of llama.cpp's convert_hf_to_gguf.py, so both our
// loader and llama.cpp load the result. Anything else is refused with a message naming what is
// missing. The output is written to OUT.tmp and renamed, so a failure never leaves a partial
// OUT. Stateless functions; thread-safe.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tensor/dtype.h"
#include "tensor/tensor.h"

namespace uc::convert {

// The --type values, named as llama-quantize names them (lower case).
enum class QuantizeType {
  kQ4_K_M,
  kQ5_K_M,
  kQ6_K,
  kQ8_0,
  kQ4_0,
  kQ4_1,
  kQ5_0,
  kQ5_1,
  kF16,
  kBF16,
  kF32
};

// "q4_k_m", ... in the order of the enum.
std::vector<std::string> QuantizeTypeNames();
std::string_view QuantizeTypeName(QuantizeType type);
// InvalidArgument "unknown --type 'x' (did you mean ...?); valid: ..." for anything else.
StatusOr<QuantizeType> ParseQuantizeType(std::string_view name);
// llama.cpp's llama_ftype number (general.file_type): Q4_K_M 15, Q5_K_M 17, Q6_K 18, Q8_0 7,
// Q4_0 2, Q4_1 3, Q5_0 8, Q5_1 9, F16 1, BF16 32, F32 (ALL_F32) 0.
int LlamaFtype(QuantizeType type);
// The type most tensors get (Q4_K for Q4_K_M, ...).
DType DefaultDType(QuantizeType type);

// What llama.cpp's type choice needs to know about the whole model.
struct ModelFacts {
  std::string arch;          // GGUF general.architecture ("llama")
  bool has_output = false;   // an "output.weight" tensor exists (else embeddings are tied)
  int num_layers = 0;        // <arch>.block_count (llama.cpp's n_ffn_down)
  int num_attention_wv = 0;  // tensors named *attn_v.weight, *attn_qkv.weight, *attn_kv_b.weight
  int num_experts = 0;       // <arch>.expert_count (0: dense)
  bool is_70b = false;       // llama.cpp's LLM_TYPE_70B (Llama, 80 layers, GQA)
};

// llama.cpp's per-tensor type choice (src/llama-quant.cpp: tensor_allows_quantization,
// llama_tensor_get_type_impl, tensor_type_fallback) for the types above, without an imatrix or
// overrides. Stateful like llama.cpp's: attn_v-like and ffn_down tensors count their position,
// so Choose() must see the tensors in llama.cpp's order (SortLikeLlamaCpp).
//   - Not quantized (the source type kept): fewer than 2 dimensions (ggml_n_dims), names not
//     ending in "weight", "*_norm.weight", and the other kinds llama.cpp leaves alone.
//   - F32 / F16 / BF16: every quantizable tensor gets that type.
//   - Quantized types: "output.weight" (or "token_embd.weight" when there is no output) ->
//     Q8_0 when its rows are not whole blocks of the default type (or the arch is falcon),
//     else Q6_K unless the default is Q8_0. For Q4_K_M / Q5_K_M, attn_v (attn_qkv, attn_kv_b)
//     at position i of n and ffn_down of layer i of n -> Q6_K where
//     use_more_bits(i, n) = i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2. MoE with 8 experts:
//     attn_v, attn_k -> Q8_0, attn_output -> Q5_K (Q4_K_M). 70B Llama: attn_v Q4_K -> Q5_K.
//   - Then rows that are not whole blocks: Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, and F16
//     when even those do not fit (counted in fallbacks(); a warning, as in llama.cpp).
class TensorTypeChooser {
 public:
  TensorTypeChooser(QuantizeType type, ModelFacts facts);
  // The type of tensor `name` (GGUF name) of `shape` (outermost first), stored as
  // `source_dtype`: F32 is returned for a kept tensor whose source is block-quantized.
  DType Choose(std::string_view name, const Shape& shape, DType source_dtype);
  int fallbacks() const { return fallbacks_; }

 private:
  QuantizeType type_;
  ModelFacts facts_;
  int i_attention_wv_ = 0;
  int i_ffn_down_ = 0;
  int fallbacks_ = 0;
};

// Indices of `names` in the order llama.cpp's model loader visits tensors (its weights_map):
// by block number ("blk.N." prefix; names without one first), then by name.
std::vector<size_t> SortLikeLlamaCpp(const std::vector<std::string>& names);

struct QuantizeOptions {
  QuantizeType type = QuantizeType::kQ8_0;
  int threads = 0;  // 0: all hardware threads
};

struct QuantizedTensor {
  std::string name;
  DType dtype;
  Shape shape;
  int64_t bytes = 0;
};

struct QuantizeReport {
  std::vector<QuantizedTensor> tensors;  // output order
  int fallbacks = 0;                     // tensors that took a fallback type
  int64_t total_bytes = 0;               // the output file's size
};

// Converts `in` (GGUF file or Hugging Face directory) into the GGUF file `out` (replaced if it
// exists; the caller decides whether that is allowed). Errors name the file and the tensor or
// key at fault.
StatusOr<QuantizeReport> QuantizeModel(const std::filesystem::path& in,
                                       const std::filesystem::path& out,
                                       const QuantizeOptions& options);

}  // namespace uc::convert
