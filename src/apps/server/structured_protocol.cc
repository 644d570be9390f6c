#include "apps/server/structured_protocol.h"

#include <vector>

#include "worker/structured_output.h"

namespace uc::server {
namespace {

using json = nlohmann::json;
using Kind = worker::GrammarSpec::Kind;

// Bounds what one request can make the grammar compiler chew on.
constexpr size_t kMaxGrammarBytes = 64 << 10;
constexpr size_t kMaxChoiceCount = 1024;

ApiError Invalid(const std::string& param, const std::string& message) {
  return BadRequest("Invalid value for '" + param + "': " + message, param, "invalid_value");
}

// Keywords the grammar engine would ignore (it only warns): an output could then break them.
constexpr const char* kUnsupportedKeywords[] = {"not",
                                                "if",
                                                "then",
                                                "else",
                                                "contains",
                                                "minContains",
                                                "maxContains",
                                                "dependentRequired",
                                                "dependentSchemas",
                                                "unevaluatedProperties",
                                                "unevaluatedItems"};

}  // namespace

std::optional<std::string> UnsupportedSchemaKeyword(const json& schema, const std::string& path,
                                                    int depth) {
  if (depth > 64 || !schema.is_object()) return std::nullopt;
  for (const auto& [k, v] : schema.items()) {
    const std::string at = path + "." + k;
    for (const char* bad : kUnsupportedKeywords) {
      if (k == bad) return at;
    }
    if ((k == "uniqueItems" && v == true) || (k == "multipleOf" && !v.is_number_integer()) ||
        (k == "$ref" && v.is_string() && v.get<std::string>().rfind('#', 0) != 0)) {
      return at;
    }
    if (k == "enum" || k == "const" || k == "default" || k == "examples") continue;
    if ((k == "properties" || k == "$defs" || k == "definitions" || k == "patternProperties") &&
        v.is_object()) {
      for (const auto& [name, sub] : v.items()) {
        if (auto found = UnsupportedSchemaKeyword(sub, at + "." + name, depth + 1)) return found;
      }
    } else if (v.is_object()) {
      if (auto found = UnsupportedSchemaKeyword(v, at, depth + 1)) return found;
    } else if (v.is_array()) {
      for (size_t i = 0; i < v.size(); ++i) {
        if (auto found = UnsupportedSchemaKeyword(v[i], at + "." + std::to_string(i), depth + 1)) {
          return found;
        }
      }
    }
  }
  return std::nullopt;
}

std::optional<ApiError> CheckSchemaSupported(const json& schema, const std::string& param) {
  const std::optional<std::string> keyword = UnsupportedSchemaKeyword(schema, param, 0);
  if (!keyword.has_value()) return std::nullopt;
  return BadRequest("'" + EchoValue(*keyword, 256) +
                        "': this JSON schema feature is not supported by structured output "
                        "(not, if/then/else, contains, dependent*, unevaluated*, uniqueItems, "
                        "a non-integer multipleOf and remote $ref are not).",
                    param, "unsupported_schema");
}

namespace {

// Sets the request's grammar unless another field already did.
std::optional<ApiError> SetGrammar(CompletionRequest* r, const std::string& param, Kind kind,
                                   std::string text) {
  if (r->sampling.grammar.active()) {
    return BadRequest(
        "'" + param + "' and '" + r->grammar_param + "' both constrain the output; send only one.",
        param, "invalid_value");
  }
  if (text.size() > kMaxGrammarBytes) {
    return Invalid(param, std::to_string(text.size()) + " bytes; at most " +
                              std::to_string(kMaxGrammarBytes) + " are accepted.");
  }
  r->sampling.grammar = {kind, std::move(text)};
  r->grammar_param = param;
  return std::nullopt;
}

// A schema: an object, or a string holding one.
std::optional<ApiError> SetSchema(CompletionRequest* r, const std::string& param, const json& v) {
  if (v.is_object()) {
    if (auto error = CheckSchemaSupported(v, param)) return error;
    return SetGrammar(r, param, Kind::kJsonSchema, v.dump());
  }
  if (v.is_boolean() && v.get<bool>()) return SetGrammar(r, param, Kind::kJsonSchema, "{}");
  if (!v.is_string()) {
    return BadRequest("Invalid type for '" + param + "': expected a JSON schema (an object).",
                      param, "invalid_type");
  }
  const json parsed = json::parse(v.get<std::string>(), nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_object()) return Invalid(param, "the string is not a JSON object (a schema).");
  if (auto error = CheckSchemaSupported(parsed, param)) return error;
  return SetGrammar(r, param, Kind::kJsonSchema, parsed.dump());
}

std::optional<ApiError> SetString(CompletionRequest* r, const std::string& param, Kind kind,
                                  const json& v) {
  if (!v.is_string()) {
    return BadRequest("Invalid type for '" + param + "': expected a string.", param,
                      "invalid_type");
  }
  if (v.get<std::string>().empty()) return Invalid(param, "must not be empty.");
  return SetGrammar(r, param, kind, v.get<std::string>());
}

std::optional<ApiError> SetChoice(CompletionRequest* r, const std::string& param, const json& v) {
  if (!v.is_array() || v.empty()) {
    return BadRequest("Invalid type for '" + param + "': expected a non-empty array of strings.",
                      param, "invalid_type");
  }
  if (v.size() > kMaxChoiceCount) {
    return Invalid(param, std::to_string(v.size()) + " choices; at most " +
                              std::to_string(kMaxChoiceCount) + " are accepted.");
  }
  std::vector<std::string> choices;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string() || v[i].get<std::string>().empty()) {
      return BadRequest("Invalid type for '" + param + "." + std::to_string(i) +
                            "': expected a non-empty string.",
                        param + "." + std::to_string(i), "invalid_type");
    }
    choices.push_back(v[i].get<std::string>());
  }
  return SetGrammar(r, param, Kind::kEbnf, worker::ChoiceGrammar(choices));
}

