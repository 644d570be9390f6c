#include "apps/server/tokenize_protocol.h"

#include <algorithm>

namespace uc::server {
namespace {

using json = nlohmann::json;

ApiError TypeError(const std::string& field, const std::string& expected) {
  return BadRequest("Invalid type for '" + field + "': expected " + expected + ".", field,
                    "invalid_type");
}

std::optional<ApiError> CheckFields(const json& body, const std::vector<std::string>& known) {
  if (!body.is_object()) return BadRequest("The request body must be a JSON object.");
  for (const auto& [key, value] : body.items()) {
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      return BadRequest("Unrecognized request argument supplied: " + EchoValue(key), EchoValue(key),
                        "unknown_parameter");
    }
  }
  if (body.contains("model") && !body["model"].is_null() && !body["model"].is_string()) {
    return TypeError("model", "a string");
  }
  return std::nullopt;
}

std::optional<ApiError> GetBool(const json& body, const std::string& key, bool* out) {
  const auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) return TypeError(key, "a boolean");
  *out = it->get<bool>();
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ParseTokenizeRequest(const json& body, TokenizeRequest* out) {
  if (auto e = CheckFields(body, {"model", "prompt", "messages", "add_special_tokens",
                                  "add_generation_prompt", "return_token_strs"})) {
    return e;
  }
  TokenizeRequest r;
  if (body.contains("model") && body["model"].is_string()) r.model = body["model"];
  const bool has_prompt = body.contains("prompt");
  const bool has_messages = body.contains("messages");
  if (has_prompt == has_messages) {
    return BadRequest("Send exactly one of 'prompt' and 'messages'.",
                      has_prompt ? "messages" : "prompt", "missing_required_parameter");
  }
  if (has_prompt) {
    if (!body["prompt"].is_string()) return TypeError("prompt", "a string");
    r.prompt = body["prompt"].get<std::string>();
  } else {
    // The chat endpoint's validation of the messages, so both refuse the same conversations.
    CompletionRequest chat;
    if (auto e = ParseCompletionRequest(json{{"messages", body["messages"]}},
                                        Endpoint::kChatCompletions, &chat)) {
      return e;
    }
    r.messages = std::move(chat.messages);
    r.add_special_tokens = false;
    bool generation_prompt = true;
    if (auto e = GetBool(body, "add_generation_prompt", &generation_prompt)) return e;
    if (!generation_prompt) {
      return BadRequest(
          "'add_generation_prompt': false is not supported: messages are rendered as a chat "
          "completion runs them, ending with the assistant's turn opened.",
          "add_generation_prompt", "unsupported_parameter");
    }
  }
  if (auto e = GetBool(body, "add_special_tokens", &r.add_special_tokens)) return e;
  if (auto e = GetBool(body, "return_token_strs", &r.return_token_strs)) return e;
  *out = std::move(r);
  return std::nullopt;
}

std::optional<ApiError> ParseDetokenizeRequest(const json& body, DetokenizeRequest* out) {
  if (auto e = CheckFields(body, {"model", "tokens"})) return e;
  DetokenizeRequest r;
  if (body.contains("model") && body["model"].is_string()) r.model = body["model"];
  const auto it = body.find("tokens");
  if (it == body.end()) {
    return BadRequest("Missing required parameter: 'tokens'.", "tokens",
                      "missing_required_parameter");
  }
  if (!it->is_array()) return TypeError("tokens", "an array of integers");
  for (const json& t : *it) {
    if (!t.is_number_integer()) return TypeError("tokens", "an array of integers");
    const int64_t id = t.get<int64_t>();
    if (id < 0 || id > INT32_MAX) {
      return BadRequest("'tokens' holds " + std::to_string(id) + ", which is not a token id.",
                        "tokens", "invalid_value");
    }
    r.tokens.push_back(static_cast<int32_t>(id));
  }
  *out = std::move(r);
  return std::nullopt;
}

}  // namespace uc::server
