#include "apps/server/protocol.h"

#include <gtest/gtest.h>

#include <chrono>
#include <map>

#include "io/json_file.h"

namespace uc::server {
namespace {

using json = nlohmann::json;

std::optional<ApiError> Parse(const std::string& body, Endpoint endpoint, CompletionRequest* out) {
  return ParseCompletionRequest(json::parse(body), endpoint, out);
}

TEST(ProtocolTest, ParsesCompletionFields) {
  CompletionRequest r;
  ASSERT_FALSE(Parse(R"({"model": "m", "prompt": "Once", "max_tokens": 7, "temperature": 0,
      "top_p": 0.9, "seed": 3, "stop": "park", "n": 2, "user": "u", "top_k": 5,
      "stream": true, "stream_options": {"include_usage": true}, "logprobs": null,
      "frequency_penalty": 0})",
                     Endpoint::kCompletions, &r));
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(*r.prompts[0].text, "Once");
  EXPECT_EQ(*r.max_tokens, 7);
  EXPECT_EQ(r.sampling.temperature, 0.0f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.9f);
  EXPECT_EQ(*r.sampling.seed, 3u);
  EXPECT_EQ(r.sampling.stop, std::vector<std::string>{"park"});
  EXPECT_EQ(r.sampling.top_k, 5);
  EXPECT_EQ(r.n, 2);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
}

TEST(ProtocolTest, PromptForms) {
  CompletionRequest r;
  ASSERT_FALSE(Parse(R"({"prompt": [1, 2, 3]})", Endpoint::kCompletions, &r));
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0].ids, (std::vector<int32_t>{1, 2, 3}));
  ASSERT_FALSE(Parse(R"({"prompt": ["a", "b"]})", Endpoint::kCompletions, &r));
  EXPECT_EQ(r.prompts.size(), 2u);
  ASSERT_FALSE(Parse(R"({"prompt": [[1, 2], [3]]})", Endpoint::kCompletions, &r));
  EXPECT_EQ(r.prompts[1].ids, std::vector<int32_t>{3});
  EXPECT_TRUE(Parse(R"({"prompt": []})", Endpoint::kCompletions, &r));
  EXPECT_TRUE(Parse(R"({"prompt": [1, "a"]})", Endpoint::kCompletions, &r));
  EXPECT_TRUE(Parse(R"({"prompt": [-1]})", Endpoint::kCompletions, &r));
}

TEST(ProtocolTest, ChatMessages) {
  CompletionRequest r;
  ASSERT_FALSE(Parse(R"({"messages": [{"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "!"}]}],
      "max_completion_tokens": 9})",
                     Endpoint::kChatCompletions, &r));
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[1].content, "Hi!");
  EXPECT_EQ(*r.max_tokens, 9);
  auto e = Parse(R"({"messages": [{"role": "wizard", "content": "x"}]})",
                 Endpoint::kChatCompletions, &r);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "messages[0].role");
  e = Parse(R"({"messages": [{"role": "user"}]})", Endpoint::kChatCompletions, &r);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "messages[0].content");
}

