#include "apps/server/tool_calls.h"

#include <set>
#include <utility>

#include "apps/server/structured_protocol.h"

namespace uc::server {
namespace {

using json = nlohmann::json;

constexpr size_t kMaxTools = 128;
constexpr const char* kOpen = "<tool_call>";
constexpr const char* kClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr const char* kBlank = " \t\r\n";

bool Blank(std::string_view s) { return s.find_first_not_of(kBlank) == std::string_view::npos; }

std::string_view Trim(std::string_view s) {
  const size_t b = s.find_first_not_of(kBlank);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(kBlank) - b + 1);
}

// {"name": NAME, "arguments": "{...}"} of a call object whose arguments sit under `args_key`
// (or are absent: {}); nullopt when `call` is not such an object.
std::optional<json> CallFunction(const json& call, const char* args_key) {
  if (!call.is_object() || !call.value("name", json()).is_string()) return std::nullopt;
  const auto args = call.find(args_key);
  if (args != call.end() && !args->is_object()) return std::nullopt;
  return json{{"name", call["name"]},
              {"arguments", args == call.end() ? std::string("{}") : args->dump()}};
}

// A <tool_call> block's body as a call's function, or nullopt.
std::optional<json> HermesCall(std::string_view body) {
  return CallFunction(json::parse(std::string(body), nullptr, /*allow_exceptions=*/false),
                      "arguments");
}

// A Llama 3.x answer as its calls' functions (an array; empty when it is not calls).
json LlamaCalls(std::string_view text) {
  std::string_view t = Trim(text);
  if (t.substr(0, kPythonTag.size()) == kPythonTag) t = Trim(t.substr(kPythonTag.size()));
  json calls = json::array();
  if (t.empty() || t[0] != '{') return calls;
  auto one = [](std::string_view piece) -> std::optional<json> {
    const json call = json::parse(std::string(Trim(piece)), nullptr, /*allow_exceptions=*/false);
    if (call.is_object() && call.contains("parameters")) return CallFunction(call, "parameters");
    return CallFunction(call, "arguments");
  };
  if (auto call = one(t)) {
    calls.push_back(*call);
    return calls;
  }
  // Several calls: "{...}; {...}" (a ';' inside a string only makes a piece fail to parse).
  size_t start = 0;
  while (start <= t.size()) {
    const size_t semi = t.find(';', start);
    const std::string_view piece =
        t.substr(start, semi == std::string_view::npos ? std::string_view::npos : semi - start);
    auto call = one(piece);
    if (!call) return json::array();
    calls.push_back(*call);
    if (semi == std::string_view::npos) break;
    start = semi + 1;
  }
  return calls;
}

json FullCall(const json& function, const std::string& id_prefix, size_t index) {
  return {{"id", "call_" + id_prefix + "_" + std::to_string(index)},
          {"type", "function"},
          {"function", function}};
}

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

// {name: const NAME, ARGS_KEY: PARAMETERS}, both required.
json CallSchema(const json& function, const std::string& args_key) {
  json params = function.value("parameters", json());
  if (!params.is_object()) params = {{"type", "object"}};
  return {{"type", "object"},
          {"properties", {{"name", {{"const", function["name"]}}}, {args_key, params}}},
          {"required", {"name", args_key}},
          {"additionalProperties", false}};
}

}  // namespace

std::optional<ApiError> ParseToolsField(const std::string& key, const json& v,
                                        CompletionRequest* r) {
  if (v.is_null()) return std::nullopt;
  return key == "tools" ? ParseTools(v, r) : ParseToolChoice(v, r);
}

ToolFormat DetectToolFormat(std::string_view template_text) {
  if (template_text.find(kOpen) != std::string_view::npos) return ToolFormat::kHermes;
  // Llama 3.1/3.2 ask for 'the format {"name": function name, "parameters": ...}' and render a
  // past call as '{"name": "' + name + '", "parameters": ' + arguments|tojson.
  if (template_text.find("\"parameters\"") != std::string_view::npos &&
      template_text.find("\"name\"") != std::string_view::npos) {
    return ToolFormat::kLlama3Json;
  }
  return ToolFormat::kHermes;
}

std::optional<ApiError> ResolveTools(CompletionRequest* r, ToolFormat format) {
  const std::string args_key = format == ToolFormat::kLlama3Json ? "parameters" : "arguments";
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
    calls.push_back(CallSchema(t["function"], args_key));
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
  r->grammar_param = "tools";
  if (format == ToolFormat::kLlama3Json) {
    r->sampling.grammar = {worker::GrammarSpec::Kind::kJsonSchema, schema.dump()};
    return std::nullopt;
  }
  const json tag = {
      {"type", "structural_tag"},
      {"format",
       {{"type", "sequence"},
        {"elements",
         json::array({{{"type", "const_string"}, {"value", std::string(kOpen) + "\n"}},
                      {{"type", "json_schema"}, {"json_schema", schema}},
                      {{"type", "const_string"}, {"value", "\n" + std::string(kClose)}}})}}}};
  r->sampling.grammar = {worker::GrammarSpec::Kind::kStructuralTag, tag.dump()};
  return std::nullopt;
}

