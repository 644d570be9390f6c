// File: protocol.h
// -----------------------------------------------------------------------------
// The OpenAI wire format of `undercurrent serve`: request bodies of /v1/completions and
// /v1/chat/completions parsed and validated into CompletionRequest, and the response bodies,
// stream chunks and error bodies built from what the engine and the probes produced. Pure
// functions over JSON, no I/O: the HTTP layer (http_server.h) calls them.
//
// Validation follows the OpenAI API: a known field with the wrong type or an impossible value,
// or a field the API does not have ("Unrecognized request argument supplied"), is a 400 naming
// the field in `param`. Fields the engine does not implement (penalties, ...)
// are accepted only at their neutral values. vLLM's extensions top_k, min_p, ignore_eos and
// stop_token_ids are accepted, and prompt_logprobs and cache_salt (prefix caching shares blocks
// only between requests of the same salt); structured output (response_format and vLLM's
// structured_outputs / guided_*) is parsed by structured_protocol.h. A per-request probing spec
// is refused: specs are the server's (loaded at start-up, reloaded by POST /v1/probes/reload or
// SIGHUP).
//
// Probing additions (Undercurrent's wire format): every choice carries `probing` (one summary
// per extraction point); a choice an inline probe stopped has finish_reason "content_flagged"
// with `flagged_by` (the point) and `flagged_score` (the signal's confidence); the response
// repeats the first choice's `probing` and the first flagged choice's fields at the top level.
// A request may pick one of the server's probe sets with `probe_set` (serve --spec NAME=FILE;
// absent: the default); choices and the response say which set and version ran
// (`probe_set: {name, version}`).
//
// Steering additions (extra body fields, the vLLM steering convention):
//   steering_vectors / prefill_steering_vectors / decode_steering_vectors:
//     {hook: {layer: VECTOR}}, added to every token / the prompt's tokens / the generated tokens;
//     hook: residual_stream (also resid_post, hook_resid_post), attn_out (hook_attn_out),
//     mlp_out (hook_mlp_out), or TransformerLens's hook_resid_pre (block L: residual_stream of
//     L - 1) and hook_resid_mid (attn_out of L; see SteeringTapOf); "blocks.L.<hook>": VECTOR
//     names the block itself; layer: a decimal block index; VECTOR: an array of numbers, a
//     base64 string of little-endian float32s, or {"vector": array | base64, "scale": number,
//     "norm_match": boolean}.
//   steering_name: a vector set registered at start-up (serve --steering-module NAME=FILE).
// Structural errors are 400s naming the JSON path ("steering_vectors.residual_stream.3");
// lengths and layers are checked against the model by the server.
//
// Thread-safety: stateless functions, safe from any thread.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "apps/server/logprobs_json.h"
#include "engine/llm_engine.h"
#include "probe/runtime/probing_session.h"
#include "probe/spec/spec.h"
#include "worker/sampling_params.h"
#include "worker/steering_config.h"

namespace uc::server {

enum class Endpoint { kCompletions, kChatCompletions };

// How a chat template's model writes tool calls (tool_calls.h, DetectToolFormat).
enum class ToolFormat {
  kHermes,      // <tool_call>{"name": ..., "arguments": {...}}</tool_call> (Qwen 2.5/3, Hermes)
  kLlama3Json,  // the whole answer {"name": ..., "parameters": {...}} (Llama 3.1/3.2)
};

// Client-sent values quoted in error messages (unknown field names, roles, hooks, model names)
// are cut to this many bytes, with an ellipsis: an error body stays small whatever was sent.
inline constexpr size_t kMaxEchoBytes = 64;
// Names a request picks (probe_set, steering_name) are at most this long (400 above).
inline constexpr size_t kMaxNameBytes = 256;

// `value` as quoted in an error message: at most `max_bytes` bytes (cut at a UTF-8 character
// boundary) followed by "..." when it was cut.
std::string EchoValue(std::string_view value, size_t max_bytes = kMaxEchoBytes);

// An OpenAI-style error: the HTTP status and {"error": {message, type, param, code}}. Body()
// caps the message (4 KiB) and the param (128 bytes) as a last line of defence.
struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // empty: null
  std::string code;   // empty: null
  nlohmann::json Body() const;
};
ApiError BadRequest(std::string message, std::string param = "", std::string code = "");

