// make_synthetic_model: writes a random-weight Llama checkpoint at a real model's shape, for
// benchmarks (weights are random, so the text is gibberish but the cost per token is real).
//
//   make_synthetic_model --shape tinyllama-1.1b --format safetensors --dtype bf16 --out DIR
//   make_synthetic_model --shape llama3-8b --format gguf --dtype f16 --out FILE.gguf
//   make_synthetic_model --shape llama3-8b --format gguf --dtype q4_k_m --out FILE.gguf
//
// Hugging Face output is a directory (config.json, generation_config.json, model.safetensors or
// shards of at most --shard-gib with model.safetensors.index.json); GGUF output is one file with
// llama.* metadata and a synthetic SentencePiece vocabulary (llama.cpp loads it too). Tensors are
// produced one at a time while writing, so memory stays small.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "convert/quantize.h"
#include "io/gguf/gguf_writer.h"
#include "io/safetensors/safetensors_writer.h"
#include "tensor/tensor.h"

namespace uc::tools {
namespace {
namespace fs = std::filesystem;

struct ModelShape {
  int hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, num_key_value_heads;
  int vocab_size, max_position_embeddings;
  float rope_theta;
  bool llama3_rope_scaling;
};

const std::map<std::string, ModelShape>& Shapes() {
  static const std::map<std::string, ModelShape> kShapes = {
      {"tinyllama-1.1b", {2048, 5632, 22, 32, 4, 32000, 2048, 10000.0f, false}},
      {"llama3-8b", {4096, 14336, 32, 32, 8, 128256, 8192, 500000.0f, true}},
      {"smoke", {256, 704, 2, 4, 2, 1024, 512, 10000.0f, false}},
  };
  return kShapes;
}

// A counter-based generator: value i of tensor t is a pure function of (seed, t, i), so the
// output does not depend on write order. Approximately normal (sum of four uniforms).
float RandomValue(uint64_t seed, uint64_t stream, uint64_t i) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull ^ (stream + 1) * 0xBF58476D1CE4E5B9ull ^ i;
  float sum = 0.0f;
  for (int k = 0; k < 4; ++k) {
    x += 0x9E3779B97F4A7C15ull;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    sum += static_cast<float>(z >> 40) * (1.0f / 16777216.0f);
  }
  return (sum - 2.0f) * 1.7320508f;  // unit variance
}

struct TensorPlan {
  std::string hf_name, gguf_name;
  Shape shape;
  float mean, stddev;
  bool is_norm;
};

std::vector<TensorPlan> Plan(const ModelShape& s) {
  const int64_t h = s.hidden_size, inter = s.intermediate_size;
  const int64_t head_dim = h / s.num_attention_heads;
  const int64_t q = s.num_attention_heads * head_dim, kv = s.num_key_value_heads * head_dim;
  const float std_in = 1.0f / std::sqrt(static_cast<float>(h));
  std::vector<TensorPlan> plan = {
      {"model.embed_tokens.weight", "token_embd.weight", {s.vocab_size, h}, 0, 1.0f, false}};
  for (int l = 0; l < s.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const std::string g = "blk." + std::to_string(l) + ".";
    plan.push_back({p + "input_layernorm.weight", g + "attn_norm.weight", {h}, 1, 0.05f, true});
    plan.push_back({p + "self_attn.q_proj.weight", g + "attn_q.weight", {q, h}, 0, std_in, false});
    plan.push_back({p + "self_attn.k_proj.weight", g + "attn_k.weight", {kv, h}, 0, std_in, false});
    plan.push_back({p + "self_attn.v_proj.weight", g + "attn_v.weight", {kv, h}, 0, std_in, false});
    plan.push_back({p + "self_attn.o_proj.weight",
                    g + "attn_output.weight",
                    {h, q},
                    0,
                    0.5f / std::sqrt(static_cast<float>(q)),
                    false});
    plan.push_back(
        {p + "post_attention_layernorm.weight", g + "ffn_norm.weight", {h}, 1, 0.05f, true});
    plan.push_back(
        {p + "mlp.gate_proj.weight", g + "ffn_gate.weight", {inter, h}, 0, std_in, false});
    plan.push_back({p + "mlp.up_proj.weight", g + "ffn_up.weight", {inter, h}, 0, std_in, false});
    plan.push_back({p + "mlp.down_proj.weight",
                    g + "ffn_down.weight",
                    {h, inter},
                    0,
                    0.5f / std::sqrt(static_cast<float>(inter)),
                    false});
  }
  plan.push_back({"model.norm.weight", "output_norm.weight", {h}, 1, 0.05f, true});
  plan.push_back({"lm_head.weight", "output.weight", {s.vocab_size, h}, 0, std_in, false});
  return plan;
}

// Produces tensor `index` of the plan in `dtype`, its rows shared among the hardware threads
// (the K-quants' reference quantizers take minutes for an 8B model on one thread).
io::TensorProducer Producer(const TensorPlan& t, uint64_t seed, uint64_t index, DType dtype) {
  return [t, seed, index, dtype]() -> StatusOr<Tensor> {
    Tensor out = Tensor::Empty(t.shape, dtype);
    const int64_t cols = t.shape.back();
    const int64_t rows = ShapeNumel(t.shape) / cols;
    auto fill = [&](int64_t begin, int64_t end) {
      std::vector<float> row(cols);
      for (int64_t r = begin; r < end; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
          row[c] = t.mean + t.stddev * RandomValue(seed, index, r * cols + c);
        }
        QuantizeRow(dtype, row.data(), out.row(r), cols);
      }
    };
    const int64_t threads =
        std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, std::max<int64_t>(1, rows));
    std::vector<std::thread> workers;
    for (int64_t i = 1; i < threads; ++i) {
      workers.emplace_back(fill, rows * i / threads, rows * (i + 1) / threads);
    }
    fill(0, rows / threads);
    for (std::thread& w : workers) w.join();
    return out;
  };
}

