// File: forward_hooks.h
// -----------------------------------------------------------------------------
// The tap-point interface through which probes observe the forward pass (the role of ggml's
// eval callback). models/ only calls it; probe/ implements it and is installed from above, so
// there is no dependency cycle. Wants() is asked before anything is copied, so activations no
// one reads cost nothing.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "base/status.h"
#include "tensor/tensor.h"

namespace uc::models {

enum class Site {
  kAttnOut,    // output of the attention block (after o_proj), before the residual add
  kMlpOut,     // output of the MLP block (after down_proj), before the residual add
  kResidPost,  // residual stream after the layer
  kFinalNorm,  // final RMSNorm output; layer index = num_hidden_layers
  kResidMid,   // stream between a sequential block's attention and its MLP: the stream before
               // the layer + attn_out (TransformerLens's hook_resid_mid); a parallel-residual
               // block has none and never observes it
  // Mixture-of-experts layers only; activation [m, num_experts], not [m, hidden_size]:
  kRouterLogits,   // the router's logits, before the softmax
  kExpertWeights,  // the weight each expert's output gets (zero off the chosen top-k)
};

struct ModelConfig;

// Whether `site` is one of a mixture-of-experts layer's router sites.
bool IsRouterSite(Site site);
// The width of one row `site` hands to ForwardHooks::Observe on a model of `config`:
// num_experts for the router sites, hidden_size for every other. Every capture buffer, gather,
// record and dataset row of a tap is this wide.
int64_t SiteWidth(Site site, const ModelConfig& config);

struct TapPoint {
  int layer = 0;
  Site site = Site::kResidPost;
  bool operator==(const TapPoint&) const = default;
  // Canonical TransformerLens-style name, e.g. "blocks.3.hook_resid_post",
  // "ln_final.hook_normalized".
  std::string ToString() const;
};

// TransformerLens's hook names of a block, accepted as aliases of our tap sites (specs, HTTP
// steering): hook_resid_pre of block L is the stream before it (residual_stream of L - 1),
// hook_resid_mid the stream between its attention and its MLP (x + attn_out on a sequential
// block, our resid_mid; a parallel block has none), hook_resid_post / hook_attn_out /
// hook_mlp_out our residual_stream / attn_out / mlp_out of L.
enum class TlHook { kResidPre, kResidMid, kResidPost, kAttnOut, kMlpOut };
struct TlHookName {
  TlHook hook = TlHook::kResidPost;
  std::optional<int> layer;  // set by the "blocks.L.<hook>" form
};
// "hook_attn_out" or "blocks.3.hook_attn_out" (layer < 1e6); nullopt for anything else.
std::optional<TlHookName> ParseTransformerLensHook(std::string_view name);
// The tap that holds `hook` of block `layer`: resid_pre of L -> (L - 1, kResidPost); resid_mid,
// resid_post, attn_out, mlp_out -> (L, their site). InvalidArgument, saying why and what to use
// instead, for resid_pre of block 0 (the embedding output is not a tap). Steering resid_mid of L
// is steering attn_out of L on a sequential block, which callers that steer use instead.
StatusOr<TapPoint> TapOfTransformerLensHook(TlHook hook, int layer);

class ForwardHooks {
 public:
  virtual ~ForwardHooks() = default;
  // Whether anyone wants `point` in the current step.
  virtual bool Wants(TapPoint point) const = 0;
  // activation: [m, hidden_size] F32 ([m, num_experts] for the router sites), row i belongs to
  // the token at positions[i]. The view is valid only during the call; copy what you keep.
  virtual void Observe(TapPoint point, std::span<const int32_t> positions,
                       const Tensor& activation) = 0;
};

}  // namespace uc::models