struct ChatMessage {
  std::string role;     // system, developer, user, assistant, tool
  std::string content;  // text parts joined
  // Tool calling (tool_calls.h): an assistant's calls, as sent (arguments parsed from their JSON
  // strings for the template; null: none), and the id a tool message answers.
  nlohmann::json tool_calls;
  std::string tool_call_id;
};

// One prompt of /v1/completions: text (tokenized by the server) or token ids.
struct PromptInput {
  std::optional<std::string> text;
  std::vector<int32_t> ids;  // when text is unset
};

struct CompletionRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;                  // empty when the client sent none
  std::vector<PromptInput> prompts;   // completions: one or more (a batch)
  std::vector<ChatMessage> messages;  // chat completions
  std::optional<int> max_tokens;      // max_tokens or max_completion_tokens, when given
  // temperature (default 1), top_p, top_k, min_p, seed, stop, stop_token_ids, ignore_eos;
  // max_tokens is filled in later, once the prompt length is known.
  worker::SamplingParams sampling;
  int n = 1;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  std::string user;
  // Steering vectors in body order, each with its JSON path (`param` of its errors).
  struct Steering {
    worker::SteeringVector vector;
    std::string param;
    bool resid_mid = false;  // named hook_resid_mid (refused for a parallel-residual model)
  };
  std::vector<Steering> steering;
  std::string steering_name;  // empty: none
  std::string probe_set;      // empty: the server's default probe set
  // Logprobs (logprobs_json.h): completions `logprobs` k in [0, 20], or chat `logprobs: true`
  // with `top_logprobs` k (default 0); unset: none returned. `sampling.logprobs` and
  // `sampling.prompt_logprobs` say what the engine computes, which may be more (best_of ranks
  // candidates by their logprobs; echo needs the prompt's).
  std::optional<int> logprobs;
  std::optional<int> top_logprobs;     // chat, as sent (folded into `logprobs`)
  bool echo = false;                   // completions: the prompt comes back before the completion
  std::optional<int> prompt_logprobs;  // vLLM's: [0, 20]
  int best_of = 1;  // completions: candidates per prompt (>= n); the n most likely are returned
  // Structured output (structured_protocol.h): sampling.grammar, and the field that set it (the
  // `param` of a 400 when it does not compile).
  std::string grammar_param;
  // Tool calling (tool_calls.h): the tools as sent, and tool_choice ("none", "auto", "required",
  // or "function" with tool_choice_name).
  nlohmann::json tools = nlohmann::json::array();
  std::string tool_choice = "auto";
  std::string tool_choice_name;
};

// "residual_stream" and its aliases, "attn_out", "mlp_out" -> the site; nullopt otherwise.
std::optional<models::Site> SteeringHookSite(const std::string& hook);
// Where steering TransformerLens hook `hook` of block `layer` adds its vector: the tap of
// models::TapOfTransformerLensHook, and for hook_resid_mid attn_out of `layer` (the stream between
// a sequential block's attention and MLP is x + attn_out, so adding there is adding to attn_out).
// InvalidArgument for hook_resid_pre of block 0.
StatusOr<models::TapPoint> SteeringTapOf(models::TlHook hook, int layer);
// Standard base64 (padding optional) -> bytes; nullopt for any other character or length.
std::optional<std::string> DecodeBase64(const std::string& text);

inline constexpr int kMaxChoices = 128;  // n times the number of prompts, at most

// Parses a request body. `body` is the parsed JSON (a non-object is a 400). `tool_format` is how
// the served chat template writes tool calls (tool_calls.h): it shapes the grammar of a forced
// call.
std::optional<ApiError> ParseCompletionRequest(const nlohmann::json& body, Endpoint endpoint,
                                               CompletionRequest* out,
                                               ToolFormat tool_format = ToolFormat::kHermes);

// The OpenAI finish_reason of a finished engine output: "stop", "length", "content_flagged"
// (an inline probe aborted) or "abort" (the client went away, or shutdown).
std::string FinishReasonOf(const engine::RequestOutput& output);

