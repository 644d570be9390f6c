// File: logprobs_json.h
// -----------------------------------------------------------------------------
// Logprobs in the wire formats clients parse (worker/logprobs.h says which row they come from):
//   - /v1/completions `logprobs` (OpenAI's legacy shape, what lm-eval-harness reads):
//     {tokens, token_logprobs, top_logprobs, text_offset}; top_logprobs[i] maps token text to
//     logprob for the `top` most likely tokens plus the chosen one (up to top + 1 entries);
//     with echo the prompt's tokens come first, the first with null token_logprobs and
//     top_logprobs (nothing predicts it);
//   - /v1/chat/completions `logprobs`: {content: [{token, logprob, bytes, top_logprobs:
//     [{token, logprob, bytes}]}], refusal: null};
//   - vLLM's `prompt_logprobs`: [null, {"<id>": {logprob, rank, decoded_token}}, ...], one per
//     prompt token, each with the `top` most likely tokens and the prompt's own.
// A token's text is its bytes (Tokenizer::TokenToPiece); bytes that are not UTF-8 (part of a
// character) become U+FFFD when the body is written, and `bytes` keeps them exact.
//
// Thread-safety: stateless functions.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "worker/logprobs.h"

namespace uc::server {

// The text of one token id.
using TokenText = std::function<std::string(int32_t)>;

// `tokens[i]` with its logprobs `entries[i]` (null: none, e.g. the first prompt token).
// `text_offset` is the offset of tokens[0] in the choice's text; each token advances it by
// its text's length.
nlohmann::json CompletionLogprobsJson(const std::vector<int32_t>& tokens,
                                      const std::vector<const worker::PositionLogprobs*>& entries,
                                      int top, const TokenText& text, size_t text_offset);

// The `content` entries of chat logprobs, one per generated token.
nlohmann::json ChatLogprobsContent(const std::vector<worker::PositionLogprobs>& generated, int top,
                                   const TokenText& text);

// vLLM's prompt_logprobs list.
nlohmann::json PromptLogprobsJson(
    const std::vector<std::optional<worker::PositionLogprobs>>& prompt, int top,
    const TokenText& text);

}  // namespace uc::server
