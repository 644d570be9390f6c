#include "apps/server/tool_calls.h"

#include <cstring>
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

}  // namespace

// Reads one call object, {"name": NAME, ARGS_KEY: {...}, ...}, as its text arrives: the name
// once its string closes, and the raw text of the arguments object as far as it has come (the
// arguments a response carries are the model's own bytes, so a streamed call and the complete
// response hold the same string). ARGS_KEY is "arguments", or for Llama 3.x "parameters" too.
// Structure only: scalars are not checked (the complete text is parsed again before it counts as
// a call); the scanner is bad when the text cannot be such an object (not an object, a name that
// is not a string, arguments that are not an object, a key twice).
class CallScanner {
 public:
  explicit CallScanner(bool llama) : llama_(llama) {}

  // `text` extends what the last call was given (the scanner reads on from where it stopped).
  void Update(std::string_view text) {
    while (pos_ < text.size() && state_ != State::kDone && state_ != State::kBad) {
      Step(text);
    }
  }
  bool done() const { return state_ == State::kDone; }
  bool bad() const { return state_ == State::kBad; }
  size_t end() const { return pos_; }  // after the closing brace, once done()
  const std::optional<std::string>& name() const { return name_; }
  bool args_begun() const { return args_begin_ != std::string::npos; }
  bool args_ended() const { return args_end_ != std::string::npos; }
  // The arguments object's text read so far (the whole object once args_ended()).
  std::string_view args(std::string_view text) const {
    if (!args_begun()) return {};
    return text.substr(args_begin_, (args_ended() ? args_end_ : pos_) - args_begin_);
  }

 private:
  enum class State { kBefore, kKey, kColon, kValue, kAfterValue, kDone, kBad };

  void Step(std::string_view text) {
    const char c = text[pos_];
    if (state_ == State::kValue || (state_ == State::kKey && in_string_)) {
      ScanToken(text);
      return;
    }
    ++pos_;
    if (std::strchr(kBlank, c) != nullptr) return;
    switch (state_) {
      case State::kBefore:
        state_ = c == '{' ? State::kKey : State::kBad;
        break;
      case State::kKey:
        if (c == '"') {
          in_string_ = true;
          token_begin_ = pos_ - 1;
        } else {
          state_ = c == '}' && !members_ ? State::kDone : State::kBad;
        }
        break;
      case State::kColon:
        if (c != ':') {
          state_ = State::kBad;
          break;
        }
        state_ = State::kValue;
        token_begin_ = std::string::npos;
        break;
      case State::kAfterValue:
        members_ = true;
        state_ = c == ',' ? State::kKey : c == '}' ? State::kDone : State::kBad;
        break;
      default:
        break;
    }
  }

  // Inside a key string or a value: reads one character.
  void ScanToken(std::string_view text) {
    const char c = text[pos_];
    if (token_begin_ == std::string::npos) {  // before the value
      ++pos_;
      if (std::strchr(kBlank, c) == nullptr) BeginValue(c);
      return;
    }
    if (in_string_) {
      ++pos_;
      if (escape_) {
        escape_ = false;
      } else if (c == '\\') {
        escape_ = true;
      } else if (c == '"') {
        in_string_ = false;
        if (state_ == State::kKey) {
          EndKey(text.substr(token_begin_, pos_ - token_begin_));
        } else if (depth_ == 0) {
          EndValue(text);
        }
      }
      return;
    }
    if (depth_ == 0) {  // a scalar ends before a delimiter
      if (c == ',' || c == '}' || std::strchr(kBlank, c) != nullptr) {
        EndValue(text);
      } else {
        ++pos_;
      }
      return;
    }
    ++pos_;
    if (c == '"') {
      in_string_ = true;
    } else if (c == '{' || c == '[') {
      ++depth_;
    } else if ((c == '}' || c == ']') && --depth_ == 0) {
      EndValue(text);
    }
  }

  // The value's first character, `c`, was just read.
  void BeginValue(char c) {
    token_begin_ = pos_ - 1;
    if ((key_ == Key::kName && c != '"') || (key_ == Key::kArgs && c != '{')) {
      state_ = State::kBad;
      return;
    }
    if (key_ == Key::kArgs) args_begin_ = token_begin_;
    in_string_ = c == '"';
    depth_ = c == '{' || c == '[' ? 1 : 0;
  }

  void EndKey(std::string_view quoted) {
    const json k = json::parse(quoted, nullptr, /*allow_exceptions=*/false);
    const std::string key = k.is_string() ? k.get<std::string>() : std::string();
    key_ = Key::kOther;
    if (key == "name") {
      key_ = Key::kName;
    } else if (key == "arguments" || (llama_ && key == "parameters")) {
      key_ = Key::kArgs;
    }
    const bool again = !seen_.insert(key).second || (key_ == Key::kArgs && args_begun());
    state_ = again ? State::kBad : State::kColon;
  }

