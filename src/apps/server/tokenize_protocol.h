// File: tokenize_protocol.h
// -----------------------------------------------------------------------------
// The tokenizer endpoints of `undercurrent serve`, in vLLM's shapes (what lm-eval-harness and
// vLLM clients call):
//   POST /tokenize    {model?, prompt: TEXT, add_special_tokens? (default true),
//                      return_token_strs?}
//                  or {model?, messages: [...], add_generation_prompt? (only true),
//                      add_special_tokens? (default false), return_token_strs?}
//                     -> {count, max_model_len, tokens, token_strs (null unless asked)}
//                     messages are rendered with the chat template /v1/chat/completions uses,
//                     so `tokens` are exactly the prompt a chat completion runs.
//   POST /detokenize  {model?, tokens: [ids]} -> {prompt: TEXT}
//   GET  /tokenizer_info -> {tokenizer_class, vocab_size, model_max_length, bos_token, ...}
// Parsing is pure JSON (this file); the server tokenizes. Errors are 400s naming the field, as
// in protocol.h (unknown fields included).
//
// Thread-safety: stateless functions.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "apps/server/protocol.h"

namespace uc::server {

struct TokenizeRequest {
  std::string model;                  // empty when not sent
  std::optional<std::string> prompt;  // set, or messages non-empty
  std::vector<ChatMessage> messages;
  bool add_special_tokens = true;  // BOS for a prompt; for messages the template writes them
  bool return_token_strs = false;
};

struct DetokenizeRequest {
  std::string model;
  std::vector<int32_t> tokens;
};

std::optional<ApiError> ParseTokenizeRequest(const nlohmann::json& body, TokenizeRequest* out);
std::optional<ApiError> ParseDetokenizeRequest(const nlohmann::json& body, DetokenizeRequest* out);

}  // namespace uc::server
