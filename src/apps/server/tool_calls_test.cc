// Tool-call formats against the chat templates that define them: the format each shipped
// template asks for, a past call rendered by the real Llama 3.1 template parsed back into the
// same call, malformed answers staying content, the forced-call grammar of each format, and the
// streamed deltas reassembling (as the openai SDK accumulates them) into exactly the calls and
// content of the complete response, whatever the text's split.
#include "apps/server/tool_calls.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "chat/chat_template.h"

namespace uc::server {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

const fs::path kTemplates = fs::path(UC_SOURCE_DIR) / "tests/testdata/chat_templates";

std::string ReadTemplate(const std::string& name) {
  std::ifstream in(kTemplates / name);
  std::stringstream s;
  s << in.rdbuf();
  EXPECT_FALSE(s.str().empty()) << name;
  return s.str();
}

TEST(ToolCallsTest, FormatComesFromTheTemplateText) {
  EXPECT_EQ(DetectToolFormat(ReadTemplate("llama-3.1-instruct.jinja")), ToolFormat::kLlama3Json);
  EXPECT_EQ(DetectToolFormat(ReadTemplate("llama-3.2-instruct.jinja")), ToolFormat::kLlama3Json);
  EXPECT_EQ(DetectToolFormat(ReadTemplate("qwen2.5_tools.jinja")), ToolFormat::kHermes);
  EXPECT_EQ(DetectToolFormat(ReadTemplate("qwen3.jinja")), ToolFormat::kHermes);
  EXPECT_EQ(DetectToolFormat(ReadTemplate("smollm2.jinja")), ToolFormat::kHermes);
}

// The Llama 3.1 template writes an assistant's past call the way the model is trained to answer;
// that text must parse back into the call.
TEST(ToolCallsTest, LlamaTemplatesOwnRenderingOfACallParsesBack) {
  auto parsed = chat::ChatTemplate::Parse(ReadTemplate("llama-3.1-instruct.jinja"));
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  const json args = {{"city", "Paris"}, {"days", 3}};
  nlohmann::ordered_json messages = nlohmann::ordered_json::parse(
      json::array({{{"role", "user"}, {"content", "Weather?"}},
                   {{"role", "assistant"},
                    {"content", nullptr},
                    {"tool_calls",
                     {{{"id", "c"},
                       {"type", "function"},
                       {"function", {{"name", "get_weather"}, {"arguments", args}}}}}}}})
          .dump());
  chat::ChatRenderOptions options;
  options.extra_variables["tools"] = nlohmann::ordered_json::array(
      {{{"type", "function"}, {"function", {{"name", "get_weather"}}}}});
  auto text = parsed->RenderJson(messages, options);
  ASSERT_TRUE(text.ok()) << text.status().message();
  const std::string open = "<|start_header_id|>assistant<|end_header_id|>\n\n";
  const size_t begin = text->rfind(open);
  ASSERT_NE(begin, std::string::npos) << *text;
  const size_t end = text->find("<|eot_id|>", begin);
  const std::string answer = text->substr(begin + open.size(), end - begin - open.size());
  ParsedToolCalls p = ParseToolCalls(answer, "x", ToolFormat::kLlama3Json);
  ASSERT_EQ(p.tool_calls.size(), 1u) << answer;
  EXPECT_FALSE(p.content.has_value());
  EXPECT_EQ(p.tool_calls[0]["id"], "call_x_0");
  EXPECT_EQ(p.tool_calls[0]["type"], "function");
  EXPECT_EQ(p.tool_calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(p.tool_calls[0]["function"]["arguments"].get<std::string>()), args);
}

TEST(ToolCallsTest, LlamaAnswers) {
  // <|python_tag|> before the call, surrounding whitespace, "arguments" instead of "parameters".
  ParsedToolCalls p =
      ParseToolCalls("<|python_tag|>{\"name\": \"f\", \"parameters\": {\"a\": [1, 2]}}\n", "y",
                     ToolFormat::kLlama3Json);
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0]["function"]["arguments"], "{\"a\": [1, 2]}");  // as written
  p = ParseToolCalls(" {\"name\": \"g\", \"arguments\": {}}", "y", ToolFormat::kLlama3Json);
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0]["function"]["name"], "g");
  // Two calls joined by ";".
  p = ParseToolCalls("{\"name\": \"f\", \"parameters\": {}}; {\"name\": \"g\", \"parameters\": {}}",
                     "y", ToolFormat::kLlama3Json);
  ASSERT_EQ(p.tool_calls.size(), 2u);
  EXPECT_EQ(p.tool_calls[1]["id"], "call_y_1");
  EXPECT_EQ(p.tool_calls[1]["function"]["name"], "g");
}

