// File: redaction.h
// -----------------------------------------------------------------------------
// Redactor: removes what must not leave the process from a sink record (Undercurrent v0.1
// inventory §5.4). Patterns are key names: a plain key ("prompt") matches that key at any
// depth; a dotted key ("metadata.raw_scores") matches that chain of object keys as a suffix of
// the path, anywhere; arrays are walked transparently; matching is exact and case-sensitive
// ("prompt" does not match "prompt_len"). `redact_keys` keep the key and replace its value by
// the replacement string; `drop_keys` remove the key. By default the prompt-text keys below
// are redacted (the webhook sink's default; the file sink redacts nothing unless asked).
//
// Thread-safety: immutable after Create; Apply is const and thread-safe.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"

namespace uc::probe {

// prompt, prompts, prompt_text, text, input_text, output_text, generated_text, completion,
// response, messages, input_ids, output_ids, token_ids.
const std::vector<std::string>& DefaultPromptTextKeys();

struct RedactionOptions {
  bool redact_prompt_text = true;  // add DefaultPromptTextKeys() to redact_keys
  std::vector<std::string> redact_keys;
  std::vector<std::string> drop_keys;
  std::string replacement = "[REDACTED]";
};

class Redactor {
 public:
  Redactor() = default;  // redacts nothing
  // InvalidArgument naming the bad pattern (empty, or with an empty segment like "a..b").
  static StatusOr<Redactor> Create(const RedactionOptions& options);

  // A redacted copy of `record`.
  nlohmann::json Apply(const nlohmann::json& record) const;
  bool empty() const { return redact_.empty() && drop_.empty(); }
  // One line for the start-up log: which keys are redacted and dropped.
  std::string Describe() const;

 private:
  using Pattern = std::vector<std::string>;  // key segments
  void Walk(nlohmann::json& node, std::vector<std::string>& path) const;
  static bool Matches(const Pattern& pattern, const std::vector<std::string>& path);

  std::vector<Pattern> redact_;
  std::vector<Pattern> drop_;
  std::string replacement_ = "[REDACTED]";
};

}  // namespace uc::probe