TEST(ProtocolTest, ErrorsNameTheField) {
  CompletionRequest r;
  const struct {
    std::string body;
    std::string param;
    std::string code;
  } cases[] = {
      {R"({"prompt": "x", "max_tokens": "ten"})", "max_tokens", "invalid_type"},
      {R"({"prompt": "x", "max_tokens": 0})", "max_tokens", "invalid_value"},
      {R"({"prompt": "x", "temperature": "hot"})", "temperature", "invalid_type"},
      {R"({"prompt": "x", "temperature": 3})", "temperature", "invalid_value"},
      {R"({"prompt": "x", "stream": "yes"})", "stream", "invalid_type"},
      {R"({"prompt": "x", "n": 0})", "n", "invalid_value"},
      {R"({"prompt": "x", "stop": [1]})", "stop", "invalid_type"},
      {R"({"prompt": "x", "promt": "y"})", "promt", "unknown_parameter"},
      {R"({"prompt": "x", "spec": {}})", "spec", "per_request_spec_not_allowed"},
      {R"({"prompt": "x", "logprobs": 21})", "logprobs", "invalid_value"},
      {R"({"prompt": "x", "logprobs": -1})", "logprobs", "invalid_value"},
      {R"({"prompt": "x", "logprobs": true})", "logprobs", "invalid_type"},
      {R"({"prompt": "x", "prompt_logprobs": 21})", "prompt_logprobs", "invalid_value"},
      {R"({"prompt": "x", "echo": 1})", "echo", "invalid_type"},
      {R"({"prompt": "x", "cache_salt": ""})", "cache_salt", "invalid_value"},
      {R"({"prompt": "x", "cache_salt": 7})", "cache_salt", "invalid_type"},
      {R"({"prompt": "x", "n": 1000})", "n", "invalid_value"},
      {R"({"prompt": "x", "best_of": 0})", "best_of", "invalid_value"},
      {R"({"prompt": "x", "n": 3, "best_of": 2})", "best_of", "invalid_value"},
      {R"({"prompt": "x", "best_of": 2, "stream": true})", "best_of", "invalid_value"},
      {R"({"prompt": ["a", "b", "c"], "best_of": 50})", "best_of", "invalid_value"},
      {R"({"prompt": "x", "stream_options": {"include_usage": true}})", "stream_options", ""},
      {R"({"max_tokens": 3})", "prompt", "missing_required_parameter"},
  };
  for (const auto& c : cases) {
    auto e = Parse(c.body, Endpoint::kCompletions, &r);
    ASSERT_TRUE(e) << c.body;
    EXPECT_EQ(e->http_status, 400) << c.body;
    EXPECT_EQ(e->param, c.param) << c.body;
    EXPECT_EQ(e->code, c.code) << c.body;
    const json body = e->Body();
    EXPECT_TRUE(body["error"]["message"].is_string());
    EXPECT_EQ(body["error"]["type"], "invalid_request_error");
  }
  auto e = Parse(R"({"prompt": "x", "promt": "y"})", Endpoint::kCompletions, &r);
  EXPECT_NE(e->message.find("did you mean 'prompt'"), std::string::npos) << e->message;
  EXPECT_TRUE(ParseCompletionRequest(json::array(), Endpoint::kCompletions, &r));
}

engine::RequestOutput Finished(engine::FinishReason reason,
                               std::optional<engine::AbortInfo> abort) {
  engine::RequestOutput out;
  out.finished = true;
  out.finish_reason = reason;
  out.abort = std::move(abort);
  out.text = "Hello";
  out.output_ids = {5, 6};
  return out;
}

// Values quoted back from a request are cut (a 4 MB field name used to be echoed twice, after
// an edit distance that took seconds); names a request picks are bounded.
TEST(ProtocolTest, EchoedValuesAreCapped) {
  EXPECT_EQ(EchoValue("short"), "short");
  EXPECT_EQ(EchoValue(std::string(100, 'a')), std::string(kMaxEchoBytes, 'a') + "...");
  // Never splits a UTF-8 character: 63 ASCII bytes then a two-byte character at 63-64.
  const std::string utf8 = std::string(63, 'a') + "\xc3\xa9" + std::string(10, 'b');
  EXPECT_EQ(EchoValue(utf8), std::string(63, 'a') + "...");

  const std::string huge(4 << 20, 'k');
  CompletionRequest r;
  const auto started = std::chrono::steady_clock::now();
  const std::optional<ApiError> e =
      ParseCompletionRequest(json{{"prompt", "x"}, {huge, 1}}, Endpoint::kCompletions, &r);
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(1));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->code, "unknown_parameter");
  EXPECT_LT(e->Body().dump().size(), 600u) << e->Body().dump().substr(0, 300);
  for (const char* field : {"probe_set", "steering_name"}) {
    const std::optional<ApiError> name =
        ParseCompletionRequest(json{{"prompt", "x"}, {field, huge}}, Endpoint::kCompletions, &r);
    ASSERT_TRUE(name.has_value()) << field;
    EXPECT_EQ(name->param, field);
    EXPECT_LT(name->Body().dump().size(), 600u) << field;
  }
  const std::optional<ApiError> role = ParseCompletionRequest(
      json{{"messages", {{{"role", huge}, {"content", "x"}}}}}, Endpoint::kChatCompletions, &r);
  ASSERT_TRUE(role.has_value());
  EXPECT_LT(role->Body().dump().size(), 600u);
  // The last line of defence: any message and param are capped in the body.
  ApiError big = BadRequest(huge, huge);
  EXPECT_LT(big.Body().dump().size(), 5000u);
}