TEST(ToolCallsTest, MalformedLlamaAnswersStayContent) {
  for (const std::string text :
       {"The weather is fine.", "{\"name\": \"f\", \"parameters\": {\"a\": 1}",  // cut off
        "{\"name\": 3, \"parameters\": {}}", "{\"name\": \"f\", \"parameters\": [1]}",
        "{\"nom\": \"f\"}", "[{\"name\": \"f\", \"parameters\": {}}]",
        "Sure: {\"name\": \"f\", \"parameters\": {}}",  // a call inside prose is not a call
        "{\"name\": \"f\", \"parameters\": {}}; oops", "<|python_tag|>", ""}) {
    ParsedToolCalls p = ParseToolCalls(text, "z", ToolFormat::kLlama3Json);
    EXPECT_TRUE(p.tool_calls.empty()) << text;
    ASSERT_TRUE(p.content.has_value()) << text;
    EXPECT_EQ(*p.content, text);
  }
  // Hermes blocks mean nothing to a Llama template, and the reverse.
  EXPECT_TRUE(ParseToolCalls("<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>", "z",
                             ToolFormat::kLlama3Json)
                  .tool_calls.empty());
  EXPECT_TRUE(ParseToolCalls("{\"name\": \"f\", \"parameters\": {}}", "z", ToolFormat::kHermes)
                  .tool_calls.empty());
}

TEST(ToolCallsTest, ForcedCallGrammarFollowsTheFormat) {
  const json params = {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}};
  const json weather = {{"type", "function"},
                        {"function", {{"name", "get_weather"}, {"parameters", params}}}};
  const json body = {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                     {"tools", {weather}},
                     {"tool_choice", "required"}};
  CompletionRequest r;
  ASSERT_FALSE(
      ParseCompletionRequest(body, Endpoint::kChatCompletions, &r, ToolFormat::kLlama3Json));
  ASSERT_EQ(r.sampling.grammar.kind, worker::GrammarSpec::Kind::kJsonSchema);
  const json schema = json::parse(r.sampling.grammar.text);
  EXPECT_EQ(schema["required"], json({"name", "parameters"}));
  EXPECT_EQ(schema["properties"]["name"]["const"], "get_weather");
  EXPECT_EQ(schema["properties"]["parameters"], weather["function"]["parameters"]);
  EXPECT_EQ(r.grammar_param, "tools");
  CompletionRequest h;
  ASSERT_FALSE(ParseCompletionRequest(body, Endpoint::kChatCompletions, &h, ToolFormat::kHermes));
  EXPECT_EQ(h.sampling.grammar.kind, worker::GrammarSpec::Kind::kStructuralTag);
}

// What the openai SDK's stream accumulation makes of the deltas: content concatenated, each
// call's fields taken from its first delta and its arguments concatenated.
struct Accumulated {
  std::optional<std::string> content;
  json tool_calls = json::array();
};

Accumulated Accumulate(const std::vector<json>& deltas) {
  Accumulated a;
  for (const json& d : deltas) {
    if (d.contains("content")) a.content = a.content.value_or("") + d["content"].get<std::string>();
    if (!d.contains("tool_calls")) continue;
    for (const json& c : d["tool_calls"]) {
      const size_t i = c["index"].get<size_t>();
      EXPECT_LE(i, a.tool_calls.size()) << "an index skipped";
      if (i == a.tool_calls.size()) {
        EXPECT_TRUE(c.contains("id") && c.contains("type")) << c.dump();
        a.tool_calls.push_back(
            {{"id", c["id"]},
             {"type", c["type"]},
             {"function", {{"name", c["function"]["name"]}, {"arguments", ""}}}});
      }
      a.tool_calls[i]["function"]["arguments"] =
          a.tool_calls[i]["function"]["arguments"].get<std::string>() +
          c["function"].value("arguments", "");
    }
  }
  return a;
}