ParsedToolCalls ParseToolCalls(const std::string& text, const std::string& id_prefix,
                               ToolFormat format) {
  ParsedToolCalls out;
  if (format == ToolFormat::kLlama3Json) {
    for (const json& f : LlamaCalls(text)) {
      out.tool_calls.push_back(FullCall(f, id_prefix, out.tool_calls.size()));
    }
    if (out.tool_calls.empty()) out.content = text;
    return out;
  }
  std::string content;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t open = text.find(kOpen, pos);
    if (open == std::string::npos) break;
    const size_t body = open + std::char_traits<char>::length(kOpen);
    const size_t close = text.find(kClose, body);
    const std::optional<json> call = HermesCall(std::string_view(text).substr(
        body, close == std::string::npos ? std::string::npos : close - body));
    const size_t end =
        close == std::string::npos ? text.size() : close + std::char_traits<char>::length(kClose);
    if (call.has_value()) {
      content += text.substr(pos, open - pos);
      out.tool_calls.push_back(FullCall(*call, id_prefix, out.tool_calls.size()));
    } else {
      content += text.substr(pos, end - pos);
    }
    pos = end;
  }
  if (pos < text.size()) content += text.substr(pos);
  if (out.tool_calls.empty() || !Blank(content)) out.content = content;
  return out;
}

void ToolCallStream::EmitContent(std::string text, std::vector<json>* out) {
  if (text.empty()) return;
  if (!content_sent_ && Blank(text)) {
    leading_ws_ += text;  // blank content before a call is no content (ParseToolCalls: null)
    return;
  }
  if (!content_sent_) text = std::exchange(leading_ws_, "") + text;
  content_sent_ = true;
  out->push_back({{"content", std::move(text)}});
}

void ToolCallStream::EmitCalls(const json& functions, std::vector<json>* out) {
  for (const json& f : functions) {
    const int index = calls_++;
    json head = FullCall({{"name", f["name"]}, {"arguments", ""}}, id_prefix_, index);
    head["index"] = index;
    out->push_back({{"tool_calls", json::array({std::move(head)})}});
    out->push_back(
        {{"tool_calls",
          json::array({{{"index", index}, {"function", {{"arguments", f["arguments"]}}}}})}});
  }
}

void ToolCallStream::DrainHermes(std::vector<json>* out) {
  const std::string_view open = kOpen;
  const std::string_view close = kClose;
  while (true) {
    if (!in_block_) {
      const size_t at = pending_.find(open);
      if (at != std::string::npos) {
        EmitContent(pending_.substr(0, at), out);
        pending_.erase(0, at + open.size());
        in_block_ = true;
        continue;
      }
      // Hold back the longest tail that may begin "<tool_call>".
      size_t keep = std::min(pending_.size(), open.size() - 1);
      while (keep > 0 &&
             open.substr(0, keep) != std::string_view(pending_).substr(pending_.size() - keep)) {
        --keep;
      }
      EmitContent(pending_.substr(0, pending_.size() - keep), out);
      pending_.erase(0, pending_.size() - keep);
      return;
    }
    const size_t at = pending_.find(close);
    if (at == std::string::npos) return;
    if (std::optional<json> call = HermesCall(std::string_view(pending_).substr(0, at))) {
      EmitCalls(json::array({*call}), out);
    } else {
      EmitContent(std::string(open) + pending_.substr(0, at + close.size()), out);
    }
    pending_.erase(0, at + close.size());
    in_block_ = false;
  }
}

std::vector<json> ToolCallStream::Feed(std::string_view text) {
  std::vector<json> out;
  pending_ += text;
  if (format_ == ToolFormat::kHermes) {
    DrainHermes(&out);
    return out;
  }
  if (mode_ == Mode::kUndecided) {
    const std::string_view t = Trim(pending_);
    if (t.empty()) return out;
    if (t[0] == '{' || t.substr(0, kPythonTag.size()) == kPythonTag) {
      mode_ = Mode::kCall;
    } else if (t.size() < kPythonTag.size() && kPythonTag.substr(0, t.size()) == t) {
      return out;  // may still be <|python_tag|>
    } else {
      mode_ = Mode::kContent;
    }
  }
  if (mode_ == Mode::kContent) EmitContent(std::exchange(pending_, ""), &out);
  return out;
}

std::vector<json> ToolCallStream::Finish() {
  std::vector<json> out;
  if (format_ == ToolFormat::kHermes) {
    if (in_block_) {
      // An unclosed block at the end is a call when its JSON is one (as ParseToolCalls reads it).
      if (std::optional<json> call = HermesCall(pending_)) {
        EmitCalls(json::array({*call}), &out);
      } else {
        EmitContent(std::string(kOpen) + pending_, &out);
      }
    } else {
      EmitContent(pending_, &out);
    }
  } else {
    const json calls = mode_ == Mode::kCall ? LlamaCalls(pending_) : json::array();
    if (!calls.empty()) {
      EmitCalls(calls, &out);
    } else {
      EmitContent(pending_, &out);
    }
  }
  pending_.clear();
  if (!content_sent_ && calls_ == 0) {
    out.push_back({{"content", std::exchange(leading_ws_, "")}});  // no call: the text, even ""
  }
  return out;
}

}  // namespace uc::server
