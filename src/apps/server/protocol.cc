#include "apps/server/protocol.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <set>

#include "apps/server/structured_protocol.h"
#include "apps/server/tool_calls.h"
#include "base/did_you_mean.h"

namespace uc::server {
namespace {

using json = nlohmann::json;

const std::vector<std::string>& KnownFields(Endpoint endpoint) {
  static const std::vector<std::string> completions = {
      "model", "prompt", "best_of", "echo", "frequency_penalty", "logit_bias", "logprobs",
      "max_tokens", "max_completion_tokens", "n", "presence_penalty", "seed", "stop", "stream",
      "stream_options", "suffix", "temperature", "top_p", "user", "response_format",
      // vLLM extensions
      "top_k", "min_p", "ignore_eos", "stop_token_ids", "prompt_logprobs", "cache_salt",
      // structured output (structured_protocol.h)
      "structured_outputs", "guided_json", "guided_regex", "guided_choice", "guided_grammar",
      "guided_decoding_backend",
      // steering
      "steering_vectors", "prefill_steering_vectors", "decode_steering_vectors", "steering_name",
      // probing
      "probe_set"};
  static const std::vector<std::string> chat = {
      "model", "messages", "audio", "frequency_penalty", "function_call", "functions", "logit_bias",
      "logprobs", "max_completion_tokens", "max_tokens", "metadata", "modalities", "n",
      "parallel_tool_calls", "prediction", "presence_penalty", "reasoning_effort",
      "response_format", "seed", "service_tier", "stop", "store", "stream", "stream_options",
      "temperature", "tool_choice", "tools", "top_logprobs", "top_p", "user", "web_search_options",
      // vLLM extensions
      "top_k", "min_p", "ignore_eos", "stop_token_ids", "prompt_logprobs", "cache_salt",
      // structured output (structured_protocol.h)
      "structured_outputs", "guided_json", "guided_regex", "guided_choice", "guided_grammar",
      "guided_decoding_backend",
      // steering
      "steering_vectors", "prefill_steering_vectors", "decode_steering_vectors", "steering_name",
      // probing
      "probe_set"};
  return endpoint == Endpoint::kCompletions ? completions : chat;
}

// Fields that would carry a per-request probing spec.
constexpr const char* kSpecFields[] = {"spec", "probing", "probing_spec", "extraction_points"};

std::string TypeName(const json& v) {
  if (v.is_number_integer()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_boolean()) return "a boolean";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "null";
}

ApiError WrongType(const std::string& field, const json& v, const std::string& expected) {
  return BadRequest(
      "Invalid type for '" + field + "': expected " + expected + ", but got " + TypeName(v) + ".",
      field, "invalid_type");
}

ApiError Unsupported(const std::string& field, const std::string& what) {
  return BadRequest("'" + field + "' is not supported by this server" + what + ".", field,
                    "unsupported_parameter");
}

std::optional<ApiError> ParseStop(const json& v, worker::SamplingParams* s) {
  if (v.is_null()) return std::nullopt;
  if (v.is_string()) {
    if (v.get<std::string>().empty()) return BadRequest("'stop' must not be empty.", "stop");
    s->stop = {v.get<std::string>()};
    return std::nullopt;
  }
  if (!v.is_array()) return WrongType("stop", v, "a string or an array of strings");
  for (const json& e : v) {
    if (!e.is_string()) return WrongType("stop", e, "a string or an array of strings");
    if (e.get<std::string>().empty()) return BadRequest("'stop' must not be empty.", "stop");
    s->stop.push_back(e.get<std::string>());
  }
  return std::nullopt;
}

std::optional<ApiError> ParseIdList(const json& v, const std::string& field,
                                    std::vector<int32_t>* ids) {
  for (const json& e : v) {
    if (!e.is_number_integer()) return WrongType(field, e, "an array of integers");
    const int64_t id = e.get<int64_t>();
    if (id < 0 || id > INT32_MAX) {
      return BadRequest("'" + field + "' holds token id " + std::to_string(id) +
                            ", which is not a valid token id.",
                        field);
    }
    ids->push_back(static_cast<int32_t>(id));
  }
  return std::nullopt;
}

std::optional<ApiError> ParsePrompt(const json& v, std::vector<PromptInput>* prompts) {
  const std::string expected = "a string, an array of strings or an array of token ids";
  if (v.is_string()) {
    prompts->push_back({v.get<std::string>(), {}});
    return std::nullopt;
  }
  if (!v.is_array() || v.empty()) {
    return v.is_array() ? BadRequest("'prompt' must not be empty.", "prompt")
                        : WrongType("prompt", v, expected);
  }
  if (v[0].is_number_integer()) {  // one prompt as ids
    PromptInput p;
    if (auto e = ParseIdList(v, "prompt", &p.ids)) return e;
    prompts->push_back(std::move(p));
    return std::nullopt;
  }
  for (const json& e : v) {  // a batch: strings, or arrays of ids
    if (e.is_string()) {
      prompts->push_back({e.get<std::string>(), {}});
    } else if (e.is_array() && !e.empty()) {
      PromptInput p;
      if (auto err = ParseIdList(e, "prompt", &p.ids)) return err;
      prompts->push_back(std::move(p));
    } else {
      return WrongType("prompt", e, expected);
    }
  }
  return std::nullopt;
}

// An assistant's tool_calls (arguments: JSON strings, parsed for the template) and a tool
// message's tool_call_id.
std::optional<ApiError> ParseMessageToolFields(const json& m, const std::string& at,
                                               ChatMessage* message) {
  const auto calls = m.find("tool_calls");
  if (calls != m.end() && !calls->is_null()) {
    if (!calls->is_array()) return WrongType(at + ".tool_calls", *calls, "an array");
    message->tool_calls = json::array();
    for (size_t i = 0; i < calls->size(); ++i) {
      const std::string c_at = at + ".tool_calls." + std::to_string(i);
      const json& c = (*calls)[i];
      const json f = c.is_object() ? c.value("function", json()) : json();
      if (!f.is_object() || !f.value("name", json()).is_string()) {
        return WrongType(c_at, c,
                         "{\"type\": \"function\", \"function\": {\"name\", \"arguments\"}}");
      }
      json args = f.value("arguments", json::object());
      if (args.is_string()) {
        args = json::parse(args.get<std::string>(), nullptr, /*allow_exceptions=*/false);
        if (args.is_discarded()) {
          return BadRequest("'" + c_at + ".function.arguments' is not valid JSON.",
                            c_at + ".function.arguments", "invalid_value");
        }
      }
      message->tool_calls.push_back({{"id", c.value("id", json(""))},
                                     {"type", "function"},
                                     {"function", {{"name", f["name"]}, {"arguments", args}}}});
    }
  }
  const auto call_id = m.find("tool_call_id");
  if (call_id != m.end() && !call_id->is_null()) {
    if (!call_id->is_string()) return WrongType(at + ".tool_call_id", *call_id, "a string");
    message->tool_call_id = call_id->get<std::string>();
  }
  return std::nullopt;
}

std::optional<ApiError> ParseMessages(const json& v, std::vector<ChatMessage>* messages) {
  if (!v.is_array()) return WrongType("messages", v, "an array");
  if (v.empty()) return BadRequest("'messages' must not be empty.", "messages");
  static const std::set<std::string> roles = {"system",    "developer", "user",
                                              "assistant", "tool",      "function"};
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string at = "messages[" + std::to_string(i) + "]";
    const json& m = v[i];
    if (!m.is_object()) return WrongType(at, m, "an object");
    const auto role = m.find("role");
    if (role == m.end())
      return BadRequest("Missing required parameter: '" + at + ".role'.", at + ".role",
                        "missing_required_parameter");
    if (!role->is_string()) return WrongType(at + ".role", *role, "a string");
    if (roles.count(role->get<std::string>()) == 0) {
      return BadRequest("Invalid value for '" + at + ".role': '" +
                            EchoValue(role->get<std::string>()) +
                            "'. Supported values are: 'system', 'developer', 'user', "
                            "'assistant', 'tool' and 'function'.",
                        at + ".role", "invalid_value");
    }
    ChatMessage message;
    message.role = role->get<std::string>();
    const auto content = m.find("content");
    if (content == m.end() || content->is_null()) {
      if (message.role != "assistant") {
        return BadRequest("Missing required parameter: '" + at + ".content'.", at + ".content",
                          "missing_required_parameter");
      }
    } else if (content->is_string()) {
      message.content = content->get<std::string>();
    } else if (content->is_array()) {
      for (const json& part : *content) {
        const std::string part_at = at + ".content";
        if (!part.is_object()) return WrongType(part_at, part, "an array of content parts");
        if (part.value("type", json()) != "text" || !part.contains("text") ||
            !part["text"].is_string()) {
          return Unsupported(part_at,
                             ": only text content parts ({\"type\": \"text\", "
                             "\"text\": ...}) are");
        }
        message.content += part["text"].get<std::string>();
      }
    } else {
      return WrongType(at + ".content", *content, "a string or an array of content parts");
    }
    if (auto error = ParseMessageToolFields(m, at, &message)) return error;
    messages->push_back(std::move(message));
  }
  return std::nullopt;
}

// Fields the engine does not implement: accepted at their neutral values only.
std::optional<ApiError> CheckNeutral(const std::string& key, const json& v) {
  if (v.is_null()) return std::nullopt;
  if (key == "frequency_penalty" || key == "presence_penalty") {
    if (!v.is_number()) return WrongType(key, v, "a number");
    if (v.get<double>() != 0.0) return Unsupported(key, " (only 0 is accepted)");
  } else if (key == "logit_bias") {
    if (!v.is_object()) return WrongType(key, v, "an object");
    if (!v.empty()) return Unsupported(key, "");
  } else if (key == "suffix") {
    if (!v.is_string()) return WrongType(key, v, "a string");
    if (!v.get<std::string>().empty()) return Unsupported(key, "");
  } else if (key == "functions") {
    if (!v.is_array()) return WrongType(key, v, "an array");
    if (!v.empty()) return Unsupported(key, " (use 'tools')");
  } else if (key == "function_call") {
    if (!(v.is_string() && (v == "none" || v == "auto"))) return Unsupported(key, "");
  } else if (key == "metadata") {
    if (!v.is_object()) return WrongType(key, v, "an object");
  } else if (key == "store" || key == "parallel_tool_calls") {
    if (!v.is_boolean()) return WrongType(key, v, "a boolean");
  } else if (key == "service_tier" || key == "reasoning_effort") {
    if (!v.is_string()) return WrongType(key, v, "a string");
  } else if (key == "modalities") {
    if (v != json::array({"text"})) return Unsupported(key, " (only [\"text\"] is)");
  } else if (key == "audio" || key == "prediction" || key == "web_search_options") {
    return Unsupported(key, "");
  }
  return std::nullopt;
}

std::optional<ApiError> ParseNumber(const json& v, const std::string& key, double lo, double hi,
                                    float* out) {
  if (v.is_null()) return std::nullopt;
  if (!v.is_number()) return WrongType(key, v, "a number");
  const double x = v.get<double>();
  if (x < lo || x > hi) {
    return BadRequest("Invalid value for '" + key + "': " + v.dump() + " is not within [" +
                          json(lo).dump() + ", " + json(hi).dump() + "].",
                      key, "invalid_value");
  }
  *out = static_cast<float>(x);
  return std::nullopt;
}

// One VECTOR of a steering field (see protocol.h) into `out`.
std::optional<ApiError> ParseSteeringVector(const json& v, const std::string& param,
                                            worker::SteeringVector* out) {
  const json* values = &v;
  if (v.is_object()) {
    values = nullptr;
    for (const auto& [key, item] : v.items()) {
      const std::string field = param + "." + key;
      if (key == "vector") {
        values = &item;
      } else if (key == "scale") {
        if (!item.is_number()) return WrongType(field, item, "a number");
        out->scale = item.get<float>();
      } else if (key == "norm_match") {
        if (!item.is_boolean()) return WrongType(field, item, "a boolean");
        out->norm_match = item.get<bool>();
      } else {
        return BadRequest("Unrecognized steering vector field '" + EchoValue(key) +
                              "' (expected vector, scale, norm_match).",
                          field, "unknown_parameter");
      }
    }
    if (values == nullptr) {
      return BadRequest("Missing 'vector' in " + param + ".", param + ".vector",
                        "missing_required_parameter");
    }
  }
  if (values->is_string()) {
    const std::optional<std::string> bytes = DecodeBase64(values->get<std::string>());
    if (!bytes.has_value() || bytes->size() % sizeof(float) != 0) {
      return BadRequest(param + " is not base64 of little-endian float32 values.", param,
                        "invalid_value");
    }
    out->values.resize(bytes->size() / sizeof(float));
    if (!bytes->empty()) std::memcpy(out->values.data(), bytes->data(), bytes->size());
  } else if (values->is_array()) {
    out->values.reserve(values->size());
    for (const json& x : *values) {
      if (!x.is_number()) return WrongType(param, x, "an array of numbers");
      out->values.push_back(x.get<float>());
    }
  } else {
    return WrongType(param, *values,
                     "an array of numbers, a base64 string or an object with 'vector'");
  }
  for (size_t i = 0; i < out->values.size(); ++i) {
    if (!std::isfinite(out->values[i])) {
      return BadRequest(param + " has a non-finite value at index " + std::to_string(i) + ".",
                        param, "invalid_value");
    }
  }
  if (!std::isfinite(out->scale)) {
    return BadRequest(param + ".scale is not finite.", param + ".scale", "invalid_value");
  }
  return std::nullopt;
}

// steering_vectors and its prefill_/decode_ forms: {hook: {layer: VECTOR}}.
std::optional<ApiError> ParseSteeringField(const std::string& key, const json& v,
                                           CompletionRequest* r) {
  if (v.is_null()) return std::nullopt;
  if (!v.is_object()) return WrongType(key, v, "an object {hook: {layer: vector}}");
  const worker::SteeringTokens tokens =
      key == "prefill_steering_vectors"  ? worker::SteeringTokens::kPrompt
      : key == "decode_steering_vectors" ? worker::SteeringTokens::kGenerated
                                         : worker::SteeringTokens::kAll;
  // One vector at (layer, site), or for a TransformerLens hook at its tap.
  auto add = [&](const std::optional<models::TlHookName>& tl, models::Site site, int layer,
                 const json& vector, const std::string& param) -> std::optional<ApiError> {
    CompletionRequest::Steering entry;
    entry.param = param;
    entry.vector.layer = layer;
    if (tl.has_value()) {
      const StatusOr<models::TapPoint> tap = SteeringTapOf(tl->hook, layer);
      if (!tap.ok()) return BadRequest(tap.status().message() + ".", param, "invalid_value");
      entry.vector.layer = tap->layer;
      entry.resid_mid = tl->hook == models::TlHook::kResidMid;
      site = tap->site;
    }
    entry.vector.site = site;
    entry.vector.tokens = tokens;
    if (auto error = ParseSteeringVector(vector, param, &entry.vector)) return error;
    r->steering.push_back(std::move(entry));
    return std::nullopt;
  };
  for (const auto& [hook, layers] : v.items()) {
    const std::string hook_param = key + "." + hook;
    const std::optional<models::TlHookName> tl = models::ParseTransformerLensHook(hook);
    models::Site site = models::Site::kResidPost;
    bool known = tl.has_value();
    if (const std::optional<models::Site> named = SteeringHookSite(hook); !known && named) {
      site = *named;
      known = true;
    }
    if (!known) {
      return BadRequest("Unknown steering hook '" + EchoValue(hook) +
                            "' (expected residual_stream, attn_out, mlp_out or a TransformerLens "
                            "hook: hook_resid_pre, hook_resid_mid, hook_resid_post, "
                            "hook_attn_out, hook_mlp_out, blocks.L.<hook>).",
                        hook_param, "invalid_value");
    }
    if (tl.has_value() && tl->layer.has_value()) {  // "blocks.L.<hook>": VECTOR
      if (auto error = add(tl, site, *tl->layer, layers, hook_param)) return error;
      continue;
    }
    if (!layers.is_object()) return WrongType(hook_param, layers, "an object {layer: vector}");
    for (const auto& [layer_text, vector] : layers.items()) {
      const std::string param = hook_param + "." + layer_text;
      int layer = -1;
      const auto [end, ec] =
          std::from_chars(layer_text.data(), layer_text.data() + layer_text.size(), layer);
      if (layer_text.empty() || ec != std::errc() || end != layer_text.data() + layer_text.size() ||
          layer < 0) {
        return BadRequest("Steering layer '" + EchoValue(layer_text) +
                              "' is not a layer index (a non-negative integer).",
                          param, "invalid_value");
      }
      if (auto error = add(tl, site, layer, vector, param)) return error;
    }
  }
  return std::nullopt;
}

std::optional<ApiError> ParseField(const std::string& key, const json& v, CompletionRequest* r) {
  worker::SamplingParams& s = r->sampling;
  if (key == "model") {
    if (v.is_null()) return std::nullopt;
    if (!v.is_string()) return WrongType(key, v, "a string");
    r->model = v.get<std::string>();
  } else if (key == "prompt") {
    return ParsePrompt(v, &r->prompts);
  } else if (key == "messages") {
    return ParseMessages(v, &r->messages);
  } else if (key == "max_tokens" || key == "max_completion_tokens") {
    if (v.is_null()) return std::nullopt;
    if (!v.is_number_integer()) return WrongType(key, v, "an integer");
    if (v.get<int64_t>() < 1 || v.get<int64_t>() > INT32_MAX) {
      const bool low = v.get<int64_t>() < 1;
      return BadRequest("Invalid value for '" + key + "': " + v.dump() +
                            (low ? " is less than 1." : " is greater than 2147483647."),
                        key, "invalid_value");
    }
    r->max_tokens = static_cast<int>(v.get<int64_t>());
  } else if (key == "temperature") {
    return ParseNumber(v, key, 0.0, 2.0, &s.temperature);
  } else if (key == "top_p") {
    return ParseNumber(v, key, 0.0, 1.0, &s.top_p);
  } else if (key == "min_p") {
    return ParseNumber(v, key, 0.0, 1.0, &s.min_p);
  } else if (key == "top_k") {
    if (v.is_null()) return std::nullopt;
    if (!v.is_number_integer()) return WrongType(key, v, "an integer");
    if (v.get<int64_t>() < -1 || v.get<int64_t>() > INT32_MAX) {
      return BadRequest("Invalid value for 'top_k': must be -1 (all) or positive.", key,
                        "invalid_value");
    }
    s.top_k = std::max(0, static_cast<int>(v.get<int64_t>()));
  } else if (key == "seed") {
    if (v.is_null()) return std::nullopt;
    if (!v.is_number_integer()) return WrongType(key, v, "an integer");
    s.seed = v.is_number_unsigned() ? v.get<uint64_t>() : static_cast<uint64_t>(v.get<int64_t>());
  } else if (key == "stop") {
    return ParseStop(v, &s);
  } else if (key == "stop_token_ids") {
    if (v.is_null()) return std::nullopt;
    if (!v.is_array()) return WrongType(key, v, "an array of integers");
    return ParseIdList(v, key, &s.stop_token_ids);
  } else if (key == "steering_vectors" || key == "prefill_steering_vectors" ||
             key == "decode_steering_vectors") {
    return ParseSteeringField(key, v, r);
  } else if (key == "steering_name") {
    if (v.is_null()) return std::nullopt;
    if (!v.is_string() || v.get<std::string>().empty()) {
      return WrongType(key, v, "a non-empty string");
    }
    if (v.get<std::string>().size() > kMaxNameBytes) {
      return BadRequest("'steering_name' is " + std::to_string(v.get<std::string>().size()) +
                            " bytes long; names are at most " + std::to_string(kMaxNameBytes) + ".",
                        key, "invalid_value");
    }
    r->steering_name = v.get<std::string>();
  } else if (key == "probe_set") {
    if (v.is_null()) return std::nullopt;
    if (!v.is_string() || v.get<std::string>().empty()) {
      return WrongType(key, v, "a non-empty string");
    }
    if (v.get<std::string>().size() > kMaxNameBytes) {
      return BadRequest("'probe_set' is " + std::to_string(v.get<std::string>().size()) +
                            " bytes long; names are at most " + std::to_string(kMaxNameBytes) + ".",
                        key, "invalid_value");
    }
    r->probe_set = v.get<std::string>();
  } else if (key == "ignore_eos") {
    if (v.is_null()) return std::nullopt;
    if (!v.is_boolean()) return WrongType(key, v, "a boolean");
    s.ignore_eos = v.get<bool>();
  } else if (key == "cache_salt") {
    if (v.is_null()) return std::nullopt;
    if (!v.is_string()) return WrongType(key, v, "a string");
    if (v.get_ref<const std::string&>().empty()) {
      return BadRequest("Invalid value for 'cache_salt': must be a non-empty string if provided.",
                        key, "invalid_value");
    }
    s.cache_salt = v.get<std::string>();
  } else if (key == "logprobs" && r->endpoint == Endpoint::kChatCompletions) {
    if (v.is_null()) return std::nullopt;
    if (!v.is_boolean()) return WrongType(key, v, "a boolean");
    if (v.get<bool>()) r->logprobs = 0;
  } else if (key == "logprobs" || key == "top_logprobs" || key == "prompt_logprobs") {
    if (v.is_null()) return std::nullopt;
    if (!v.is_number_integer()) return WrongType(key, v, "an integer");
    if (v.get<int64_t>() < 0 || v.get<int64_t>() > worker::kMaxLogprobs) {
      return BadRequest("Invalid value for '" + key + "': " + v.dump() + " is not within [0, " +
                            std::to_string(worker::kMaxLogprobs) + "].",
                        key, "invalid_value");
    }
    const int k = static_cast<int>(v.get<int64_t>());
    if (key == "prompt_logprobs") {
      r->prompt_logprobs = k;
    } else if (key == "logprobs") {
      r->logprobs = k;
    } else {
      r->top_logprobs = k;
    }
  } else if (key == "echo") {
    if (v.is_null()) return std::nullopt;
    if (!v.is_boolean()) return WrongType(key, v, "a boolean");
    r->echo = v.get<bool>();
  } else if (key == "best_of") {
    if (v.is_null()) return std::nullopt;
    if (!v.is_number_integer()) return WrongType(key, v, "an integer");
    if (v.get<int64_t>() < 1 || v.get<int64_t>() > kMaxChoices) {
      return BadRequest(
          "Invalid value for 'best_of': must be between 1 and " + std::to_string(kMaxChoices) + ".",
          key, "invalid_value");
    }
    r->best_of = static_cast<int>(v.get<int64_t>());
  } else if (key == "n") {
    if (v.is_null()) return std::nullopt;
    if (!v.is_number_integer()) return WrongType(key, v, "an integer");
    if (v.get<int64_t>() < 1 || v.get<int64_t>() > kMaxChoices) {
      return BadRequest(
          "Invalid value for 'n': must be between 1 and " + std::to_string(kMaxChoices) + ".", key,
          "invalid_value");
    }
    r->n = static_cast<int>(v.get<int64_t>());
  } else if (key == "stream") {
    if (v.is_null()) return std::nullopt;
    if (!v.is_boolean()) return WrongType(key, v, "a boolean");
    r->stream = v.get<bool>();
  } else if (key == "stream_options") {
    if (v.is_null()) return std::nullopt;
    if (!v.is_object()) return WrongType(key, v, "an object");
    for (const auto& [k, e] : v.items()) {
      if (k != "include_usage") {
        return BadRequest("Unrecognized request argument supplied: stream_options." + EchoValue(k),
                          key, "unknown_parameter");
      }
      if (!e.is_boolean()) return WrongType("stream_options.include_usage", e, "a boolean");
      r->include_usage = e.get<bool>();
    }
  } else if (key == "user") {
    if (v.is_null()) return std::nullopt;
    if (!v.is_string()) return WrongType(key, v, "a string");
    r->user = v.get<std::string>();
  } else if (key == "tools" || key == "tool_choice") {
    return ParseToolsField(key, v, r);
  } else if (IsStructuredOutputField(key)) {
    return ParseStructuredOutputField(key, v, r);
  } else {
    return CheckNeutral(key, v);
  }
  return std::nullopt;
}

// Checks how the logprob fields combine and sets what the engine computes.
std::optional<ApiError> ResolveLogprobs(const json& body, CompletionRequest* r) {
  if (r->top_logprobs.has_value()) {
    if (!r->logprobs.has_value() && *r->top_logprobs > 0) {
      return BadRequest("'top_logprobs' requires 'logprobs' to be true.", "top_logprobs",
                        "invalid_value");
    }
    if (r->logprobs.has_value()) r->logprobs = *r->top_logprobs;
  }
  if (body.contains("best_of") && !body["best_of"].is_null()) {
    if (r->best_of < r->n) {
      return BadRequest("'best_of' (" + std::to_string(r->best_of) +
                            ") must be greater than or equal to 'n' (" + std::to_string(r->n) +
                            ").",
                        "best_of", "invalid_value");
    }
    if (r->best_of > 1 && r->stream) {
      return BadRequest("'best_of' greater than 1 cannot be streamed.", "best_of", "invalid_value");
    }
  } else {
    r->best_of = r->n;
  }
  r->sampling.logprobs = r->logprobs;
  // best_of ranks its candidates by their summed logprobs.
  if (r->best_of > r->n && !r->sampling.logprobs.has_value()) r->sampling.logprobs = 0;
  r->sampling.prompt_logprobs = r->prompt_logprobs;
  if (r->echo && r->logprobs.has_value()) {
    r->sampling.prompt_logprobs = std::max(r->prompt_logprobs.value_or(0), *r->logprobs);
  }
  return std::nullopt;
}

}  // namespace