void ExpectStreamMatchesParse(const std::string& text, ToolFormat format) {
  const ParsedToolCalls whole = ParseToolCalls(text, "s", format);
  // Split into pieces of every size from 1 byte to the whole text.
  for (size_t step = 1; step <= text.size(); step = step < 8 ? step + 1 : step * 2) {
    ToolCallStream stream(format, "s");
    std::vector<json> deltas;
    for (size_t at = 0; at < text.size(); at += step) {
      for (json& d : stream.Feed(std::string_view(text).substr(at, step))) deltas.push_back(d);
    }
    for (json& d : stream.Finish()) deltas.push_back(d);
    const Accumulated a = Accumulate(deltas);
    EXPECT_EQ(a.content, whole.content) << text << " step " << step;
    EXPECT_EQ(a.tool_calls, whole.tool_calls) << text << " step " << step;
    EXPECT_EQ(stream.called(), !whole.tool_calls.empty());
  }
}

TEST(ToolCallsTest, StreamedDeltasReassembleIntoTheParsedResponse) {
  for (const std::string text :
       {"Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
        "\"Paris\"}}\n</tool_call>",
        "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\n"
        "<tool_call>{\"name\": \"b\", \"arguments\": {\"k\": 1}}</tool_call>\n",
        "no call <tool_call>not json</tool_call> after", "a < b <tool_ and <tool_call",
        "<tool_call>{\"name\": \"open\", \"arguments\": {}}", "plain text", "  \n",
        // Keys in the model's order, strings holding braces, quotes and the close tag's "<".
        "<tool_call>\n{\"name\": \"q\", \"arguments\": {\"z\": \"a \\\"}\\\" <b\", \"a\": [1, "
        "{\"x\": "
        "[]}], \"n\": -1.5e3, \"t\": true}}\n</tool_call>",
        "<tool_call>{\"arguments\": {\"k\": null}, \"name\": \"late\"}</tool_call>",  // name last
        "<tool_call>{\"name\": \"bare\"}</tool_call>"}) {  // no arguments

    ExpectStreamMatchesParse(text, ToolFormat::kHermes);
  }
  for (const std::string text :
       {"{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
        "<|python_tag|>{\"name\": \"f\", \"parameters\": {}}",
        "\n{\"name\": \"f\", \"parameters\": {}}; {\"name\": \"g\", \"parameters\": {\"x\": 1}}",
        "{\"parameters\": {\"s\": \"x}; {\\\"y\"}, \"name\": \"f\"}", "<|pyth", "It is sunny.", " ",
        ""}) {
    ExpectStreamMatchesParse(text, ToolFormat::kLlama3Json);
  }
}

TEST(ToolCallsTest, StreamedCallDeltasAreOpenAIShaped) {
  ToolCallStream stream(ToolFormat::kLlama3Json, "p");
  EXPECT_TRUE(stream.Feed("{\"name\": \"f\", ").empty());  // undecided until the arguments begin
  std::vector<json> deltas = stream.Feed("\"parameters\": {\"a\": 1");
  ASSERT_EQ(deltas.size(), 2u);
  EXPECT_EQ(deltas[0], json::parse(R"({"tool_calls": [{"index": 0, "id": "call_p_0",
      "type": "function", "function": {"name": "f", "arguments": ""}}]})"));
  EXPECT_EQ(deltas[1], json::parse(R"({"tool_calls": [{"index": 0,
      "function": {"arguments": "{\"a\": 1"}}]})"));
  deltas = stream.Feed("}}");
  ASSERT_EQ(deltas.size(), 1u);
  EXPECT_EQ(deltas[0], json::parse(R"({"tool_calls": [{"index": 0,
      "function": {"arguments": "}"}}]})"));
  EXPECT_TRUE(stream.Finish().empty());
  // Prose goes out as soon as it cannot be a call.
  ToolCallStream prose(ToolFormat::kLlama3Json, "p");
  const std::vector<json> first = prose.Feed("It");
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0], json({{"content", "It"}}));
}

// Token by token, as the server feeds it: every token of the arguments goes out as it comes.
TEST(ToolCallsTest, ArgumentsStreamAsTheyAreWritten) {
  const std::vector<std::string> tokens = {
      "<tool", "_call", ">\n{\"",    "name", "\":",   " \"",  "get", "_weather",
      "\",",   " \"",   "arguments", "\":",  " {\"",  "city", "\":", " \"",
      "Paris", "\"}}",  "\n</",      "tool", "_call", ">"};
  ToolCallStream stream(ToolFormat::kHermes, "t");
  std::vector<std::string> fragments;
  int heads = 0;
  for (const std::string& t : tokens) {
    for (const json& d : stream.Feed(t)) {
      ASSERT_TRUE(d.contains("tool_calls")) << d.dump();
      const json& c = d["tool_calls"][0];
      if (c.contains("id")) {
        ++heads;
        EXPECT_EQ(c["function"]["name"], "get_weather");
      } else {
        fragments.push_back(c["function"]["arguments"].get<std::string>());
      }
    }
  }
  EXPECT_TRUE(stream.Finish().empty());
  EXPECT_EQ(heads, 1);
  EXPECT_EQ(fragments, (std::vector<std::string>{"{\"", "city", "\":", " \"", "Paris", "\"}"}));
}

