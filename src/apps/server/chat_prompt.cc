#include "apps/server/chat_prompt.h"

#include "apps/server/tool_calls.h"

namespace uc::server {

StatusOr<std::unique_ptr<ChatPrompt>> ChatPrompt::Load(const std::filesystem::path& model_path,
                                                       const std::filesystem::path& override_file) {
  std::unique_ptr<ChatPrompt> prompt(new ChatPrompt());
  StatusOr<chat::LoadedChatTemplate> loaded = chat::LoadChatTemplate(model_path, override_file);
  if (loaded.ok()) {
    prompt->loaded_ = std::move(loaded).value();
    prompt->tool_format_ = DetectToolFormat(prompt->loaded_->chat_template.text());
    // Rendered once now, so that a template that cannot render a plain conversation (or runs
    // past its budgets) stops the server at start-up instead of failing every request.
    const std::vector<chat::ChatMessage> sample = {
        {"user", "Hello!"}, {"assistant", "Hi, how can I help?"}, {"user", "Tell me a story."}};
    StatusOr<std::string> text =
        prompt->loaded_->chat_template.Render(sample, prompt->loaded_->DefaultOptions());
    if (!text.ok() && text.status().code() != StatusCode::kInvalidArgument) {
      return text.status().Annotate("the chat template cannot render a sample conversation");
    }
  } else if (!override_file.empty()) {
    return loaded.status().Annotate("--chat-template");
  } else {
    prompt->unavailable_ = "/v1/chat/completions is unavailable: " + loaded.status().message();
  }
  return prompt;
}

StatusOr<std::string> ChatPrompt::RenderWith(const std::vector<ChatMessage>& messages,
                                             const nlohmann::json& tools) const {
  if (tools.empty()) {
    std::vector<chat::ChatMessage> chat_messages;
    for (const ChatMessage& m : messages) chat_messages.push_back({m.role, m.content});
    return loaded_->chat_template.Render(chat_messages, loaded_->DefaultOptions());
  }
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const ChatMessage& m : messages) {
    nlohmann::ordered_json j = {{"role", m.role}, {"content", m.content}};
    if (!m.tool_calls.is_null()) {
      j["tool_calls"] = nlohmann::ordered_json::parse(m.tool_calls.dump());
      if (m.content.empty()) j["content"] = nullptr;
    }
    if (!m.tool_call_id.empty()) j["tool_call_id"] = m.tool_call_id;
    list.push_back(std::move(j));
  }
  chat::ChatRenderOptions options = loaded_->DefaultOptions();
  options.extra_variables["tools"] = nlohmann::ordered_json::parse(tools.dump());
  return loaded_->chat_template.RenderJson(list, options);
}

StatusOr<std::string> ChatPrompt::Render(const std::vector<ChatMessage>& messages,
                                         const nlohmann::json& tools) const {
  if (!loaded_.has_value()) return FailedPreconditionError(unavailable_);
  StatusOr<std::string> text = RenderWith(messages, tools);
  if (!text.ok() && text.status().code() == StatusCode::kResourceExhausted) {
    return InvalidArgumentError(
        "the conversation is too large for the chat template's render "
        "budget: " +
        text.status().message());
  }
  if (!text.ok() && text.status().code() != StatusCode::kInvalidArgument) {
    return InternalError(text.status().message());
  }
  return text;
}

}  // namespace uc::server