TEST(ProtocolTest, JsonDepthIsFoundWithoutParsing) {
  EXPECT_EQ(io::JsonDepthExceededAt(R"({"a": [[1], {"b": [2]}]})", 4), std::string_view::npos);
  EXPECT_EQ(io::JsonDepthExceededAt(R"({"a": [[1], {"b": [2]}]})", 3), 18u);
  EXPECT_EQ(io::JsonDepthExceededAt(R"({"a": [[1], {"b": [2]}]})", 2), 7u);
  // Brackets inside strings (escaped quotes included) do not count.
  EXPECT_EQ(io::JsonDepthExceededAt(R"(["[[[[", "\"[[[[", "\\"])", 1), std::string_view::npos);
  EXPECT_EQ(io::JsonDepthExceededAt(std::string(io::kMaxJsonDepth, '['), io::kMaxJsonDepth),
            std::string_view::npos);
  // 8e6 '[': found at the first level too many, in proportion to what was scanned.
  const std::string deep(8000000, '[');
  EXPECT_EQ(io::JsonDepthExceededAt(deep), static_cast<size_t>(io::kMaxJsonDepth));
}

TEST(ProtocolTest, SteeringFieldsInEveryForm) {
  CompletionRequest r;
  // 1.0f, -2.5f, 0.25f as little-endian float32, base64.
  ASSERT_FALSE(Parse(R"({"prompt": "Once",
      "steering_vectors": {"residual_stream": {"3": [1, -2.5, 0.25]}},
      "prefill_steering_vectors": {"attn_out": {"1": {"vector": "AACAPwAAIMAAAIA+", "scale": 2}}},
      "decode_steering_vectors": {"hook_mlp_out": {"0": {"vector": [0, 1, 0], "norm_match": true}}},
      "steering_name": "calm"})",
                     Endpoint::kCompletions, &r));
  ASSERT_EQ(r.steering.size(), 3u);
  auto find = [&](const std::string& param) -> const worker::SteeringVector& {
    for (const auto& e : r.steering) {
      if (e.param == param) return e.vector;
    }
    ADD_FAILURE() << "no " << param;
    return r.steering[0].vector;
  };
  const worker::SteeringVector& all = find("steering_vectors.residual_stream.3");
  EXPECT_EQ(all.layer, 3);
  EXPECT_EQ(all.site, models::Site::kResidPost);
  EXPECT_EQ(all.tokens, worker::SteeringTokens::kAll);
  EXPECT_EQ(all.values, (std::vector<float>{1.0f, -2.5f, 0.25f}));
  const worker::SteeringVector& prefill = find("prefill_steering_vectors.attn_out.1");
  EXPECT_EQ(prefill.site, models::Site::kAttnOut);
  EXPECT_EQ(prefill.tokens, worker::SteeringTokens::kPrompt);
  EXPECT_EQ(prefill.values, (std::vector<float>{1.0f, -2.5f, 0.25f}));
  EXPECT_EQ(prefill.scale, 2.0f);
  const worker::SteeringVector& decode = find("decode_steering_vectors.hook_mlp_out.0");
  EXPECT_EQ(decode.site, models::Site::kMlpOut);
  EXPECT_EQ(decode.tokens, worker::SteeringTokens::kGenerated);
  EXPECT_TRUE(decode.norm_match);
  EXPECT_EQ(r.steering_name, "calm");
  CompletionRequest chat;
  ASSERT_FALSE(Parse(R"({"messages": [{"role": "user", "content": "hi"}],
      "steering_vectors": {"attn_out": {"2": [0.5]}}})",
                     Endpoint::kChatCompletions, &chat));
  EXPECT_EQ(chat.steering.size(), 1u);
}