std::optional<ApiError> ParseResponseFormat(const json& v, CompletionRequest* r) {
  const std::string param = "response_format";
  if (!v.is_object()) {
    return BadRequest("Invalid type for 'response_format': expected an object.", param,
                      "invalid_type");
  }
  const json type = v.value("type", json());
  if (!type.is_string()) {
    return BadRequest("Missing required parameter: 'response_format.type'.", param + ".type",
                      "missing_required_parameter");
  }
  for (const auto& [k, e] : v.items()) {
    if (k != "type" && k != "json_schema") {
      return BadRequest("Unrecognized request argument supplied: response_format." + EchoValue(k),
                        param, "unknown_parameter");
    }
  }
  if (type == "text") return std::nullopt;
  if (type == "json_object") return SetGrammar(r, param, Kind::kJsonObject, "");
  if (type != "json_schema") {
    return BadRequest(
        "Invalid value for 'response_format.type': expected 'text', 'json_object' "
        "or 'json_schema', got '" +
            EchoValue(type.get<std::string>()) + "'.",
        param + ".type", "invalid_value");
  }
  const json js = v.value("json_schema", json());
  if (!js.is_object()) {
    return BadRequest(
        "'response_format.json_schema' (an object with 'name' and 'schema') is required when "
        "'response_format.type' is 'json_schema'.",
        param + ".json_schema", "missing_required_parameter");
  }
  for (const auto& [k, e] : js.items()) {
    if (k == "name" || k == "description") {
      if (!e.is_string()) {
        return BadRequest(
            "Invalid type for 'response_format.json_schema." + k + "': expected a string.",
            param + ".json_schema." + k, "invalid_type");
      }
    } else if (k == "strict") {
      if (!e.is_boolean() && !e.is_null()) {
        return BadRequest(
            "Invalid type for 'response_format.json_schema.strict': expected a "
            "boolean.",
            param + ".json_schema.strict", "invalid_type");
      }
    } else if (k != "schema") {
      return BadRequest(
          "Unrecognized request argument supplied: response_format.json_schema." + EchoValue(k),
          param + ".json_schema", "unknown_parameter");
    }
  }
  const json schema = js.value("schema", json::object());
  if (!schema.is_object()) {
    return BadRequest(
        "Invalid type for 'response_format.json_schema.schema': expected an "
        "object (a JSON schema).",
        param + ".json_schema.schema", "invalid_type");
  }
  if (auto error = CheckSchemaSupported(schema, param + ".json_schema.schema")) return error;
  return SetGrammar(r, param + ".json_schema.schema", Kind::kJsonSchema, schema.dump());
}

