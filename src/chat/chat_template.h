// File: chat_template.h
// -----------------------------------------------------------------------------
// Chat templates: turn a conversation (OpenAI-style messages) into the prompt text a chat model
// was trained on, by rendering the model's own Jinja `chat_template` exactly as Hugging Face
// transformers' apply_chat_template does (same whitespace handling, same Python-style printing,
// raise_exception, strftime_now, namespace(), loop controls, `{% generation %}`).
//
//   UC_ASSIGN_OR_RETURN(chat::LoadedChatTemplate t, chat::LoadChatTemplate(model_path, ""));
//   chat::ChatRenderOptions options = t.DefaultOptions();  // bos/eos, add_generation_prompt
//   UC_ASSIGN_OR_RETURN(std::string prompt, t.chat_template.Render(
//       {{"system", "Be brief."}, {"user", "Hi!"}}, options));
//
// What is supported is the Jinja subset real Llama-2, Llama-3/3.1/3.2, Mistral (v0.1-v0.3),
// Qwen2/2.5/3, Gemma 3, Phi-3/3.5 and ChatML (SmolLM2) templates use; see jinja_parser.h and
// jinja_builtins.h. A template using anything else fails at Parse (or, for a runtime-only
// problem, at Render) with a message naming the construct and its line in the template.
//
// ChatTemplate is immutable after Parse and thread-safe: a server renders it from any thread.
#pragma once

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "chat/jinja.h"

namespace uc::chat {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", "tool", ...
  std::string content;
};

struct ChatRenderOptions {
  // Appends the header that opens the assistant's turn (what a server wants).
  bool add_generation_prompt = false;
  std::string bos_token;  // the template variables bos_token / eos_token
  std::string eos_token;
  // More template variables (e.g. "tools", "date_string"); a JSON object, key order kept.
  nlohmann::ordered_json extra_variables = nlohmann::ordered_json::object();
  // The clock strftime_now() reads (default: now, local time); tests pin it.
  std::optional<std::chrono::system_clock::time_point> now;
};

class ChatTemplate {
 public:
  // Parses template text. `origin` names it in messages (a file, "FILE.gguf
  // (tokenizer.chat_template)"). InvalidArgument "ORIGIN: line N: MESSAGE" for a syntax error
  // or an unsupported construct ("unsupported construct '{% include %}'", "unsupported filter
  // 'wordwrap'").
  static StatusOr<ChatTemplate> Parse(std::string_view text, std::string origin = "chat template");

  // Renders the template with `messages`. Errors: InvalidArgument "the chat template rejected the
  // conversation: MESSAGE" when the template calls raise_exception(MESSAGE) (e.g. roles that do not
  // alternate: the request's fault); ResourceExhausted "ORIGIN: line N: ..." past the render
  // budgets (jinja::RenderLimits: steps, output and value sizes; an unbounded loop fails within
  // seconds); FailedPrecondition "ORIGIN: line N: MESSAGE" when rendering fails otherwise.
  StatusOr<std::string> Render(const std::vector<ChatMessage>& messages,
                               const ChatRenderOptions& options) const;
  // The same with messages as JSON: an array of objects with at least "role" and "content";
  // any other fields (tool_calls, name, content as a list of parts, ...) are visible to the
  // template. InvalidArgument if `messages` is not an array.
  StatusOr<std::string> RenderJson(const nlohmann::ordered_json& messages,
                                   const ChatRenderOptions& options) const;
  StatusOr<std::string> RenderJson(const nlohmann::json& messages,
                                   const ChatRenderOptions& options) const;

  const std::string& text() const { return text_; }
  const std::string& origin() const { return origin_; }

 private:
  StatusOr<std::string> RenderValue(jinja::Value messages, const ChatRenderOptions& options) const;

  jinja::Template template_;
  std::string text_;
  std::string origin_;
};

// A model's chat template with the special tokens its templates refer to.
struct LoadedChatTemplate {
  ChatTemplate chat_template;
  std::string bos_token;  // "" when the model does not say
  std::string eos_token;
  std::string origin;  // where the template text came from (same as chat_template.origin())

  // bos_token/eos_token filled in and add_generation_prompt set.
  ChatRenderOptions DefaultOptions() const;
};

// Finds and parses the chat template for the model at `model_path` (what `--model` takes), or
// the one in `override_file` when that is not empty (`--chat-template FILE`: raw Jinja text;
// the model still supplies bos/eos when it can). The server calls this once at start-up.
//   Hugging Face directory: chat_template.jinja, else chat_template.json {"chat_template"},
//     else tokenizer_config.json "chat_template" (a string, or a list of {name, template}: the
//     one named "default"); bos_token/eos_token from tokenizer_config.json (string or
//     {"content": ...}) or special_tokens_map.json.
//   GGUF file: metadata tokenizer.chat_template, or, for a file without one, the template built
//     in for its general.architecture (builtin_templates.h: Gemma 3); bos/eos are the tokens at
//     tokenizer.ggml.bos_token_id / eos_token_id.
//   llama2.c checkpoint: carries no template.
// Errors: NotFound when the model has no template (the message suggests --chat-template) or a
// file is missing; InvalidArgument for unreadable metadata or a template that does not parse.
// Reads metadata only, never weights.
StatusOr<LoadedChatTemplate> LoadChatTemplate(const std::filesystem::path& model_path,
                                              const std::filesystem::path& override_file = {});

}  // namespace uc::chat