std::string EchoValue(std::string_view value, size_t max_bytes) {
  if (value.size() <= max_bytes) return std::string(value);
  size_t cut = max_bytes;
  // Back off over UTF-8 continuation bytes so that no character is split.
  while (cut > 0 && (static_cast<unsigned char>(value[cut]) & 0xC0) == 0x80) --cut;
  return std::string(value.substr(0, cut)) + "...";
}

json ApiError::Body() const {
  return {{"error",
           {{"message", EchoValue(message, 4096)},
            {"type", type},
            {"param", param.empty() ? json(nullptr) : json(EchoValue(param, 128))},
            {"code", code.empty() ? json(nullptr) : json(code)}}}};
}

ApiError BadRequest(std::string message, std::string param, std::string code) {
  ApiError e;
  e.http_status = 400;
  e.message = std::move(message);
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

StatusOr<models::TapPoint> SteeringTapOf(models::TlHook hook, int layer) {
  // Adding v to the stream between a sequential block's attention and MLP adds it to what the
  // MLP and every later layer read: the same as adding it to attn_out.
  if (hook == models::TlHook::kResidMid) return models::TapPoint{layer, models::Site::kAttnOut};
  return models::TapOfTransformerLensHook(hook, layer);
}

std::optional<models::Site> SteeringHookSite(const std::string& hook) {
  if (hook == "residual_stream" || hook == "resid_post" || hook == "hook_resid_post") {
    return models::Site::kResidPost;
  }
  if (hook == "attn_out" || hook == "hook_attn_out") return models::Site::kAttnOut;
  if (hook == "mlp_out" || hook == "hook_mlp_out") return models::Site::kMlpOut;
  return std::nullopt;
}

std::optional<std::string> DecodeBase64(const std::string& text) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  size_t n = text.size();
  while (n > 0 && text[n - 1] == '=' && text.size() - n < 2) --n;
  if (n % 4 == 1 || (text.size() != n && text.size() % 4 != 0)) return std::nullopt;
  std::string out;
  out.reserve(n / 4 * 3 + 2);
  uint32_t bits = 0;
  int count = 0;
  for (size_t i = 0; i < n; ++i) {
    const int v = value(text[i]);
    if (v < 0) return std::nullopt;
    bits = (bits << 6) | static_cast<uint32_t>(v);
    if (++count == 4) {
      out.push_back(static_cast<char>((bits >> 16) & 0xff));
      out.push_back(static_cast<char>((bits >> 8) & 0xff));
      out.push_back(static_cast<char>(bits & 0xff));
      bits = 0;
      count = 0;
    }
  }
  if (count == 2) out.push_back(static_cast<char>((bits >> 4) & 0xff));
  if (count == 3) {
    out.push_back(static_cast<char>((bits >> 10) & 0xff));
    out.push_back(static_cast<char>((bits >> 2) & 0xff));
  }
  return out;
}