// Per extraction point: {score, flagged, execution_mode, evaluated, verdict}. `score` is the
// last signal's confidence for single_shot points, {max_score, final_score} for the others,
// null when the point never saw its position (evaluated: false).
nlohmann::json ProbingSummary(const probe::RequestProbeResults& results, const probe::Spec& spec);

// One finished choice, as the HTTP layer gathered it.
struct ChoiceResult {
  int index = 0;
  engine::RequestOutput output;           // finished
  std::optional<nlohmann::json> probing;  // ProbingSummary; unset without a spec
  // {"name": SET, "version": N}: the probe set (and its version) whose probes ran.
  std::optional<nlohmann::json> probe_set;
  std::string echo_text = {};  // with echo: the prompt's text, before the completion's
};

struct ResponseContext {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string id;  // cmpl-... / chatcmpl-...
  int64_t created = 0;
  std::string model;
  bool probing_enabled = false;  // a spec is set: `probing` fields appear (null if missing)
  // What the request asked to see (CompletionRequest's fields of the same names); token_text
  // names tokens in logprobs (required when either is set).
  std::optional<int> logprobs = std::nullopt;
  std::optional<int> prompt_logprobs = std::nullopt;
  bool echo = false;
  TokenText token_text = nullptr;
  // Chat with tools (tool_choice not "none"): the calls the message writes in `tool_format`
  // become `tool_calls` (tool_calls.h).
  bool parse_tool_calls = false;
  ToolFormat tool_format = ToolFormat::kHermes;
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  // Prompt tokens served from the prefix cache (prompt_tokens_details.cached_tokens).
  int64_t cached_tokens = 0;
  nlohmann::json ToJson() const;
};

// The non-streaming response body (object "text_completion" or "chat.completion").
nlohmann::json ResponseBody(const ResponseContext& ctx, const std::vector<ChoiceResult>& choices,
                            const Usage& usage);

// Stream chunks (object "text_completion" or "chat.completion.chunk"); `usage` is null in
// every chunk when include_usage, absent otherwise.
// The first chunk of a chat choice: delta {role: "assistant", content: ""} (content null when the
// stream may carry tool calls, as OpenAI sends it).
nlohmann::json RoleChunk(const ResponseContext& ctx, int index, bool include_usage,
                         bool null_content = false);
// A text increment, with the logprobs of the tokens sampled with it when the request asked
// (`text_offset`: where `text` starts in the choice's text, for completions' text_offset).
nlohmann::json TextChunk(const ResponseContext& ctx, int index, const std::string& text,
                         bool include_usage,
                         const std::vector<worker::PositionLogprobs>& logprobs = {},
                         size_t text_offset = 0);
// Completions with echo: the prompt's text (and, when asked, its tokens' logprobs), streamed
// before the completion.
nlohmann::json EchoChunk(
    const ResponseContext& ctx, int index, const std::string& prompt_text,
    const std::vector<int32_t>& prompt_ids,
    const std::vector<std::optional<worker::PositionLogprobs>>& prompt_logprobs,
    bool include_usage);
// A chat chunk with the given delta ({"content": ...} or {"tool_calls": [...]}, tool_calls.h).
nlohmann::json DeltaChunk(const ResponseContext& ctx, int index, const nlohmann::json& delta,
                          bool include_usage);
// The last chunk of a choice: empty delta (chat) or text, with finish_reason (`tool_calls`: a
// "stop" becomes "tool_calls"); a flagged choice also carries flagged, flagged_by and
// flagged_score (in the choice and at the top level).
nlohmann::json FinishChunk(const ResponseContext& ctx, const ChoiceResult& choice,
                           bool include_usage, bool tool_calls = false);
// The extra chunk of stream_options.include_usage: choices [] and usage.
nlohmann::json UsageChunk(const ResponseContext& ctx, const Usage& usage);
// The data of the `probing_result` event sent for each choice before [DONE]: a chunk with
// `choices: []` (OpenAI clients skip it like the usage chunk) plus index, flagged and probing.
nlohmann::json ProbingResultEvent(const ResponseContext& ctx, const ChoiceResult& choice);

// "data: JSON\n\n", or "event: NAME\ndata: JSON\n\n".
std::string SseEvent(const nlohmann::json& data, const std::string& event = "");

}  // namespace uc::server
