// Logprobs and the tokenizer endpoints of `undercurrent serve`, through the real binary on
// loopback with the bundled stories260K: completions' echo + logprobs (what lm-eval-harness's
// loglikelihood requests send) equal a log-softmax computed here from the one-request
// Generator's logits; a greedy token's logprob is the largest of its top_logprobs exactly;
// chat logprobs streamed and not agree; prompt_logprobs, n with best_of; bad values are 400s
// naming the field; /tokenize, /detokenize and /tokenizer_info in vLLM's shapes agree with the
// engine's tokenizer and the chat endpoint; a repeated prompt reports its cached tokens
// (usage.prompt_tokens_details, /metrics) unless --no-prefix-caching.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <string>

#include "common/server_util.h"
#include "common/test_util.h"
#include "engine/generator.h"

namespace uc {
namespace {

using json = nlohmann::json;
using testing::HttpGet;
using testing::HttpPost;
using testing::HttpStream;
using testing::ServeProcess;

const std::string kLpModel = std::string(UC_SOURCE_DIR) + "/models/stories260K";
const char* kLpPrompt = "Once upon a time, there was a little girl named Lily. She";

class ServeLogprobsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // ctest runs each test of the suite in a process of its own, two at a time: a directory per
    // process, or one process's template write truncates the file another's server is reading
    // (a chat request then renders an empty prompt).
    const std::string dir =
        testing::ScratchDir("serve_logprobs_test_" + std::to_string(getpid())).string();
    // stories260K has no chat template: a plain one, so chat requests run.
    template_path_ = new std::string(dir + "/chat.jinja");
    std::ofstream(*template_path_)
        << "{% for m in messages %}{{ m['content'] }}\n{% endfor %}Answer:";
    server_ = new ServeProcess({"--model", kLpModel, "--threads", "2", "--chat-template",
                                *template_path_, "--served-model-name", "st"});
    auto gen =
        engine::Generator::Open({.model_path = kLpModel, .tokenizer_path = {}, .num_threads = 2});
    UC_CHECK(gen.ok(), "%s", gen.status().ToString().c_str());
    solo_ = gen->release();
  }
  static void TearDownTestSuite() {
    delete server_;
    delete solo_;
    std::filesystem::remove_all(std::filesystem::path(*template_path_).parent_path());
    delete template_path_;
  }
  void SetUp() override { ASSERT_TRUE(server_->ok()) << server_->log(); }

  static json Post(const std::string& path, const json& body, int status = 200) {
    const testing::HttpResult r = HttpPost(server_->port(), path, body.dump());
    EXPECT_EQ(r.status, status) << path << " " << body.dump() << " -> " << r.body;
    return r.Json();
  }
  // log softmax of the Generator's logits at `row` of `ids`, for `token`, in double.
  static std::vector<double> Oracle(const std::vector<int32_t>& ids) {
    auto logits = solo_->ScoreAllPositions(ids);
    UC_CHECK(logits.ok(), "%s", logits.status().ToString().c_str());
    const int64_t vocab = logits->shape()[1];
    std::vector<double> out = {0.0};  // position 0: nothing predicts it
    for (size_t q = 1; q < ids.size(); ++q) {
      const float* x = logits->data<float>() + (q - 1) * vocab;
      double max = x[0], sum = 0.0;
      for (int64_t i = 1; i < vocab; ++i) max = std::max(max, static_cast<double>(x[i]));
      for (int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(x[i]) - max);
      out.push_back(static_cast<double>(x[ids[q]]) - max - std::log(sum));
    }
    return out;
  }

  static ServeProcess* server_;
  static engine::Generator* solo_;
  static std::string* template_path_;
};

ServeProcess* ServeLogprobsTest::server_ = nullptr;
engine::Generator* ServeLogprobsTest::solo_ = nullptr;
std::string* ServeLogprobsTest::template_path_ = nullptr;