  void EndValue(std::string_view text) {
    if (key_ == Key::kName) {
      const json v = json::parse(text.substr(token_begin_, pos_ - token_begin_), nullptr, false);
      if (!v.is_string()) {
        state_ = State::kBad;
        return;
      }
      name_ = v.get<std::string>();
    } else if (key_ == Key::kArgs) {
      args_end_ = pos_;
    }
    state_ = State::kAfterValue;
  }

  enum class Key { kName, kArgs, kOther };
  const bool llama_;
  State state_ = State::kBefore;
  size_t pos_ = 0;
  size_t token_begin_ = std::string::npos;
  int depth_ = 0;
  bool in_string_ = false;
  bool escape_ = false;
  bool members_ = false;
  Key key_ = Key::kOther;
  std::set<std::string> seen_;
  std::optional<std::string> name_;
  size_t args_begin_ = std::string::npos;
  size_t args_end_ = std::string::npos;
};

namespace {

// A call object's text as its function, {"name": NAME, "arguments": the arguments object's text
// as written, or "{}" when absent}; nullopt when `text` is not a call.
std::optional<json> CallFunction(std::string_view text, bool llama) {
  if (!json::accept(text)) return std::nullopt;
  CallScanner scan(llama);
  scan.Update(text);
  if (!scan.done() || !scan.name().has_value()) return std::nullopt;
  return json{{"name", *scan.name()},
              {"arguments", scan.args_begun() ? std::string(scan.args(text)) : "{}"}};
}

// A <tool_call> block's body as a call's function, or nullopt.
std::optional<json> HermesCall(std::string_view body) {
  return CallFunction(Trim(body), /*llama=*/false);
}

// A Llama 3.x answer as its calls' functions (an array; empty when it is not calls).
json LlamaCalls(std::string_view text) {
  std::string_view t = Trim(text);
  if (t.substr(0, kPythonTag.size()) == kPythonTag) t = Trim(t.substr(kPythonTag.size()));
  json calls = json::array();
  if (t.empty() || t[0] != '{') return calls;
  auto one = [](std::string_view piece) { return CallFunction(Trim(piece), /*llama=*/true); };
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

ToolCallStream::ToolCallStream(ToolFormat format, std::string id_prefix)
    : format_(format), id_prefix_(std::move(id_prefix)) {}

ToolCallStream::ToolCallStream(ToolCallStream&&) noexcept = default;
ToolCallStream::~ToolCallStream() = default;

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

void ToolCallStream::EmitHead(const std::string& name, std::vector<json>* out) {
  json head = FullCall({{"name", name}, {"arguments", ""}}, id_prefix_, calls_);
  head["index"] = calls_++;
  out->push_back({{"tool_calls", json::array({std::move(head)})}});
}

void ToolCallStream::EmitArguments(std::string_view fragment, std::vector<json>* out) {
  if (fragment.empty()) return;
  out->push_back({{"tool_calls", json::array({{{"index", calls_ - 1},
                                               {"function", {{"arguments", fragment}}}}})}});
}

void ToolCallStream::EmitCalls(const json& functions, std::vector<json>* out) {
  for (const json& f : functions) {
    EmitHead(f["name"].get<std::string>(), out);
    EmitArguments(f["arguments"].get<std::string>(), out);
  }
}

void ToolCallStream::BeginCall() {
  scan_ = std::make_unique<CallScanner>(format_ == ToolFormat::kLlama3Json);
  committed_ = false;
  args_sent_ = 0;
}

void ToolCallStream::StreamCall(std::string_view text, std::vector<json>* out) {
  scan_->Update(text);
  if (!committed_ && scan_->name().has_value() && scan_->args_begun()) {
    EmitHead(*scan_->name(), out);
    committed_ = true;
  }
  if (!committed_) return;
  const std::string_view args = scan_->args(text);
  EmitArguments(args.substr(std::min(args_sent_, args.size())), out);
  args_sent_ = std::max(args_sent_, args.size());
}

namespace {

// The length of the longest tail of `text` that `tag` begins with (and is not the whole tag).
size_t TagPrefixTail(std::string_view text, std::string_view tag) {
  size_t keep = std::min(text.size(), tag.size() - 1);
  while (keep > 0 && tag.substr(0, keep) != text.substr(text.size() - keep)) --keep;
  return keep;
}

}  // namespace

void ToolCallStream::EndHermesBlock(std::string_view body, std::string_view close,
                                    std::vector<json>* out) {
  StreamCall(body, out);  // a call whose arguments have begun is a call
  if (!committed_) {
    if (std::optional<json> call = HermesCall(body)) {
      EmitCalls(json::array({*call}), out);
    } else {
      EmitContent(std::string(kOpen) + std::string(body) + std::string(close), out);
    }
  }
  in_block_ = false;
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
        BeginCall();
        continue;
      }
      const size_t keep = TagPrefixTail(pending_, open);  // may begin "<tool_call>"
      EmitContent(pending_.substr(0, pending_.size() - keep), out);
      pending_.erase(0, pending_.size() - keep);
      return;
    }
    const size_t at = pending_.find(close);
    if (at == std::string::npos) {
      const std::string_view body = pending_;
      StreamCall(body.substr(0, body.size() - TagPrefixTail(body, close)), out);
      return;
    }
    EndHermesBlock(std::string_view(pending_).substr(0, at), close, out);
    pending_.erase(0, at + close.size());
  }
}

