#include "probe/sinks/redaction.h"

namespace uc::probe {

using nlohmann::json;

const std::vector<std::string>& DefaultPromptTextKeys() {
  static const std::vector<std::string> keys = {
      "prompt",      "prompts",        "prompt_text", "text",     "input_text",
      "output_text", "generated_text", "completion",  "response", "messages",
      "input_ids",   "output_ids",     "token_ids"};
  return keys;
}

namespace {

StatusOr<std::vector<std::string>> Split(const std::string& key, const char* option) {
  std::vector<std::string> segments;
  size_t start = 0;
  while (true) {
    const size_t dot = key.find('.', start);
    segments.push_back(
        key.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (segments.back().empty()) {
      return InvalidArgumentError(std::string(option) + ": '" + key +
                                  "' has an empty key segment; use a key name or a dotted "
                                  "chain like metadata.raw_scores");
    }
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return segments;
}

std::string Join(const std::vector<std::vector<std::string>>& patterns) {
  std::string out;
  for (const auto& p : patterns) {
    if (!out.empty()) out += ",";
    for (size_t i = 0; i < p.size(); ++i) out += (i ? "." : "") + p[i];
  }
  return out.empty() ? "none" : out;
}

}  // namespace

StatusOr<Redactor> Redactor::Create(const RedactionOptions& options) {
  Redactor r;
  r.replacement_ = options.replacement;
  std::vector<std::string> redact = options.redact_keys;
  if (options.redact_prompt_text) {
    redact.insert(redact.end(), DefaultPromptTextKeys().begin(), DefaultPromptTextKeys().end());
  }
  for (const std::string& key : redact) {
    UC_ASSIGN_OR_RETURN(Pattern p, Split(key, "redact key"));
    r.redact_.push_back(std::move(p));
  }
  for (const std::string& key : options.drop_keys) {
    UC_ASSIGN_OR_RETURN(Pattern p, Split(key, "drop key"));
    r.drop_.push_back(std::move(p));
  }
  return r;
}

bool Redactor::Matches(const Pattern& pattern, const std::vector<std::string>& path) {
  if (pattern.size() > path.size()) return false;
  const size_t offset = path.size() - pattern.size();
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != path[offset + i]) return false;
  }
  return true;
}

void Redactor::Walk(json& node, std::vector<std::string>& path) const {
  if (node.is_array()) {
    for (json& item : node) Walk(item, path);
    return;
  }
  if (!node.is_object()) return;
  for (auto it = node.begin(); it != node.end();) {
    path.push_back(it.key());
    bool drop = false;
    for (const Pattern& p : drop_) drop = drop || Matches(p, path);
    if (drop) {
      path.pop_back();
      it = node.erase(it);
      continue;
    }
    bool redact = false;
    for (const Pattern& p : redact_) redact = redact || Matches(p, path);
    if (redact) {
      it.value() = replacement_;
    } else {
      Walk(it.value(), path);
    }
    path.pop_back();
    ++it;
  }
}

json Redactor::Apply(const json& record) const {
  json copy = record;
  if (empty()) return copy;
  std::vector<std::string> path;
  Walk(copy, path);
  return copy;
}

std::string Redactor::Describe() const {
  return "redacted keys: " + Join(redact_) + "; dropped keys: " + Join(drop_);
}

}  // namespace uc::probe