// TransformerLens hook names: hook_resid_pre of block L steers the stream after L - 1,
// hook_resid_mid of L its attn_out (the stream the MLP reads), "blocks.L.<hook>" names the block.
TEST(ProtocolTest, SteeringAcceptsTransformerLensHooks) {
  CompletionRequest r;
  ASSERT_FALSE(Parse(R"({"prompt": "Once",
      "steering_vectors": {"hook_resid_pre": {"3": [1]}, "hook_resid_mid": {"2": [2]},
                           "blocks.4.hook_resid_post": [3], "blocks.1.hook_resid_pre": [4],
                           "blocks.5.hook_mlp_out": {"vector": [5], "scale": 2}}})",
                     Endpoint::kCompletions, &r));
  std::map<std::string, std::pair<int, models::Site>> got;
  for (const auto& e : r.steering) got[e.param] = {e.vector.layer, e.vector.site};
  const std::map<std::string, std::pair<int, models::Site>> want = {
      {"steering_vectors.hook_resid_pre.3", {2, models::Site::kResidPost}},
      {"steering_vectors.hook_resid_mid.2", {2, models::Site::kAttnOut}},
      {"steering_vectors.blocks.4.hook_resid_post", {4, models::Site::kResidPost}},
      {"steering_vectors.blocks.1.hook_resid_pre", {0, models::Site::kResidPost}},
      {"steering_vectors.blocks.5.hook_mlp_out", {5, models::Site::kMlpOut}},
  };
  EXPECT_EQ(got, want);
  for (const auto& e : r.steering) {
    EXPECT_EQ(e.resid_mid, e.param == "steering_vectors.hook_resid_mid.2") << e.param;
  }
  for (const std::string& field : {std::string(R"({"hook_resid_pre": {"0": [1]}})"),
                                   std::string(R"({"blocks.0.hook_resid_pre": [1]})")}) {
    CompletionRequest bad;
    const auto error = Parse(R"({"prompt": "Once", "steering_vectors": )" + field + "}",
                             Endpoint::kCompletions, &bad);
    ASSERT_TRUE(error.has_value()) << field;
    EXPECT_EQ(error->http_status, 400);
    EXPECT_NE(error->message.find("embedding output"), std::string::npos) << error->message;
  }
}

TEST(ProtocolTest, BadSteeringIsA400NamingThePath) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"("steering_vectors": [1, 2])", "steering_vectors"},
      {R"("steering_vectors": {"final_norm": {"1": [1]}})", "steering_vectors.final_norm"},
      {R"("steering_vectors": {"attn_out": {"x1": [1]}})", "steering_vectors.attn_out.x1"},
      {R"("steering_vectors": {"attn_out": {"-1": [1]}})", "steering_vectors.attn_out.-1"},
      {R"("decode_steering_vectors": {"mlp_out": {"2": [1, "a"]}})",
       "decode_steering_vectors.mlp_out.2"},
      {R"("steering_vectors": {"attn_out": {"2": "not base64!"}})", "steering_vectors.attn_out.2"},
      // Five bytes: not a whole number of floats.
      {R"("steering_vectors": {"attn_out": {"2": "AAAAAAA="}})", "steering_vectors.attn_out.2"},
      // A NaN (0x7fc00000) smuggled in base64.
      {R"("steering_vectors": {"attn_out": {"2": "AADAfw=="}})", "steering_vectors.attn_out.2"},
      {R"("steering_vectors": {"attn_out": {"2": {"scale": 1}}})",
       "steering_vectors.attn_out.2.vector"},
      {R"("steering_vectors": {"attn_out": {"2": {"vector": [1], "gain": 1}}})",
       "steering_vectors.attn_out.2.gain"},
      {R"("steering_name": 3)", "steering_name"},
  };
  for (const auto& [field, param] : cases) {
    CompletionRequest r;
    const auto error = Parse(R"({"prompt": "Once", )" + field + "}", Endpoint::kCompletions, &r);
    ASSERT_TRUE(error.has_value()) << field;
    EXPECT_EQ(error->http_status, 400) << field;
    EXPECT_EQ(error->param, param) << field << ": " << error->message;
  }
  EXPECT_FALSE(DecodeBase64("QQ=").has_value());
  EXPECT_EQ(*DecodeBase64("QUJD"), "ABC");
  EXPECT_EQ(*DecodeBase64("QUI="), "AB");
  EXPECT_EQ(*DecodeBase64("QUI"), "AB");
}

