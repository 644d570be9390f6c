// Structured output on the bundled stories260K (a story model that never writes JSON by itself):
// a JSON schema, a regex and a choice list constrain greedy and sampled decoding, every output
// parses and satisfies its constraint and ends with finish_reason "stop" (the grammar completes
// and only EOS is allowed); json_object output is an object or its prefix cut by max_tokens;
// constrained and unconstrained requests share one continuous batch, each with its own matcher; a
// bad schema or regex is refused at AddRequest without disturbing the engine.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <regex>

#include "engine/llm_engine.h"

namespace uc {
namespace {

using engine::EngineOptions;
using engine::FinishReason;
using engine::LLMEngine;
using engine::Prompt;
using engine::RequestOutput;
using worker::GrammarSpec;
using Kind = worker::GrammarSpec::Kind;

EngineOptions GrammarEngineOptions() {
  EngineOptions o;
  o.model_path = std::string(UC_SOURCE_DIR) + "/models/stories260K";
  o.num_threads = 2;
  o.max_model_len = 256;
  return o;
}

std::map<std::string, RequestOutput> RunToEnd(LLMEngine& engine) {
  std::map<std::string, RequestOutput> done;
  while (engine.HasUnfinished()) {
    for (RequestOutput& out : engine.Step()) {
      if (out.finished) done[out.request_id] = std::move(out);
    }
  }
  return done;
}

worker::SamplingParams GrammarParams(GrammarSpec grammar, float temperature, uint64_t seed) {
  worker::SamplingParams p;
  p.temperature = temperature;
  p.seed = seed;
  p.max_tokens = 120;
  p.grammar = std::move(grammar);
  return p;
}

const char* kGrammarSchema = R"({
  "type": "object",
  "properties": {
    "color": {"enum": ["red", "green", "blue"]},
    "size": {"type": "integer", "minimum": 1, "maximum": 9},
    "tags": {"type": "array", "items": {"type": "boolean"}, "minItems": 1, "maxItems": 3}
  },
  "required": ["color", "size", "tags"],
  "additionalProperties": false
})";

// What kGrammarSchema asks, checked by hand (the Python suite runs the jsonschema package).
void ExpectMatchesSchema(const std::string& text) {
  const nlohmann::json v = nlohmann::json::parse(text, nullptr, false);
  ASSERT_TRUE(v.is_object()) << text;
  EXPECT_EQ(v.size(), 3u) << text;
  ASSERT_TRUE(v.contains("color") && v["color"].is_string()) << text;
  const std::string color = v["color"];
  EXPECT_TRUE(color == "red" || color == "green" || color == "blue") << text;
  ASSERT_TRUE(v.contains("size") && v["size"].is_number_integer()) << text;
  EXPECT_GE(v["size"].get<int>(), 1) << text;
  EXPECT_LE(v["size"].get<int>(), 9) << text;
  ASSERT_TRUE(v.contains("tags") && v["tags"].is_array()) << text;
  EXPECT_GE(v["tags"].size(), 1u) << text;
  EXPECT_LE(v["tags"].size(), 3u) << text;
  for (const auto& t : v["tags"]) EXPECT_TRUE(t.is_boolean()) << text;
}

TEST(StructuredOutputTest, EveryConstraintHoldsInOneContinuousBatch) {
  auto opened = LLMEngine::Open(GrammarEngineOptions());
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  LLMEngine& engine = **opened;
  const GrammarSpec schema{Kind::kJsonSchema, kGrammarSchema};
  const GrammarSpec object{Kind::kJsonObject, ""};
  const GrammarSpec regex{Kind::kRegex, "[0-9]{3}-[a-z]{2,4}"};
  const GrammarSpec choice{Kind::kEbnf, worker::ChoiceGrammar({"yes", "no", "a \"quoted\" maybe"})};
  const char* prompt = "Once upon a time, there was a little girl named Lily.";
  for (int i = 0; i < 3; ++i) {
    const float t = i == 0 ? 0.0f : 1.0f;
    const std::string n = std::to_string(i);
    ASSERT_TRUE(
        engine.AddRequest("schema" + n, Prompt::Text(prompt), GrammarParams(schema, t, i)).ok());
    ASSERT_TRUE(
        engine.AddRequest("object" + n, Prompt::Text(prompt), GrammarParams(object, t, i)).ok());
    ASSERT_TRUE(
        engine.AddRequest("regex" + n, Prompt::Text(prompt), GrammarParams(regex, t, i)).ok());
    ASSERT_TRUE(
        engine.AddRequest("choice" + n, Prompt::Text(prompt), GrammarParams(choice, t, i)).ok());
    ASSERT_TRUE(engine.AddRequest("free" + n, Prompt::Text(prompt), GrammarParams({}, t, i)).ok());
  }
  const std::map<std::string, RequestOutput> done = RunToEnd(engine);
  ASSERT_EQ(done.size(), 15u);
  for (int i = 0; i < 3; ++i) {
    const std::string n = std::to_string(i);
    SCOPED_TRACE("request set " + n);
    for (const char* name : {"schema", "regex", "choice"}) {
      EXPECT_EQ(done.at(name + n).finish_reason, FinishReason::kStop) << name;
    }
    ExpectMatchesSchema(done.at("schema" + n).text);
    // Free-form JSON: the story model writes strings until max_tokens, so the output may be
    // a cut prefix of an object; complete, it parses.
    const RequestOutput& object = done.at("object" + n);
    EXPECT_EQ(object.text.rfind("{", 0), 0u) << object.text;
    if (object.finish_reason == FinishReason::kStop) {
      EXPECT_TRUE(nlohmann::json::parse(object.text, nullptr, false).is_object()) << object.text;
    } else {
      EXPECT_EQ(object.output_ids.size(), 120u);
    }
    EXPECT_TRUE(std::regex_match(done.at("regex" + n).text, std::regex("[0-9]{3}-[a-z]{2,4}")))
        << done.at("regex" + n).text;
    const std::string& c = done.at("choice" + n).text;
    EXPECT_TRUE(c == "yes" || c == "no" || c == "a \"quoted\" maybe") << c;
    // The story model left alone writes a story, not JSON: the constraint did the work.
    EXPECT_FALSE(nlohmann::json::parse(done.at("free" + n).text, nullptr, false).is_object());
  }
}

TEST(StructuredOutputTest, BadGrammarsAreRefusedAndTheEngineCarriesOn) {
  auto opened = LLMEngine::Open(GrammarEngineOptions());
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  LLMEngine& engine = **opened;
  const char* prompt = "Once upon a time";
  for (const GrammarSpec& bad :
       {GrammarSpec{Kind::kJsonSchema, R"({"type": "no-such-type"})"},
        GrammarSpec{Kind::kJsonSchema, "{not json"}, GrammarSpec{Kind::kRegex, "([a-z]"},
        GrammarSpec{Kind::kEbnf, "root ::= undefined_rule"}}) {
    SCOPED_TRACE(bad.text);
    const Status s = engine.AddRequest("bad", Prompt::Text(prompt), GrammarParams(bad, 0, 0));
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find("request 'bad'"), std::string::npos) << s.ToString();
  }
  EXPECT_FALSE(engine.HasUnfinished());
  ASSERT_TRUE(
      engine
          .AddRequest("ok", Prompt::Text(prompt), GrammarParams({Kind::kRegex, "(ab|cd){2}"}, 0, 0))
          .ok());
  const std::map<std::string, RequestOutput> done = RunToEnd(engine);
  EXPECT_TRUE(std::regex_match(done.at("ok").text, std::regex("(ab|cd){2}"))) << done.at("ok").text;
}

}  // namespace
}  // namespace uc
