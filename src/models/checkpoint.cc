#include "models/checkpoint.h"

#include <fstream>
#include <map>
#include <optional>

#include "io/json_file.h"
#include "io/llama2c.h"
#include "io/safetensors/safetensors.h"
#include "models/architecture.h"

namespace uc::models {
namespace fs = std::filesystem;
namespace {

// ---------------------------------------------------------------- Hugging Face config.json

Status ReadIntField(const nlohmann::json& json, const std::string& source, const char* key,
                    bool required, int& out) {
  if (!json.contains(key) || json[key].is_null()) {
    if (!required) return OkStatus();
    return InvalidArgumentError(source + ": required field '" + key + "' is missing");
  }
  if (!json[key].is_number_integer()) {
    return InvalidArgumentError(source + ": field '" + key + "' must be an integer, got " +
                                json[key].dump());
  }
  out = json[key].get<int>();
  return OkStatus();
}

Status ReadFloatField(const nlohmann::json& json, const std::string& source, const char* key,
                      float& out) {
  if (!json.contains(key) || json[key].is_null()) return OkStatus();
  if (!json[key].is_number()) {
    return InvalidArgumentError(source + ": field '" + key + "' must be a number, got " +
                                json[key].dump());
  }
  out = json[key].get<float>();
  return OkStatus();
}

// eos_token_id may be an int or a list of ints.
void ReadTokenIds(const nlohmann::json& json, const char* key, std::vector<int>& out) {
  if (!json.contains(key)) return;
  const nlohmann::json& v = json[key];
  if (v.is_number_integer()) {
    out = {v.get<int>()};
  } else if (v.is_array()) {
    out.clear();
    for (const auto& e : v) {
      if (e.is_number_integer()) out.push_back(e.get<int>());
    }
  }
}

Status ReadRopeScaling(const nlohmann::json& json, const std::string& source,
                       RopeScaling& scaling) {
  // Newer transformers write "rope_parameters" (with rope_theta inside) instead, and models with
  // several layer types (Gemma 3) one object per type: the global layers' is "full_attention".
  const char* key = json.contains("rope_parameters") && json["rope_parameters"].is_object()
                        ? "rope_parameters"
                        : "rope_scaling";
  if (!json.contains(key) || json[key].is_null()) return OkStatus();
  const nlohmann::json& rs =
      json[key].contains("full_attention") ? json[key]["full_attention"] : json[key];
  if (!rs.is_object()) return InvalidArgumentError(source + ": rope_scaling must be an object");
  const std::string src = source + ": " + key;
  if (rs.contains("rope_type") && rs["rope_type"].is_string()) {
    scaling.type = rs["rope_type"].get<std::string>();
  } else if (rs.contains("type") && rs["type"].is_string()) {
    scaling.type = rs["type"].get<std::string>();
  } else {
    return InvalidArgumentError(src + ": 'rope_type' is missing");
  }
  if (scaling.type == "default") {
    scaling.type.clear();
    return OkStatus();
  }
  UC_RETURN_IF_ERROR(ReadFloatField(rs, src, "factor", scaling.factor));
  UC_RETURN_IF_ERROR(ReadFloatField(rs, src, "low_freq_factor", scaling.low_freq_factor));
  UC_RETURN_IF_ERROR(ReadFloatField(rs, src, "high_freq_factor", scaling.high_freq_factor));
  UC_RETURN_IF_ERROR(ReadFloatField(rs, src, "beta_fast", scaling.beta_fast));
  UC_RETURN_IF_ERROR(ReadFloatField(rs, src, "beta_slow", scaling.beta_slow));
  UC_RETURN_IF_ERROR(ReadFloatField(rs, src, "attention_factor", scaling.attention_factor));
  if (rs.contains("truncate") && !rs["truncate"].is_null()) {
    if (!rs["truncate"].is_boolean()) {
      return InvalidArgumentError(src + ": field 'truncate' must be a boolean, got " +
                                  rs["truncate"].dump());
    }
    scaling.truncate = rs["truncate"].get<bool>();
  }
  if (scaling.type == "yarn" && (rs.contains("mscale") || rs.contains("mscale_all_dim")) &&
      !rs.contains("attention_factor")) {
    return UnimplementedError(src + ": yarn 'mscale' / 'mscale_all_dim' are not supported");
  }
  return ReadIntField(rs, src, "original_max_position_embeddings", false,
                      scaling.original_max_position_embeddings);
}

StatusOr<ModelConfig> ConfigFromNormalizedHfJson(const nlohmann::json& json,
                                                 const std::string& source,
                                                 const Architecture& spec, ModelConfig c);

StatusOr<ModelConfig> ConfigFromHfJson(const nlohmann::json& json, const std::string& source) {
  if (!json.is_object()) return InvalidArgumentError(source + ": expected a JSON object");
  if (!json.contains("architectures") || !json["architectures"].is_array() ||
      json["architectures"].empty() || !json["architectures"][0].is_string()) {
    return InvalidArgumentError(source +
                                ": field 'architectures' is missing (expected e.g. "
                                "[\"LlamaForCausalLM\"])");
  }
  ModelConfig c;
  c.architecture = json["architectures"][0].get<std::string>();
  const Architecture* arch = FindArchitectureByHfClass(c.architecture);
  if (arch == nullptr) {
    return UnimplementedError(source + ": unknown architecture '" + c.architecture +
                              "' (supported: " + SupportedArchitectureNames() + ")");
  }
  if (arch->normalize_hf_json != nullptr) {
    nlohmann::json normalized = json;
    UC_RETURN_IF_ERROR(arch->normalize_hf_json(normalized, source));
    return ConfigFromNormalizedHfJson(normalized, source, *arch, std::move(c));
  }
  return ConfigFromNormalizedHfJson(json, source, *arch, std::move(c));
}

StatusOr<ModelConfig> ConfigFromNormalizedHfJson(const nlohmann::json& json,
                                                 const std::string& source,
                                                 const Architecture& spec, ModelConfig c) {
  const Architecture* arch = &spec;
  UC_RETURN_IF_ERROR(ReadIntField(json, source, "hidden_size", true, c.hidden_size));
  UC_RETURN_IF_ERROR(ReadIntField(json, source, "intermediate_size", true, c.intermediate_size));
  UC_RETURN_IF_ERROR(ReadIntField(json, source, "num_hidden_layers", true, c.num_hidden_layers));
  UC_RETURN_IF_ERROR(
      ReadIntField(json, source, "num_attention_heads", true, c.num_attention_heads));
  c.num_key_value_heads = c.num_attention_heads;
  UC_RETURN_IF_ERROR(
      ReadIntField(json, source, "num_key_value_heads", false, c.num_key_value_heads));
  UC_RETURN_IF_ERROR(ReadIntField(json, source, "vocab_size", true, c.vocab_size));
  c.max_position_embeddings = 2048;
  UC_RETURN_IF_ERROR(
      ReadIntField(json, source, "max_position_embeddings", false, c.max_position_embeddings));
  if (c.num_attention_heads > 0) c.head_dim = c.hidden_size / c.num_attention_heads;
  UC_RETURN_IF_ERROR(ReadIntField(json, source, "head_dim", false, c.head_dim));
  UC_RETURN_IF_ERROR(ReadFloatField(json, source, "rms_norm_eps", c.rms_norm_eps));
  UC_RETURN_IF_ERROR(ReadFloatField(json, source, "rope_theta", c.rope_theta));
  UC_RETURN_IF_ERROR(ReadRopeScaling(json, source, c.rope_scaling));
  if (json.contains("rope_parameters") && json["rope_parameters"].is_object()) {
    const nlohmann::json& rp = json["rope_parameters"].contains("full_attention")
                                   ? json["rope_parameters"]["full_attention"]
                                   : json["rope_parameters"];
    UC_RETURN_IF_ERROR(
        ReadFloatField(rp, source + ": rope_parameters", "rope_theta", c.rope_theta));
  }
  c.rotary_dim = c.head_dim;
  if (json.contains("tie_word_embeddings") && json["tie_word_embeddings"].is_boolean()) {
    c.tie_word_embeddings = json["tie_word_embeddings"].get<bool>();
  }
  // Gemma names it hidden_activation; both spellings may be present (hidden_activation wins).
  for (const char* key : {"hidden_act", "hidden_activation"}) {
    if (!json.contains(key) || json[key].is_null()) continue;
    if (json[key] == "silu") {
      c.hidden_act = Activation::kSilu;
    } else if (json[key] == "gelu_pytorch_tanh" || json[key] == "gelu_new") {
      c.hidden_act = Activation::kGeluTanh;
    } else if (json[key] == "gelu") {
      c.hidden_act = Activation::kGelu;
    } else {
      return UnimplementedError(source + ": " + key + " " + json[key].dump() +
                                " is not supported (supported: \"silu\", \"gelu_pytorch_tanh\", "
                                "\"gelu_new\", \"gelu\")");
    }
  }
  ReadIntField(json, source, "bos_token_id", false, c.bos_token_id).ok();
  ReadTokenIds(json, "eos_token_id", c.eos_token_ids);
  c.rope_style = kernels::RopeStyle::kHalf;
  UC_RETURN_IF_ERROR(arch->read_hf_extras(json, source, c));
  return c;
}

// generation_config.json overrides bos/eos when present.
void ApplyGenerationConfig(const fs::path& dir, ModelConfig& config) {
  const fs::path path = dir / "generation_config.json";
  if (!fs::exists(path)) return;
  StatusOr<nlohmann::json> json = io::ReadJsonFile(path);
  if (!json.ok() || !json->is_object()) return;
  ReadTokenIds(*json, "eos_token_id", config.eos_token_ids);
  if (json->contains("bos_token_id") && (*json)["bos_token_id"].is_number_integer()) {
    config.bos_token_id = (*json)["bos_token_id"].get<int>();
  }
}

// config.json (+ generation_config.json) of a Hugging Face directory, not yet validated.
StatusOr<ModelConfig> ReadHfConfig(const fs::path& dir) {
  const fs::path config_path = dir / "config.json";
  UC_ASSIGN_OR_RETURN(nlohmann::json json, io::ReadJsonFile(config_path));
  UC_ASSIGN_OR_RETURN(ModelConfig config, ConfigFromHfJson(json, config_path.string()));
  ApplyGenerationConfig(dir, config);
  return config;
}

StatusOr<Checkpoint> OpenHfDirectory(const fs::path& dir) {
  Checkpoint ckpt;
  ckpt.format = CheckpointFormat::kHuggingFace;
  ckpt.path = dir;
  UC_ASSIGN_OR_RETURN(ckpt.config, ReadHfConfig(dir));
  UC_ASSIGN_OR_RETURN(ckpt.tensors, io::SafetensorsCheckpoint::Open(dir));
  UC_RETURN_IF_ERROR(ckpt.config.Validate((dir / "config.json").string()));
  const Architecture* arch = FindArchitectureByHfClass(ckpt.config.architecture);
  if (arch != nullptr && arch->hf_tensors != nullptr) {
    ckpt.tensors = arch->hf_tensors(std::move(ckpt.tensors), ckpt.config);
  }
  return ckpt;
}

// ---------------------------------------------------------------- GGUF

// One expert's projection inside llama.cpp's stacked expert tensor: "model.layers.N.mlp.experts.E.
// gate_proj.weight" is row E of "blk.N.ffn_gate_exps.weight" ([num_experts, rows, cols]); files
// from before the stacking name it "blk.N.ffn_gate.E.weight". Biases (gpt-oss) likewise: "...E.
// gate_proj.bias" is row E of "blk.N.ffn_gate_exps.bias" ([num_experts, rows]).
struct GgufExpertName {
  std::string stacked;
  std::string legacy;
  int64_t expert = 0;
};

std::optional<GgufExpertName> HfToGgufExpertName(std::string_view hf_name) {
  int layer = 0;
  std::string_view rest;
  if (!SplitLayerName(hf_name, layer, rest)) return std::nullopt;
  constexpr std::string_view kExperts = "mlp.experts.";
  if (rest.substr(0, kExperts.size()) != kExperts) return std::nullopt;
  rest.remove_prefix(kExperts.size());
  const size_t dot = rest.find('.');
  if (dot == std::string_view::npos || dot == 0 || dot > 6) return std::nullopt;
  int64_t expert = 0;
  for (char ch : rest.substr(0, dot)) {
    if (ch < '0' || ch > '9') return std::nullopt;
    expert = expert * 10 + (ch - '0');
  }
  const std::string_view projection = rest.substr(dot + 1);
  const std::pair<std::string_view, std::string_view> kProjections[] = {
      {"gate_proj.", "ffn_gate"}, {"up_proj.", "ffn_up"}, {"down_proj.", "ffn_down"}};
  for (const auto& [hf, gguf] : kProjections) {
    if (projection.substr(0, hf.size()) != hf) continue;
    const std::string_view kind = projection.substr(hf.size());
    if (kind != "weight" && kind != "bias") return std::nullopt;
    const std::string block = "blk." + std::to_string(layer) + "." + std::string(gguf);
    const std::string suffix = "." + std::string(kind);
    return GgufExpertName{block + "_exps" + suffix, block + "." + std::to_string(expert) + suffix,
                          expert};
  }
  return std::nullopt;
}

// Presents a GgufFile under Hugging Face tensor names (experts as views of their stacked
// tensor; llama.cpp's 1-D shared-expert gate [hidden] as [1, hidden]).
class GgufHfNames : public io::TensorSource {
 public:
  GgufHfNames(std::shared_ptr<const io::GgufFile> file, const Architecture& arch)
      : file_(std::move(file)), arch_(arch) {}
  bool Has(std::string_view name) const override {
    if (std::optional<GgufExpertName> expert = HfToGgufExpertName(name)) {
      // A stacked tensor of the wrong shape "has" the expert: Get() then says what is wrong.
      return file_->Has(expert->stacked) || file_->Has(expert->legacy);
    }
    const std::string gguf = HfToGgufTensorName(name, arch_);
    return !gguf.empty() && file_->Has(gguf);
  }
  StatusOr<Tensor> Get(std::string_view name) const override {
    if (std::optional<GgufExpertName> expert = HfToGgufExpertName(name)) return GetExpert(*expert);
    const std::string gguf = HfToGgufTensorName(name, arch_);
    if (gguf.empty()) return io::TensorNotFoundError(*this, name);
    UC_ASSIGN_OR_RETURN(Tensor t, file_->Get(gguf));
    constexpr std::string_view kSharedGate = "mlp.shared_expert_gate.weight";
    if (t.rank() == 1 && name.size() > kSharedGate.size() &&
        name.substr(name.size() - kSharedGate.size()) == kSharedGate) {
      return t.Reshape({1, t.dim(0)});
    }
    return t;
  }
  std::vector<std::string> TensorNames() const override { return file_->TensorNames(); }
  std::string Describe() const override { return file_->Describe(); }