std::optional<ApiError> ParseCompletionRequest(const json& body, Endpoint endpoint,
                                               CompletionRequest* out, ToolFormat tool_format) {
  if (!body.is_object()) {
    return BadRequest("The request body must be a JSON object, not " + TypeName(body) + ".");
  }
  CompletionRequest r;
  r.endpoint = endpoint;
  const std::vector<std::string>& known = KnownFields(endpoint);
  for (const auto& [key, value] : body.items()) {
    for (const char* spec_field : kSpecFields) {
      if (key == spec_field) {
        return BadRequest("Per-request probing specs are not accepted ('" + key +
                              "'): the server's extraction-point spec is fixed at start-up "
                              "(undercurrent serve --spec).",
                          key, "per_request_spec_not_allowed");
      }
    }
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      // No suggestion for a long name: the edit distance costs its length times each name's.
      return BadRequest("Unrecognized request argument supplied: " + EchoValue(key) +
                            (key.size() <= kMaxEchoBytes ? DidYouMean(key, known) : ""),
                        EchoValue(key), "unknown_parameter");
    }
    if (auto error = ParseField(key, value, &r)) return error;
  }
  const char* required = endpoint == Endpoint::kCompletions ? "prompt" : "messages";
  if (!body.contains(required)) {
    return BadRequest(std::string("Missing required parameter: '") + required + "'.", required,
                      "missing_required_parameter");
  }
  if (r.include_usage && !r.stream) {
    return BadRequest("The 'stream_options' parameter is only allowed when 'stream' is enabled.",
                      "stream_options");
  }
  if (auto error = ResolveLogprobs(body, &r)) return error;
  if (auto error = ResolveTools(&r, tool_format)) return error;
  const int per_prompt = std::max(r.n, r.best_of);
  const size_t choices = std::max<size_t>(1, r.prompts.size()) * static_cast<size_t>(per_prompt);
  if (choices > static_cast<size_t>(kMaxChoices)) {
    const std::string field = r.best_of > r.n ? "best_of" : "n";
    return BadRequest("The request asks for " + std::to_string(choices) + " choices (" + field +
                          " times the number of prompts); at most " + std::to_string(kMaxChoices) +
                          " are allowed.",
                      field, "invalid_value");
  }
  *out = std::move(r);
  return std::nullopt;
}

