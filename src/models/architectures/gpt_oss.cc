// gpt-oss (GptOssForCausalLM): a pre-norm RMSNorm decoder with biases on q/k/v/o, a learned
// sink logit per attention head ("self_attn.sinks"), sliding-window layers alternating with
// full-attention ones (layer_types; sliding_window 128 in the published models), YaRN RoPE
// (rotate_half) and a mixture of experts in every layer: the router ("mlp.router", with a bias)
// picks the top num_experts_per_tok logits and weights them by their softmax; each expert is a
// clamped SwiGLU with biases (swiglu_alpha, swiglu_limit).
//
// transformers stores each layer's experts fused and transposed: "mlp.experts.gate_up_proj"
// [E, hidden, 2 * I] with gate and up interleaved along the last dimension (gate the even
// columns, up the odd), "gate_up_proj_bias" [E, 2 * I], "down_proj" [E, I, hidden] and
// "down_proj_bias" [E, hidden]. They are presented under the decoder's per-expert names
// ("mlp.experts.E.{gate,up,down}_proj.{weight,bias}", router "mlp.gate.{weight,bias}") as F32
// copies. The published checkpoints store the expert matrices as MXFP4 instead (transformers'
// Mxfp4GptOssExperts, quantization_config.quant_method "mxfp4"): "gate_up_proj_blocks"
// [E, 2 * I, hidden / 32, 16] and "gate_up_proj_scales" [E, 2 * I, hidden / 32], uint8, the rows
// the output features (gate the even rows, up the odd), blocks of 32 along the input, each with
// its E8M0 scale byte and 16 bytes of FP4 codes, element 2b of a block in the low nibble of byte
// b and 2b + 1 in the high one; "down_proj_blocks" [E, hidden, I / 32, 16] / "_scales" likewise.
// Those experts are presented as DType::kMXFP4 tensors, the bytes repacked into ggml's nibble
// order (elements 0..15 in the low nibbles), so they stay 4.25 bits a weight and MatMul reads
// them directly.
//
// GGUF (llama.cpp's "gpt-oss", convert_hf_to_gguf.py's layout): the post-attention norm as
// blk.N.post_attention_norm, the sinks as blk.N.attn_sinks.weight, the router as
// ffn_gate_inp.{weight,bias}, the experts stacked as ffn_{gate,up,down}_exps.{weight,bias} (MXFP4
// in the published files); YaRN from rope.scaling.*, attention.sliding_window with every other
// layer sliding from layer 0 (attention.sliding_window_pattern overrides it); llama.cpp
// hard-codes swiglu_alpha 1.702 and swiglu_limit 7.0, and so does this reader. The YaRN
// correction range is not truncated, as in the published config (llama.cpp truncates it, a small
// deviation from the model that this engine does not copy).
#include <cstdint>

#include "models/architecture.h"

