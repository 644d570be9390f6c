// File: tool_calls.h
// -----------------------------------------------------------------------------
// OpenAI tool calling for chat templates that define tool calls. The template renders `tools`
// (its `tools` variable); how the model answers a call depends on the template's family, which
// DetectToolFormat reads from the template text (not from the model's name):
//   kHermes (Qwen 2.5/3, Hermes): one block per call, text around them allowed,
//     <tool_call>\n{"name": NAME, "arguments": {...}}\n</tool_call>
//   kLlama3Json (Llama 3.1/3.2 JSON tool calling): the whole answer is the call,
//     {"name": NAME, "parameters": {...}}, maybe after <|python_tag|> (the turn then ends with
//     <|eom_id|> or <|eot_id|>, both stop tokens); several calls separated by ";" are accepted.
// The server parses calls out of the completion into the message's `tool_calls` (content: the
// text outside them, null when empty; finish_reason "tool_calls"); output that does not parse as
// a call stays content. With `tool_choice: "required"` or a named function, sampling is
// constrained to a call whose JSON validates against {name: const NAME, arguments or parameters:
// the function's `parameters`} ("required": any of the tools): an xgrammar structural tag
// (kHermes) or a JSON schema (kLlama3Json).
//
// Requests: `tools` is an array of {"type": "function", "function": {"name", "description",
// "parameters"}}; `tool_choice` is "none", "auto" (default with tools), "required", or
// {"type": "function", "function": {"name": NAME}} naming one of the tools. Errors are 400s
// naming the field (tools.3.function.name, tool_choice, ...). Streamed responses carry calls as
// OpenAI does (ToolCallStream): `delta.tool_calls` chunks, and finish_reason "tool_calls".
//
// Thread-safety: free functions are stateless, safe from any thread; a ToolCallStream belongs to
// one response.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "apps/server/protocol.h"

namespace uc::server {

// Parses `tools` or `tool_choice` into r->tools / r->tool_choice.
std::optional<ApiError> ParseToolsField(const std::string& key, const nlohmann::json& v,
                                        CompletionRequest* r);

// The tool-call format of a chat template's text: kHermes when it writes <tool_call>, kLlama3Json
// when it asks for {"name": ..., "parameters": ...} (Llama 3.1/3.2), kHermes otherwise.
ToolFormat DetectToolFormat(std::string_view template_text);

// After every field is parsed: checks tool_choice against tools, and for "required" or a named
// function sets the grammar of a `format` call (a second constraint, e.g. response_format, is a
// 400).
std::optional<ApiError> ResolveTools(CompletionRequest* r, ToolFormat format = ToolFormat::kHermes);

// A completion split into its text and its tool calls.
struct ParsedToolCalls {
  std::optional<std::string> content;                   // null when only calls were written
  nlohmann::json tool_calls = nlohmann::json::array();  // OpenAI shape; arguments: a JSON string
};
// kHermes: splits `text` at its <tool_call> blocks; a block whose JSON is not {name: string,
// arguments: object} stays in the content. kLlama3Json: `text` (trimmed, <|python_tag|> dropped)
// is one call {name: string, parameters (or arguments): object}, or several joined by ";";
// anything else is content. `id_prefix` makes the call ids ("call_<prefix>_<i>").
ParsedToolCalls ParseToolCalls(const std::string& text, const std::string& id_prefix,
                               ToolFormat format = ToolFormat::kHermes);

class CallScanner;

// The streamed form: text increments in, chat deltas out, each {"content": TEXT} or
// {"tool_calls": [...]} shaped as OpenAI streams them: per call one delta {index, id, type:
// "function", function: {name, arguments: ""}}, then {index, function: {arguments: FRAGMENT}}
// deltas as the arguments are written, token by token. A call goes out once its name is read and
// its arguments object has begun; from then on it is a call, and what follows goes out as the
// model writes it (so a call cut off by max_tokens, or with broken JSON after its arguments
// began, carries its arguments as far as they were written, where the complete response would
// show that text as content). Text that may still become a call is held back until it is
// decided (kHermes: a partial "<tool_call>" and a block until its call begins; kLlama3Json: an
// answer that begins with "{" or <|python_tag|>, until a call begins). For every answer whose
// calls are well formed, the concatenated content and calls equal ParseToolCalls of the whole
// text, arguments byte for byte.
class ToolCallStream {
 public:
  ToolCallStream(ToolFormat format, std::string id_prefix);
  ToolCallStream(ToolCallStream&&) noexcept;
  ~ToolCallStream();
  std::vector<nlohmann::json> Feed(std::string_view text);
  // At the end of the completion: what was held back.
  std::vector<nlohmann::json> Finish();
  // Whether a call went out (finish_reason "tool_calls").
  bool called() const { return calls_ > 0; }

 private:
  void EmitContent(std::string text, std::vector<nlohmann::json>* out);
  void EmitHead(const std::string& name, std::vector<nlohmann::json>* out);
  void EmitArguments(std::string_view fragment, std::vector<nlohmann::json>* out);
  void EmitCalls(const nlohmann::json& functions, std::vector<nlohmann::json>* out);
  // Starts reading a call object; StreamCall reads `text`, the object's text so far (each call
  // extends the last), and sends the call's head and new argument bytes once it has begun.
  void BeginCall();
  void StreamCall(std::string_view text, std::vector<nlohmann::json>* out);
  void DrainHermes(std::vector<nlohmann::json>* out);
  // A block ends: `body` is all of it, `close` the tag that ended it ("" at the end of the text).
  void EndHermesBlock(std::string_view body, std::string_view close,
                      std::vector<nlohmann::json>* out);
  void DrainLlama(std::vector<nlohmann::json>* out);
  void FinishLlama(std::vector<nlohmann::json>* out);

  const ToolFormat format_;
  const std::string id_prefix_;
  std::string pending_;     // held back (kHermes: from the open block's body on)
  std::string leading_ws_;  // whitespace before anything else, held (blank content is null)
  bool in_block_ = false;   // kHermes: after "<tool_call>"
  enum class Mode { kUndecided, kContent, kCall } mode_ = Mode::kUndecided;  // kLlama3Json
  int calls_ = 0;
  bool content_sent_ = false;
  std::unique_ptr<CallScanner> scan_;  // the call being read
  bool committed_ = false;             // scan_'s call went out
  size_t args_sent_ = 0;               // how much of its arguments
  size_t llama_pos_ = 0;               // kLlama3Json: where scan_'s object (or the next) begins
  bool llama_streaming_ = true;        // kLlama3Json: false once the text stops being calls
};

}  // namespace uc::server
