// Real chat templates (Llama-2, Llama-3/3.1/3.2, Mistral v0.1/v0.3, Qwen2/2.5/3, SmolLM2's
// ChatML, Gemma 3, Phi-3/3.5) render exactly as transformers' apply_chat_template does: every
// conversation of tests/testdata/chat_templates/cases.json (tools/reference/chat_templates.py),
// with and without the generation prompt, including the ones the template rejects. Then
// LoadChatTemplate: where it finds a model's template and special tokens (built in for Gemma 3
// GGUFs that have none), and what it says when there is none.
#include "chat/chat_template.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <ctime>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "chat/builtin_templates.h"
#include "io/gguf/gguf_writer.h"

namespace uc::chat {
namespace {

namespace fs = std::filesystem;

const fs::path kDataDir = fs::path(UC_SOURCE_DIR) / "tests/testdata/chat_templates";

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::chrono::system_clock::time_point LocalTime(const std::string& iso) {
  std::tm tm{};
  std::sscanf(iso.c_str(), "%d-%d-%dT%d:%d:%d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
              &tm.tm_min, &tm.tm_sec);
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  tm.tm_isdst = -1;
  return std::chrono::system_clock::from_time_t(std::mktime(&tm));
}

class ScratchDir {
 public:
  ScratchDir() {
    path_ = fs::temp_directory_path() /
            ("uc_chat_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    fs::create_directories(path_);
  }
  ~ScratchDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }
  fs::path Write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ / name, std::ios::binary) << text;
    return path_ / name;
  }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

TEST(ChatTemplateTest, RendersEveryReferenceConversationExactly) {
  std::ifstream in(kDataDir / "cases.json");
  const nlohmann::ordered_json doc = nlohmann::ordered_json::parse(in);
  std::map<std::string, ChatTemplate> templates;
  std::set<std::string> names;
  int rendered = 0, rejected = 0;
  for (const auto& c : doc["cases"]) {
    const std::string name = c["template"];
    SCOPED_TRACE(name + " / " + c["case"].get<std::string>() +
                 (c["add_generation_prompt"].get<bool>() ? " / add_generation_prompt" : ""));
    if (templates.count(name) == 0) {
      StatusOr<ChatTemplate> t = ChatTemplate::Parse(ReadFile(kDataDir / (name + ".jinja")), name);
      ASSERT_TRUE(t.ok()) << t.status().ToString();
      templates.emplace(name, std::move(t).value());
    }
    names.insert(name);
    ChatRenderOptions options;
    options.add_generation_prompt = c["add_generation_prompt"];
    options.bos_token = c["bos_token"];
    options.eos_token = c["eos_token"];
    options.extra_variables = c["variables"];
    options.now = LocalTime(c["now"]);
    StatusOr<std::string> out = templates.at(name).RenderJson(c["messages"], options);
    if (c.contains("error")) {
      ASSERT_FALSE(out.ok()) << *out;
      EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
      EXPECT_EQ(out.status().message(),
                "the chat template rejected the conversation: " + c["error"].get<std::string>());
      ++rejected;
    } else {
      ASSERT_TRUE(out.ok()) << out.status().ToString();
      EXPECT_EQ(*out, c["output"].get<std::string>());
      ++rendered;
    }
  }
  EXPECT_EQ(names.size(), 13u);
  EXPECT_GT(rendered, 250);
  EXPECT_GT(rejected, 5);
}

TEST(ChatTemplateTest, RendersPlainMessagesAndKeepsExtraFieldsVisible) {
  StatusOr<ChatTemplate> t = ChatTemplate::Parse(
      "{% for m in messages %}[{{ m.role }}:{{ m.content }}{{ '+' ~ m.name if m.name }}]"
      "{% endfor %}{% if add_generation_prompt %}{{ bos_token }}>{% endif %}");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ChatRenderOptions options;
  options.add_generation_prompt = true;
  options.bos_token = "<s>";
  StatusOr<std::string> plain =
      t->Render(std::vector<ChatMessage>{{"system", "S"}, {"user", "U"}}, options);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(*plain, "[system:S][user:U]<s>>");
  const nlohmann::json messages =
      nlohmann::json::parse(R"([{"role": "tool", "content": "42", "name": "calc"}])");
  StatusOr<std::string> json = t->RenderJson(messages, options);
  ASSERT_TRUE(json.ok()) << json.status().ToString();
  EXPECT_EQ(*json, "[tool:42+calc]<s>>");
  EXPECT_FALSE(t->RenderJson(nlohmann::json::object(), options).ok());
}

TEST(ChatTemplateTest, ErrorsNameTheOriginAndLine) {
  StatusOr<ChatTemplate> bad =
      ChatTemplate::Parse("{% for m in messages %}\n{% include 'x' %}{% endfor %}", "my.jinja");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "my.jinja: line 2: unsupported construct '{% include %}'");
  StatusOr<ChatTemplate> t =
      ChatTemplate::Parse("a\n{{ messages[0].content.upper() + 1 }}", "t.jinja");
  ASSERT_TRUE(t.ok());
  StatusOr<std::string> out =
      t->Render(std::vector<ChatMessage>{{"user", "x"}}, ChatRenderOptions{});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(out.status().message(),
            "t.jinja: line 2: unsupported operand type(s) for +: 'str' and 'int'");
}

