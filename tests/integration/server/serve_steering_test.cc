// Per-request steering over HTTP through the real `undercurrent serve` on stories260K: the
// steering_vectors / prefill_ / decode_ body fields (arrays, base64, {vector, scale}) and
// steering_name (--steering-module) give the text the engine gives the same steering in-process
// (itself checked against transformers by request_steering_test), next to unsteered requests
// in the same batch; GET /v1/steering lists the modules; bad vectors are 400s naming the field.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "common/server_util.h"
#include "common/steering_util.h"
#include "common/test_util.h"
#include "engine/llm.h"
#include "models/steering.h"

namespace uc {
namespace {

using json = nlohmann::json;
using testing::HttpGet;
using testing::HttpPost;
using testing::ServeProcess;

const std::string kModel = std::string(UC_SOURCE_DIR) + "/models/stories260K";

std::string Base64(const std::vector<float>& values) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes(values.size() * sizeof(float), '\0');
  std::memcpy(bytes.data(), values.data(), bytes.size());
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t n = static_cast<uint8_t>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) n |= static_cast<uint8_t>(bytes[i + 1]) << 8;
    if (i + 2 < bytes.size()) n |= static_cast<uint8_t>(bytes[i + 2]);
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(n >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? kAlphabet[n & 63] : '=';
  }
  return out;
}

// The text the engine generates in-process for `prompt` with `steering`.
std::string EngineText(const std::vector<int32_t>& prompt, engine::RequestSteering steering) {
  engine::EngineOptions options;
  options.model_path = kModel;
  options.num_threads = 1;
  auto llm = engine::LLM::Open(options);
  EXPECT_TRUE(llm.ok()) << llm.status().ToString();
  const auto results = (*llm)->Generate(
      {{"x", engine::Prompt::Ids(prompt), testing::Greedy(16), std::move(steering)}});
  EXPECT_TRUE(results[0].status.ok()) << results[0].status.ToString();
  return results[0].output.text;
}

json Body(const std::vector<int32_t>& prompt) {
  return {{"prompt", prompt}, {"max_tokens", 16}, {"temperature", 0}, {"ignore_eos", true}};
}

TEST(ServeSteeringTest, BodyFieldsAndModulesSteerLikeTheEngine) {
  const nlohmann::json& cases = testing::RequestSteeringReference()["cases"];
  const std::vector<int32_t> prompt =
      testing::JsonInts(testing::RequestSteeringReference()["input_ids"]);
  const std::string module = testing::TestData("steering/vectors_a.gguf").string();
  ServeProcess server({"--model", kModel, "--threads", "1", "--steering-module", "a=" + module,
                       "--max-steering-configs", "2"});
  ASSERT_TRUE(server.ok()) << server.log();

  // The reference cases as body fields: the key and hook of each vector from its tokens/site.
  std::vector<json> bodies;
  std::vector<std::string> expected;
  for (const auto& c : cases) {
    if (c["from_position"].get<int>() > 0 || !c["until_position"].is_null()) {
      continue;  // conditional: spec-driven, not HTTP
    }
    json body = Body(prompt);
    for (const auto& v : c["vectors"]) {
      const std::string tokens = v["tokens"];
      const std::string key = tokens == "prompt"      ? "prefill_steering_vectors"
                              : tokens == "generated" ? "decode_steering_vectors"
                                                      : "steering_vectors";
      json vector = {{"vector", Base64(testing::JsonFloats(v["values"]))},
                     {"scale", v["scale"]},
                     {"norm_match", v["norm_match"]}};
      if (v["scale"] == 1.0 && !v["norm_match"].get<bool>()) vector = v["values"];  // plain array
      body[key][v["site"].get<std::string>()][std::to_string(v["layer"].get<int>())] = vector;
    }
    bodies.push_back(body);
    expected.push_back(EngineText(prompt, testing::RequestSteeringOf(c)));
  }
  // steering_name: vectors_a's directions on the residual stream, as --control-vector adds them.
  {
    auto vectors = models::ReadControlVectorFile(module, 64, 5);
    ASSERT_TRUE(vectors.ok()) << vectors.status().ToString();
    auto config = std::make_shared<worker::SteeringConfig>();
    for (const auto& [layer, values] : *vectors) {
      config->vectors.push_back({.layer = layer, .values = values});
    }
    json body = Body(prompt);
    body["steering_name"] = "a";
    bodies.push_back(body);
    expected.push_back(EngineText(prompt, {config}));
  }
  std::set<std::string> distinct(expected.begin(), expected.end());
  EXPECT_EQ(distinct.size(), expected.size()) << "each steering gives its own text";

  // All at once (and twice each), so steered and unsteered requests share batches.
  std::vector<testing::HttpResult> results(bodies.size() * 2);
  std::vector<std::thread> clients;
  for (size_t i = 0; i < results.size(); ++i) {
    clients.emplace_back([&, i] {
      results[i] = HttpPost(server.port(), "/v1/completions", bodies[i % bodies.size()].dump());
    });
  }
  for (std::thread& t : clients) t.join();
  for (size_t i = 0; i < results.size(); ++i) {
    ASSERT_EQ(results[i].status, 200) << results[i].body;
    EXPECT_EQ(results[i].Json()["choices"][0]["text"], expected[i % bodies.size()])
        << bodies[i % bodies.size()].dump().substr(0, 200);
  }

  const testing::HttpResult listed = HttpGet(server.port(), "/v1/steering");
  ASSERT_EQ(listed.status, 200) << listed.body;
  const json list = listed.Json();
  ASSERT_EQ(list["data"].size(), 1u) << list.dump();
  EXPECT_EQ(list["data"][0]["name"], "a");
  EXPECT_EQ(list["data"][0]["layers"], json({1, 3}));
  EXPECT_EQ(list["hidden_size"], 64);
  EXPECT_EQ(list["max_steering_configs"], 2);
}

