// File: structured_protocol.h
// -----------------------------------------------------------------------------
// The request fields that constrain a completion's output (worker::GrammarSpec):
//   response_format (OpenAI): {"type": "text"} (none), {"type": "json_object"}, or
//     {"type": "json_schema", "json_schema": {"name": ..., "schema": {...}, "strict": ...}};
//   structured_outputs (vLLM): {"json": SCHEMA} | {"regex": STRING} | {"choice": [STRING, ...]}
//     | {"grammar": EBNF} | {"json_object": true} | {"structural_tag": STRING}, exactly one,
//     plus vLLM's tuning flags (disable_any_whitespace, disable_additional_properties,
//     disable_fallback, whitespace_pattern), accepted and ignored;
//   guided_json / guided_regex / guided_choice / guided_grammar (vLLM's earlier names of the
//     same), and guided_decoding_backend (accepted, ignored: the backend is xgrammar).
// A SCHEMA is a JSON object or a string holding one. At most one of these may constrain a
// request (a 400 names the second). Only the shape is checked here; whether a schema, regex or
// grammar compiles is checked by the server with the engine (LLMEngine::CompileGrammar), and its
// 400 names `grammar_param`.
//
// Thread-safety: stateless functions, safe from any thread.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "apps/server/protocol.h"

namespace uc::server {

// The path (`path`.key...) of the first keyword in `schema` that structured output cannot
// enforce (the grammar engine would ignore it): not, if/then/else, contains/minContains/
// maxContains, dependentRequired/dependentSchemas, unevaluatedProperties/Items, uniqueItems
// true, a non-integer multipleOf, a $ref outside the document. nullopt when there is none.
std::optional<std::string> UnsupportedSchemaKeyword(const nlohmann::json& schema,
                                                    const std::string& path, int depth = 0);
// A 400 (code unsupported_schema) naming `param` when UnsupportedSchemaKeyword finds one.
std::optional<ApiError> CheckSchemaSupported(const nlohmann::json& schema,
                                             const std::string& param);

// Whether `key` is one of the fields above.
bool IsStructuredOutputField(const std::string& key);

// Parses field `key` (IsStructuredOutputField) into r->sampling.grammar and r->grammar_param.
std::optional<ApiError> ParseStructuredOutputField(const std::string& key, const nlohmann::json& v,
                                                   CompletionRequest* r);

}  // namespace uc::server