TEST(LoadChatTemplateTest, HuggingFaceTokenizerConfig) {
  ScratchDir dir;
  dir.Write("config.json", "{}");
  dir.Write("tokenizer_config.json",
            nlohmann::json{{"bos_token", {{"content", "<s>"}, {"lstrip", false}}},
                           {"eos_token", "</s>"},
                           {"chat_template",
                            "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}"}}
                .dump());
  StatusOr<LoadedChatTemplate> loaded = LoadChatTemplate(dir.path());
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->bos_token, "<s>");
  EXPECT_EQ(loaded->eos_token, "</s>");
  EXPECT_EQ(loaded->origin, (dir.path() / "tokenizer_config.json").string() + " (chat_template)");
  const ChatRenderOptions options = loaded->DefaultOptions();
  EXPECT_TRUE(options.add_generation_prompt);
  StatusOr<std::string> out =
      loaded->chat_template.Render(std::vector<ChatMessage>{{"user", "hi"}}, options);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, "<s>hi");
  // config.json as the path means its directory.
  EXPECT_TRUE(LoadChatTemplate(dir.path() / "config.json").ok());
}

TEST(LoadChatTemplateTest, NamedTemplatesAndTheJinjaFileTakePrecedence) {
  ScratchDir dir;
  dir.Write("tokenizer_config.json", nlohmann::json{{"chat_template",
                                                     {{{"name", "tool_use"}, {"template", "T"}},
                                                      {{"name", "default"}, {"template", "D"}}}}}
                                         .dump());
  StatusOr<LoadedChatTemplate> named = LoadChatTemplate(dir.path());
  ASSERT_TRUE(named.ok()) << named.status().ToString();
  EXPECT_EQ(named->chat_template.text(), "D");
  dir.Write("chat_template.jinja", "J");
  StatusOr<LoadedChatTemplate> file = LoadChatTemplate(dir.path());
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(file->chat_template.text(), "J");
  EXPECT_EQ(file->origin, (dir.path() / "chat_template.jinja").string());
}

TEST(LoadChatTemplateTest, GgufMetadata) {
  ScratchDir dir;
  io::GgufWriter writer;
  writer.SetString("general.architecture", "llama");
  writer.SetString("tokenizer.chat_template", "{{ bos_token }}|{{ eos_token }}");
  writer.SetStringArray("tokenizer.ggml.tokens", {"<unk>", "<|im_start|>", "<|im_end|>"});
  writer.Set<uint32_t>("tokenizer.ggml.bos_token_id", 1);
  writer.Set<uint32_t>("tokenizer.ggml.eos_token_id", 2);
  const fs::path path = dir.path() / "m.gguf";
  ASSERT_TRUE(writer.WriteFile(path).ok());
  StatusOr<LoadedChatTemplate> loaded = LoadChatTemplate(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->origin, path.string() + " (tokenizer.chat_template)");
  StatusOr<std::string> out =
      loaded->chat_template.Render(std::vector<ChatMessage>{}, loaded->DefaultOptions());
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, "<|im_start|>|<|im_end|>");
}

