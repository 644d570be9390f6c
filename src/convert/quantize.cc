#include "convert/quantize.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <utility>

#include "base/did_you_mean.h"
#include "base/thread_pool.h"
#include "io/gguf/gguf.h"
#include "io/gguf/gguf_types.h"
#include "io/gguf/gguf_writer.h"
#include "models/checkpoint.h"
#include "tokenizer/loaders.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"

namespace uc::convert {
namespace {

namespace fs = std::filesystem;

struct TypeInfo {
  QuantizeType type;
  std::string_view name;
  int ftype;
  DType dtype;
};

constexpr TypeInfo kTypes[] = {
    {QuantizeType::kQ4_K_M, "q4_k_m", 15, DType::kQ4_K},
    {QuantizeType::kQ5_K_M, "q5_k_m", 17, DType::kQ5_K},
    {QuantizeType::kQ6_K, "q6_k", 18, DType::kQ6_K},
    {QuantizeType::kQ8_0, "q8_0", 7, DType::kQ8_0},
    {QuantizeType::kQ4_0, "q4_0", 2, DType::kQ4_0},
    {QuantizeType::kQ4_1, "q4_1", 3, DType::kQ4_1},
    {QuantizeType::kQ5_0, "q5_0", 8, DType::kQ5_0},
    {QuantizeType::kQ5_1, "q5_1", 9, DType::kQ5_1},
    {QuantizeType::kF16, "f16", 1, DType::kF16},
    {QuantizeType::kBF16, "bf16", 32, DType::kBF16},
    {QuantizeType::kF32, "f32", 0, DType::kF32},
};

const TypeInfo& Info(QuantizeType type) {
  for (const TypeInfo& info : kTypes) {
    if (info.type == type) return info;
  }
  UC_CHECK(false, "unknown QuantizeType %d", static_cast<int>(type));
  return kTypes[0];
}

bool Contains(std::string_view name, std::string_view part) {
  return name.find(part) != std::string_view::npos;
}

// ggml_n_dims: dimensions up to the last (outermost) one above 1, at least 1.
int NDims(const Shape& shape) {
  int n = static_cast<int>(shape.size());
  for (size_t i = 0; i < shape.size() && n > 1 && shape[i] == 1; ++i) --n;
  return std::max(n, 1);
}

// llama.cpp's tensor_allows_quantization (no only_copy, quantize_output_tensor on).
bool AllowsQuantization(std::string_view name, const Shape& shape) {
  if (NDims(shape) < 2) return false;
  if (name.size() < 6 || name.substr(name.size() - 6) != "weight") return false;
  for (std::string_view part : {"_norm.weight",
                                "ffn_gate_inp.weight",
                                "altup",
                                "laurel",
                                "per_layer_model_proj",
                                "ssm_conv1d",
                                "shortconv.conv.weight",
                                "time_mix_first.weight",
                                "time_mix_w0.weight",
                                "time_mix_w1.weight",
                                "time_mix_w2.weight",
                                "time_mix_v0.weight",
                                "time_mix_v1.weight",
                                "time_mix_v2.weight",
                                "time_mix_a0.weight",
                                "time_mix_a1.weight",
                                "time_mix_a2.weight",
                                "time_mix_g1.weight",
                                "time_mix_g2.weight",
                                "time_mix_decay_w1.weight",
                                "time_mix_decay_w2.weight",
                                "time_mix_lerp_fused.weight",
                                "attn_rel_b.weight",
                                ".position_embd",
                                "sam.pos_embd",
                                "sam.neck.",
                                "sam.net_",
                                ".rel_pos",
                                ".patch_embd",
                                ".patch_merger"}) {
    if (Contains(name, part)) return false;
  }
  return name != "position_embd.weight" && name != "token_types.weight";
}

bool IsAttnVLike(std::string_view name) {
  return Contains(name, "attn_qkv.weight") || Contains(name, "attn_kv_b.weight") ||
         Contains(name, "attn_v.weight");
}

bool UseMoreBits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

bool IsPlain(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16;
}

// The block number of "blk.N.*", or -1.
int BlockNumber(std::string_view name) {
  if (name.substr(0, 4) != "blk.") return -1;
  int n = 0;
  size_t i = 4;
  if (i >= name.size() || name[i] < '0' || name[i] > '9') return -1;
  while (i < name.size() && name[i] >= '0' && name[i] <= '9') n = n * 10 + (name[i++] - '0');
  return i < name.size() && name[i] == '.' ? n : -1;
}

// One tensor to write: its GGUF name, shape, source dtype and a function giving its values as
// F32 rows (for Hugging Face q/k, already in GGUF's row order).
struct SourceTensor {
  std::string name;
  Shape shape;
  DType dtype;
  std::function<StatusOr<Tensor>()> read;  // the source tensor as stored
  int64_t permute_heads = 0;               // > 0: reorder rows rotate-half -> interleaved
};

// Dequantizes `src` to F32 [numel] (rows in parallel).
std::vector<float> ToF32(const Tensor& src, ThreadPool& pool) {
  const int64_t numel = src.numel();
  const int64_t cols = src.rank() == 0 ? 1 : src.shape().back();
  const int64_t rows = numel / cols;
  const int64_t row_bytes = DTypeRowBytes(src.dtype(), cols);
  std::vector<float> out(static_cast<size_t>(numel));
  const auto* base = static_cast<const char*>(src.raw());
  pool.ParallelFor(
      rows,
      [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          DequantizeRow(src.dtype(), base + r * row_bytes, out.data() + r * cols, cols);
        }
      },
      16);
  return out;
}

// convert_hf_to_gguf's LlamaModel.permute: rows of each head go from Hugging Face's
// rotate-half order (first halves, then second halves) back to interleaved pairs.
std::vector<float> PermuteRows(const std::vector<float>& x, int64_t rows, int64_t cols,
                               int64_t heads) {
  std::vector<float> out(x.size());
  const int64_t head_dim = rows / heads;
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < half; ++i) {
      for (int64_t j = 0; j < 2; ++j) {
        const int64_t dst = h * head_dim + 2 * i + j;
        const int64_t src = h * head_dim + j * half + i;
        std::memcpy(out.data() + dst * cols, x.data() + src * cols,
                    static_cast<size_t>(cols) * sizeof(float));
      }
    }
  }
  return out;
}