StatusOr<DType> ParseDType(const std::string& name) {
  static const std::map<std::string, DType> kNames = {
      {"f32", DType::kF32},   {"f16", DType::kF16},   {"bf16", DType::kBF16},
      {"q8_0", DType::kQ8_0}, {"q4_0", DType::kQ4_0}, {"q4_1", DType::kQ4_1}};
  auto it = kNames.find(name);
  if (it == kNames.end()) {
    return InvalidArgumentError("--dtype '" + name +
                                "': expected f32, f16, bf16, q8_0, q4_0 or q4_1");
  }
  return it->second;
}

// The --dtype of every tensor: one plain type for all but the norms (F32), or a llama-quantize
// mix (q4_k_m, q5_k_m, q6_k, ...: convert::TensorTypeChooser, as `undercurrent quantize` gives
// them). GGUF names of `plan`.
struct DTypeChoice {
  std::optional<DType> plain;
  std::optional<convert::QuantizeType> mix;
};

StatusOr<DTypeChoice> ParseDTypeChoice(const std::string& name) {
  StatusOr<DType> plain = ParseDType(name);
  if (plain.ok()) return DTypeChoice{*plain, std::nullopt};
  StatusOr<convert::QuantizeType> mix = convert::ParseQuantizeType(name);
  if (!mix.ok()) {
    return InvalidArgumentError("--dtype '" + name +
                                "': expected f32, f16, bf16, q8_0, q4_0, q4_1 or a quantize "
                                "type (q4_k_m, q5_k_m, q6_k, q5_0, q5_1; GGUF only)");
  }
  return DTypeChoice{std::nullopt, *mix};
}

std::vector<DType> TensorDTypes(const ModelShape& s, const std::vector<TensorPlan>& plan,
                                const DTypeChoice& choice) {
  std::vector<DType> dtypes(plan.size(), DType::kF32);
  if (choice.plain) {
    for (size_t i = 0; i < plan.size(); ++i) {
      if (!plan[i].is_norm) dtypes[i] = *choice.plain;
    }
    return dtypes;
  }
  convert::ModelFacts facts;
  facts.arch = "llama";
  facts.has_output = true;
  facts.num_layers = s.num_hidden_layers;
  facts.num_attention_wv = s.num_hidden_layers;
  convert::TensorTypeChooser chooser(*choice.mix, facts);
  std::vector<std::string> names;
  for (const TensorPlan& t : plan) names.push_back(t.gguf_name);
  for (size_t i : convert::SortLikeLlamaCpp(names)) {
    dtypes[i] = chooser.Choose(plan[i].gguf_name, plan[i].shape, DType::kF32);
  }
  return dtypes;
}

