// Fuzzes the chat-template engine: the input is template source, parsed with
// ChatTemplate::Parse and rendered against a fixed sample conversation with the same variables
// ChatTemplate::Render sets. The render budgets (jinja::RenderLimits) are scaled down so one
// input costs milliseconds: running out of budget (ResourceExhausted) is a normal outcome, as
// is any other Status; only a crash, a hang or unbounded memory is a finding.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chat/chat_template.h"
#include "chat/jinja.h"
#include "fuzz/fuzz_util.h"

namespace {

const nlohmann::ordered_json& SampleMessages() {
  static const auto* messages = new nlohmann::ordered_json(nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Hi! What is 2+2?"},
    {"role": "assistant", "content": "4", "tool_calls": [
      {"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 2}}}]},
    {"role": "tool", "content": "{\"sum\": 4}", "name": "add"},
    {"role": "user", "content": [{"type": "text", "text": "Thanks, émoji 🙂"}]}
  ])"));
  return *messages;
}

const nlohmann::ordered_json& SampleTools() {
  static const auto* tools = new nlohmann::ordered_json(nlohmann::ordered_json::parse(R"([
    {"type": "function", "function": {"name": "add", "description": "Adds.",
     "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}
  ])"));
  return *tools;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  uc::StatusOr<uc::chat::ChatTemplate> chat = uc::chat::ChatTemplate::Parse(text, "fuzz.jinja");
  uc::StatusOr<uc::chat::jinja::Template> parsed = uc::chat::jinja::Template::Parse(text);
  UC_FUZZ_ASSERT(chat.ok() == parsed.ok(), "ChatTemplate::Parse and jinja::Template::Parse agree");
  if (!parsed.ok()) return 0;

  namespace jinja = uc::chat::jinja;
  std::vector<std::pair<std::string, jinja::Value>> variables;
  variables.emplace_back("tools", jinja::Value::FromJson(SampleTools()));
  variables.emplace_back("messages", jinja::Value::FromJson(SampleMessages()));
  variables.emplace_back("add_generation_prompt", jinja::Value::Bool(true));
  variables.emplace_back("bos_token", jinja::Value::String("<s>"));
  variables.emplace_back("eos_token", jinja::Value::String("</s>"));
  jinja::RenderLimits limits;
  limits.max_steps = 200'000;
  limits.max_output_bytes = 1 << 20;
  limits.max_list_items = 100'000;
  const auto now = std::chrono::system_clock::time_point(std::chrono::seconds(1'700'000'000));
  jinja::RenderError error;
  uc::StatusOr<std::string> out = parsed->Render(variables, now, &error, limits);
  if (out.ok()) {
    UC_FUZZ_ASSERT(static_cast<int64_t>(out->size()) <= limits.max_output_bytes,
                   "the output stays within max_output_bytes");
  } else {
    UC_FUZZ_ASSERT(error.status.code() == out.status().code(), "RenderError carries the status");
  }
  return 0;
}