// Produces the output tensor of `t` in `dtype`.
StatusOr<Tensor> Convert(const SourceTensor& t, DType dtype, ThreadPool& pool) {
  UC_ASSIGN_OR_RETURN(Tensor src, t.read());
  if (src.dtype() == dtype && t.permute_heads == 0) return src;
  std::vector<float> x = ToF32(src, pool);
  const int64_t cols = t.shape.empty() ? 1 : t.shape.back();
  const int64_t rows = static_cast<int64_t>(x.size()) / cols;
  if (t.permute_heads > 0) {
    const int64_t perm_rows = t.shape.front();
    x = PermuteRows(x, perm_rows, static_cast<int64_t>(x.size()) / perm_rows, t.permute_heads);
  }
  Tensor out = Tensor::Empty(t.shape, dtype);
  const int64_t row_bytes = DTypeRowBytes(dtype, cols);
  auto* base = static_cast<char*>(out.raw());
  pool.ParallelFor(
      rows,
      [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          QuantizeRow(dtype, x.data() + r * cols, base + r * row_bytes, cols);
        }
      },
      4);
  return out;
}

// ------------------------------------------------------------------ GGUF input

struct Plan {
  std::vector<SourceTensor> tensors;  // output order
  ModelFacts facts;
};

StatusOr<Plan> PlanGguf(std::shared_ptr<const io::GgufFile> file, io::GgufWriter* writer) {
  Plan plan;
  for (const std::string& key : file->Keys()) {
    if (key == "general.alignment") continue;  // the writer sets it
    writer->SetValue(key, *file->Find(key));
  }
  if (file->Find("general.architecture") != nullptr) {
    UC_ASSIGN_OR_RETURN(plan.facts.arch, file->GetString("general.architecture"));
  }
  const std::string& arch = plan.facts.arch;
  auto optional_int = [&](const std::string& key) -> StatusOr<int64_t> {
    if (file->Find(key) == nullptr) return 0;
    return file->GetInt(key);
  };
  UC_ASSIGN_OR_RETURN(int64_t layers, optional_int(arch + ".block_count"));
  UC_ASSIGN_OR_RETURN(int64_t experts, optional_int(arch + ".expert_count"));
  UC_ASSIGN_OR_RETURN(int64_t heads, optional_int(arch + ".attention.head_count"));
  UC_ASSIGN_OR_RETURN(int64_t kv_heads, optional_int(arch + ".attention.head_count_kv"));
  plan.facts.num_layers = static_cast<int>(layers);
  plan.facts.num_experts = static_cast<int>(experts);
  plan.facts.is_70b = arch == "llama" && layers == 80 && kv_heads != 0 && heads != kv_heads;
  for (const io::GgufTensorInfo& info : file->tensor_infos()) {
    const std::optional<DType> dtype = io::DTypeFromGgml(info.ggml_type);
    if (!dtype) {
      return UnimplementedError(file->path() + ": tensor '" + info.name + "' has ggml type " +
                                io::GgmlTypeName(info.ggml_type) + ", which cannot be read");
    }
    if (info.name == "output.weight") plan.facts.has_output = true;
    if (IsAttnVLike(info.name)) ++plan.facts.num_attention_wv;
    const std::string name = info.name;
    plan.tensors.push_back({name, info.shape, *dtype,
                            [file, name]() -> StatusOr<Tensor> { return file->Get(name); }, 0});
  }
  return plan;
}

