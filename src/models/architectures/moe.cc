// The config.json fields every mixture-of-experts family shares (ModelConfig::num_experts and
// the fields after it), read under the family's own key for the expert count.
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

}  // namespace uc::models
