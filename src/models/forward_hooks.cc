#include "models/forward_hooks.h"

namespace uc::models {

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
  }
  return prefix + "?";
}

}  // namespace uc::models