// A Gemma 3 GGUF without tokenizer.chat_template gets the built-in Gemma 3 template, which is
// the reference copy gemma-3-it.jinja; other architectures still need --chat-template.
TEST(LoadChatTemplateTest, BuiltinTemplateForGgufWithoutOne) {
  EXPECT_EQ(BuiltinChatTemplate("gemma3"), ReadFile(kDataDir / "gemma-3-it.jinja"));
  EXPECT_EQ(BuiltinChatTemplate("llama"), "");
  ScratchDir dir;
  for (const char* arch : {"gemma3", "llama"}) {
    io::GgufWriter writer;
    writer.SetString("general.architecture", arch);
    writer.SetStringArray("tokenizer.ggml.tokens", {"<pad>", "<eos>", "<bos>"});
    writer.Set<uint32_t>("tokenizer.ggml.bos_token_id", 2);
    writer.Set<uint32_t>("tokenizer.ggml.eos_token_id", 1);
    const fs::path path = dir.path() / (std::string(arch) + ".gguf");
    ASSERT_TRUE(writer.WriteFile(path).ok());
    StatusOr<LoadedChatTemplate> loaded = LoadChatTemplate(path);
    if (std::string_view(arch) == "llama") {
      ASSERT_FALSE(loaded.ok());
      EXPECT_EQ(loaded.status().code(), StatusCode::kNotFound);
      continue;
    }
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    EXPECT_EQ(loaded->origin,
              path.string() + " (no tokenizer.chat_template; built-in gemma3 template)");
    EXPECT_EQ(loaded->bos_token, "<bos>");
    StatusOr<std::string> out = loaded->chat_template.Render(
        {{"system", "Be brief."}, {"user", " Hi! "}}, loaded->DefaultOptions());
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_EQ(*out,
              "<bos><start_of_turn>user\nBe brief.\n\nHi!<end_of_turn>\n"
              "<start_of_turn>model\n");
  }
}

TEST(LoadChatTemplateTest, OverrideFileAndMissingTemplates) {
  ScratchDir dir;
  dir.Write("tokenizer_config.json", R"({"eos_token": "</s>"})");
  StatusOr<LoadedChatTemplate> none = LoadChatTemplate(dir.path());
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find("pass one with --chat-template FILE"), std::string::npos)
      << none.status().message();
  const fs::path override_file = dir.Write("override.jinja", "{{ eos_token }}!");
  StatusOr<LoadedChatTemplate> overridden = LoadChatTemplate(dir.path(), override_file);
  ASSERT_TRUE(overridden.ok()) << overridden.status().ToString();
  EXPECT_EQ(overridden->origin, override_file.string());
  EXPECT_EQ(
      *overridden->chat_template.Render(std::vector<ChatMessage>{}, overridden->DefaultOptions()),
      "</s>!");

  const fs::path llama2c = dir.Write("model.bin", std::string(28, '\0'));
  StatusOr<LoadedChatTemplate> bin = LoadChatTemplate(llama2c);
  ASSERT_FALSE(bin.ok());
  EXPECT_EQ(bin.status().message(), llama2c.string() +
                                        ": a llama2.c checkpoint carries no chat template; pass "
                                        "one with --chat-template FILE");
  EXPECT_TRUE(LoadChatTemplate(llama2c, override_file).ok());
  StatusOr<LoadedChatTemplate> missing = LoadChatTemplate(dir.path() / "nope");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  StatusOr<LoadedChatTemplate> bad_override =
      LoadChatTemplate(dir.path(), dir.Write("bad.jinja", "{% macro %}"));
  ASSERT_FALSE(bad_override.ok());
  EXPECT_EQ(
      bad_override.status().message().rfind((dir.path() / "bad.jinja").string() + ": line 1: ", 0),
      0u)
      << bad_override.status().message();
}

// SmolLM2-135M-Instruct's GGUF (UC_SMOLLM2_GGUF, scripts/fetch-smollm2.sh) carries the ChatML
// template committed as smollm2.jinja, with <|im_start|> / <|im_end|> as BOS / EOS.
TEST(LoadChatTemplateTest, SmolLM2Gguf) {
  const char* gguf = std::getenv("UC_SMOLLM2_GGUF");
  if (gguf == nullptr || !fs::exists(gguf)) GTEST_SKIP() << "UC_SMOLLM2_GGUF not set";
  StatusOr<LoadedChatTemplate> loaded = LoadChatTemplate(gguf);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->chat_template.text(), ReadFile(kDataDir / "smollm2.jinja"));
  EXPECT_EQ(loaded->bos_token, "<|im_start|>");
  EXPECT_EQ(loaded->eos_token, "<|im_end|>");
}

// The Gemma 3 270M GGUF (UC_GEMMA3_GGUF, scripts/fetch-gemma3.sh) has no template of its own:
// it gets the built-in one, with <bos> / <eos> from its vocabulary.
TEST(LoadChatTemplateTest, Gemma3Gguf) {
  const char* gguf = std::getenv("UC_GEMMA3_GGUF");
  if (gguf == nullptr || *gguf == '\0') GTEST_SKIP() << "UC_GEMMA3_GGUF not set";
  StatusOr<LoadedChatTemplate> loaded = LoadChatTemplate(gguf);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->chat_template.text(), ReadFile(kDataDir / "gemma-3-it.jinja"));
  EXPECT_EQ(loaded->bos_token, "<bos>");
  EXPECT_EQ(loaded->eos_token, "<eos>");
}

}  // namespace
}  // namespace uc::chat