 private:
  // A stacked weight is [num_experts, rows, cols], a stacked bias [num_experts, rows].
  static size_t StackedRank(const GgufExpertName& expert) {
    constexpr std::string_view kBias = ".bias";
    const std::string_view name = expert.stacked;
    return name.size() > kBias.size() && name.substr(name.size() - kBias.size()) == kBias ? 2 : 3;
  }

  StatusOr<Tensor> GetExpert(const GgufExpertName& expert) const {
    if (!file_->Has(expert.stacked) && file_->Has(expert.legacy)) return file_->Get(expert.legacy);
    UC_ASSIGN_OR_RETURN(Tensor all, file_->Get(expert.stacked));
    const size_t rank = StackedRank(expert);
    if (static_cast<size_t>(all.rank()) != rank || expert.expert >= all.dim(0)) {
      return InvalidArgumentError(
          file_->path() + ": tensor '" + expert.stacked + "' has shape " +
          ShapeToString(all.shape()) + ", which holds no expert " + std::to_string(expert.expert) +
          " (expected " + (rank == 3 ? "[num_experts, rows, cols])" : "[num_experts, rows])"));
    }
    Tensor one = all.Slice(expert.expert, expert.expert + 1);
    return rank == 3 ? one.Reshape({all.dim(1), all.dim(2)}) : one.Reshape({all.dim(1)});
  }