TEST_F(ServeLogprobsTest, EchoedPromptLogprobsEqualAnIndependentLogSoftmax) {
  // lm-eval-harness's loglikelihood request: prompt ids, echo, one token, logprobs 1.
  const json tokenized = Post("/tokenize", {{"prompt", kLpPrompt}});
  const std::vector<int32_t> ids = tokenized["tokens"].get<std::vector<int32_t>>();
  ASSERT_GT(ids.size(), 5u);
  EXPECT_EQ(ids, solo_->tokenizer().Encode(kLpPrompt, true, true));
  const json body = Post(
      "/v1/completions",
      {{"prompt", ids}, {"echo", true}, {"logprobs", 1}, {"max_tokens", 1}, {"temperature", 0}});
  const json& lp = body["choices"][0]["logprobs"];
  ASSERT_EQ(lp["token_logprobs"].size(), ids.size() + 1) << lp.dump();
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  const std::vector<double> oracle = Oracle(ids);
  for (size_t q = 1; q < ids.size(); ++q) {
    EXPECT_NEAR(lp["token_logprobs"][q].get<double>(), oracle[q], 2e-4) << "position " << q;
    EXPECT_LE(lp["top_logprobs"][q].size(), 2u);
  }
  // The generated greedy token: its logprob is the largest top entry, exactly (lm-eval's
  // is_greedy test), and it is the oracle's too.
  const json& last = lp["top_logprobs"][ids.size()];
  double best = -1e30;
  for (const auto& [token, value] : last.items()) best = std::max(best, value.get<double>());
  EXPECT_EQ(lp["token_logprobs"][ids.size()].get<double>(), best);
  const std::string text = body["choices"][0]["text"];
  EXPECT_EQ(text.rfind(solo_->tokenizer().Decode(ids), 0), 0u) << text;
  EXPECT_EQ(lp["tokens"].size(), lp["text_offset"].size());
  EXPECT_EQ(body["usage"]["prompt_tokens"], ids.size());

  // Streamed: the echo chunk first, then the completion, with the same logprobs.
  std::vector<json> chunks;
  const testing::StreamResult streamed = HttpStream(server_->port(), "/v1/completions",
                                                    json{{"prompt", ids},
                                                         {"echo", true},
                                                         {"logprobs", 1},
                                                         {"max_tokens", 1},
                                                         {"temperature", 0},
                                                         {"stream", true}}
                                                        .dump(),
                                                    [&](const testing::SseEvent& e) {
                                                      if (e.data != "[DONE]")
                                                        chunks.push_back(json::parse(e.data));
                                                      return true;
                                                    });
  ASSERT_EQ(streamed.status, 200);
  std::vector<json> token_logprobs;
  for (const json& c : chunks) {
    if (c["choices"].empty() || c["choices"][0]["logprobs"].is_null()) continue;
    for (const json& v : c["choices"][0]["logprobs"]["token_logprobs"]) token_logprobs.push_back(v);
  }
  EXPECT_EQ(json(token_logprobs), lp["token_logprobs"]);
}

