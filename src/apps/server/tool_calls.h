// File: tool_calls.h
// -----------------------------------------------------------------------------
// OpenAI tool calling for chat templates that define it the Hermes/Qwen 2.5/3 way: the template
// renders `tools` into the system prompt, and the model answers a call as
//   <tool_call>\n{"name": NAME, "arguments": {...}}\n</tool_call>
// (one block per call). The server parses those blocks out of the completion into the message's
// `tool_calls` (content: the text outside the blocks, null when empty; finish_reason
// "tool_calls"). With `tool_choice: "required"` or a named function, sampling is constrained to
// such a block whose JSON validates against {name: const NAME, arguments: the function's
// `parameters`} (an xgrammar structural tag; "required": any of the tools).
//
// Requests: `tools` is an array of {"type": "function", "function": {"name", "description",
// "parameters"}}; `tool_choice` is "none", "auto" (default with tools), "required", or
// {"type": "function", "function": {"name": NAME}} naming one of the tools. Errors are 400s
// naming the field (tools.3.function.name, tool_choice, ...). Streaming responses carry calls as
// content text (they are parsed only in complete responses).
//
// Thread-safety: stateless functions, safe from any thread.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "apps/server/protocol.h"

namespace uc::server {

// Parses `tools` or `tool_choice` into r->tools / r->tool_choice.
std::optional<ApiError> ParseToolsField(const std::string& key, const nlohmann::json& v,
                                        CompletionRequest* r);

// After every field is parsed: checks tool_choice against tools, and for "required" or a named
// function sets the grammar (a second constraint, e.g. response_format, is a 400).
std::optional<ApiError> ResolveTools(CompletionRequest* r);

// A completion split into its text and its tool calls.
struct ParsedToolCalls {
  std::optional<std::string> content;                   // null when only calls were written
  nlohmann::json tool_calls = nlohmann::json::array();  // OpenAI shape; arguments: a JSON string
};
// Splits `text` at its <tool_call> blocks. A block whose JSON is not {name: string, arguments:
// object} stays in the content. `id_prefix` makes the call ids ("call_<prefix>_<i>").
ParsedToolCalls ParseToolCalls(const std::string& text, const std::string& id_prefix);

}  // namespace uc::server