nlohmann::json HfConfig(const ModelShape& s) {
  nlohmann::json c = {
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
      {"hidden_size", s.hidden_size},
      {"intermediate_size", s.intermediate_size},
      {"num_hidden_layers", s.num_hidden_layers},
      {"num_attention_heads", s.num_attention_heads},
      {"num_key_value_heads", s.num_key_value_heads},
      {"vocab_size", s.vocab_size},
      {"max_position_embeddings", s.max_position_embeddings},
      {"rms_norm_eps", 1e-5},
      {"rope_theta", s.rope_theta},
      {"tie_word_embeddings", false},
      {"hidden_act", "silu"},
      {"bos_token_id", 1},
      {"eos_token_id", 2},
  };
  c["rope_scaling"] = nullptr;
  if (s.llama3_rope_scaling) {
    c["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", 8.0},
                         {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 8192}};
  }
  return c;
}

Status WriteSafetensors(const ModelShape& s, DType dtype, uint64_t seed, double shard_gib,
                        const fs::path& dir) {
  if (dtype != DType::kF32 && dtype != DType::kF16 && dtype != DType::kBF16) {
    return InvalidArgumentError("safetensors holds f32, f16 or bf16 only");
  }
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << HfConfig(s).dump(2) << "\n";
  std::ofstream(dir / "generation_config.json")
      << nlohmann::json{{"bos_token_id", 1}, {"eos_token_id", 2}}.dump(2) << "\n";
  const std::vector<TensorPlan> plan = Plan(s);
  const int64_t shard_bytes = static_cast<int64_t>(shard_gib * (1ull << 30));
  std::vector<std::vector<size_t>> shards(1);
  int64_t current = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    const int64_t bytes = Tensor::BytesFor(plan[i].shape, dtype);
    if (current > 0 && current + bytes > shard_bytes) {
      shards.emplace_back();
      current = 0;
    }
    shards.back().push_back(i);
    current += bytes;
  }
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t k = 0; k < shards.size(); ++k) {
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", k + 1, shards.size());
    const std::string file = shards.size() == 1 ? "model.safetensors" : name;
    io::SafetensorsWriter writer;
    writer.SetMetadata("format", "pt");
    for (size_t i : shards[k]) {
      UC_RETURN_IF_ERROR(
          writer.AddLazy(plan[i].hf_name, dtype, plan[i].shape, Producer(plan[i], seed, i, dtype)));
      weight_map[plan[i].hf_name] = file;
    }
    UC_RETURN_IF_ERROR(writer.WriteFile(dir / file));
    std::fprintf(stderr, "wrote %s\n", (dir / file).c_str());
  }
  if (shards.size() > 1) {
    std::ofstream(dir / "model.safetensors.index.json")
        << nlohmann::json{{"metadata", nlohmann::json::object()}, {"weight_map", weight_map}}.dump(
               2);
  }
  return OkStatus();
}

// A SentencePiece-style vocabulary of `vocab_size` pieces, so that llama.cpp (which needs one to
// load a model) and our loader both take the file: <unk>, <s>, </s>, the 256 byte pieces
// <0x00>..<0xFF>, then "▁t<i>" pieces with descending scores.
void WriteSyntheticVocabulary(int vocab_size, io::GgufWriter& writer) {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};  // llama.cpp: 1 normal, 2 unknown, 3 control, 6 byte
  for (int b = 0; b < 256; ++b) {
    char piece[8];
    std::snprintf(piece, sizeof(piece), "<0x%02X>", b);
    tokens.push_back(piece);
    types.push_back(6);
  }
  for (int i = static_cast<int>(tokens.size()); i < vocab_size; ++i) {
    tokens.push_back("\xe2\x96\x81t" + std::to_string(i));
    types.push_back(1);
  }
  tokens.resize(static_cast<size_t>(vocab_size));
  types.resize(static_cast<size_t>(vocab_size));
  std::vector<float> scores(tokens.size());
  for (size_t i = 0; i < scores.size(); ++i) scores[i] = types[i] == 1 ? -static_cast<float>(i) : 0;
  writer.SetString("tokenizer.ggml.model", "llama");
  writer.SetStringArray("tokenizer.ggml.tokens", tokens);
  writer.SetArray<float>("tokenizer.ggml.scores", scores);
  writer.SetArray<int32_t>("tokenizer.ggml.token_type", types);
  writer.Set<uint32_t>("tokenizer.ggml.unknown_token_id", 0);
  writer.Set<uint32_t>("tokenizer.ggml.bos_token_id", 1);
  writer.Set<uint32_t>("tokenizer.ggml.eos_token_id", 2);
  writer.Set<bool>("tokenizer.ggml.add_bos_token", true);
}

