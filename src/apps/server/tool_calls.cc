#include "apps/server/tool_calls.h"

#include <set>

#include "apps/server/structured_protocol.h"

namespace uc::server {
namespace {

using json = nlohmann::json;

constexpr size_t kMaxTools = 128;
constexpr const char* kOpen = "<tool_call>";
constexpr const char* kClose = "</tool_call>";

ApiError ToolTypeError(const std::string& param, const std::string& expected) {
  return BadRequest("Invalid type for '" + param + "': expected " + expected + ".", param,
                    "invalid_type");
}

std::optional<ApiError> ParseTools(const json& v, CompletionRequest* r) {
  if (!v.is_array()) return ToolTypeError("tools", "an array");
  if (v.size() > kMaxTools) {
    return BadRequest("'tools' holds " + std::to_string(v.size()) + " tools; at most " +
                          std::to_string(kMaxTools) + " are accepted.",
                      "tools", "invalid_value");
  }
  std::set<std::string> names;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string at = "tools." + std::to_string(i);
    const json& t = v[i];
    if (!t.is_object()) return ToolTypeError(at, "an object");
    if (t.value("type", json()) != "function") {
      return BadRequest("Invalid value for '" + at + ".type': only 'function' is supported.",
                        at + ".type", "invalid_value");
    }
    const json f = t.value("function", json());
    if (!f.is_object()) return ToolTypeError(at + ".function", "an object");
    const json name = f.value("name", json());
    if (!name.is_string() || name.get<std::string>().empty() ||
        name.get<std::string>().size() > 64) {
      return BadRequest("'" + at + ".function.name' must be a string of 1 to 64 characters.",
                        at + ".function.name", "invalid_value");
    }
    if (!names.insert(name.get<std::string>()).second) {
      return BadRequest("Two tools are named '" + EchoValue(name.get<std::string>()) + "'.",
                        at + ".function.name", "invalid_value");
    }
    if (f.contains("parameters") && !f["parameters"].is_object() && !f["parameters"].is_null()) {
      return ToolTypeError(at + ".function.parameters", "an object (a JSON schema)");
    }
    if (f.contains("parameters")) {
      if (auto error = CheckSchemaSupported(f["parameters"], at + ".function.parameters")) {
        return error;
      }
    }
    if (f.contains("description") && !f["description"].is_string() && !f["description"].is_null()) {
      return ToolTypeError(at + ".function.description", "a string");
    }
  }
  r->tools = v;
  return std::nullopt;
}

std::optional<ApiError> ParseToolChoice(const json& v, CompletionRequest* r) {
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s != "none" && s != "auto" && s != "required") {
      return BadRequest(
          "Invalid value for 'tool_choice': expected 'none', 'auto', 'required' or "
          "{\"type\": \"function\", \"function\": {\"name\": ...}}.",
          "tool_choice", "invalid_value");
    }
    r->tool_choice = s;
    return std::nullopt;
  }
  if (!v.is_object() || v.value("type", json()) != "function" ||
      !v.value("function", json()).is_object() ||
      !v["function"].value("name", json()).is_string()) {
    return ToolTypeError("tool_choice",
                         "'none', 'auto', 'required' or {\"type\": \"function\", \"function\": "
                         "{\"name\": ...}}");
  }
  r->tool_choice = "function";
  r->tool_choice_name = v["function"]["name"].get<std::string>();
  return std::nullopt;
}

// {name: const NAME, arguments: PARAMETERS}, both required.
json CallSchema(const json& function) {
  json params = function.value("parameters", json());
  if (!params.is_object()) params = {{"type", "object"}};
  return {{"type", "object"},
          {"properties", {{"name", {{"const", function["name"]}}}, {"arguments", params}}},
          {"required", {"name", "arguments"}},
          {"additionalProperties", false}};
}

}  // namespace

std::optional<ApiError> ParseToolsField(const std::string& key, const json& v,
                                        CompletionRequest* r) {
  if (v.is_null()) return std::nullopt;
  return key == "tools" ? ParseTools(v, r) : ParseToolChoice(v, r);
}

std::optional<ApiError> ResolveTools(CompletionRequest* r) {
  const bool forced = r->tool_choice == "required" || r->tool_choice == "function";
  if (r->tools.empty()) {
    if (forced) {
      return BadRequest(
          "'tool_choice' " +
              (r->tool_choice == "required" ? std::string("'required'") : "names a function") +
              " but the request has no 'tools'.",
          "tool_choice", "invalid_value");
    }
    return std::nullopt;
  }
  json calls = json::array();
  for (const json& t : r->tools) {
    if (r->tool_choice == "function" && t["function"]["name"] != r->tool_choice_name) continue;
    calls.push_back(CallSchema(t["function"]));
  }
  if (r->tool_choice == "function" && calls.empty()) {
    return BadRequest("'tool_choice' names the function '" + EchoValue(r->tool_choice_name) +
                          "', which is not among the 'tools'.",
                      "tool_choice", "invalid_value");
  }
  if (!forced) return std::nullopt;
  if (r->sampling.grammar.active()) {
    return BadRequest("'tool_choice' " + r->tool_choice + " and '" + r->grammar_param +
                          "' both constrain the output; send only one.",
                      "tool_choice", "invalid_value");
  }
  const json schema = calls.size() == 1 ? calls[0] : json{{"anyOf", calls}};
  const json tag = {
      {"type", "structural_tag"},
      {"format",
       {{"type", "sequence"},
        {"elements",
         json::array({{{"type", "const_string"}, {"value", std::string(kOpen) + "\n"}},
                      {{"type", "json_schema"}, {"json_schema", schema}},
                      {{"type", "const_string"}, {"value", "\n" + std::string(kClose)}}})}}}};
  r->sampling.grammar = {worker::GrammarSpec::Kind::kStructuralTag, tag.dump()};
  r->grammar_param = "tools";
  return std::nullopt;
}

ParsedToolCalls ParseToolCalls(const std::string& text, const std::string& id_prefix) {
  ParsedToolCalls out;
  std::string content;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t open = text.find(kOpen, pos);
    if (open == std::string::npos) break;
    const size_t body = open + std::char_traits<char>::length(kOpen);
    const size_t close = text.find(kClose, body);
    const json call = json::parse(
        text.substr(body, close == std::string::npos ? std::string::npos : close - body), nullptr,
        /*allow_exceptions=*/false);
    const size_t end =
        close == std::string::npos ? text.size() : close + std::char_traits<char>::length(kClose);
    if (call.is_object() && call.value("name", json()).is_string() &&
        (call.value("arguments", json()).is_object() || !call.contains("arguments"))) {
      content += text.substr(pos, open - pos);
      out.tool_calls.push_back(
          {{"id", "call_" + id_prefix + "_" + std::to_string(out.tool_calls.size())},
           {"type", "function"},
           {"function",
            {{"name", call["name"]},
             {"arguments", call.value("arguments", json::object()).dump()}}}});
    } else {
      content += text.substr(pos, end - pos);
    }
    pos = end;
  }
  if (pos < text.size()) content += text.substr(pos);
  const bool blank = content.find_first_not_of(" \t\r\n") == std::string::npos;
  if (out.tool_calls.empty() || !blank) out.content = content;
  return out;
}

}  // namespace uc::server
