#include "worker/steering_config.h"

#include <cmath>

#include "worker/byte_codec.h"

namespace uc::worker {
namespace {

using internal::ByteReader;
using internal::ByteWriter;

constexpr uint32_t kSteeringMagic = 0x55435354;  // "UCST"

bool IsSteerableSite(models::Site site) {
  return site == models::Site::kResidPost || site == models::Site::kAttnOut ||
         site == models::Site::kMlpOut;
}

}  // namespace

Status SteeringConfig::Validate(int hidden_size, int num_layers, const std::string& field) const {
  for (size_t i = 0; i < vectors.size(); ++i) {
    const SteeringVector& v = vectors[i];
    const std::string name =
        field + "[" + std::to_string(i) + "] (layer " + std::to_string(v.layer) + ")";
    if (v.layer < 0 || v.layer >= num_layers) {
      return InvalidArgumentError(name + ": the model has layers 0 to " +
                                  std::to_string(num_layers - 1));
    }
    if (!IsSteerableSite(v.site)) {
      return InvalidArgumentError(name + ": steering goes to residual_stream, attn_out or mlp_out");
    }
    if (static_cast<int64_t>(v.values.size()) != hidden_size) {
      return InvalidArgumentError(name + " has " + std::to_string(v.values.size()) +
                                  " values; the model's hidden size is " +
                                  std::to_string(hidden_size));
    }
    if (!std::isfinite(v.scale)) return InvalidArgumentError(name + ": the scale is not finite");
    double norm = 0.0;
    for (size_t j = 0; j < v.values.size(); ++j) {
      if (!std::isfinite(v.values[j])) {
        return InvalidArgumentError(name + " has a non-finite value at index " + std::to_string(j));
      }
      norm += static_cast<double>(v.values[j]) * v.values[j];
    }
    if (v.norm_match && norm == 0.0) {
      return InvalidArgumentError(name + " is all zeros, which norm matching cannot rescale");
    }
  }
  return OkStatus();
}

std::string SteeringConfig::Serialize() const {
  ByteWriter w;
  w.Put(kSteeringMagic);
  w.Put<uint32_t>(static_cast<uint32_t>(vectors.size()));
  for (const SteeringVector& v : vectors) {
    w.Put(v.layer);
    w.Put<uint8_t>(static_cast<uint8_t>(v.site));
    w.Put<uint8_t>(static_cast<uint8_t>(v.tokens));
    w.Put(v.scale);
    w.Put<uint8_t>(v.norm_match);
    w.Put(v.group);
    w.Put<uint32_t>(static_cast<uint32_t>(v.values.size()));
    for (float x : v.values) w.Put(x);
  }
  return w.Take();
}

StatusOr<SteeringConfig> SteeringConfig::Parse(const std::string& bytes) {
  ByteReader r(bytes);
  uint32_t magic = 0, n = 0;
  if (!r.Get(magic) || magic != kSteeringMagic || !r.Get(n)) {
    return InvalidArgumentError("malformed steering config (header)");
  }
  SteeringConfig config;
  for (uint32_t i = 0; i < n; ++i) {
    SteeringVector v;
    uint8_t site = 0, tokens = 0, norm_match = 0;
    uint32_t size = 0;
    if (!(r.Get(v.layer) && r.Get(site) && r.Get(tokens) && r.Get(v.scale) && r.Get(norm_match) &&
          r.Get(v.group) && r.Get(size)) ||
        site > static_cast<uint8_t>(models::Site::kFinalNorm) ||
        tokens > static_cast<uint8_t>(SteeringTokens::kGenerated)) {
      return InvalidArgumentError("malformed steering config (vector " + std::to_string(i) + ")");
    }
    v.site = static_cast<models::Site>(site);
    v.tokens = static_cast<SteeringTokens>(tokens);
    v.norm_match = norm_match != 0;
    v.values.resize(size);
    for (float& x : v.values) {
      if (!r.Get(x)) return InvalidArgumentError("malformed steering config (values)");
    }
    config.vectors.push_back(std::move(v));
  }
  if (!r.done()) return InvalidArgumentError("malformed steering config (trailing bytes)");
  return config;
}

StatusOr<SteeringTokens> ParseSteeringTokens(const std::string& name) {
  if (name == "all" || name == "both") return SteeringTokens::kAll;
  if (name == "prompt") return SteeringTokens::kPrompt;
  if (name == "generated") return SteeringTokens::kGenerated;
  return InvalidArgumentError("unknown steering tokens '" + name +
                              "' (expected prompt, generated or all)");
}

const char* SteeringTokensName(SteeringTokens tokens) {
  switch (tokens) {
    case SteeringTokens::kPrompt:
      return "prompt";
    case SteeringTokens::kGenerated:
      return "generated";
    case SteeringTokens::kAll:
      break;
  }
  return "all";
}

StatusOr<models::Site> ParseSteeringSite(const std::string& name) {
  if (name == "residual_stream") return models::Site::kResidPost;
  if (name == "attn_out") return models::Site::kAttnOut;
  if (name == "mlp_out") return models::Site::kMlpOut;
  return InvalidArgumentError("unknown steering site '" + name +
                              "' (expected residual_stream, attn_out or mlp_out)");
}

const char* SteeringSiteName(models::Site site) {
  switch (site) {
    case models::Site::kAttnOut:
      return "attn_out";
    case models::Site::kMlpOut:
      return "mlp_out";
    default:
      break;
  }
  return "residual_stream";
}

}  // namespace uc::worker