std::optional<ApiError> ParseStructuredOutputs(const json& v, CompletionRequest* r) {
  const std::string param = "structured_outputs";
  if (!v.is_object()) {
    return BadRequest("Invalid type for 'structured_outputs': expected an object.", param,
                      "invalid_type");
  }
  for (const auto& [k, e] : v.items()) {
    const std::string at = param + "." + k;
    if (e.is_null()) continue;
    if (k == "json") {
      if (auto error = SetSchema(r, at, e)) return error;
    } else if (k == "regex") {
      if (auto error = SetString(r, at, Kind::kRegex, e)) return error;
    } else if (k == "choice") {
      if (auto error = SetChoice(r, at, e)) return error;
    } else if (k == "grammar") {
      if (auto error = SetString(r, at, Kind::kEbnf, e)) return error;
    } else if (k == "structural_tag") {
      if (auto error = SetString(r, at, Kind::kStructuralTag, e)) return error;
    } else if (k == "json_object") {
      if (!e.is_boolean()) {
        return BadRequest("Invalid type for '" + at + "': expected a boolean.", at, "invalid_type");
      }
      if (e.get<bool>()) {
        if (auto error = SetGrammar(r, at, Kind::kJsonObject, "")) return error;
      }
    } else if (k == "disable_any_whitespace" || k == "disable_additional_properties" ||
               k == "disable_fallback") {
      if (!e.is_boolean()) {
        return BadRequest("Invalid type for '" + at + "': expected a boolean.", at, "invalid_type");
      }
    } else if (k == "whitespace_pattern") {
      if (!e.is_string()) {
        return BadRequest("Invalid type for '" + at + "': expected a string.", at, "invalid_type");
      }
    } else {
      return BadRequest("Unrecognized request argument supplied: " + param + "." + EchoValue(k), at,
                        "unknown_parameter");
    }
  }
  return std::nullopt;
}

}  // namespace

bool IsStructuredOutputField(const std::string& key) {
  return key == "response_format" || key == "structured_outputs" || key == "guided_json" ||
         key == "guided_regex" || key == "guided_choice" || key == "guided_grammar" ||
         key == "guided_decoding_backend";
}

std::optional<ApiError> ParseStructuredOutputField(const std::string& key, const json& v,
                                                   CompletionRequest* r) {
  if (v.is_null()) return std::nullopt;
  if (key == "response_format") return ParseResponseFormat(v, r);
  if (key == "structured_outputs") return ParseStructuredOutputs(v, r);
  if (key == "guided_json") return SetSchema(r, key, v);
  if (key == "guided_regex") return SetString(r, key, Kind::kRegex, v);
  if (key == "guided_choice") return SetChoice(r, key, v);
  if (key == "guided_grammar") return SetString(r, key, Kind::kEbnf, v);
  if (key == "guided_decoding_backend") {
    if (!v.is_string()) {
      return BadRequest("Invalid type for 'guided_decoding_backend': expected a string.", key,
                        "invalid_type");
    }
    return std::nullopt;
  }
  return BadRequest("Unrecognized request argument supplied: " + EchoValue(key), key,
                    "unknown_parameter");
}

}  // namespace uc::server