// ------------------------------------------------------------------ Hugging Face input

Status WriteHfMetadata(const models::ModelConfig& c, const fs::path& dir, QuantizeType type,
                       io::GgufWriter* writer) {
  const std::string a = "llama";
  writer->SetString("general.architecture", a);
  writer->SetString("general.name", dir.filename().empty() ? dir.parent_path().filename().string()
                                                           : dir.filename().string());
  writer->Set<uint32_t>(a + ".block_count", static_cast<uint32_t>(c.num_hidden_layers));
  writer->Set<uint32_t>(a + ".context_length", static_cast<uint32_t>(c.max_position_embeddings));
  writer->Set<uint32_t>(a + ".embedding_length", static_cast<uint32_t>(c.hidden_size));
  writer->Set<uint32_t>(a + ".feed_forward_length", static_cast<uint32_t>(c.intermediate_size));
  writer->Set<uint32_t>(a + ".attention.head_count", static_cast<uint32_t>(c.num_attention_heads));
  writer->Set<uint32_t>(a + ".attention.head_count_kv",
                        static_cast<uint32_t>(c.num_key_value_heads));
  writer->Set<float>(a + ".rope.freq_base", c.rope_theta);
  writer->Set<float>(a + ".attention.layer_norm_rms_epsilon", c.rms_norm_eps);
  writer->Set<uint32_t>("general.file_type", static_cast<uint32_t>(LlamaFtype(type)));
  writer->Set<uint32_t>(a + ".vocab_size", static_cast<uint32_t>(c.vocab_size));
  writer->Set<uint32_t>(a + ".rope.dimension_count", static_cast<uint32_t>(c.head_dim));
  if (c.head_dim != c.hidden_size / c.num_attention_heads) {
    writer->Set<uint32_t>(a + ".attention.key_length", static_cast<uint32_t>(c.head_dim));
    writer->Set<uint32_t>(a + ".attention.value_length", static_cast<uint32_t>(c.head_dim));
  }
  if (c.rope_scaling.type == "linear") {
    writer->SetString(a + ".rope.scaling.type", "linear");
    writer->Set<float>(a + ".rope.scaling.factor", c.rope_scaling.factor);
  }
  writer->Set<uint32_t>("general.quantization_version", 2);

  const fs::path model_file = dir / "tokenizer.model";
  std::ifstream in(model_file, std::ios::binary);
  if (!in) {
    return UnimplementedError(
        dir.string() +
        ": no tokenizer.model; Hugging Face input needs a SentencePiece tokenizer.model "
        "(tokenizer.json-only BPE tokenizers are not converted yet: use llama.cpp's "
        "convert_hf_to_gguf.py)");
  }
  const std::string bytes((std::istreambuf_iterator<char>(in)), {});
  UC_ASSIGN_OR_RETURN(tokenizer::TokenizerSpec spec,
                      tokenizer::ParseSentencePieceModel(bytes, model_file.string()));
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  for (const tokenizer::TokenInfo& t : spec.tokens) {
    tokens.push_back(t.text);
    scores.push_back(t.score);
    types.push_back(static_cast<int32_t>(t.type));
  }
  if (static_cast<int>(tokens.size()) != c.vocab_size) {
    return InvalidArgumentError(model_file.string() + ": " + std::to_string(tokens.size()) +
                                " tokens, but config.json says vocab_size " +
                                std::to_string(c.vocab_size));
  }
  writer->SetString("tokenizer.ggml.model", "llama");
  writer->SetString("tokenizer.ggml.pre", "default");
  writer->SetStringArray("tokenizer.ggml.tokens", tokens);
  writer->SetArray<float>("tokenizer.ggml.scores", scores);
  writer->SetArray<int32_t>("tokenizer.ggml.token_type", types);
  const int32_t bos = c.bos_token_id >= 0 ? c.bos_token_id : spec.bos_id;
  const int32_t eos = !c.eos_token_ids.empty() ? c.eos_token_ids.front() : spec.eos_id;
  if (bos >= 0) writer->Set<uint32_t>("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(bos));
  if (eos >= 0) writer->Set<uint32_t>("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(eos));
  if (spec.unknown.unk_id >= 0) {
    writer->Set<uint32_t>("tokenizer.ggml.unknown_token_id",
                          static_cast<uint32_t>(spec.unknown.unk_id));
  }
  if (spec.pad_id >= 0) {
    writer->Set<uint32_t>("tokenizer.ggml.padding_token_id", static_cast<uint32_t>(spec.pad_id));
  }
  writer->Set<bool>("tokenizer.ggml.add_bos_token", true);
  writer->Set<bool>("tokenizer.ggml.add_eos_token", false);
  return OkStatus();
}

StatusOr<Plan> PlanHf(const fs::path& dir, QuantizeType type, io::GgufWriter* writer) {
  UC_ASSIGN_OR_RETURN(models::Checkpoint ckpt, models::OpenCheckpoint(dir));
  const models::ModelConfig& c = ckpt.config;
  if (c.architecture != "LlamaForCausalLM") {
    return UnimplementedError(dir.string() + ": converting Hugging Face '" + c.architecture +
                              "' checkpoints is not supported (supported: LlamaForCausalLM); "
                              "convert it with llama.cpp's convert_hf_to_gguf.py");
  }
  if (!c.rope_scaling.type.empty() && c.rope_scaling.type != "linear" &&
      c.rope_scaling.type != "none" && c.rope_scaling.type != "default") {
    return UnimplementedError(dir.string() + ": rope_scaling type '" + c.rope_scaling.type +
                              "' is not converted (needs GGUF rope_freqs; supported: none, "
                              "linear)");
  }
  if (c.rotary_dim != c.head_dim) {
    return UnimplementedError(dir.string() + ": partial rotary embeddings are not converted");
  }
  UC_RETURN_IF_ERROR(WriteHfMetadata(c, dir, type, writer));

  Plan plan;
  plan.facts.arch = "llama";
  plan.facts.num_layers = c.num_hidden_layers;
  plan.facts.is_70b = c.num_hidden_layers == 80 && c.num_attention_heads != c.num_key_value_heads;
  std::vector<std::pair<std::string, std::string>> names;  // (gguf, hf)
  for (const std::string& hf : ckpt.tensors->TensorNames()) {
    if (hf.find("rotary_emb.inv_freq") != std::string::npos) continue;
    if (hf == "lm_head.weight" && c.tie_word_embeddings) continue;
    const std::string gguf = models::HfToGgufTensorName(hf);
    if (gguf.empty()) {
      return UnimplementedError(dir.string() + ": tensor '" + hf +
                                "' has no GGUF name; cannot convert this checkpoint");
    }
    names.emplace_back(gguf, hf);
  }
  // token_embd, blocks in order, then output_norm and output, as convert_hf_to_gguf writes.
  auto rank = [](const std::string& gguf) {
    if (gguf == "token_embd.weight") return -1;
    const int block = BlockNumber(gguf);
    return block >= 0 ? block : 1 << 30;
  };
  std::stable_sort(names.begin(), names.end(), [&](const auto& x, const auto& y) {
    if (rank(x.first) != rank(y.first)) return rank(x.first) < rank(y.first);
    return x.first < y.first;
  });
  std::shared_ptr<const io::TensorSource> source = ckpt.tensors;
  for (const auto& [gguf, hf] : names) {
    UC_ASSIGN_OR_RETURN(Tensor probe, source->Get(hf));
    SourceTensor t{gguf, probe.shape(), probe.dtype(),
                   [source, hf]() -> StatusOr<Tensor> { return source->Get(hf); }, 0};
    if (gguf.find("attn_q.") != std::string::npos) t.permute_heads = c.num_attention_heads;
    if (gguf.find("attn_k.") != std::string::npos) t.permute_heads = c.num_key_value_heads;
    if (gguf == "output.weight") plan.facts.has_output = true;
    if (IsAttnVLike(gguf)) ++plan.facts.num_attention_wv;
    plan.tensors.push_back(std::move(t));
  }
  return plan;
}

}  // namespace

// ------------------------------------------------------------------ public

std::vector<std::string> QuantizeTypeNames() {
  std::vector<std::string> names;
  for (const TypeInfo& info : kTypes) names.emplace_back(info.name);
  return names;
}

std::string_view QuantizeTypeName(QuantizeType type) { return Info(type).name; }

StatusOr<QuantizeType> ParseQuantizeType(std::string_view name) {
  std::string lower(name);
  for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  for (const TypeInfo& info : kTypes) {
    if (info.name == lower) return info.type;
  }
  return InvalidArgumentError("unknown --type '" + std::string(name) + "'" +
                              DidYouMean(lower, QuantizeTypeNames()) +
                              "; valid: " + JoinQuoted(QuantizeTypeNames(), ", "));
}

int LlamaFtype(QuantizeType type) { return Info(type).ftype; }

DType DefaultDType(QuantizeType type) { return Info(type).dtype; }

TensorTypeChooser::TensorTypeChooser(QuantizeType type, ModelFacts facts)
    : type_(type), facts_(std::move(facts)) {}

DType TensorTypeChooser::Choose(std::string_view name, const Shape& shape, DType source_dtype) {
  if (!AllowsQuantization(name, shape)) return IsPlain(source_dtype) ? source_dtype : DType::kF32;
  const DType default_type = DefaultDType(type_);
  if (!DTypeIsQuantized(default_type)) return default_type;
  const bool km = type_ == QuantizeType::kQ4_K_M || type_ == QuantizeType::kQ5_K_M;
  const int64_t cols = shape.empty() ? 1 : shape.back();
  DType t = default_type;
  if (name == "output.weight" || (!facts_.has_output && name == "token_embd.weight")) {
    if (facts_.arch == "falcon" || cols % DTypeBlockSize(t) != 0) {
      t = DType::kQ8_0;
    } else if (t != DType::kQ8_0) {
      t = DType::kQ6_K;
    }
  } else if (name == "token_embd.weight" || name == "per_layer_token_embd.weight") {
    // No rule for these types.
  } else if (IsAttnVLike(name)) {
    if (km && UseMoreBits(i_attention_wv_, facts_.num_attention_wv)) t = DType::kQ6_K;
    if (facts_.is_70b && t == DType::kQ4_K) t = DType::kQ5_K;
    if (facts_.num_experts == 8) t = DType::kQ8_0;
    ++i_attention_wv_;
  } else if (Contains(name, "attn_k.weight")) {
    if (facts_.num_experts == 8) t = DType::kQ8_0;
  } else if (Contains(name, "attn_q.weight")) {
    // No rule for these types.
  } else if (Contains(name, "attn_output.weight")) {
    if (facts_.arch != "falcon" && facts_.num_experts == 8 && type_ == QuantizeType::kQ4_K_M) {
      t = DType::kQ5_K;
    }
  } else if (Contains(name, "ffn_up") || Contains(name, "ffn_gate")) {
    // No rule for these types.
  } else if (Contains(name, "ffn_down")) {
    int i_layer = i_ffn_down_;
    if (facts_.num_experts > 1) i_layer = BlockNumber(name);
    const int n_layer = facts_.num_layers;
    if (type_ == QuantizeType::kQ4_K_M && facts_.arch == "falcon") {
      t = i_layer < n_layer / 16          ? DType::kQ6_K
          : UseMoreBits(i_layer, n_layer) ? DType::kQ5_K
                                          : DType::kQ4_K;
    } else if (km && UseMoreBits(i_layer, n_layer)) {
      t = DType::kQ6_K;
    }
    ++i_ffn_down_;
  }
  if (cols % DTypeBlockSize(t) != 0) {
    ++fallbacks_;
    switch (t) {
      case DType::kQ4_K:
        t = DType::kQ5_0;
        break;
      case DType::kQ5_K:
        t = DType::kQ5_1;
        break;
      case DType::kQ6_K:
        t = DType::kQ8_0;
        break;
      default:
        break;
    }
    if (cols % DTypeBlockSize(t) != 0) t = DType::kF16;
  }
  return t;
}

std::vector<size_t> SortLikeLlamaCpp(const std::vector<std::string>& names) {
  std::vector<size_t> order(names.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const int la = BlockNumber(names[a]), lb = BlockNumber(names[b]);
    if (la != lb) return la < lb;
    return names[a] < names[b];
  });
  return order;
}