std::string FinishReasonOf(const engine::RequestOutput& output) {
  if (output.finish_reason == engine::FinishReason::kAbort && output.abort.has_value() &&
      output.abort->by == "probe") {
    return "content_flagged";
  }
  return std::string(engine::FinishReasonName(output.finish_reason));
}

namespace {

// Whether the probe saw any activation: it signalled, or its verdict counts calls (the
// built-in probes' "n" and "count"; trajectory probes signal only when they trigger).
bool Evaluated(const probe::ProbeResult& r) {
  if (!r.signal_history.empty()) return true;
  if (!r.verdict.is_object()) return false;
  for (const char* key : {"n", "count"}) {
    const auto it = r.verdict.find(key);
    if (it != r.verdict.end() && it->is_number() && it->get<double>() > 0) return true;
  }
  return false;
}

}  // namespace

json ProbingSummary(const probe::RequestProbeResults& results, const probe::Spec& spec) {
  json summary = json::object();
  for (const probe::ProbeResult& r : results.results) {
    const probe::ExtractionPoint* point = nullptr;
    for (const probe::ExtractionPoint& p : spec.extraction_points) {
      if (p.name == r.point) point = &p;
    }
    std::vector<double> scores;
    bool flagged = r.verdict.is_object() && r.verdict.value("flagged", false) == true;
    for (const probe::ProbeSignal& s : r.signal_history) {
      if (s.confidence.has_value()) scores.push_back(*s.confidence);
      flagged = flagged || s.action != probe::ProbeAction::kContinue;
    }
    json score = nullptr;
    if (!scores.empty()) {
      if (point != nullptr && point->probe_kind == probe::ProbeKind::kSingleShot) {
        score = scores.back();
      } else {
        score = {{"max_score", *std::max_element(scores.begin(), scores.end())},
                 {"final_score", scores.back()}};
      }
    }
    summary[r.point] = {
        {"score", score},
        {"flagged", flagged},
        {"execution_mode",
         point != nullptr ? std::string(probe::Name(point->execution_mode)) : "inline"},
        {"evaluated", Evaluated(r)},
        {"verdict", r.verdict},
    };
  }
  return summary;
}

