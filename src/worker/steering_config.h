// File: steering_config.h
// -----------------------------------------------------------------------------
// SteeringConfig: one request's steering — vectors added to the residual stream at chosen
// (layer, site)s for chosen tokens — as the engine registers it with every rank. Configs are
// deduplicated by content (Serialize() is canonical: vectors in the order given), so requests
// that steer alike share one registration, and a step's batch carries only config ids.
//
// A vector at site kResidPost (default) is added to the output of decoder block `layer`
// (llama.cpp's control-vector place); kAttnOut / kMlpOut add it to what the attention / MLP
// block adds to the residual stream (after Gemma's post-norms), so kAttnOut also reaches that
// layer's MLP. `tokens` picks prompt positions, generated positions or both. With norm_match
// the vector is rescaled per token to scale × ‖stream‖ / ‖vector‖, where ‖stream‖ is the norm
// of the residual stream it joins (the stream right after that site, unsteered); otherwise
// scale × vector is added.
//
// Vectors come in groups (SteeringVector::group) that a request switches on and off by position
// (conditional steering); a request without windows has every group on everywhere.
//
// Plain value type; thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "models/forward_hooks.h"

namespace uc::worker {

enum class SteeringTokens : uint8_t { kAll = 0, kPrompt = 1, kGenerated = 2 };

struct SteeringVector {
  int32_t layer = 0;
  models::Site site = models::Site::kResidPost;
  SteeringTokens tokens = SteeringTokens::kAll;
  float scale = 1.0f;
  bool norm_match = false;
  // Which switchable group the vector belongs to: a request may turn groups on and off at
  // token positions (ScheduledSequence::steering_windows), e.g. a spec's conditional entries.
  uint8_t group = 0;
  std::vector<float> values;  // [hidden_size]

  // True when this vector applies to the token at `position` of a sequence whose prompt has
  // `num_prompt_tokens` tokens.
  bool AppliesTo(int32_t position, int32_t num_prompt_tokens) const {
    switch (tokens) {
      case SteeringTokens::kPrompt:
        return position < num_prompt_tokens;
      case SteeringTokens::kGenerated:
        return position >= num_prompt_tokens;
      case SteeringTokens::kAll:
        break;
    }
    return true;
  }
  bool operator==(const SteeringVector&) const = default;
};

struct SteeringConfig {
  std::vector<SteeringVector> vectors;

  bool empty() const { return vectors.empty(); }
  // InvalidArgument naming `field` and the vector (e.g. "steering_vectors[2]") when a layer is
  // outside [0, num_layers), a site is not attn_out / mlp_out / residual_stream, a length is
  // not hidden_size, a value or the scale is not finite, or a norm-matched vector is all zero.
  Status Validate(int hidden_size, int num_layers, const std::string& field) const;

  // Canonical bytes (equal configs give equal bytes) and their exact inverse.
  std::string Serialize() const;
  static StatusOr<SteeringConfig> Parse(const std::string& bytes);
  bool operator==(const SteeringConfig&) const = default;
};

// "prompt" / "generated" / "all" (also "both"); InvalidArgument otherwise.
StatusOr<SteeringTokens> ParseSteeringTokens(const std::string& name);
const char* SteeringTokensName(SteeringTokens tokens);
// "residual_stream" / "attn_out" / "mlp_out" (the spec's tensor_type names); InvalidArgument
// otherwise.
StatusOr<models::Site> ParseSteeringSite(const std::string& name);
const char* SteeringSiteName(models::Site site);

}  // namespace uc::worker