Status WriteGguf(const ModelShape& s, const DTypeChoice& choice, uint64_t seed,
                 const fs::path& path) {
  io::GgufWriter writer;
  writer.SetString("general.architecture", "llama");
  writer.SetString("general.name", "synthetic");
  if (choice.mix) {
    writer.Set<uint32_t>("general.file_type",
                         static_cast<uint32_t>(convert::LlamaFtype(*choice.mix)));
    writer.Set<uint32_t>("general.quantization_version", 2);
  }
  writer.Set<uint32_t>("llama.block_count", s.num_hidden_layers);
  writer.Set<uint32_t>("llama.context_length", s.max_position_embeddings);
  writer.Set<uint32_t>("llama.embedding_length", s.hidden_size);
  writer.Set<uint32_t>("llama.feed_forward_length", s.intermediate_size);
  writer.Set<uint32_t>("llama.attention.head_count", s.num_attention_heads);
  writer.Set<uint32_t>("llama.attention.head_count_kv", s.num_key_value_heads);
  writer.Set<float>("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  writer.Set<float>("llama.rope.freq_base", s.rope_theta);
  writer.Set<uint32_t>("llama.vocab_size", s.vocab_size);
  WriteSyntheticVocabulary(s.vocab_size, writer);
  const std::vector<TensorPlan> plan = Plan(s);
  const std::vector<DType> dtypes = TensorDTypes(s, plan, choice);
  for (size_t i = 0; i < plan.size(); ++i) {
    const DType t = dtypes[i];
    UC_RETURN_IF_ERROR(
        writer.AddLazy(plan[i].gguf_name, t, plan[i].shape, Producer(plan[i], seed, i, t)));
  }
  if (path.has_parent_path()) fs::create_directories(path.parent_path());
  UC_RETURN_IF_ERROR(writer.WriteFile(path));
  std::fprintf(stderr, "wrote %s\n", path.c_str());
  return OkStatus();
}

}  // namespace
}  // namespace uc::tools

int main(int argc, char** argv) {
  CLI::App app{"Write a random-weight Llama checkpoint at a real model's shape"};
  std::string shape_name = "tinyllama-1.1b", format = "safetensors", dtype_name = "bf16", out;
  uint64_t seed = 1;
  double shard_gib = 4.0;
  app.add_option("--shape", shape_name, "tinyllama-1.1b, llama3-8b or smoke")
      ->capture_default_str();
  app.add_option("--format", format, "safetensors (a directory) or gguf (a file)")
      ->check(CLI::IsMember({"safetensors", "gguf"}))
      ->capture_default_str();
  app.add_option("--dtype", dtype_name,
                 "f32, f16, bf16, q8_0, q4_0, q4_1 (every tensor but the norms), or, for GGUF, "
                 "a quantize type's per-tensor mix: q4_k_m, q5_k_m, q6_k, q5_0, q5_1")
      ->capture_default_str();
  app.add_option("--seed", seed, "Random seed")->capture_default_str();
  app.add_option("--shard-gib", shard_gib, "Largest safetensors shard")->capture_default_str();
  app.add_option("--out", out, "Output directory (safetensors) or file (gguf)")->required();
  CLI11_PARSE(app, argc, argv);
  const auto& shapes = uc::tools::Shapes();
  auto it = shapes.find(shape_name);
  if (it == shapes.end()) {
    std::fprintf(stderr, "error: unknown --shape '%s'\n", shape_name.c_str());
    return 2;
  }
  const uc::StatusOr<uc::tools::DTypeChoice> dtype = uc::tools::ParseDTypeChoice(dtype_name);
  if (!dtype.ok()) {
    std::fprintf(stderr, "error: %s\n", dtype.status().message().c_str());
    return 2;
  }
  if (format != "gguf" && !dtype->plain) {
    std::fprintf(stderr, "error: --dtype '%s' writes GGUF only: add --format gguf\n",
                 dtype_name.c_str());
    return 2;
  }
  const uc::Status status = format == "gguf" ? uc::tools::WriteGguf(it->second, *dtype, seed, out)
                                             : uc::tools::WriteSafetensors(
                                                   it->second, *dtype->plain, seed, shard_gib, out);
  if (!status.ok()) {
    std::fprintf(stderr, "error: %s\n", status.message().c_str());
    return 1;
  }
  return 0;
}
