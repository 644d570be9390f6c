// The config.json fields every mixture-of-experts family shares (ModelConfig::num_experts and
// the fields after it), read under the family's own key for the expert count; and the same from
// llama.cpp's GGUF keys ("<arch>.expert_count", ...).
#include "models/architecture.h"

namespace uc::models {
namespace {

Status ReadInt(const nlohmann::json& json, const std::string& source, const char* key,
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

}  // namespace

Status ReadMoeHfExtras(const nlohmann::json& json, const std::string& source,
                       const char* num_experts_key, ModelConfig& config) {
  // transformers 5 writes some families' count as num_local_experts whatever their Hub key.
  const bool local = !json.contains(num_experts_key) && json.contains("num_local_experts");
  UC_RETURN_IF_ERROR(ReadInt(json, source, local ? "num_local_experts" : num_experts_key, true,
                             config.num_experts));
  UC_RETURN_IF_ERROR(
      ReadInt(json, source, "num_experts_per_tok", true, config.num_experts_per_tok));
  config.moe_intermediate_size = config.intermediate_size;
  UC_RETURN_IF_ERROR(
      ReadInt(json, source, "moe_intermediate_size", false, config.moe_intermediate_size));
  UC_RETURN_IF_ERROR(ReadInt(json, source, "shared_expert_intermediate_size", false,
                             config.shared_expert_intermediate_size));
  UC_RETURN_IF_ERROR(
      ReadInt(json, source, "decoder_sparse_step", false, config.decoder_sparse_step));
  if (json.contains("norm_topk_prob") && !json["norm_topk_prob"].is_null()) {
    if (!json["norm_topk_prob"].is_boolean()) {
      return InvalidArgumentError(source + ": field 'norm_topk_prob' must be a boolean, got " +
                                  json["norm_topk_prob"].dump());
    }
    config.norm_topk_prob = json["norm_topk_prob"].get<bool>();
  }
  if (json.contains("mlp_only_layers") && !json["mlp_only_layers"].is_null()) {
    const nlohmann::json& layers = json["mlp_only_layers"];
    if (!layers.is_array()) {
      return InvalidArgumentError(source + ": field 'mlp_only_layers' must be a list of layers");
    }
    for (const nlohmann::json& layer : layers) {
      if (!layer.is_number_integer()) {
        return InvalidArgumentError(source + ": mlp_only_layers entry " + layer.dump() +
                                    " is not a layer index");
      }
      config.mlp_only_layers.push_back(layer.get<int>());
    }
  }
  return OkStatus();
}

Status ReadMoeGgufExtras(const io::GgufFile& file, const std::string& arch, bool renormalize,
                         ModelConfig& config) {
  const std::string& source = file.path();
  auto read_int = [&](const std::string& key, int& out) -> Status {
    UC_ASSIGN_OR_RETURN(int64_t v, file.GetInt(key));
    if (v < 0 || v > (int64_t{1} << 30)) {
      return InvalidArgumentError(source + ": metadata key '" + key +
                                  "' is out of range: " + std::to_string(v));
    }
    out = static_cast<int>(v);
    return OkStatus();
  };
  UC_RETURN_IF_ERROR(read_int(arch + ".expert_count", config.num_experts));
  UC_RETURN_IF_ERROR(read_int(arch + ".expert_used_count", config.num_experts_per_tok));
  config.moe_intermediate_size = config.intermediate_size;
  if (file.Find(arch + ".expert_feed_forward_length") != nullptr) {
    UC_RETURN_IF_ERROR(
        read_int(arch + ".expert_feed_forward_length", config.moe_intermediate_size));
  }
  config.norm_topk_prob = renormalize;
  if (file.Find(arch + ".expert_weights_norm") != nullptr) {
    UC_ASSIGN_OR_RETURN(config.norm_topk_prob, file.GetBool(arch + ".expert_weights_norm"));
  }
  if (file.Find(arch + ".expert_gating_func") != nullptr) {
    UC_ASSIGN_OR_RETURN(int64_t gating, file.GetInt(arch + ".expert_gating_func"));
    if (gating != 1) {  // llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX
      return UnimplementedError(source + ": " + arch + ".expert_gating_func " +
                                std::to_string(gating) + " is not supported (1, softmax, only)");
    }
  }
  // GGUF has no mlp_only_layers: a layer without a router keeps its dense MLP.
  config.decoder_sparse_step = 1;
  config.mlp_only_layers.clear();
  for (int layer = 0; layer < config.num_hidden_layers; ++layer) {
    if (!file.Has("blk." + std::to_string(layer) + ".ffn_gate_inp.weight")) {
      config.mlp_only_layers.push_back(layer);
    }
  }
  // The shared expert (Qwen2-MoE): its own length, else the dense length, as llama.cpp reads it.
  config.shared_expert_intermediate_size = 0;
  for (int layer = 0; layer < config.num_hidden_layers; ++layer) {
    if (!file.Has("blk." + std::to_string(layer) + ".ffn_up_shexp.weight")) continue;
    config.shared_expert_intermediate_size = config.intermediate_size;
    if (file.Find(arch + ".expert_shared_feed_forward_length") != nullptr) {
      UC_RETURN_IF_ERROR(read_int(arch + ".expert_shared_feed_forward_length",
                                  config.shared_expert_intermediate_size));
    }
    break;
  }
  return OkStatus();
}

}  // namespace uc::models
