// Structured-output and tool fields of the wire format: what each spelling turns into, the 400s
// naming the field, and <tool_call> parsing. No engine: the grammars' compilation is tested in
// tests/integration/structured_output_test.cc.
#include "apps/server/structured_protocol.h"

#include <gtest/gtest.h>

#include "apps/server/protocol.h"
#include "apps/server/tool_calls.h"

namespace uc::server {
namespace {

using json = nlohmann::json;
using Kind = worker::GrammarSpec::Kind;

CompletionRequest ParseOk(const json& body) {
  CompletionRequest r;
  const auto error = ParseCompletionRequest(body, Endpoint::kChatCompletions, &r);
  EXPECT_FALSE(error.has_value()) << (error ? error->message : "");
  return r;
}

std::string ErrorParam(const json& body) {
  CompletionRequest r;
  const auto error = ParseCompletionRequest(body, Endpoint::kChatCompletions, &r);
  if (!error.has_value()) return "<accepted>";
  EXPECT_EQ(error->http_status, 400);
  return error->param;
}

json Chat(json extra) {
  json body = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  body.update(extra);
  return body;
}

TEST(StructuredProtocolTest, EverySpellingSetsTheGrammar) {
  CompletionRequest r = ParseOk(Chat({{"response_format", {{"type", "json_object"}}}}));
  EXPECT_EQ(r.sampling.grammar.kind, Kind::kJsonObject);
  r = ParseOk(Chat({{"response_format",
                     {{"type", "json_schema"},
                      {"json_schema", {{"name", "x"}, {"schema", {{"type", "object"}}}}}}}}));
  EXPECT_EQ(r.sampling.grammar.kind, Kind::kJsonSchema);
  EXPECT_EQ(json::parse(r.sampling.grammar.text), json({{"type", "object"}}));
  EXPECT_EQ(r.grammar_param, "response_format.json_schema.schema");
  r = ParseOk(Chat({{"response_format", {{"type", "text"}}}}));
  EXPECT_FALSE(r.sampling.grammar.active());
  r = ParseOk(Chat({{"structured_outputs", {{"regex", "a+"}}}}));
  EXPECT_EQ(r.sampling.grammar, (worker::GrammarSpec{Kind::kRegex, "a+"}));
  r = ParseOk(Chat({{"structured_outputs", {{"json", "{\"type\": \"integer\"}"}}}}));
  EXPECT_EQ(r.sampling.grammar.kind, Kind::kJsonSchema);
  r = ParseOk(Chat({{"guided_choice", {"a", "b\"c"}}}));
  EXPECT_EQ(r.sampling.grammar.kind, Kind::kEbnf);
  EXPECT_EQ(r.sampling.grammar.text, "root ::= \"a\" | \"b\\\"c\"\n");
  r = ParseOk(Chat({{"guided_grammar", "root ::= \"x\""}, {"guided_decoding_backend", "auto"}}));
  EXPECT_EQ(r.sampling.grammar.kind, Kind::kEbnf);
}

TEST(StructuredProtocolTest, MalformedFieldsAreA400NamingTheField) {
  EXPECT_EQ(ErrorParam(Chat({{"response_format", {{"type", "xml"}}}})), "response_format.type");
  EXPECT_EQ(ErrorParam(Chat({{"response_format", {{"type", "json_schema"}}}})),
            "response_format.json_schema");
  EXPECT_EQ(ErrorParam(Chat({{"response_format",
                              {{"type", "json_schema"}, {"json_schema", {{"schema", 3}}}}}})),
            "response_format.json_schema.schema");
  EXPECT_EQ(ErrorParam(Chat({{"response_format", "json"}})), "response_format");
  EXPECT_EQ(ErrorParam(Chat({{"structured_outputs", {{"choice", json::array()}}}})),
            "structured_outputs.choice");
  EXPECT_EQ(ErrorParam(Chat({{"structured_outputs", {{"choice", {"a", 1}}}}})),
            "structured_outputs.choice.1");
  EXPECT_EQ(ErrorParam(Chat({{"structured_outputs", {{"json", "{oops"}}}})),
            "structured_outputs.json");
  EXPECT_EQ(ErrorParam(Chat({{"structured_outputs", {{"regex", ""}}}})),
            "structured_outputs.regex");
  EXPECT_EQ(ErrorParam(Chat({{"structured_outputs", {{"xml", "a"}}}})), "structured_outputs.xml");
  EXPECT_EQ(ErrorParam(Chat({{"guided_json", {{"type", "object"}}}, {"guided_regex", "a"}})),
            "guided_regex");
  EXPECT_EQ(ErrorParam(Chat({{"guided_regex", std::string(70000, 'a')}})), "guided_regex");
  // Features the grammar engine would silently ignore.
  EXPECT_EQ(ErrorParam(Chat({{"guided_json", {{"type", "array"}, {"uniqueItems", true}}}})),
            "guided_json");
  EXPECT_EQ(ErrorParam(Chat(json::parse(
                R"({"structured_outputs": {"json": {"properties": {"a": {"not": {}}}}}})"))),
            "structured_outputs.json");
  // A property named like a keyword is only a name.
  ParseOk(Chat(json::parse(R"({"guided_json": {"properties": {"not": {"type": "string"}}}})")));
  EXPECT_EQ(UnsupportedSchemaKeyword(json::parse(R"({"items": {"if": {}}})"), "s"), "s.items.if");
}

json Weather() {
  return json::parse(R"({"type": "function", "function": {"name": "get_weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}})");
}