// Mutated answers (bytes dropped, doubled or replaced by JSON's and the tags' characters) in
// random pieces: the stream never throws, every delta is OpenAI-shaped (Accumulate checks the
// indices), and a stream that sends no call sends the text unchanged as content.
TEST(ToolCallsTest, MutatedAnswersStreamSafely) {
  const std::vector<std::string> seeds = {
      "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, \"}\"], \"b\": {}}}\n</tool_call>",
      "<|python_tag|>{\"name\": \"f\", \"parameters\": {\"q\": \"x\\\"y\"}}; {\"name\": \"g\"}"};
  const std::string alphabet = "{}[]\":,;\\ <>/_ta1";
  std::mt19937 rng(7);
  for (int i = 0; i < 2000; ++i) {
    const ToolFormat format = i % 2 == 0 ? ToolFormat::kHermes : ToolFormat::kLlama3Json;
    std::string text = seeds[i % 2];
    for (int edits = 1 + static_cast<int>(rng() % 4); edits > 0 && !text.empty(); --edits) {
      const size_t at = rng() % text.size();
      switch (rng() % 3) {
        case 0:
          text.erase(at, 1);
          break;
        case 1:
          text.insert(at, 1, text[at]);
          break;
        default:
          text[at] = alphabet[rng() % alphabet.size()];
      }
    }
    ToolCallStream stream(format, "m");
    std::vector<json> deltas;
    for (size_t at = 0; at < text.size();) {
      const size_t n = 1 + rng() % 6;
      for (json& d : stream.Feed(std::string_view(text).substr(at, n))) deltas.push_back(d);
      at += n;
    }
    for (json& d : stream.Finish()) deltas.push_back(d);
    const Accumulated a = Accumulate(deltas);
    EXPECT_EQ(stream.called(), !a.tool_calls.empty()) << text;
    if (!stream.called()) {
      EXPECT_EQ(a.content, text) << text;
    }
  }
}

// Once a call's arguments have begun it stays a call: cut off, or followed by text that is not
// a call, the stream carries what was written, where the complete response (which can wait for
// the end) keeps malformed calls as content.
TEST(ToolCallsTest, AStreamedCallStaysACallOnceItsArgumentsBegin) {
  struct Case {
    std::string text;
    ToolFormat format;
    std::string arguments;
    std::optional<std::string> content;
  };
  const std::vector<Case> cases = {
      {"{\"name\": \"f\", \"parameters\": {\"a\": 1", ToolFormat::kLlama3Json, "{\"a\": 1",
       std::nullopt},
      {"{\"name\": \"f\", \"parameters\": {}}; oops", ToolFormat::kLlama3Json, "{}", "oops"},
      {"<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": [1", ToolFormat::kHermes, "{\"a\": [1",
       std::nullopt},
      {"<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}, }</tool_call>", ToolFormat::kHermes,
       "{\"a\": 1}", std::nullopt},
  };
  for (const Case& c : cases) {
    EXPECT_TRUE(ParseToolCalls(c.text, "s", c.format).tool_calls.empty()) << c.text;
    for (size_t step : {size_t{1}, size_t{3}, c.text.size()}) {
      ToolCallStream stream(c.format, "s");
      std::vector<json> deltas;
      for (size_t at = 0; at < c.text.size(); at += step) {
        for (json& d : stream.Feed(std::string_view(c.text).substr(at, step))) deltas.push_back(d);
      }
      for (json& d : stream.Finish()) deltas.push_back(d);
      const Accumulated a = Accumulate(deltas);
      ASSERT_EQ(a.tool_calls.size(), 1u) << c.text << " step " << step;
      EXPECT_EQ(a.tool_calls[0]["function"]["name"], "f");
      EXPECT_EQ(a.tool_calls[0]["function"]["arguments"], c.arguments) << c.text;
      EXPECT_EQ(a.content, c.content) << c.text << " step " << step;
      EXPECT_TRUE(stream.called());
    }
  }
}

}  // namespace
}  // namespace uc::server