void ToolCallStream::DrainLlama(std::vector<json>* out) {
  const std::string_view text = pending_;
  while (llama_streaming_) {
    if (scan_ == nullptr) {  // before a call: blanks, <|python_tag|> (first call), then "{"
      const size_t at = text.find_first_not_of(kBlank, llama_pos_);
      if (at == std::string_view::npos) return;
      if (calls_ == 0 && text.substr(at, kPythonTag.size()) == kPythonTag) {
        llama_pos_ = at + kPythonTag.size();
        continue;
      }
      if (text.substr(at).size() < kPythonTag.size() && calls_ == 0 &&
          kPythonTag.substr(0, text.size() - at) == text.substr(at)) {
        return;  // may still be <|python_tag|>
      }
      if (text[at] != '{') {
        llama_streaming_ = false;  // not a call: Finish decides
        return;
      }
      llama_pos_ = at;
      BeginCall();
    }
    StreamCall(text.substr(llama_pos_), out);
    if (scan_->bad()) llama_streaming_ = false;
    if (!scan_->done()) return;
    const std::string_view object = text.substr(llama_pos_, scan_->end());
    if (!committed_) {
      const std::optional<json> call = CallFunction(object, /*llama=*/true);
      if (!call.has_value()) {
        llama_streaming_ = false;
        return;
      }
      EmitCalls(json::array({*call}), out);
      committed_ = true;
    }
    // Calls stay in the stream only when they are followed by ";" and another.
    const size_t next = text.find_first_not_of(kBlank, llama_pos_ + scan_->end());
    if (next == std::string_view::npos) return;
    if (text[next] != ';') {
      llama_streaming_ = false;
      return;
    }
    llama_pos_ = next + 1;
    scan_.reset();
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
  if (mode_ == Mode::kCall) DrainLlama(&out);
  return out;
}

void ToolCallStream::FinishLlama(std::vector<json>* out) {
  if (calls_ == 0) {  // nothing went out: the whole answer is calls, or it is content
    const json calls = mode_ == Mode::kCall ? LlamaCalls(pending_) : json::array();
    if (!calls.empty()) {
      EmitCalls(calls, out);
    } else {
      EmitContent(pending_, out);
    }
    return;
  }
  // Calls went out; what follows the last of them is more calls or content. A call cut off after
  // its arguments began went out as far as it was written.
  size_t rest = llama_pos_;
  if (scan_ != nullptr && committed_) {
    rest = scan_->done() ? llama_pos_ + scan_->end() : pending_.size();
  }
  std::string_view tail = Trim(std::string_view(pending_).substr(rest));
  if (!tail.empty() && tail[0] == ';') tail = Trim(tail.substr(1));
  const json calls = LlamaCalls(tail);
  if (!calls.empty()) {
    EmitCalls(calls, out);
  } else {
    EmitContent(std::string(tail), out);
  }
}

std::vector<json> ToolCallStream::Finish() {
  std::vector<json> out;
  if (format_ == ToolFormat::kHermes) {
    if (in_block_) {
      // An unclosed block at the end is a call when its JSON is one (as ParseToolCalls reads it)
      // or when its arguments already went out.
      EndHermesBlock(pending_, "", &out);
    } else {
      EmitContent(pending_, &out);
    }
  } else {
    FinishLlama(&out);
  }
  pending_.clear();
  if (!content_sent_ && calls_ == 0) {
    out.push_back({{"content", std::exchange(leading_ws_, "")}});  // no call: the text, even ""
  }
  return out;
}

}  // namespace uc::server
