#include "chat/chat_template.h"

#include <fstream>
#include <sstream>

#include "chat/builtin_templates.h"
#include "io/gguf/gguf.h"
#include "io/json_file.h"
#include "io/text_file.h"

namespace uc::chat {
namespace fs = std::filesystem;

StatusOr<ChatTemplate> ChatTemplate::Parse(std::string_view text, std::string origin) {
  StatusOr<jinja::Template> parsed = jinja::Template::Parse(text);
  if (!parsed.ok()) return parsed.status().Annotate(origin);
  ChatTemplate t;
  t.template_ = std::move(parsed).value();
  t.text_ = std::string(text);
  t.origin_ = std::move(origin);
  return t;
}

StatusOr<std::string> ChatTemplate::RenderValue(jinja::Value messages,
                                                const ChatRenderOptions& options) const {
  if (!options.extra_variables.is_object()) {
    return InvalidArgumentError("chat template variables must be a JSON object");
  }
  std::vector<std::pair<std::string, jinja::Value>> variables;
  for (const auto& [key, value] : options.extra_variables.items()) {
    variables.emplace_back(key, jinja::Value::FromJson(value));
  }
  variables.emplace_back("messages", std::move(messages));
  variables.emplace_back("add_generation_prompt",
                         jinja::Value::Bool(options.add_generation_prompt));
  variables.emplace_back("bos_token", jinja::Value::String(options.bos_token));
  variables.emplace_back("eos_token", jinja::Value::String(options.eos_token));
  jinja::RenderError error;
  StatusOr<std::string> out =
      template_.Render(variables, options.now.value_or(std::chrono::system_clock::now()), &error);
  if (out.ok()) return out;
  if (error.raised_exception) {
    return InvalidArgumentError("the chat template rejected the conversation: " +
                                error.status.message());
  }
  if (out.status().code() == StatusCode::kResourceExhausted) {
    return ResourceExhaustedError(origin_ + ": " + out.status().message());
  }
  return FailedPreconditionError(origin_ + ": " + out.status().message());
}

StatusOr<std::string> ChatTemplate::RenderJson(const nlohmann::ordered_json& messages,
                                               const ChatRenderOptions& options) const {
  if (!messages.is_array()) return InvalidArgumentError("chat messages must be a JSON array");
  return RenderValue(jinja::Value::FromJson(messages), options);
}

StatusOr<std::string> ChatTemplate::RenderJson(const nlohmann::json& messages,
                                               const ChatRenderOptions& options) const {
  if (!messages.is_array()) return InvalidArgumentError("chat messages must be a JSON array");
  return RenderValue(jinja::Value::FromJson(messages), options);
}

StatusOr<std::string> ChatTemplate::Render(const std::vector<ChatMessage>& messages,
                                           const ChatRenderOptions& options) const {
  jinja::List list;
  for (const ChatMessage& m : messages) {
    list.push_back(jinja::Value::MakeDict(
        {{"role", jinja::Value::String(m.role)}, {"content", jinja::Value::String(m.content)}}));
  }
  return RenderValue(jinja::Value::MakeList(std::move(list)), options);
}

ChatRenderOptions LoadedChatTemplate::DefaultOptions() const {
  ChatRenderOptions options;
  options.add_generation_prompt = true;
  options.bos_token = bos_token;
  options.eos_token = eos_token;
  return options;
}

namespace {

// Chat templates are kilobytes; tokenizer_config.json files that embed one stay under a few MB.
constexpr int64_t kMaxTemplateFileBytes = int64_t{64} << 20;

StatusOr<std::string> ReadTextFile(const fs::path& path) {
  return io::ReadTextFile(path, kMaxTemplateFileBytes, "chat template file");
}

// A special token in tokenizer_config.json: "<s>" or {"content": "<s>", ...}.
std::string TokenText(const nlohmann::json& config, const char* key) {
  if (!config.is_object() || !config.contains(key)) return "";
  const nlohmann::json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    return v["content"].get<std::string>();
  }
  return "";
}

struct TemplateSource {
  std::string text;
  std::string origin;
  std::string bos_token;
  std::string eos_token;
};

// tokenizer_config.json's chat_template: a string, or a list of {name, template}.
StatusOr<std::string> TemplateFromConfig(const nlohmann::json& value, const std::string& origin) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_array()) {
    std::string names;
    for (const nlohmann::json& entry : value) {
      if (!entry.is_object() || !entry.contains("name") || !entry.contains("template")) continue;
      if (entry["name"] == "default" && entry["template"].is_string()) {
        return entry["template"].get<std::string>();
      }
      names += (names.empty() ? "" : ", ") + entry["name"].dump();
    }
    return NotFoundError(
        origin + ": chat_template lists no template named \"default\" (has: " + names + ")");
  }
  return InvalidArgumentError(origin +
                              ": chat_template must be a string or a list of "
                              "{name, template}, got " +
                              std::string(value.type_name()));
}