TEST(ProtocolTest, LogprobFields) {
  CompletionRequest r;
  ASSERT_FALSE(Parse(R"({"prompt": "x", "logprobs": 3, "echo": true, "max_tokens": 1})",
                     Endpoint::kCompletions, &r));
  EXPECT_EQ(r.logprobs, 3);
  EXPECT_TRUE(r.echo);
  EXPECT_EQ(r.sampling.logprobs, 3);
  EXPECT_EQ(r.sampling.prompt_logprobs, 3);  // echo needs the prompt's
  EXPECT_FALSE(r.prompt_logprobs.has_value());
  ASSERT_FALSE(Parse(R"({"prompt": "x", "cache_salt": "tenant-7"})", Endpoint::kCompletions, &r));
  EXPECT_EQ(r.sampling.cache_salt, "tenant-7");
  ASSERT_FALSE(Parse(R"({"messages": [{"role": "user", "content": "hi"}], "cache_salt": "t"})",
                     Endpoint::kChatCompletions, &r));
  EXPECT_EQ(r.sampling.cache_salt, "t");
  ASSERT_FALSE(Parse(R"({"prompt": "x", "n": 2, "best_of": 4})", Endpoint::kCompletions, &r));
  EXPECT_EQ(r.best_of, 4);
  EXPECT_FALSE(r.logprobs.has_value());
  EXPECT_EQ(r.sampling.logprobs, 0);  // ranks the candidates
  ASSERT_FALSE(Parse(R"({"prompt": "x", "n": 2})", Endpoint::kCompletions, &r));
  EXPECT_EQ(r.best_of, 2);
  EXPECT_FALSE(r.sampling.logprobs.has_value());
  ASSERT_FALSE(Parse(R"({"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 4,
      "logprobs": true, "prompt_logprobs": 2})",
                     Endpoint::kChatCompletions, &r));
  EXPECT_EQ(r.logprobs, 4);
  EXPECT_EQ(r.sampling.logprobs, 4);
  EXPECT_EQ(r.sampling.prompt_logprobs, 2);
  ASSERT_FALSE(Parse(R"({"messages": [{"role": "user", "content": "hi"}], "logprobs": false})",
                     Endpoint::kChatCompletions, &r));
  EXPECT_FALSE(r.logprobs.has_value());
  const struct {
    std::string body;
    std::string param;
  } chat_errors[] = {
      {R"({"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2})", "top_logprobs"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "logprobs": true,
          "top_logprobs": 21})",
       "top_logprobs"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "logprobs": 3})", "logprobs"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "echo": true})", "echo"},
  };
  for (const auto& c : chat_errors) {
    auto e = Parse(c.body, Endpoint::kChatCompletions, &r);
    ASSERT_TRUE(e) << c.body;
    EXPECT_EQ(e->http_status, 400);
    EXPECT_EQ(e->param, c.param) << c.body;
  }
}

