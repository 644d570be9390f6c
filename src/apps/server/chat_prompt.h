// File: chat_prompt.h
// -----------------------------------------------------------------------------
// ChatPrompt: turns the messages of /v1/chat/completions into the prompt text of the served
// model with its own chat template (chat::LoadChatTemplate: tokenizer_config.json or GGUF
// metadata), or the one given with --chat-template. The text is tokenized without an added BOS
// and with control tokens parsed: templates write BOS and turn markers themselves, as Hugging
// Face's apply_chat_template does.
//
// A model without a template still serves /v1/completions; its chat requests get a 400 that
// says why.
//
// Thread-safety: immutable after Load; Render may be called from any thread.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "apps/server/protocol.h"
#include "base/status.h"
#include "chat/chat_template.h"

namespace uc::server {

class ChatPrompt {
 public:
  // Loads the template of `model_path`, or `override_file` when not empty, and renders a sample
  // conversation with it. Fails for an override file that cannot be read or parsed (the user
  // asked for it) and for a template that cannot render the sample (an error, or past its
  // render budgets: a server never starts with a template that would hang every request); a
  // model without a template gives a ChatPrompt whose Render says why.
  static StatusOr<std::unique_ptr<ChatPrompt>> Load(const std::filesystem::path& model_path,
                                                    const std::filesystem::path& override_file);

  // The prompt text, ending with the assistant's turn opened. FailedPrecondition when the model
  // has no usable template; InvalidArgument when the template rejects the conversation (e.g.
  // roles that do not alternate) or the conversation is too large for its render budgets;
  // Internal when rendering fails otherwise.
  // With `tools` (an array, tool_calls.h) the template gets them as its `tools` variable, and
  // messages carry their tool_calls / tool_call_id.
  StatusOr<std::string> Render(const std::vector<ChatMessage>& messages,
                               const nlohmann::json& tools = nlohmann::json::array()) const;

  // Where the template came from ("" when there is none) and why chat is unavailable.
  std::string origin() const { return loaded_ ? loaded_->origin : ""; }
  const std::string& unavailable_reason() const { return unavailable_; }
  // How the template's model writes tool calls (tool_calls.h; kHermes without a template).
  ToolFormat tool_format() const { return tool_format_; }

 private:
  ChatPrompt() = default;
  // Render's template call (errors not yet mapped). REQUIRES: loaded_.
  StatusOr<std::string> RenderWith(const std::vector<ChatMessage>& messages,
                                   const nlohmann::json& tools) const;
  std::optional<chat::LoadedChatTemplate> loaded_;
  std::string unavailable_;
  ToolFormat tool_format_ = ToolFormat::kHermes;
};

}  // namespace uc::server