StatusOr<TemplateSource> FromHfDirectory(const fs::path& dir, bool need_template) {
  TemplateSource source;
  const fs::path config_path = dir / "tokenizer_config.json";
  nlohmann::json config;
  if (fs::exists(config_path)) {
    UC_ASSIGN_OR_RETURN(config, io::ReadJsonFile(config_path));
    source.bos_token = TokenText(config, "bos_token");
    source.eos_token = TokenText(config, "eos_token");
  }
  const fs::path special_path = dir / "special_tokens_map.json";
  if ((source.bos_token.empty() || source.eos_token.empty()) && fs::exists(special_path)) {
    StatusOr<nlohmann::json> special = io::ReadJsonFile(special_path);
    if (special.ok()) {
      if (source.bos_token.empty()) source.bos_token = TokenText(*special, "bos_token");
      if (source.eos_token.empty()) source.eos_token = TokenText(*special, "eos_token");
    }
  }
  if (!need_template) return source;
  if (fs::exists(dir / "chat_template.jinja")) {
    source.origin = (dir / "chat_template.jinja").string();
    UC_ASSIGN_OR_RETURN(source.text, ReadTextFile(dir / "chat_template.jinja"));
    return source;
  }
  if (fs::exists(dir / "chat_template.json")) {
    source.origin = (dir / "chat_template.json").string();
    UC_ASSIGN_OR_RETURN(nlohmann::json json, io::ReadJsonFile(dir / "chat_template.json"));
    if (json.is_object() && json.contains("chat_template")) {
      UC_ASSIGN_OR_RETURN(source.text, TemplateFromConfig(json["chat_template"], source.origin));
      return source;
    }
  }
  if (config.is_object() && config.contains("chat_template") &&
      !config["chat_template"].is_null()) {
    source.origin = config_path.string() + " (chat_template)";
    UC_ASSIGN_OR_RETURN(source.text,
                        TemplateFromConfig(config["chat_template"], config_path.string()));
    return source;
  }
  return NotFoundError(dir.string() +
                       ": the model has no chat template (looked for chat_template.jinja, "
                       "chat_template.json and 'chat_template' in tokenizer_config.json); pass "
                       "one with --chat-template FILE");
}

std::string GgufToken(const io::GgufFile& file, const char* id_key) {
  const io::GgufValue* id = file.Find(id_key);
  const io::GgufValue* tokens = file.Find("tokenizer.ggml.tokens");
  if (id == nullptr || tokens == nullptr || !id->AsInt().has_value() || !tokens->is_array() ||
      tokens->element_type() != io::GgufType::kString) {
    return "";
  }
  const int64_t index = *id->AsInt();
  const std::vector<std::string_view> views = tokens->StringViews();
  if (index < 0 || index >= static_cast<int64_t>(views.size())) return "";
  return std::string(views[static_cast<size_t>(index)]);
}

StatusOr<TemplateSource> FromGguf(const fs::path& path, bool need_template) {
  UC_ASSIGN_OR_RETURN(std::shared_ptr<const io::GgufFile> file, io::GgufFile::Open(path));
  TemplateSource source;
  source.bos_token = GgufToken(*file, "tokenizer.ggml.bos_token_id");
  source.eos_token = GgufToken(*file, "tokenizer.ggml.eos_token_id");
  if (!need_template) return source;
  if (file->Find("tokenizer.chat_template") == nullptr) {
    std::string architecture;
    if (file->Find("general.architecture") != nullptr) {
      StatusOr<std::string> arch = file->GetString("general.architecture");
      if (arch.ok()) architecture = *arch;
    }
    const std::string_view builtin = BuiltinChatTemplate(architecture);
    if (!builtin.empty()) {
      source.text = std::string(builtin);
      source.origin =
          path.string() + " (no tokenizer.chat_template; built-in " + architecture + " template)";
      return source;
    }
    return NotFoundError(path.string() +
                         ": the GGUF file has no tokenizer.chat_template metadata; pass a "
                         "template with --chat-template FILE");
  }
  UC_ASSIGN_OR_RETURN(source.text, file->GetString("tokenizer.chat_template"));
  source.origin = path.string() + " (tokenizer.chat_template)";
  return source;
}

bool IsGguf(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  in.read(magic, 4);
  return (in.gcount() == 4 && std::string_view(magic, 4) == "GGUF") || path.extension() == ".gguf";
}

StatusOr<TemplateSource> FromModel(const fs::path& model_path, bool need_template) {
  std::error_code ec;
  if (!fs::exists(model_path, ec)) {
    return NotFoundError(model_path.string() + ": no such file or directory");
  }
  if (fs::is_directory(model_path, ec)) return FromHfDirectory(model_path, need_template);
  if (model_path.filename() == "config.json" || model_path.filename() == "tokenizer_config.json") {
    return FromHfDirectory(model_path.parent_path(), need_template);
  }
  if (IsGguf(model_path)) return FromGguf(model_path, need_template);
  if (!need_template) return TemplateSource{};
  return NotFoundError(model_path.string() +
                       ": a llama2.c checkpoint carries no chat template; pass one with "
                       "--chat-template FILE");
}

}  // namespace

StatusOr<LoadedChatTemplate> LoadChatTemplate(const fs::path& model_path,
                                              const fs::path& override_file) {
  TemplateSource source;
  if (!override_file.empty()) {
    // The model only contributes its special tokens here; a model we cannot read for them
    // leaves them empty rather than failing a template the user chose explicitly.
    StatusOr<TemplateSource> tokens = FromModel(model_path, /*need_template=*/false);
    if (tokens.ok()) source = std::move(tokens).value();
    UC_ASSIGN_OR_RETURN(source.text, ReadTextFile(override_file));
    source.origin = override_file.string();
  } else {
    UC_ASSIGN_OR_RETURN(source, FromModel(model_path, /*need_template=*/true));
  }
  UC_ASSIGN_OR_RETURN(ChatTemplate parsed, ChatTemplate::Parse(source.text, source.origin));
  LoadedChatTemplate loaded{std::move(parsed), source.bos_token, source.eos_token, source.origin};
  return loaded;
}

}  // namespace uc::chat
