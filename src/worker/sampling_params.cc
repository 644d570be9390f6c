#include "worker/sampling_params.h"

#include <cmath>
#include <utility>

#include "worker/logprobs.h"

namespace uc::worker {

Status SamplingParams::Validate() const {
  if (!std::isfinite(temperature) || temperature < 0.0f) {
    return InvalidArgumentError("temperature must be >= 0, got " + std::to_string(temperature));
  }
  if (top_k < 0) return InvalidArgumentError("top_k must be >= 0, got " + std::to_string(top_k));
  if (!(top_p > 0.0f && top_p <= 1.0f)) {
    return InvalidArgumentError("top_p must be in (0, 1], got " + std::to_string(top_p));
  }
  if (!(min_p >= 0.0f && min_p <= 1.0f)) {
    return InvalidArgumentError("min_p must be in [0, 1], got " + std::to_string(min_p));
  }
  if (max_tokens < 0) {
    return InvalidArgumentError("max_tokens must be >= 0, got " + std::to_string(max_tokens));
  }
  for (const auto& [name, value] :
       {std::pair{"logprobs", logprobs}, std::pair{"prompt_logprobs", prompt_logprobs}}) {
    if (value.has_value() && (*value < 0 || *value > kMaxLogprobs)) {
      return InvalidArgumentError(std::string(name) + " must be in [0, " +
                                  std::to_string(kMaxLogprobs) + "], got " +
                                  std::to_string(*value));
    }
  }
  for (const std::string& s : stop) {
    if (s.empty()) return InvalidArgumentError("stop strings must not be empty");
  }
  return OkStatus();
}

}  // namespace uc::worker