worker::PositionLogprobs Entry(int32_t token, float logprob, std::vector<int32_t> top) {
  worker::PositionLogprobs p;
  p.chosen = {token, logprob, 1};
  for (size_t i = 0; i < top.size(); ++i) {
    p.top.push_back({top[i], logprob - static_cast<float>(i), static_cast<int32_t>(i) + 1});
  }
  return p;
}

TEST(ProtocolTest, LogprobsInOpenAisShapes) {
  engine::RequestOutput out = Finished(engine::FinishReason::kLength, std::nullopt);
  out.prompt_ids = {1, 2};
  out.output_ids = {5, 6};
  out.logprobs = {Entry(5, -0.5f, {5, 7}), Entry(6, -1.5f, {6, 8})};
  out.prompt_logprobs = {std::nullopt, Entry(2, -3.0f, {9, 2})};
  const TokenText text = [](int32_t id) { return "t" + std::to_string(id); };
  ResponseContext ctx{Endpoint::kCompletions, "cmpl-1", 1, "m", false, 1, 1, true, text};
  ChoiceResult choice{0, out, std::nullopt, std::nullopt, "Hi"};
  const json body = ResponseBody(ctx, {choice}, Usage{2, 2});
  const json& c = body["choices"][0];
  EXPECT_EQ(c["text"], "HiHello");  // the echo, then the completion
  EXPECT_EQ(c["logprobs"]["tokens"], json({"t1", "t2", "t5", "t6"}));
  EXPECT_EQ(c["logprobs"]["token_logprobs"][0], nullptr);
  EXPECT_EQ(c["logprobs"]["token_logprobs"][1], -3.0);
  EXPECT_EQ(c["logprobs"]["token_logprobs"][2], -0.5);
  EXPECT_EQ(c["logprobs"]["top_logprobs"][0], nullptr);
  // Top 1 plus the chosen token.
  EXPECT_EQ(c["logprobs"]["top_logprobs"][1], json({{"t9", -3.0}, {"t2", -3.0}}));
  EXPECT_EQ(c["logprobs"]["top_logprobs"][2], json({{"t5", -0.5}}));
  EXPECT_EQ(c["logprobs"]["text_offset"], json({0, 2, 4, 6}));
  EXPECT_EQ(c["prompt_logprobs"][0], nullptr);
  EXPECT_EQ(c["prompt_logprobs"][1]["9"]["rank"], 1);
  EXPECT_EQ(c["prompt_logprobs"][1]["2"]["decoded_token"], "t2");

  ResponseContext chat{
      Endpoint::kChatCompletions, "c-1", 1, "m", false, 2, std::nullopt, false, text};
  const json cb = ResponseBody(chat, {ChoiceResult{0, out, std::nullopt, std::nullopt}}, {});
  const json& content = cb["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 2u);
  EXPECT_EQ(content[0]["token"], "t5");
  EXPECT_EQ(content[0]["logprob"], -0.5);
  EXPECT_EQ(content[0]["bytes"], json({116, 53}));
  ASSERT_EQ(content[0]["top_logprobs"].size(), 2u);
  EXPECT_EQ(content[0]["top_logprobs"][1]["token"], "t7");
  EXPECT_EQ(cb["choices"][0]["logprobs"]["refusal"], nullptr);
  EXPECT_FALSE(cb.contains("prompt_logprobs"));
  const json chunk = TextChunk(chat, 0, "x", false, {out.logprobs[1]});
  EXPECT_EQ(chunk["choices"][0]["logprobs"]["content"][0]["token"], "t6");
  // Without logprobs asked: null, as before.
  ResponseContext plain{Endpoint::kChatCompletions, "c-2", 1, "m", false};
  EXPECT_EQ(ResponseBody(plain, {ChoiceResult{0, out, {}, {}}}, {})["choices"][0]["logprobs"],
            nullptr);
}

TEST(ProtocolTest, FlaggedChoiceAndChunks) {
  engine::AbortInfo info("probe", "extraction point 'gate' aborted generation");
  info.point = "gate";
  info.confidence = 12.5;
  ChoiceResult choice{0, Finished(engine::FinishReason::kAbort, info),
                      json{{"gate", {{"flagged", true}}}}, std::nullopt};
  ResponseContext ctx{Endpoint::kChatCompletions, "chatcmpl-1", 1, "m", true};
  EXPECT_EQ(FinishReasonOf(choice.output), "content_flagged");
  const json body = ResponseBody(ctx, {choice}, Usage{3, 2});
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "content_flagged");
  EXPECT_EQ(body["choices"][0]["flagged_by"], "gate");
  EXPECT_EQ(body["choices"][0]["flagged_score"], 12.5);
  EXPECT_EQ(body["flagged_by"], "gate");
  EXPECT_EQ(body["probing"]["gate"]["flagged"], true);
  EXPECT_EQ(body["usage"]["total_tokens"], 5);
  const json chunk = FinishChunk(ctx, choice, /*include_usage=*/true);
  EXPECT_EQ(chunk["choices"][0]["delta"], json::object());
  EXPECT_EQ(chunk["choices"][0]["finish_reason"], "content_flagged");
  EXPECT_EQ(chunk["flagged"], true);
  EXPECT_TRUE(chunk["usage"].is_null());
  EXPECT_EQ(SseEvent(json{{"a", 1}}, "probing_result"),
            "event: probing_result\ndata: {\"a\":1}\n\n");

  ChoiceResult client{0, Finished(engine::FinishReason::kAbort, engine::AbortInfo()), {}, {}};
  EXPECT_EQ(FinishReasonOf(client.output), "abort");
  ResponseContext plain{Endpoint::kCompletions, "cmpl-1", 1, "m", false};
  const json text = ResponseBody(plain, {client}, Usage{});
  EXPECT_EQ(text["choices"][0]["text"], "Hello");
  EXPECT_FALSE(text.contains("probing"));
}