  std::shared_ptr<const io::GgufFile> file_;
  const Architecture& arch_;
};

StatusOr<int> GgufInt(const io::GgufFile& file, const std::string& key) {
  UC_ASSIGN_OR_RETURN(int64_t value, file.GetInt(key));
  if (value < 0 || value > (int64_t{1} << 31) - 1) {
    return InvalidArgumentError(file.path() + ": metadata key '" + key +
                                "' is out of range: " + std::to_string(value));
  }
  return static_cast<int>(value);
}

// llama.cpp's rope.scaling keys: "linear" (factor) or "yarn" (factor, original_context_length,
// and the optional yarn_beta_fast / yarn_beta_slow / yarn_attn_factor; llama.cpp always
// floors/ceils the correction range, the RopeScaling default, which an architecture may undo).
Status ReadGgufRopeScaling(const io::GgufFile& file, const std::string& arch, ModelConfig& c) {
  const std::string key = arch + ".rope.scaling.";
  if (file.Find(key + "type") == nullptr) return OkStatus();
  UC_ASSIGN_OR_RETURN(std::string type, file.GetString(key + "type"));
  if (type == "none") return OkStatus();
  if (type != "linear" && type != "yarn") {
    return UnimplementedError(file.path() + ": " + key + "type '" + type +
                              "' is not supported (supported: none, linear, yarn)");
  }
  c.rope_scaling.type = type;
  UC_ASSIGN_OR_RETURN(double factor, file.GetFloat(key + "factor"));
  c.rope_scaling.factor = static_cast<float>(factor);
  if (type == "yarn") {
    UC_ASSIGN_OR_RETURN(c.rope_scaling.original_max_position_embeddings,
                        GgufInt(file, key + "original_context_length"));
    UC_RETURN_IF_ERROR(
        ReadOptionalGgufFloat(file, key + "yarn_beta_fast", c.rope_scaling.beta_fast));
    UC_RETURN_IF_ERROR(
        ReadOptionalGgufFloat(file, key + "yarn_beta_slow", c.rope_scaling.beta_slow));
    UC_RETURN_IF_ERROR(
        ReadOptionalGgufFloat(file, key + "yarn_attn_factor", c.rope_scaling.attention_factor));
  }
  return OkStatus();
}

StatusOr<ModelConfig> ConfigFromGguf(const io::GgufFile& file) {
  const std::string source = file.path();
  UC_ASSIGN_OR_RETURN(std::string arch, file.GetString("general.architecture"));
  const Architecture* spec = FindArchitectureByGguf(arch);
  if (spec == nullptr) {
    return UnimplementedError(
        source + ": unknown architecture '" + arch +
        "' in general.architecture (supported: " + SupportedGgufArchitectureNames() + ")");
  }
  ModelConfig c;
  c.architecture = std::string(spec->hf_class);
  UC_ASSIGN_OR_RETURN(c.hidden_size, GgufInt(file, arch + ".embedding_length"));
  UC_ASSIGN_OR_RETURN(c.intermediate_size, GgufInt(file, arch + ".feed_forward_length"));
  UC_ASSIGN_OR_RETURN(c.num_hidden_layers, GgufInt(file, arch + ".block_count"));
  UC_ASSIGN_OR_RETURN(c.num_attention_heads, GgufInt(file, arch + ".attention.head_count"));
  c.num_key_value_heads = c.num_attention_heads;
  if (file.Find(arch + ".attention.head_count_kv") != nullptr) {
    UC_ASSIGN_OR_RETURN(c.num_key_value_heads, GgufInt(file, arch + ".attention.head_count_kv"));
  }
  c.head_dim = c.num_attention_heads > 0 ? c.hidden_size / c.num_attention_heads : 0;
  if (file.Find(arch + ".attention.key_length") != nullptr) {
    UC_ASSIGN_OR_RETURN(c.head_dim, GgufInt(file, arch + ".attention.key_length"));
  }
  c.rotary_dim = c.head_dim;
  if (file.Find(arch + ".rope.dimension_count") != nullptr) {
    UC_ASSIGN_OR_RETURN(c.rotary_dim, GgufInt(file, arch + ".rope.dimension_count"));
  }
  UC_ASSIGN_OR_RETURN(c.max_position_embeddings, GgufInt(file, arch + ".context_length"));
  // LayerNorm models (gpt2, gptneox) state layer_norm_epsilon instead.
  const std::string eps_key =
      file.Find(arch + ".attention.layer_norm_epsilon") != nullptr &&
              file.Find(arch + ".attention.layer_norm_rms_epsilon") == nullptr
          ? arch + ".attention.layer_norm_epsilon"
          : arch + ".attention.layer_norm_rms_epsilon";
  UC_ASSIGN_OR_RETURN(double eps, file.GetFloat(eps_key));
  c.rms_norm_eps = static_cast<float>(eps);
  if (file.Find(arch + ".rope.freq_base") != nullptr) {
    UC_ASSIGN_OR_RETURN(double theta, file.GetFloat(arch + ".rope.freq_base"));
    c.rope_theta = static_cast<float>(theta);
  }
  UC_RETURN_IF_ERROR(ReadGgufRopeScaling(file, arch, c));
  if (file.Find(arch + ".vocab_size") != nullptr) {
    UC_ASSIGN_OR_RETURN(c.vocab_size, GgufInt(file, arch + ".vocab_size"));
  } else {
    UC_ASSIGN_OR_RETURN(std::vector<std::string> tokens,
                        file.GetStringArray("tokenizer.ggml.tokens"));
    c.vocab_size = static_cast<int>(tokens.size());
  }
  c.tie_word_embeddings = !file.Has("output.weight");
  c.attention_bias = file.Has("blk.0.attn_q.bias");
  c.o_proj_bias = file.Has("blk.0.attn_output.bias");
  c.rope_style = spec->gguf_rope_style;
  if (file.Has("rope_freqs.weight")) {
    UC_ASSIGN_OR_RETURN(Tensor freqs, file.Get("rope_freqs.weight"));
    c.rope_freq_factors = freqs.ToFloatVector();
  }
  if (file.Find("tokenizer.ggml.bos_token_id") != nullptr) {
    UC_ASSIGN_OR_RETURN(c.bos_token_id, GgufInt(file, "tokenizer.ggml.bos_token_id"));
  }
  if (file.Find("tokenizer.ggml.eos_token_id") != nullptr) {
    UC_ASSIGN_OR_RETURN(int eos, GgufInt(file, "tokenizer.ggml.eos_token_id"));
    c.eos_token_ids = {eos};
  }
  if (spec->read_gguf_extras != nullptr) UC_RETURN_IF_ERROR(spec->read_gguf_extras(file, arch, c));
  return c;
}

StatusOr<Checkpoint> OpenGguf(const fs::path& path) {
  UC_ASSIGN_OR_RETURN(std::shared_ptr<const io::GgufFile> file, io::GgufFile::Open(path));
  Checkpoint ckpt;
  ckpt.format = CheckpointFormat::kGguf;
  ckpt.path = path;
  UC_ASSIGN_OR_RETURN(ckpt.config, ConfigFromGguf(*file));
  UC_RETURN_IF_ERROR(ckpt.config.Validate(path.string()));
  ckpt.gguf = file;
  const Architecture* arch = FindArchitectureByHfClass(ckpt.config.architecture);
  UC_CHECK(arch != nullptr, "no architecture for %s", ckpt.config.architecture.c_str());
  ckpt.tensors = std::make_shared<GgufHfNames>(file, *arch);
  return ckpt;
}

// ---------------------------------------------------------------- llama2.c

ModelConfig ConfigFromLlama2c(const io::Llama2cHeader& h) {
  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.hidden_size = static_cast<int>(h.hidden_size);
  c.intermediate_size = static_cast<int>(h.intermediate_size);
  c.num_hidden_layers = static_cast<int>(h.num_hidden_layers);
  c.num_attention_heads = static_cast<int>(h.num_attention_heads);
  c.num_key_value_heads = static_cast<int>(h.num_key_value_heads);
  c.head_dim = static_cast<int>(h.head_dim());
  c.rotary_dim = c.head_dim;
  c.vocab_size = static_cast<int>(h.vocab_size);
  c.max_position_embeddings = static_cast<int>(h.max_position_embeddings);
  c.rms_norm_eps = 1e-5f;
  c.rope_theta = 10000.0f;
  c.tie_word_embeddings = h.tie_word_embeddings;
  c.rope_style = kernels::RopeStyle::kInterleaved;
  c.bos_token_id = 1;
  c.eos_token_ids = {2};
  return c;
}

StatusOr<Checkpoint> OpenLlama2c(const fs::path& path) {
  UC_ASSIGN_OR_RETURN(auto file, io::Llama2cCheckpoint::Open(path));
  Checkpoint ckpt;
  ckpt.format = CheckpointFormat::kLlama2c;
  ckpt.path = path;
  ckpt.config = ConfigFromLlama2c(file->header());
  UC_RETURN_IF_ERROR(ckpt.config.Validate(path.string()));
  ckpt.tensors = std::move(file);
  return ckpt;
}

bool HasGgufMagic(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  in.read(magic, 4);
  return in.gcount() == 4 && std::string_view(magic, 4) == "GGUF";
}

}  // namespace

std::string_view CheckpointFormatName(CheckpointFormat format) {
  switch (format) {
    case CheckpointFormat::kHuggingFace:
      return "huggingface";
    case CheckpointFormat::kGguf:
      return "gguf";
    case CheckpointFormat::kLlama2c:
      return "llama2c";
  }
  return "?";
}

std::string HfToGgufTensorName(std::string_view hf_name) {
  return HfToGgufTensorName(hf_name, /*sandwich_names=*/false);
}

std::string HfToGgufTensorName(std::string_view hf_name, const Architecture& arch) {
  return HfToGgufTensorName(hf_name, arch.gguf_sandwich_names);
}

std::string HfToGgufTensorName(std::string_view hf_name, bool sandwich_names) {
  static const std::map<std::string, std::string, std::less<>> kGlobal = {
      {"model.embed_tokens.weight", "token_embd.weight"},
      {"model.embed_positions.weight", "position_embd.weight"},
      {"model.norm.weight", "output_norm.weight"},
      {"model.norm.bias", "output_norm.bias"},
      {"lm_head.weight", "output.weight"},
  };
  static const std::map<std::string, std::string, std::less<>> kLayer = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"input_layernorm.bias", "attn_norm.bias"},
      {"post_attention_layernorm.bias", "ffn_norm.bias"},
      {"self_attn.qkv_proj.bias", "attn_qkv.bias"},
      {"mlp.up_proj.bias", "ffn_up.bias"},
      {"mlp.down_proj.bias", "ffn_down.bias"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"self_attn.q_proj.bias", "attn_q.bias"},
      {"self_attn.k_proj.bias", "attn_k.bias"},
      {"self_attn.v_proj.bias", "attn_v.bias"},
      {"self_attn.o_proj.bias", "attn_output.bias"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},
      {"self_attn.q_norm.weight", "attn_q_norm.weight"},
      {"self_attn.k_norm.weight", "attn_k_norm.weight"},
      {"self_attn.qkv_proj.weight", "attn_qkv.weight"},
      {"mlp.gate_up_proj.weight", "ffn_up.weight"},
      {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
      {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
      {"mlp.gate.weight", "ffn_gate_inp.weight"},
      {"mlp.gate.bias", "ffn_gate_inp.bias"},
      {"self_attn.sinks", "attn_sinks.weight"},
      {"mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight"},
      {"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight"},
      {"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight"},
      {"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight"},
  };
  if (auto it = kGlobal.find(hf_name); it != kGlobal.end()) return it->second;
  constexpr std::string_view kPrefix = "model.layers.";
  if (hf_name.substr(0, kPrefix.size()) != kPrefix) return "";
  const std::string_view rest = hf_name.substr(kPrefix.size());
  const size_t dot = rest.find('.');
  if (dot == std::string_view::npos || dot == 0) return "";
  const std::string_view layer = rest.substr(0, dot);
  for (char ch : layer) {
    if (ch < '0' || ch > '9') return "";
  }
  const std::string_view tail = rest.substr(dot + 1);
  if (sandwich_names && tail == "post_attention_layernorm.weight") {
    return "blk." + std::string(layer) + ".post_attention_norm.weight";
  }
  auto it = kLayer.find(tail);
  if (it == kLayer.end()) return "";
  return "blk." + std::string(layer) + "." + it->second;
}

namespace {

// Which layout `path` is in; NotFound for a missing path or a directory without config.json.
// `dir` is set to the model directory for the Hugging Face layout.
StatusOr<CheckpointFormat> DetectFormat(const fs::path& path, fs::path* dir) {
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    return NotFoundError(path.string() + ": no such file or directory");
  }
  if (fs::is_directory(path, ec)) {
    if (!fs::exists(path / "config.json")) {
      return NotFoundError(path.string() +
                           ": directory has no config.json (expected a Hugging Face model "
                           "directory, a .gguf file or a llama2.c .bin)");
    }
    *dir = path;
    return CheckpointFormat::kHuggingFace;
  }
  if (HasGgufMagic(path) || path.extension() == ".gguf") return CheckpointFormat::kGguf;
  if (path.filename() == "config.json") {
    *dir = path.parent_path();
    return CheckpointFormat::kHuggingFace;
  }
  return CheckpointFormat::kLlama2c;
}

}  // namespace