namespace uc::models {
namespace {

// What every gpt-oss layer has, whatever the file: biased attention, sinks, a biased router whose
// top-k logits are softmaxed, biased experts.
void SetGptOssFixedFields(ModelConfig& config) {
  config.attention_sinks = true;
  config.router_bias = true;
  config.router_topk_then_softmax = true;
  config.expert_bias = true;
  config.swiglu_limit = 7.0f;
  config.swiglu_alpha = 1.702f;
}

Status ReadGptOssGguf(const io::GgufFile& file, const std::string& arch, ModelConfig& config) {
  SetGptOssFixedFields(config);
  config.rope_scaling.truncate = false;
  const std::string window_key = arch + ".attention.sliding_window";
  if (file.Find(window_key) != nullptr) {
    UC_ASSIGN_OR_RETURN(int64_t window, file.GetInt(window_key));
    if (window <= 0 || window > kMaxPositionEmbeddings) {
      return InvalidArgumentError(file.path() + ": " + window_key +
                                  " is out of range: " + std::to_string(window));
    }
    config.sliding_window = static_cast<int>(window);
    int64_t pattern = 2;  // llama.cpp's default for gpt-oss: layers 0, 2, 4, ... slide
    const std::string pattern_key = arch + ".attention.sliding_window_pattern";
    if (file.Find(pattern_key) != nullptr) {
      UC_ASSIGN_OR_RETURN(pattern, file.GetInt(pattern_key));
      if (pattern <= 0) {
        return InvalidArgumentError(file.path() + ": " + pattern_key + " must be positive, got " +
                                    std::to_string(pattern) + " (a per-layer array is not read)");
      }
    }
    config.sliding_layers.assign(static_cast<size_t>(config.num_hidden_layers), false);
    for (int i = 0; i < config.num_hidden_layers; ++i) {
      config.sliding_layers[i] = (i + 1) % pattern != 0;
    }
  }
  return ReadMoeGgufExtras(file, arch, /*renormalize=*/false, config);
}

Status ReadGptOssExtras(const nlohmann::json& json, const std::string& source,
                        ModelConfig& config) {
  config.attention_bias = true;
  if (json.contains("attention_bias") && json["attention_bias"].is_boolean()) {
    config.attention_bias = json["attention_bias"].get<bool>();
  }
  config.o_proj_bias = config.attention_bias;
  SetGptOssFixedFields(config);
  UC_RETURN_IF_ERROR(ReadOptionalFloat(json, source, "swiglu_limit", config.swiglu_limit));
  UC_RETURN_IF_ERROR(ReadOptionalFloat(json, source, "swiglu_alpha", config.swiglu_alpha));
  if (json.contains("sliding_window") && json["sliding_window"].is_number_integer()) {
    const int window = json["sliding_window"].get<int>();
    if (window <= 0) {
      return InvalidArgumentError(source + ": sliding_window must be positive or null, got " +
                                  std::to_string(window));
    }
    config.sliding_window = window;
  }
  if (config.sliding_window > 0) {
    // transformers' default: even layers (0, 2, ...) slide.
    UC_RETURN_IF_ERROR(ReadLayerTypes(json, source, /*default_pattern=*/2, config));
  }
  if (json.contains("quantization_config") && json["quantization_config"].is_object()) {
    const nlohmann::json& q = json["quantization_config"];
    if (q.contains("quant_method") && q["quant_method"] != "mxfp4") {
      return UnimplementedError(source + ": quantization_config.quant_method " +
                                q["quant_method"].dump() + " is not supported");
    }
  }
  return ReadMoeHfExtras(json, source, "num_local_experts", config);
}

constexpr std::string_view kExperts = "mlp.experts.";

// "E.gate_proj.weight" -> (E, "gate_proj", "weight"); false for other names.
bool SplitExpertName(std::string_view rest, int& expert, std::string_view& projection,
                     std::string_view& kind) {
  const size_t dot = rest.find('.');
  if (dot == std::string_view::npos || dot == 0) return false;
  expert = 0;
  for (const char ch : rest.substr(0, dot)) {
    if (ch < '0' || ch > '9') return false;
    expert = expert * 10 + (ch - '0');
    if (expert > kMaxExperts) return false;
  }
  rest.remove_prefix(dot + 1);
  const size_t dot2 = rest.find('.');
  if (dot2 == std::string_view::npos) return false;
  projection = rest.substr(0, dot2);
  kind = rest.substr(dot2 + 1);
  return (projection == "gate_proj" || projection == "up_proj" || projection == "down_proj") &&
         (kind == "weight" || kind == "bias");
}

// The fused tensor `name` of the file, or an error naming it.
StatusOr<Tensor> Fused(const io::TensorSource& f, const std::string& name) {
  UC_ASSIGN_OR_RETURN(Tensor t, f.Get(name));
  if (DTypeIsQuantized(t.dtype()) || t.dtype() == DType::kI32) {
    return InvalidArgumentError(f.Describe() + ": tensor '" + name + "' has dtype " +
                                std::string(DTypeName(t.dtype())) + ", expected F32, F16 or BF16");
  }
  return t;
}

// The 4-bit code of element i of a block in transformers' packing (element 2b in the low nibble
// of byte b, 2b + 1 in the high one).
uint8_t HfNibble(const uint8_t* block, int i) {
  return i % 2 == 0 ? block[i / 2] & 0xF : block[i / 2] >> 4;
}

// Rows first, first + step, ... of expert `expert` of the MXFP4 matrix "<name>_blocks" /
// "<name>_scales" (see the file comment) as a [rows, in] kMXFP4 tensor in ggml's layout.
StatusOr<Tensor> Mxfp4Expert(const io::TensorSource& f, const std::string& name, int expert,
                             int64_t first, int64_t step) {
  UC_ASSIGN_OR_RETURN(io::U8View blocks, f.GetU8(name + "_blocks"));
  UC_ASSIGN_OR_RETURN(io::U8View scales, f.GetU8(name + "_scales"));
  const Shape& b = blocks.shape;
  if (b.size() != 4 || b[3] != 16 || scales.shape != Shape{b[0], b[1], b[2]} || expert >= b[0] ||
      b[1] % step != 0 || b[1] == 0) {
    return InvalidArgumentError(f.Describe() + ": tensors '" + name + "_blocks' " +
                                ShapeToString(b) + " and '" + name + "_scales' " +
                                ShapeToString(scales.shape) +
                                " are not MXFP4 experts [num_experts, rows, in / 32, 16] and "
                                "[num_experts, rows, in / 32] holding expert " +
                                std::to_string(expert));
  }
  const int64_t rows = b[1], groups = b[2];
  Tensor out = Tensor::Empty({rows / step, groups * 32}, DType::kMXFP4);
  for (int64_t r = 0; r < rows / step; ++r) {
    const int64_t src = int64_t{expert} * rows + first + r * step;
    const uint8_t* codes = blocks.bytes.data() + src * groups * 16;
    const uint8_t* e = scales.bytes.data() + src * groups;
    auto* dst = reinterpret_cast<BlockMXFP4*>(out.row(r));
    for (int64_t g = 0; g < groups; ++g) {
      dst[g].e = e[g];
      for (int j = 0; j < 16; ++j) {
        dst[g].qs[j] = static_cast<uint8_t>(HfNibble(codes + 16 * g, j) |
                                            HfNibble(codes + 16 * g, j + 16) << 4);
      }
    }
  }
  return out;
}

// One expert's tensor, converted from the fused layout.
StatusOr<Tensor> ExpertTensor(const io::TensorSource& f, const std::string& prefix, int expert,
                              std::string_view projection, std::string_view kind) {
  const bool down = projection == "down_proj";
  const bool bias = kind == "bias";
  const std::string name = prefix + (down ? "down_proj" : "gate_up_proj") + (bias ? "_bias" : "");
  if (!bias && !f.Has(name) && f.Has(name + "_blocks")) {
    // Down: every row; gate / up: the even / odd rows of gate_up.
    return Mxfp4Expert(f, name, expert, projection == "up_proj" ? 1 : 0, down ? 1 : 2);
  }
  UC_ASSIGN_OR_RETURN(Tensor fused, Fused(f, name));
  const int64_t want_rank = bias ? 2 : 3;
  if (fused.rank() != want_rank || expert >= fused.dim(0) ||
      (!down && fused.dim(fused.rank() - 1) % 2 != 0)) {
    return InvalidArgumentError(f.Describe() + ": tensor '" + name + "' has shape " +
                                ShapeToString(fused.shape()) + ", expected " +
                                (bias ? "[num_experts, n]" : "[num_experts, in, out]") +
                                " holding expert " + std::to_string(expert));
  }
  const std::vector<float> v = fused.Slice(expert, expert + 1).ToFloatVector();
  if (bias) {
    if (down) return Tensor::FromVector(v, {fused.dim(1)});
    const int64_t inter = fused.dim(1) / 2, offset = projection == "gate_proj" ? 0 : 1;
    std::vector<float> out(static_cast<size_t>(inter));
    for (int64_t i = 0; i < inter; ++i) out[i] = v[2 * i + offset];
    return Tensor::FromVector(out, {inter});
  }
  const int64_t in = fused.dim(1), cols = fused.dim(2);
  if (down) {  // [I, hidden] -> [hidden, I]
    std::vector<float> out(v.size());
    for (int64_t r = 0; r < in; ++r) {
      for (int64_t c = 0; c < cols; ++c) out[c * in + r] = v[r * cols + c];
    }
    return Tensor::FromVector(out, {cols, in});
  }
  // [hidden, 2I] interleaved -> [I, hidden], the even (gate) or odd (up) columns.
  const int64_t inter = cols / 2, offset = projection == "gate_proj" ? 0 : 1;
  std::vector<float> out(static_cast<size_t>(inter * in));
  for (int64_t r = 0; r < in; ++r) {
    for (int64_t i = 0; i < inter; ++i) out[i * in + r] = v[r * cols + 2 * i + offset];
  }
  return Tensor::FromVector(out, {inter, in});
}

StatusOr<Tensor> GptOssTensor(const io::TensorSource& f, std::string_view name) {
  int layer = 0;
  std::string_view rest;
  if (!SplitLayerName(name, layer, rest)) return f.Get(name);
  const std::string prefix = "model.layers." + std::to_string(layer) + ".";
  if (rest == "mlp.gate.weight") return f.Get(prefix + "mlp.router.weight");
  if (rest == "mlp.gate.bias") return f.Get(prefix + "mlp.router.bias");
  if (rest.substr(0, kExperts.size()) == kExperts) {
    int expert = 0;
    std::string_view projection, kind;
    if (SplitExpertName(rest.substr(kExperts.size()), expert, projection, kind)) {
      return ExpertTensor(f, prefix + std::string(kExperts), expert, projection, kind);
    }
  }
  return f.Get(name);
}

std::shared_ptr<const io::TensorSource> GptOssTensors(std::shared_ptr<const io::TensorSource> file,
                                                      const ModelConfig&) {
  return std::make_shared<ConvertedTensors>(std::move(file), GptOssTensor);
}

}  // namespace

const Architecture kGptOssArchitecture = {
    .hf_class = "GptOssForCausalLM",
    .gguf_arch = "gpt-oss",
    .gguf_rope_style = kernels::RopeStyle::kHalf,
    .read_hf_extras = ReadGptOssExtras,
    .read_gguf_extras = ReadGptOssGguf,
    .gguf_sandwich_names = true,
    .hf_tensors = GptOssTensors,
};

}  // namespace uc::models