TEST(StructuredProtocolTest, ToolsAndToolChoice) {
  CompletionRequest r = ParseOk(Chat({{"tools", {Weather()}}}));
  EXPECT_EQ(r.tool_choice, "auto");
  EXPECT_FALSE(r.sampling.grammar.active());
  r = ParseOk(
      Chat({{"tools", {Weather()}},
            {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}}}));
  EXPECT_EQ(r.sampling.grammar.kind, Kind::kStructuralTag);
  EXPECT_NE(r.sampling.grammar.text.find("<tool_call>"), std::string::npos);
  r = ParseOk(Chat({{"tools", {Weather()}}, {"tool_choice", "required"}}));
  EXPECT_EQ(r.sampling.grammar.kind, Kind::kStructuralTag);
  EXPECT_EQ(
      ErrorParam(Chat({{"tools", {Weather()}},
                       {"tool_choice", {{"type", "function"}, {"function", {{"name", "x"}}}}}})),
      "tool_choice");
  EXPECT_EQ(ErrorParam(Chat({{"tool_choice", "required"}})), "tool_choice");
  EXPECT_EQ(ErrorParam(Chat({{"tool_choice", "sometimes"}})), "tool_choice");
  EXPECT_EQ(ErrorParam(Chat({{"tools", {{{"type", "retrieval"}}}}})), "tools.0.type");
  EXPECT_EQ(ErrorParam(Chat({{"tools", {Weather(), Weather()}}})), "tools.1.function.name");
  EXPECT_EQ(ErrorParam(Chat({{"messages",
                              {{{"role", "assistant"},
                                {"content", nullptr},
                                {"tool_calls",
                                 {{{"type", "function"},
                                   {"function", {{"name", "f"}, {"arguments", "{bad"}}}}}}}}}})),
            "messages[0].tool_calls.0.function.arguments");
}

TEST(StructuredProtocolTest, ToolCallBlocksBecomeToolCalls) {
  ParsedToolCalls p = ParseToolCalls(
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\"}}\n</tool_call>",
      "x");
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(p.tool_calls[0]["function"]["arguments"].get<std::string>()),
            json({{"city", "Paris"}}));
  EXPECT_EQ(p.tool_calls[0]["id"], "call_x_0");
  ASSERT_TRUE(p.content.has_value());
  EXPECT_EQ(*p.content, "Let me check.\n");
  p = ParseToolCalls(
      "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\n"
      "<tool_call>{\"name\": \"b\", \"arguments\": {\"k\": 1}}</tool_call>",
      "y");
  EXPECT_EQ(p.tool_calls.size(), 2u);
  EXPECT_FALSE(p.content.has_value());
  p = ParseToolCalls("no call <tool_call>not json</tool_call>", "z");
  EXPECT_TRUE(p.tool_calls.empty());
  EXPECT_EQ(*p.content, "no call <tool_call>not json</tool_call>");
}

}  // namespace
}  // namespace uc::server