TEST(ProtocolTest, ProbingSummaryScores) {
  probe::Spec spec;
  probe::ExtractionPoint one;
  one.name = "one";
  one.probe_kind = probe::ProbeKind::kSingleShot;
  probe::ExtractionPoint traj = one;
  traj.name = "traj";
  traj.probe_kind = probe::ProbeKind::kTrajectory;
  traj.execution_mode = probe::ExecutionMode::kAsync;
  probe::ExtractionPoint never = one;
  never.name = "never";
  spec.extraction_points = {one, traj, never};
  probe::RequestProbeResults results;
  probe::ProbeResult r1{"id", "one", json{{"flagged", false}}, {}, json::object()};
  probe::ProbeSignal s;
  s.confidence = 0.25;
  r1.signal_history = {s};
  probe::ProbeResult r2 = r1;
  r2.point = "traj";
  s.confidence = 0.75;
  s.action = probe::ProbeAction::kFlag;
  r2.signal_history.push_back(s);
  probe::ProbeResult r3{"id", "never", json(nullptr), {}, json::object()};
  results.results = {r1, r2, r3};
  const json j = ProbingSummary(results, spec);
  EXPECT_EQ(j["one"]["score"], 0.25);
  EXPECT_EQ(j["one"]["flagged"], false);
  EXPECT_EQ(j["one"]["execution_mode"], "inline");
  EXPECT_EQ(j["traj"]["score"]["max_score"], 0.75);
  EXPECT_EQ(j["traj"]["score"]["final_score"], 0.75);
  EXPECT_EQ(j["traj"]["flagged"], true);
  EXPECT_EQ(j["traj"]["execution_mode"], "async");
  EXPECT_EQ(j["never"]["evaluated"], false);
  EXPECT_EQ(j["one"]["evaluated"], true);
  probe::ProbeResult quiet{"id", "never", json{{"count", 4}}, {}, json::object()};
  results.results = {quiet};
  EXPECT_EQ(ProbingSummary(results, spec)["never"]["evaluated"], true);
  EXPECT_TRUE(j["never"]["score"].is_null());
}

}  // namespace
}  // namespace uc::server