TEST(ServeSteeringTest, BadVectorsAre400sNamingTheField) {
  ServeProcess server({"--model", kModel, "--threads", "1"});
  ASSERT_TRUE(server.ok()) << server.log();
  const std::vector<float> ok(64, 0.1f);
  std::vector<float> nan = ok;
  nan[7] = std::nanf("");
  const std::vector<std::tuple<json, std::string, std::string>> cases = {
      {{{"steering_vectors", {{"residual_stream", {{"2", std::vector<float>(63, 0.1f)}}}}}},
       "steering_vectors.residual_stream.2",
       "has 63 values; the model's hidden size is 64"},
      {{{"steering_vectors", {{"attn_out", {{"5", ok}}}}}},
       "steering_vectors.attn_out.5",
       "the model has layers 0 to 4"},
      {{{"decode_steering_vectors", {{"mlp_out", {{"1", Base64(nan)}}}}}},
       "decode_steering_vectors.mlp_out.1",
       "non-finite value at index 7"},
      {{{"steering_name", "calm"}}, "steering_name", "this server registers none"},
      {{{"steering_vectors", {{"final_norm", {{"1", ok}}}}}},
       "steering_vectors.final_norm",
       "Unknown steering hook"},
  };
  for (const auto& [fields, param, message] : cases) {
    json body = Body({1, 403, 407});
    body.update(fields);
    const testing::HttpResult r = HttpPost(server.port(), "/v1/completions", body.dump());
    EXPECT_EQ(r.status, 400) << param << ": " << r.body;
    const json error = r.Json()["error"];
    EXPECT_EQ(error["param"], param) << r.body;
    EXPECT_NE(error["message"].get<std::string>().find(message), std::string::npos) << r.body;
  }
  // The server is unharmed.
  const testing::HttpResult fine = HttpPost(server.port(), "/v1/completions", Body({1}).dump());
  EXPECT_EQ(fine.status, 200) << fine.body;
}

TEST(ServeSteeringTest, BadModulesStopTheServerNamingTheFile) {
  const std::string bad = testing::TestData("steering/bad_hidden.gguf").string();
  for (const auto& [flag, message] : std::vector<std::pair<std::string, std::string>>{
           {"b=" + bad, bad + ": tensor 'direction.2' has 48 values"},
           {"noequals", "expected NAME=FILE"}}) {
    ServeProcess server({"--model", kModel, "--threads", "1", "--steering-module", flag}, 60);
    EXPECT_FALSE(server.ok()) << flag;
    EXPECT_NE(server.log().find(message), std::string::npos) << server.log();
  }
}

}  // namespace
}  // namespace uc