StatusOr<Checkpoint> OpenCheckpoint(const fs::path& path) {
  fs::path dir;
  UC_ASSIGN_OR_RETURN(const CheckpointFormat format, DetectFormat(path, &dir));
  switch (format) {
    case CheckpointFormat::kHuggingFace:
      return OpenHfDirectory(dir);
    case CheckpointFormat::kGguf:
      return OpenGguf(path);  // a bad magic is reported there
    case CheckpointFormat::kLlama2c:
      break;
  }
  return OpenLlama2c(path);
}

StatusOr<ModelConfig> ReadCheckpointConfig(const fs::path& path, CheckpointFormat* format) {
  fs::path dir;
  UC_ASSIGN_OR_RETURN(const CheckpointFormat detected, DetectFormat(path, &dir));
  if (format != nullptr) *format = detected;
  ModelConfig config;
  std::string source = path.string();
  switch (detected) {
    case CheckpointFormat::kHuggingFace: {
      UC_ASSIGN_OR_RETURN(config, ReadHfConfig(dir));
      source = (dir / "config.json").string();
      break;
    }
    case CheckpointFormat::kGguf: {
      UC_ASSIGN_OR_RETURN(std::shared_ptr<const io::GgufFile> file, io::GgufFile::Open(path));
      UC_ASSIGN_OR_RETURN(config, ConfigFromGguf(*file));
      break;
    }
    case CheckpointFormat::kLlama2c: {
      UC_ASSIGN_OR_RETURN(auto file, io::Llama2cCheckpoint::Open(path));
      config = ConfigFromLlama2c(file->header());
      break;
    }
  }
  UC_RETURN_IF_ERROR(config.Validate(source));
  return config;
}

}  // namespace uc::models
