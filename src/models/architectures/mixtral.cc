// Mixtral (MixtralForCausalLM): the Mistral decoder whose MLPs are num_local_experts experts of
// intermediate_size, the top num_experts_per_tok of the router's softmax, always renormalised.
// Its files name the block "block_sparse_moe" and the experts' gate / down / up projections
// w1 / w2 / w3; they are presented under the decoder's names ("mlp.gate",
// "mlp.experts.E.{gate,up,down}_proj").
#include "models/architecture.h"

namespace uc::models {
namespace {

Status ReadMixtralExtras(const nlohmann::json& json, const std::string& source,
                         ModelConfig& config) {
  UC_RETURN_IF_ERROR(ReadMistralHfExtras(json, source, config));
  UC_RETURN_IF_ERROR(ReadMoeHfExtras(json, source, "num_local_experts", config));
  config.norm_topk_prob = true;
  return OkStatus();
}

// "mlp.gate.weight" -> "block_sparse_moe.gate.weight", "mlp.experts.E.gate_proj.weight" ->
// "block_sparse_moe.experts.E.w1.weight" (up_proj w3, down_proj w2); "" for other names.
std::string MixtralName(std::string_view name) {
  int layer = 0;
  std::string_view rest;
  if (!SplitLayerName(name, layer, rest)) return "";
  constexpr std::string_view kMlp = "mlp.";
  if (rest.substr(0, kMlp.size()) != kMlp) return "";
  rest.remove_prefix(kMlp.size());
  std::string out = "model.layers." + std::to_string(layer) + ".block_sparse_moe.";
  if (rest == "gate.weight") return out + "gate.weight";
  constexpr std::string_view kExperts = "experts.";
  if (rest.substr(0, kExperts.size()) != kExperts) return "";
  const std::pair<std::string_view, std::string_view> kProjections[] = {
      {".gate_proj.weight", ".w1.weight"},
      {".up_proj.weight", ".w3.weight"},
      {".down_proj.weight", ".w2.weight"}};
  for (const auto& [hf, mixtral] : kProjections) {
    if (rest.size() > hf.size() && rest.substr(rest.size() - hf.size()) == hf) {
      return out + std::string(rest.substr(0, rest.size() - hf.size())) + std::string(mixtral);
    }
  }
  return "";
}

std::shared_ptr<const io::TensorSource> MixtralTensors(std::shared_ptr<const io::TensorSource> file,
                                                       const ModelConfig&) {
  return std::make_shared<ConvertedTensors>(
      std::move(file), [](const io::TensorSource& f, std::string_view name) -> StatusOr<Tensor> {
        const std::string mixtral = MixtralName(name);
        return f.Get(mixtral.empty() ? name : std::string_view(mixtral));
      });
}

}  // namespace

const Architecture kMixtralArchitecture = {
    .hf_class = "MixtralForCausalLM",
    .gguf_arch = "",
    .gguf_rope_style = kernels::RopeStyle::kInterleaved,
    .read_hf_extras = ReadMixtralExtras,
    .hf_tensors = MixtralTensors,
};

}  // namespace uc::models
