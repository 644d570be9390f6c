#include "models/forward_hooks.h"

#include <utility>

#include "models/model_config.h"

namespace uc::models {

bool IsRouterSite(Site site) { return site == Site::kRouterLogits || site == Site::kExpertWeights; }

int64_t SiteWidth(Site site, const ModelConfig& config) {
  return IsRouterSite(site) ? int64_t{config.num_experts} : config.hidden_size;
}

std::string TapPoint::ToString() const {
  const std::string prefix = "blocks." + std::to_string(layer) + ".";
  switch (site) {
    case Site::kAttnOut:
      return prefix + "hook_attn_out";
    case Site::kMlpOut:
      return prefix + "hook_mlp_out";
    case Site::kResidPost:
      return prefix + "hook_resid_post";
    case Site::kFinalNorm:
      return "ln_final.hook_normalized";
    case Site::kResidMid:
      return prefix + "hook_resid_mid";
    case Site::kRouterLogits:
      return prefix + "mlp.hook_router_logits";
    case Site::kExpertWeights:
      return prefix + "mlp.hook_expert_weights";
  }
  return prefix + "?";
}

std::optional<TlHookName> ParseTransformerLensHook(std::string_view name) {
  TlHookName out;
  constexpr std::string_view kBlocks = "blocks.";
  if (name.substr(0, kBlocks.size()) == kBlocks) {
    name.remove_prefix(kBlocks.size());
    const size_t dot = name.find('.');
    if (dot == std::string_view::npos || dot == 0 || dot > 6) return std::nullopt;
    int layer = 0;
    for (const char ch : name.substr(0, dot)) {
      if (ch < '0' || ch > '9') return std::nullopt;
      layer = layer * 10 + (ch - '0');
    }
    out.layer = layer;
    name.remove_prefix(dot + 1);
  }
  static constexpr std::pair<std::string_view, TlHook> kHooks[] = {
      {"hook_resid_pre", TlHook::kResidPre},   {"hook_resid_mid", TlHook::kResidMid},
      {"hook_resid_post", TlHook::kResidPost}, {"hook_attn_out", TlHook::kAttnOut},
      {"hook_mlp_out", TlHook::kMlpOut},
  };
  for (const auto& [text, hook] : kHooks) {
    if (name == text) {
      out.hook = hook;
      return out;
    }
  }
  return std::nullopt;
}

StatusOr<TapPoint> TapOfTransformerLensHook(TlHook hook, int layer) {
  switch (hook) {
    case TlHook::kResidPre:
      if (layer == 0) {
        return InvalidArgumentError(
            "blocks.0.hook_resid_pre is the embedding output, which is not a tap site; the "
            "first tap is blocks.0.hook_resid_post (residual_stream of layer 0)");
      }
      return TapPoint{layer - 1, Site::kResidPost};
    case TlHook::kResidMid:
      return TapPoint{layer, Site::kResidMid};
    case TlHook::kResidPost:
      return TapPoint{layer, Site::kResidPost};
    case TlHook::kAttnOut:
      return TapPoint{layer, Site::kAttnOut};
    case TlHook::kMlpOut:
      return TapPoint{layer, Site::kMlpOut};
  }
  return InvalidArgumentError("unknown TransformerLens hook");
}

}  // namespace uc::models