json Usage::ToJson() const {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}};
}

namespace {

const char* ObjectName(Endpoint endpoint, bool chunk) {
  if (endpoint == Endpoint::kCompletions) return "text_completion";
  return chunk ? "chat.completion.chunk" : "chat.completion";
}

json Envelope(const ResponseContext& ctx, bool chunk) {
  return {{"id", ctx.id},
          {"object", ObjectName(ctx.endpoint, chunk)},
          {"created", ctx.created},
          {"model", ctx.model},
          {"system_fingerprint", nullptr}};
}

// Adds flagged / flagged_by / flagged_score to `j` when the choice was stopped by a probe.
bool AddFlaggedFields(const ChoiceResult& choice, json& j) {
  if (FinishReasonOf(choice.output) != "content_flagged") return false;
  const engine::AbortInfo& abort = *choice.output.abort;
  j["flagged"] = true;
  j["flagged_by"] = abort.point;
  j["flagged_score"] = abort.confidence.has_value() ? json(*abort.confidence) : json(nullptr);
  return true;
}

// The choice's `logprobs`: completions' legacy object (the prompt's tokens first with echo),
// or chat's {content, refusal}; null when not asked.
json ChoiceLogprobs(const ResponseContext& ctx, const ChoiceResult& choice) {
  if (!ctx.logprobs.has_value()) return nullptr;
  const engine::RequestOutput& out = choice.output;
  if (ctx.endpoint == Endpoint::kChatCompletions) {
    return {{"content", ChatLogprobsContent(out.logprobs, *ctx.logprobs, ctx.token_text)},
            {"refusal", nullptr}};
  }
  std::vector<int32_t> tokens;
  std::vector<const worker::PositionLogprobs*> entries;
  if (ctx.echo) {
    tokens = out.prompt_ids;
    for (size_t i = 0; i < out.prompt_ids.size(); ++i) {
      const bool known = i < out.prompt_logprobs.size() && out.prompt_logprobs[i].has_value();
      entries.push_back(known ? &*out.prompt_logprobs[i] : nullptr);
    }
  }
  for (size_t i = 0; i < out.output_ids.size(); ++i) {
    tokens.push_back(out.output_ids[i]);
    entries.push_back(i < out.logprobs.size() ? &out.logprobs[i] : nullptr);
  }
  return CompletionLogprobsJson(tokens, entries, *ctx.logprobs, ctx.token_text, 0);
}

json ChoiceJson(const ResponseContext& ctx, const ChoiceResult& choice) {
  json j = {{"index", choice.index}, {"logprobs", ChoiceLogprobs(ctx, choice)}};
  if (ctx.endpoint == Endpoint::kCompletions) {
    j["text"] = choice.echo_text + choice.output.text;
    if (ctx.prompt_logprobs.has_value()) {
      j["prompt_logprobs"] =
          PromptLogprobsJson(choice.output.prompt_logprobs, *ctx.prompt_logprobs, ctx.token_text);
    }
  } else {
    j["message"] = {{"role", "assistant"}, {"content", choice.output.text}, {"refusal", nullptr}};
  }
  j["finish_reason"] = FinishReasonOf(choice.output);
  if (ctx.endpoint == Endpoint::kChatCompletions && ctx.parse_tool_calls) {
    ParsedToolCalls parsed = ParseToolCalls(
        choice.output.text, ctx.id + "_" + std::to_string(choice.index), ctx.tool_format);
    if (!parsed.tool_calls.empty()) {
      j["message"]["content"] = parsed.content.has_value() ? json(*parsed.content) : json(nullptr);
      j["message"]["tool_calls"] = std::move(parsed.tool_calls);
      if (j["finish_reason"] == "stop") j["finish_reason"] = "tool_calls";
    }
  }
  j["tokens_generated"] = choice.output.output_ids.size();
  AddFlaggedFields(choice, j);
  if (ctx.probing_enabled) {
    j["probing"] = choice.probing.value_or(json(nullptr));
    j["probe_set"] = choice.probe_set.value_or(json(nullptr));
  }
  return j;
}

json StreamChoice(const ResponseContext& ctx, int index, const json& delta_or_text) {
  json c = {{"index", index}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
  if (ctx.endpoint == Endpoint::kCompletions) {
    c["text"] = delta_or_text;
  } else {
    c["delta"] = delta_or_text;
  }
  return c;
}

json Chunk(const ResponseContext& ctx, json choice, bool include_usage) {
  json j = Envelope(ctx, /*chunk=*/true);
  j["choices"] = json::array({std::move(choice)});
  if (include_usage) j["usage"] = nullptr;
  return j;
}

}  // namespace

json ResponseBody(const ResponseContext& ctx, const std::vector<ChoiceResult>& choices,
                  const Usage& usage) {
  json j = Envelope(ctx, /*chunk=*/false);
  j["choices"] = json::array();
  bool flagged = false;
  for (const ChoiceResult& c : choices) {
    j["choices"].push_back(ChoiceJson(ctx, c));
    if (!flagged) flagged = AddFlaggedFields(c, j);
  }
  j["usage"] = usage.ToJson();
  if (ctx.endpoint == Endpoint::kChatCompletions && ctx.prompt_logprobs.has_value()) {
    j["prompt_logprobs"] = choices.empty()
                               ? json(nullptr)
                               : PromptLogprobsJson(choices[0].output.prompt_logprobs,
                                                    *ctx.prompt_logprobs, ctx.token_text);
  }
  if (ctx.probing_enabled) {
    j["flagged"] = flagged;
    j["probing"] = choices.empty() ? json(nullptr) : choices[0].probing.value_or(json(nullptr));
    j["probe_set"] = choices.empty() ? json(nullptr) : choices[0].probe_set.value_or(json(nullptr));
  }
  return j;
}

json RoleChunk(const ResponseContext& ctx, int index, bool include_usage, bool null_content) {
  return Chunk(ctx,
               StreamChoice(ctx, index,
                            {{"role", "assistant"}, {"content", null_content ? json() : json("")}}),
               include_usage);
}

json TextChunk(const ResponseContext& ctx, int index, const std::string& text, bool include_usage,
               const std::vector<worker::PositionLogprobs>& logprobs, size_t text_offset) {
  const json payload =
      ctx.endpoint == Endpoint::kCompletions ? json(text) : json{{"content", text}};
  json choice = StreamChoice(ctx, index, payload);
  if (ctx.logprobs.has_value() && ctx.endpoint == Endpoint::kChatCompletions) {
    choice["logprobs"] = {{"content", ChatLogprobsContent(logprobs, *ctx.logprobs, ctx.token_text)},
                          {"refusal", nullptr}};
  } else if (ctx.logprobs.has_value()) {
    std::vector<int32_t> tokens;
    std::vector<const worker::PositionLogprobs*> entries;
    for (const worker::PositionLogprobs& p : logprobs) {
      tokens.push_back(p.chosen.token);
      entries.push_back(&p);
    }
    choice["logprobs"] =
        CompletionLogprobsJson(tokens, entries, *ctx.logprobs, ctx.token_text, text_offset);
  }
  return Chunk(ctx, std::move(choice), include_usage);
}

json EchoChunk(const ResponseContext& ctx, int index, const std::string& prompt_text,
               const std::vector<int32_t>& prompt_ids,
               const std::vector<std::optional<worker::PositionLogprobs>>& prompt_logprobs,
               bool include_usage) {
  json choice = StreamChoice(ctx, index, prompt_text);
  if (ctx.logprobs.has_value()) {
    std::vector<const worker::PositionLogprobs*> entries;
    for (size_t i = 0; i < prompt_ids.size(); ++i) {
      const bool known = i < prompt_logprobs.size() && prompt_logprobs[i].has_value();
      entries.push_back(known ? &*prompt_logprobs[i] : nullptr);
    }
    choice["logprobs"] =
        CompletionLogprobsJson(prompt_ids, entries, *ctx.logprobs, ctx.token_text, 0);
  }
  return Chunk(ctx, std::move(choice), include_usage);
}

json DeltaChunk(const ResponseContext& ctx, int index, const json& delta, bool include_usage) {
  return Chunk(ctx, StreamChoice(ctx, index, delta), include_usage);
}

json FinishChunk(const ResponseContext& ctx, const ChoiceResult& choice, bool include_usage,
                 bool tool_calls) {
  const json payload = ctx.endpoint == Endpoint::kCompletions ? json("") : json::object();
  json c = StreamChoice(ctx, choice.index, payload);
  c["finish_reason"] = FinishReasonOf(choice.output);
  if (tool_calls && c["finish_reason"] == "stop") c["finish_reason"] = "tool_calls";
  json j = Chunk(ctx, std::move(c), include_usage);
  if (AddFlaggedFields(choice, j["choices"][0])) AddFlaggedFields(choice, j);
  return j;
}

json UsageChunk(const ResponseContext& ctx, const Usage& usage) {
  json j = Envelope(ctx, /*chunk=*/true);
  j["choices"] = json::array();
  j["usage"] = usage.ToJson();
  return j;
}

json ProbingResultEvent(const ResponseContext& ctx, const ChoiceResult& choice) {
  // Shaped like a chunk with no choices (as the include_usage chunk is), so that OpenAI clients,
  // which do not look at event names, read it as one more chunk and skip it.
  json j = Envelope(ctx, /*chunk=*/true);
  j["choices"] = json::array();
  j["index"] = choice.index;
  j["flagged"] = FinishReasonOf(choice.output) == "content_flagged";
  j["probing"] = choice.probing.value_or(json(nullptr));
  j["probe_set"] = choice.probe_set.value_or(json(nullptr));
  return j;
}

std::string SseEvent(const json& data, const std::string& event) {
  std::string out;
  if (!event.empty()) out = "event: " + event + "\n";
  out += "data: " + data.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
  return out;
}

}  // namespace uc::server