TEST_F(ServeLogprobsTest, ChatLogprobsStreamedAndNotAgree) {
  const json request = {{"messages", {{{"role", "user"}, {"content", "Tell me about Lily."}}}},
                        {"logprobs", true},
                        {"top_logprobs", 3},
                        {"max_tokens", 12},
                        {"temperature", 0}};
  const json body = Post("/v1/chat/completions", request);
  const json& content = body["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), body["usage"]["completion_tokens"].get<size_t>()) << body.dump();
  for (const json& entry : content) {
    ASSERT_EQ(entry["top_logprobs"].size(), 3u);
    EXPECT_EQ(entry["logprob"], entry["top_logprobs"][0]["logprob"]);  // greedy
    EXPECT_EQ(entry["token"], entry["top_logprobs"][0]["token"]);
    EXPECT_TRUE(entry["bytes"].is_array());
  }
  json streamed_content = json::array();
  json with_stream = request;
  with_stream["stream"] = true;
  HttpStream(server_->port(), "/v1/chat/completions", with_stream.dump(),
             [&](const testing::SseEvent& e) {
               if (e.data == "[DONE]") return true;
               const json c = json::parse(e.data);
               if (!c["choices"].empty() && c["choices"][0]["logprobs"].is_object()) {
                 for (const json& x : c["choices"][0]["logprobs"]["content"]) {
                   streamed_content.push_back(x);
                 }
               }
               return true;
             });
  EXPECT_EQ(streamed_content, content);
  // The prompt a chat completion ran is what /tokenize renders for the same messages.
  const json tokenized = Post("/tokenize", {{"messages", request["messages"]}});
  EXPECT_EQ(tokenized["count"], body["usage"]["prompt_tokens"]);
  // vLLM's prompt_logprobs at the top level of a chat response.
  json with_prompt = request;
  with_prompt["prompt_logprobs"] = 1;
  const json pl = Post("/v1/chat/completions", with_prompt)["prompt_logprobs"];
  ASSERT_EQ(pl.size(), tokenized["count"].get<size_t>());
  EXPECT_TRUE(pl[0].is_null());
  const std::vector<double> oracle = Oracle(tokenized["tokens"].get<std::vector<int32_t>>());
  for (size_t q = 1; q < pl.size(); ++q) {
    const std::string id = std::to_string(tokenized["tokens"][q].get<int32_t>());
    ASSERT_TRUE(pl[q].contains(id)) << pl[q].dump();
    EXPECT_NEAR(pl[q][id]["logprob"].get<double>(), oracle[q], 2e-4);
    EXPECT_GE(pl[q][id]["rank"].get<int>(), 1);
  }
}

TEST_F(ServeLogprobsTest, BestOfReturnsTheMostLikelyCandidates) {
  const json body = Post("/v1/completions", {{"prompt", kLpPrompt},
                                             {"n", 2},
                                             {"best_of", 4},
                                             {"logprobs", 0},
                                             {"max_tokens", 8},
                                             {"temperature", 1.0},
                                             {"seed", 11}});
  ASSERT_EQ(body["choices"].size(), 2u) << body.dump();
  std::vector<double> sums;
  for (const json& c : body["choices"]) {
    double sum = 0;
    for (const json& v : c["logprobs"]["token_logprobs"]) sum += v.get<double>();
    sums.push_back(sum);
  }
  EXPECT_GE(sums[0], sums[1] - 1e-6);
  EXPECT_EQ(body["choices"][0]["index"], 0);
  EXPECT_EQ(body["choices"][1]["index"], 1);
  // The same four candidates as n = 4: the two returned are the two most likely of them.
  const json all = Post("/v1/completions", {{"prompt", kLpPrompt},
                                            {"n", 4},
                                            {"logprobs", 0},
                                            {"max_tokens", 8},
                                            {"temperature", 1.0},
                                            {"seed", 11}});
  std::vector<double> candidates;
  for (const json& c : all["choices"]) {
    double sum = 0;
    for (const json& v : c["logprobs"]["token_logprobs"]) sum += v.get<double>();
    candidates.push_back(sum);
  }
  std::sort(candidates.rbegin(), candidates.rend());
  EXPECT_NEAR(sums[0], candidates[0], 1e-4);
  EXPECT_NEAR(sums[1], candidates[1], 1e-4);
}

TEST_F(ServeLogprobsTest, BadValuesAreA400NamingTheField) {
  const struct {
    std::string path;
    json body;
    std::string param;
  } cases[] = {
      {"/v1/completions", {{"prompt", "x"}, {"logprobs", 21}}, "logprobs"},
      {"/v1/completions", {{"prompt", "x"}, {"n", 0}}, "n"},
      {"/v1/completions", {{"prompt", "x"}, {"n", 1000}}, "n"},
      {"/v1/completions", {{"prompt", "x"}, {"n", 3}, {"best_of", 2}}, "best_of"},
      {"/v1/completions", {{"prompt", "x"}, {"prompt_logprobs", 50}}, "prompt_logprobs"},
      {"/v1/chat/completions",
       {{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"top_logprobs", 2}},
       "top_logprobs"},
      {"/v1/chat/completions",
       {{"messages", {{{"role", "user"}, {"content", "x"}}}},
        {"logprobs", true},
        {"top_logprobs", 21}},
       "top_logprobs"},
      {"/tokenize", {{"prompt", 3}}, "prompt"},
      {"/tokenize", {{"prompt", "a"}, {"messages", json::array()}}, "messages"},
      {"/tokenize", {{"prompt", "a"}, {"add_special_tokens", "yes"}}, "add_special_tokens"},
      {"/tokenize", {{"text", "a"}}, "text"},
      {"/detokenize", {{"tokens", {1, -1}}}, "tokens"},
      {"/detokenize", {{"tokens", {1, 100000}}}, "tokens"},
      {"/detokenize", json::object(), "tokens"},
  };
  for (const auto& c : cases) {
    const json error = Post(c.path, c.body, 400);
    EXPECT_EQ(error["error"]["param"], c.param) << c.body.dump() << " -> " << error.dump();
  }
  EXPECT_EQ(HttpPost(server_->port(), "/tokenize", R"({"prompt": "a", "model": "other"})").status,
            404);
  EXPECT_EQ(HttpPost(server_->port(), "/detokenize", "{not json").status, 400);
}

TEST_F(ServeLogprobsTest, TokenizerEndpointsInVllmsShapes) {
  const json t =
      Post("/tokenize", {{"prompt", "Lily liked the park."}, {"return_token_strs", true}});
  const std::vector<int32_t> ids = t["tokens"].get<std::vector<int32_t>>();
  EXPECT_EQ(ids, solo_->tokenizer().Encode("Lily liked the park.", true, true));
  EXPECT_EQ(t["count"], ids.size());
  EXPECT_GT(t["max_model_len"].get<int>(), 0);
  ASSERT_EQ(t["token_strs"].size(), ids.size());
  EXPECT_EQ(t["token_strs"][1], std::string(solo_->tokenizer().TokenText(ids[1])));
  const json plain =
      Post("/tokenize", {{"prompt", "Lily liked the park."}, {"add_special_tokens", false}});
  EXPECT_EQ(plain["count"].get<size_t>() + 1, ids.size());  // no BOS
  EXPECT_TRUE(plain["token_strs"].is_null());
  const json d = Post("/detokenize", {{"tokens", plain["tokens"]}, {"model", "st"}});
  EXPECT_EQ(d["prompt"], "Lily liked the park.");
  const testing::HttpResult info = HttpGet(server_->port(), "/tokenizer_info");
  ASSERT_EQ(info.status, 200) << info.body;
  const json i = info.Json();
  EXPECT_EQ(i["vocab_size"], 512);
  EXPECT_TRUE(i["tokenizer_class"].is_string());
  EXPECT_EQ(i["bos_token"], "<s>");
  EXPECT_EQ(i["add_bos_token"], true);
  EXPECT_EQ(i["model_max_length"], t["max_model_len"]);
}

TEST_F(ServeLogprobsTest, PrefixCachingReportsCachedTokensAndCanBeTurnedOff) {
  const std::string prompt = std::string(kLpPrompt) +
                             " loved to play outside in the park with her friends. One day, she "
                             "saw a big red ball under a tree and ran to get it.";
  const json request = {{"prompt", prompt}, {"max_tokens", 6}, {"temperature", 0}};
  const json first = Post("/v1/completions", request);
  const json second = Post("/v1/completions", request);
  EXPECT_EQ(second["choices"][0]["text"], first["choices"][0]["text"]);
  EXPECT_GE(second["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 48)
      << second["usage"].dump();
  EXPECT_LT(second["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(),
            second["usage"]["prompt_tokens"].get<int>());
  const std::string metrics = HttpGet(server_->port(), "/metrics").body;
  EXPECT_GE(testing::MetricValue(metrics, "undercurrent_prefix_cache_hits_total"), 48);
  EXPECT_GT(testing::MetricValue(metrics, "undercurrent_prefix_cache_queries_total"),
            testing::MetricValue(metrics, "undercurrent_prefix_cache_hits_total"));

  ServeProcess off({"--model", kLpModel, "--threads", "1", "--no-prefix-caching"});
  ASSERT_TRUE(off.ok()) << off.log();
  for (int i = 0; i < 2; ++i) {
    const testing::HttpResult r = HttpPost(off.port(), "/v1/completions", request.dump());
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.Json()["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    EXPECT_EQ(r.Json()["choices"][0]["text"], first["choices"][0]["text"]);
  }
}

}  // namespace
}  // namespace uc
