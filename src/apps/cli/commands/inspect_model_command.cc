#include "apps/cli/commands/inspect_model_command.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>

#include "apps/cli/exit_codes.h"
#include "io/gguf/gguf.h"
#include "io/gguf/gguf_types.h"
#include "probe/spec/spec.h"

namespace uc::cli {
namespace {

constexpr char kKvReason[] =
    "the KV cache is stored as paged blocks, not as a per-token activation";

// Layer indices as compact ranges: "0-4, 6-10, 12".
std::string Ranges(const std::vector<int>& layers) {
  std::string out;
  for (size_t i = 0; i < layers.size();) {
    size_t j = i;
    while (j + 1 < layers.size() && layers[j + 1] == layers[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    out += layers[i] == layers[j] ? std::to_string(layers[i])
                                  : std::to_string(layers[i]) + "-" + std::to_string(layers[j]);
    i = j + 1;
  }
  return out;
}

// {"undercurrent": table} and, for v0.1's scripts, the same table under each v0.1 backend key
// asked for: here one engine captures for every backend, so what it can capture is the answer
// whichever backend a script asks about.
nlohmann::ordered_json SupportByBackend(nlohmann::ordered_json table,
                                        const std::vector<std::string>& v0_1_backends) {
  nlohmann::ordered_json support = {{"undercurrent", table}};
  for (const std::string& backend : v0_1_backends) support[backend] = table;
  return support;
}

std::string Range(int first, int last) {
  return first == last ? std::to_string(first) : std::to_string(first) + "-" + std::to_string(last);
}

struct InspectOptions {
  std::string path;
  std::string format = "text";
  std::string emit_spec;
  std::string backend = "all";  // v0.1's --backend: which of its keys (hf, vllm) to add
  bool trust_remote_code = false;
  std::string revision;
  bool tensors = false;  // list every tensor in the text form
};

// Every tensor's name (as stored), shape and stored type, from the file's index (no weights are
// read; a GGUF tensor of a type we cannot run is listed with its ggml name). Adds "tensors" and
// "tensor_types" (count per type) to `report`; on a file that does not open, a note instead.
void AddTensorIndex(const std::string& path, nlohmann::ordered_json& report) {
  StatusOr<models::Checkpoint> ckpt = models::OpenCheckpoint(path);
  if (!ckpt.ok()) {
    report["tensors_note"] = "the tensor index could not be read: " + ckpt.status().message();
    return;
  }
  nlohmann::ordered_json tensors = nlohmann::ordered_json::array();
  std::map<std::string, int> counts;
  auto add = [&](const std::string& name, const Shape& shape, const std::string& type) {
    tensors.push_back({{"name", name}, {"shape", shape}, {"type", type}});
    ++counts[type];
  };
  if (ckpt->gguf != nullptr) {
    for (const std::string& name : ckpt->gguf->TensorNames()) {
      const io::GgufTensorInfo* info = ckpt->gguf->FindTensor(name);
      if (info != nullptr) add(name, info->shape, io::GgmlTypeName(info->ggml_type));
    }
  } else {
    for (const std::string& name : ckpt->tensors->TensorNames()) {
      StatusOr<Tensor> t = ckpt->tensors->Get(name);
      if (t.ok()) add(name, t->shape(), std::string(DTypeName(t->dtype())));
    }
  }
  nlohmann::ordered_json types = nlohmann::ordered_json::object();
  for (const auto& [type, count] : counts) types[type] = count;
  report["tensor_types"] = std::move(types);
  report["tensors"] = std::move(tensors);
}

// The text lines of the tensor index: a count per type, and with `all` every tensor.
std::string TensorIndexText(const nlohmann::ordered_json& r, bool all) {
  if (r.contains("tensors_note"))
    return "tensors:        " + r["tensors_note"].get<std::string>() + "\n";
  if (!r.contains("tensor_types")) return "";
  std::string out = "tensor types:   ";
  bool first = true;
  for (const auto& [type, count] : r["tensor_types"].items()) {
    out += (first ? "" : ", ") + type + " x" + std::to_string(count.get<int>());
    first = false;
  }
  out += " (" + std::to_string(r["tensors"].size()) + " tensors" +
         (all ? ")\n" : "; --tensors lists them)\n");
  if (!all) return out;
  for (const auto& t : r["tensors"]) {
    std::string shape;
    for (const auto& d : t["shape"]) shape += (shape.empty() ? "" : ", ") + d.dump();
    char line[512];
    std::snprintf(line, sizeof(line), "  %-48s %-8s [%s]\n", t["name"].get<std::string>().c_str(),
                  t["type"].get<std::string>().c_str(), shape.c_str());
    out += line;
  }
  return out;
}

// v0.1's backends named by --backend ("all": both).
std::vector<std::string> V01Backends(const std::string& backend) {
  if (backend == "all") return {"hf", "vllm"};
  if (backend == "undercurrent") return {};
  return {backend};
}

int RunInspect(const InspectOptions& o) {
  models::CheckpointFormat format;
  StatusOr<models::ModelConfig> config = models::ReadCheckpointConfig(o.path, &format);
  if (!config.ok()) {
    std::fprintf(stderr, "error: %s\n", config.status().message().c_str());
    return kExitFailure;
  }
  if (!o.revision.empty()) {
    std::fprintf(stderr,
                 "note: --revision %s is ignored: undercurrent reads the local model files "
                 "given, never a Hub revision\n",
                 o.revision.c_str());
  }
  nlohmann::ordered_json report = ModelReport(o.path, format, *config, V01Backends(o.backend));
  AddTensorIndex(o.path, report);
  if (!o.emit_spec.empty()) {
    const std::string spec = StarterSpec(report);
    const StatusOr<probe::Spec> parsed = probe::ParseSpecText(spec, o.emit_spec);
    if (!parsed.ok()) {  // a bug, not a user error: the starter must always parse
      std::fprintf(stderr, "error: the starter spec does not parse: %s\n",
                   parsed.status().message().c_str());
      return kExitFailure;
    }
    std::ofstream out(o.emit_spec, std::ios::binary);
    out << spec;
    out.close();
    if (!out) {
      std::fprintf(stderr, "error: cannot write the starter spec to '%s'\n", o.emit_spec.c_str());
      return kExitFailure;
    }
    std::fprintf(stderr, "wrote %s\n", o.emit_spec.c_str());
  }
  if (o.format == "json") {
    std::cout << report.dump(2) << "\n";
  } else {
    std::cout << ModelReportText(report) << TensorIndexText(report, o.tensors);
  }
  std::cout.flush();
  return kExitOk;
}

}  // namespace

nlohmann::ordered_json ModelReport(const std::string& path, models::CheckpointFormat format,
                                   const models::ModelConfig& c,
                                   const std::vector<std::string>& v0_1_backends) {
  const int layers = c.num_hidden_layers;
  auto supported = [&](int first, int last, const std::string& what) {
    return nlohmann::ordered_json{{"status", "yes"},
                                  {"reason", nullptr},
                                  {"layers", {{"first", first}, {"last", last}}},
                                  {"description", what}};
  };
  nlohmann::ordered_json support = {
      {"residual_stream", supported(0, layers - 1, "the residual stream after each decoder layer")},
      {"attn_out",
       supported(0, layers - 1,
                 c.sandwich_norms ? "the attention block's output (after o_proj and its post-norm)"
                                  : "the attention block's output (after o_proj)")},
      {"mlp_out",
       supported(0, layers - 1,
                 c.sandwich_norms ? "the MLP block's output (after down_proj and its post-norm)"
                                  : "the MLP block's output (after down_proj)")},
      {"final_norm",
       supported(layers, layers, "the final RMSNorm's output, addressed as layer num_layers")},
      {"kv",
       {{"status", "no"},
        {"reason", kKvReason},
        {"layers", nullptr},
        {"description", "keys and values"}}},
  };
  if (c.num_experts > 0) {  // the router's two tensor types, on the mixture-of-experts layers
    int first = layers, last = -1;
    for (int l = 0; l < layers; ++l) {
      if (c.IsMoeLayer(l)) first = std::min(first, l), last = std::max(last, l);
    }
    const std::string width = " ([" + std::to_string(c.num_experts) + "] per token";
    support["router_logits"] =
        supported(first, last, "the router's logits before the softmax" + width + ")");
    support["expert_weights"] =
        supported(first, last,
                  "each expert's routing weight" + width + ", zero off the top-" +
                      std::to_string(c.num_experts_per_tok) + ")");
  }
  std::vector<int> sliding, global;
  for (int l = 0; l < layers; ++l) (c.LayerWindow(l) > 0 ? sliding : global).push_back(l);
  nlohmann::ordered_json attention = {
      {"sliding_window", c.sliding_window > 0 ? nlohmann::ordered_json(c.sliding_window)
                                              : nlohmann::ordered_json(nullptr)},
      {"sliding_layers", sliding},
      {"global_layers", global},
      {"rope_theta", c.rope_theta},
      {"rope_local_theta", c.rope_local_theta > 0 ? nlohmann::ordered_json(c.rope_local_theta)
                                                  : nlohmann::ordered_json(nullptr)},
      {"qk_norm", c.qk_norm},
      {"logit_softcapping", c.final_logit_softcapping > 0
                                ? nlohmann::ordered_json(c.final_logit_softcapping)
                                : nlohmann::ordered_json(nullptr)},
  };
  return {
      {"model", path},
      {"format", std::string(models::CheckpointFormatName(format))},
      {"model_class", c.architecture},
      {"model_type", c.ModelType()},
      {"num_layers", layers},
      {"hidden_size", c.hidden_size},
      {"num_attention_heads", c.num_attention_heads},
      {"num_key_value_heads", c.num_key_value_heads},
      {"head_dim", c.head_dim},
      {"intermediate_size", c.intermediate_size},
      {"vocab_size", c.vocab_size},
      {"max_position_embeddings", c.max_position_embeddings},
      {"attention", std::move(attention)},
      {"weights_loaded", false},
      {"verified", true},
      {"note", "final_norm is addressed as layer index num_layers (" + std::to_string(layers) +
                   "); layer indices are the same at every tensor- and pipeline-parallel size"},
      {"support", SupportByBackend(std::move(support), v0_1_backends)},
      {"suggested",
       {{"layers", {layers / 2}}, {"tensor_type", "residual_stream"}, {"position", "prompt[-1]"}}},
  };
}

std::string ModelReportText(const nlohmann::ordered_json& r) {
  auto i = [&](const char* key) { return std::to_string(r[key].get<int>()); };
  std::string out;
  out += "model:          " + r["model"].get<std::string>() + " (" +
         r["format"].get<std::string>() + ", configuration only; weights not loaded)\n";
  out += "architecture:   " + r["model_class"].get<std::string>() + " (" +
         r["model_type"].get<std::string>() + ")\n";
  out += "layers:         " + i("num_layers") + "\n";
  out += "hidden size:    " + i("hidden_size") + " (intermediate " + i("intermediate_size") + ")\n";
  out += "heads:          " + i("num_attention_heads") + " attention, " + i("num_key_value_heads") +
         " key/value, head_dim " + i("head_dim") + "\n";
  out += "vocabulary:     " + i("vocab_size") + "\n";
  out += "context:        " + i("max_position_embeddings") + " positions\n";
  const auto& att = r["attention"];
  if (!att["sliding_window"].is_null()) {
    std::vector<int> sliding = att["sliding_layers"].get<std::vector<int>>();
    std::vector<int> global = att["global_layers"].get<std::vector<int>>();
    out += "attention:      sliding window " + std::to_string(att["sliding_window"].get<int>()) +
           " on layers " + Ranges(sliding) +
           (global.empty() ? std::string() : "; global on " + Ranges(global)) + "\n";
  }
  out += "\n";
  out += "capturable tensor types (tensor_type: layer indices):\n";
  for (const auto& [type, s] : r["support"]["undercurrent"].items()) {
    char line[256];
    if (s["status"] == "yes") {
      std::snprintf(line, sizeof(line), "  %-16s %-8s %s\n", type.c_str(),
                    Range(s["layers"]["first"], s["layers"]["last"]).c_str(),
                    s["description"].get<std::string>().c_str());
    } else {
      std::snprintf(line, sizeof(line), "  %-16s %-8s %s\n", type.c_str(), "no",
                    s["reason"].get<std::string>().c_str());
    }
    out += line;
  }
  const auto& sug = r["suggested"];
  out += "\nsuggested starting point: " + sug["tensor_type"].get<std::string>() + " at layer " +
         std::to_string(sug["layers"][0].get<int>()) + ", position " +
         sug["position"].get<std::string>() + "\n";
  out += "  (--emit-spec FILE writes it as a starter spec)\n";
  return out;
}

std::string StarterSpec(const nlohmann::ordered_json& r) {
  const int layer = r["suggested"]["layers"][0];
  const int layers = r["num_layers"];
  std::string y;
  y += "# yaml-language-server: $schema=https://undercurrent.dev/schema/probe-spec.schema.json\n";
  y += "# Starter probe spec for " + r["model"].get<std::string>() + "\n";
  y += "# (" + r["model_class"].get<std::string>() + ", " + std::to_string(layers) +
       " layers, hidden_size " + std::to_string(r["hidden_size"].get<int>()) +
       "), written by `undercurrent inspect-model --emit-spec`.\n";
  y += "# Capturable: residual_stream, attn_out, mlp_out at layers 0-" +
       std::to_string(layers - 1) + "; final_norm at layer " + std::to_string(layers) +
       "; not kv.\n";
  y +=
      "# Check it with `undercurrent validate FILE`; run it with `undercurrent generate --spec`.\n";
  y += "version: \"1\"\n";
  y += "extraction_points:\n";
  y += "  - name: starter\n";
  y += "    # The residual stream after the middle decoder layer, at the last prompt token.\n";
  y += "    layers: [" + std::to_string(layer) + "]\n";
  y += "    tensor_type: residual_stream\n";
  y += "    position: \"prompt[-1]\"\n";
  y += "    # Replace my_probe with a registered probe type (built-ins: linear, mlp, norm_gate,\n";
  y += "    # cosine, ema, running_mean) and give its probe_args, e.g.\n";
  y += "    # probe_args: {weights: probe.safetensors, sigmoid: true, threshold: 0.9}\n";
  y += "    probe_type: my_probe\n";
  y += "    probe_kind: single_shot\n";
  y += "    # inline: the probe may stop the generation; async: it only observes.\n";
  y += "    execution_mode: inline\n";
  return y;
}

void AddInspectModelCommand(CLI::App& app) {
  auto options = std::make_shared<InspectOptions>();
  CLI::App* cmd = app.add_subcommand(
      "inspect-model",
      "Describe a model and what a probe spec can capture from it (reads its configuration, "
      "not its weights)");
  cmd->add_option("path", options->path,
                  "Model: a Hugging Face directory (or its config.json), a .gguf file or a "
                  "llama2.c .bin")
      ->type_name("PATH")
      ->required();
  cmd->add_option("--format", options->format, "Output format")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  cmd->add_option("--emit-spec", options->emit_spec,
                  "Also write a commented starter spec for this model to FILE")
      ->type_name("FILE");
  cmd->add_option("--backend", options->backend,
                  "Undercurrent v0.1's backend keys to add to the JSON report's support table "
                  "beside 'undercurrent' (hf, vllm, all, or undercurrent for none). Every key "
                  "holds this engine's table: it captures the same tensors whichever backend a "
                  "v0.1 script asks about")
      ->check(CLI::IsMember({"hf", "vllm", "all", "undercurrent"}))
      ->capture_default_str();
  cmd->add_flag("--trust-remote-code", options->trust_remote_code,
                "Accepted for Undercurrent v0.1's scripts; does nothing: no model code is ever "
                "run, only its configuration is read");
  cmd->add_option("--revision", options->revision,
                  "Accepted for Undercurrent v0.1's scripts; ignored (with a note on stderr): "
                  "models are local files here, never a Hub revision")
      ->type_name("REV");
  cmd->add_flag("--tensors", options->tensors,
                "List every tensor (name as stored, type, shape) in the text form; the JSON form "
                "always has them");
  cmd->callback([options] { throw CLI::RuntimeError(RunInspect(*options)); });
}

}  // namespace uc::cli