StatusOr<QuantizeReport> QuantizeModel(const fs::path& in, const fs::path& out,
                                       const QuantizeOptions& options) {
  std::error_code ec;
  if (!fs::exists(in, ec)) return NotFoundError(in.string() + ": no such file or directory");
  if (fs::exists(out, ec) && fs::equivalent(in, out, ec)) {
    return InvalidArgumentError(out.string() + ": the output would overwrite the input");
  }
  io::GgufWriter writer;
  Plan plan;
  if (fs::is_directory(in)) {
    UC_ASSIGN_OR_RETURN(plan, PlanHf(in, options.type, &writer));
  } else {
    UC_ASSIGN_OR_RETURN(std::shared_ptr<const io::GgufFile> file, io::GgufFile::Open(in));
    if (file->alignment() != io::kGgufDefaultAlignment) {
      writer = io::GgufWriter(static_cast<uint32_t>(file->alignment()));
    }
    UC_ASSIGN_OR_RETURN(plan, PlanGguf(file, &writer));
  }
  writer.Set<uint32_t>("general.file_type", static_cast<uint32_t>(LlamaFtype(options.type)));
  writer.Set<uint32_t>("general.quantization_version", 2);

  // Types in llama.cpp's visiting order (its counters depend on it), written in ours.
  std::vector<std::string> names;
  for (const SourceTensor& t : plan.tensors) names.push_back(t.name);
  std::vector<DType> types(plan.tensors.size());
  TensorTypeChooser chooser(options.type, plan.facts);
  for (size_t i : SortLikeLlamaCpp(names)) {
    types[i] = chooser.Choose(plan.tensors[i].name, plan.tensors[i].shape, plan.tensors[i].dtype);
  }

  const int threads = options.threads > 0 ? options.threads : ThreadPool::HardwareConcurrency();
  ThreadPool pool(threads);
  QuantizeReport report;
  report.fallbacks = chooser.fallbacks();
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    const SourceTensor* t = &plan.tensors[i];
    const DType dtype = types[i];
    UC_RETURN_IF_ERROR(writer.AddLazy(t->name, dtype, t->shape,
                                      [t, dtype, &pool]() { return Convert(*t, dtype, pool); }));
    report.tensors.push_back({t->name, dtype, t->shape, Tensor::BytesFor(t->shape, dtype)});
  }
  UC_RETURN_IF_ERROR(writer.WriteFile(out));
  report.total_bytes = static_cast<int64_t>(fs::file_size(out, ec));
  return report;
}

}  // namespace uc::convert
