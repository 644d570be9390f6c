// File: sampling_params.h
// -----------------------------------------------------------------------------
// How one request picks its tokens and when it stops (vLLM's SamplingParams). Plain value type.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace uc::worker {

// What a request's output must be. Plain value type; compiled and
// enforced by worker/structured_output.h.
struct GrammarSpec {
  enum class Kind : uint8_t {
    kNone = 0,
    kJsonObject = 1,     // any JSON object (text unused)
    kJsonSchema = 2,     // text: a JSON schema
    kRegex = 3,          // text: a regular expression the whole output matches
    kEbnf = 4,           // text: an EBNF grammar (xgrammar's GBNF dialect) with a `root` rule
    kStructuralTag = 5,  // text: an xgrammar structural tag (JSON)
  };
  Kind kind = Kind::kNone;
  std::string text;

  bool active() const { return kind != Kind::kNone; }
  bool operator==(const GrammarSpec&) const = default;
};

struct SamplingParams {
  float temperature = 1.0f;       // 0 selects greedy (argmax) decoding
  int top_k = 0;                  // keep the k most likely tokens; 0 = all
  float top_p = 1.0f;             // keep the smallest set with cumulative probability >= top_p
  float min_p = 0.0f;             // drop tokens with probability < min_p * max probability
  std::optional<uint64_t> seed;   // same seed and prompt -> same output
  int max_tokens = 16;            // tokens to generate at most
  std::vector<std::string> stop;  // stop strings (not included in the output text)
  std::vector<int32_t> stop_token_ids;  // extra ids that end generation (included in ids)
  bool ignore_eos = false;              // keep going past the model's end-of-sequence tokens
  // Log-probabilities (worker/logprobs.h): set, the engine returns each generated token's
  // logprob and the `logprobs` most likely tokens of its row; `prompt_logprobs` the same for
  // every prompt token after the first. Each in [0, kMaxLogprobs].
  std::optional<int> logprobs;
  std::optional<int> prompt_logprobs;
  // Prefix caching: a request shares cached KV blocks only with requests of the same salt (a
  // tenant's isolation, vLLM's `cache_salt`); empty: the shared pool. Not a sampling setting,
  // carried here because it travels with the request.
  std::string cache_salt;
  // Structured output (worker/structured_output.h): the grammar the output must follow.
  GrammarSpec grammar;

  bool greedy() const { return temperature <= 0.0f; }
  // InvalidArgument naming the field when a value is out of range.
  Status Validate() const;
};

}  // namespace uc::worker
