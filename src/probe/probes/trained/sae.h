// File: sae.h
// -----------------------------------------------------------------------------
// Sparse-autoencoder features for probes, from SAELens's on-disk format (a directory with
// cfg.json and sae_weights.safetensors: W_enc [d_in, d_sae], b_enc [d_sae], W_dec [d_sae, d_in],
// b_dec [d_in], and threshold [d_sae] for JumpReLU). Architectures, as sae-lens encodes:
//   standard  f = relu((x − b_dec·apply_b_dec_to_input) W_enc + b_enc)
//   jumprelu  f = relu(pre) · [pre > threshold], pre as above
//   topk      f = relu of the k largest pre-activations (× |W_dec row| first when
//             rescale_acts_by_decoder_norm), zero elsewhere
// SaeEncoder computes only the features it is asked for. For standard and JumpReLU it copies
// just those columns of W_enc (n × d_in values of d_in × d_sae) when it loads, and a token costs
// n × d_in multiply-adds; TopK needs every pre-activation to know the k largest, so it reads
// all of W_enc. Accumulates in double. Immutable after Load; thread-safe.
//
//   sae  (probe_type sae, single_shot)  the named features' activations of each token:
//        sae       (required) the SAELens directory
//        features  (required) list of feature indices
//        score     "max" (default) or "sum" of the named features' activations
//        threshold, action (abort, default, or flag): as the other scoring probes
//        Where cfg.json says which hook the SAE was trained on (sae-lens's "hook_name", at the
//        top level or in "metadata", a TransformerLens name such as "blocks.1.hook_resid_pre",
//        with "hook_layer" where the name has no block), the point must capture exactly that
//        tap (write the hook_name itself as the point's tensor_type): otherwise creating the
//        probe fails naming both.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "probe/probes/registry.h"

namespace uc::probe {

class SaeEncoder {
 public:
  enum class Architecture { kStandard, kJumpRelu, kTopK };

  // InvalidArgument naming the file and field: a missing or malformed cfg.json, an architecture
  // or normalize_activations other than the above ("none"), a tensor missing or of the wrong
  // shape, a feature index out of [0, d_sae).
  static StatusOr<std::shared_ptr<const SaeEncoder>> Load(const std::filesystem::path& dir,
                                                          std::vector<int64_t> features);

  // The named features' activations for one activation row. REQUIRES: x.size() == d_in().
  std::vector<double> Encode(std::span<const float> x) const;

  int64_t d_in() const { return d_in_; }
  int64_t d_sae() const { return d_sae_; }
  Architecture architecture() const { return architecture_; }
  const std::vector<int64_t>& features() const { return features_; }
  // cfg.json's hook_name and hook_layer (top level or "metadata"); "" and -1 when absent.
  const std::string& hook_name() const { return hook_name_; }
  int hook_layer() const { return hook_layer_; }
  // Encoder weights this encoder read from W_enc and keeps (n × d_in, or d_in × d_sae for TopK).
  int64_t encoder_values_read() const { return static_cast<int64_t>(w_enc_.size()); }

 private:
  SaeEncoder() = default;

  Architecture architecture_ = Architecture::kStandard;
  int64_t d_in_ = 0;
  int64_t d_sae_ = 0;
  int64_t k_ = 0;
  std::vector<int64_t> features_;
  std::string hook_name_;
  int hook_layer_ = -1;
  std::vector<float> b_dec_;  // [d_in], zeros unless apply_b_dec_to_input
  std::vector<float> w_enc_;  // standard/jumprelu: [n, d_in] (named columns); topk: [d_in, d_sae]
  std::vector<float> b_enc_;  // [n] or [d_sae]
  std::vector<float> threshold_;  // jumprelu: [n]
  std::vector<double> scale_;     // topk with rescale: |W_dec row| [d_sae]; else empty
};

// Registers probe_type "sae" (single_shot).
void RegisterSaeProbe(ProbeRegistry& registry);

}  // namespace uc::probe
