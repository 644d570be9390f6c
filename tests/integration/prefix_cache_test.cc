// Automatic prefix caching on the bundled stories260K: requests sharing a long prefix reuse its
// KV blocks (a hit rate above zero, cached_tokens per request) with greedy outputs identical to
// the cache turned off; steered and unsteered requests with the same prompt never share a
// block; and a spec on prompt positions gets exactly the records it gets without the cache —
// while a spec on generated positions only lets the cache serve the prompt, which is what would
// make the prompt-position records vanish if the engine ignored the spec; and cache_salt keeps
// tenants' blocks apart.
#include <gtest/gtest.h>

#include "common/probing_util.h"
#include "common/test_util.h"
#include "engine/llm.h"
#include "engine/llm_engine.h"

namespace uc {
namespace {

using engine::GenerateRequest;
using engine::Prompt;
using probe::ActivationRecord;
using testing::Greedy;

std::unique_ptr<engine::LLM> OpenCached(bool prefix_caching) {
  engine::EngineOptions o;
  o.model_path = std::string(UC_SOURCE_DIR) + "/models/stories260K";
  o.num_threads = 2;
  o.max_model_len = 256;
  o.max_prefill_chunk = 32;
  o.enable_prefix_caching = prefix_caching;
  auto llm = engine::LLM::Open(o);
  EXPECT_TRUE(llm.ok()) << llm.status().ToString();
  return llm.ok() ? std::move(llm).value() : nullptr;
}

// A shared "system prompt" of about 70 tokens, then a different question each.
const char* kShared =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
    "park with her friends. One day, she saw a big red ball under a tree and ran to get it. ";

std::vector<GenerateRequest> SharedPrefixRequests(int count, const std::string& tag) {
  const char* tails[] = {"Then she", "Her mom said", "The dog", "A bird", "They all"};
  std::vector<GenerateRequest> requests;
  for (int i = 0; i < count; ++i) {
    requests.push_back(
        {tag + std::to_string(i), Prompt::Text(std::string(kShared) + tails[i % 5]), Greedy(12)});
  }
  return requests;
}

std::vector<engine::GenerateResult> OneByOne(engine::LLM& llm,
                                             const std::vector<GenerateRequest>& requests) {
  std::vector<engine::GenerateResult> out;
  for (const GenerateRequest& r : requests) out.push_back(llm.Generate({r})[0]);
  return out;
}

TEST(PrefixCacheTest, SharedPrefixIsReusedWithIdenticalGreedyOutputs) {
  auto cached = OpenCached(true);
  auto plain = OpenCached(false);
  ASSERT_TRUE(cached && plain);
  const std::vector<GenerateRequest> requests = SharedPrefixRequests(5, "q");
  const auto with = OneByOne(*cached, requests);
  const auto without = OneByOne(*plain, requests);
  for (size_t i = 0; i < requests.size(); ++i) {
    ASSERT_TRUE(with[i].status.ok() && without[i].status.ok());
    EXPECT_EQ(with[i].output.output_ids, without[i].output.output_ids) << i;
    EXPECT_EQ(without[i].output.num_cached_tokens, 0);
    if (i == 0) {
      EXPECT_EQ(with[i].output.num_cached_tokens, 0);
    } else {
      // Every full block of the shared prefix (16 tokens a block) comes from the cache.
      EXPECT_GE(with[i].output.num_cached_tokens, 48) << i;
      EXPECT_LT(with[i].output.num_cached_tokens,
                static_cast<int>(with[i].output.prompt_ids.size()));
    }
  }
  const engine::EngineStats stats = cached->engine().stats();
  EXPECT_TRUE(stats.prefix_caching);
  EXPECT_GT(stats.prefix_cache_hits, 0);
  EXPECT_LT(stats.prefix_cache_hits, stats.prefix_cache_queries);
  EXPECT_FALSE(plain->engine().stats().prefix_caching);
  EXPECT_EQ(plain->engine().stats().prefix_cache_hits, 0);
  // Concurrently (all in one batch, then again): the same text.
  const auto batched = cached->Generate(SharedPrefixRequests(5, "b"));
  for (size_t i = 0; i < batched.size(); ++i) {
    EXPECT_EQ(batched[i].output.output_ids, without[i].output.output_ids) << i;
  }
  EXPECT_EQ(cached->engine().stats().num_free_kv_blocks, cached->engine().stats().num_kv_blocks);
}

TEST(PrefixCacheTest, SteeredAndUnsteeredRequestsNeverShareBlocks) {
  auto cached = OpenCached(true);
  auto plain = OpenCached(false);
  ASSERT_TRUE(cached && plain);
  const int hidden = cached->engine().config().hidden_size;
  auto config = std::make_shared<worker::SteeringConfig>();
  worker::SteeringVector v;
  v.layer = 2;
  v.site = models::Site::kResidPost;
  v.values.assign(static_cast<size_t>(hidden), 0.0f);
  v.values[3] = 4.0f;
  config->vectors.push_back(v);
  engine::RequestSteering steering;
  steering.config = config;
  const std::string prompt = std::string(kShared) + "Then she";
  auto run = [](engine::LLM& llm, const std::string& id, const std::string& text,
                const engine::RequestSteering& s) {
    engine::LLMEngine& e = llm.engine();
    EXPECT_TRUE(e.AddRequest(id, Prompt::Text(text), Greedy(12), s).ok());
    engine::RequestOutput done;
    while (e.HasUnfinished()) {
      for (engine::RequestOutput& out : e.Step()) {
        if (out.finished) done = std::move(out);
      }
    }
    return done;
  };
  const engine::RequestOutput unsteered = run(*cached, "u", prompt, {});
  const engine::RequestOutput steered = run(*cached, "s", prompt, steering);
  EXPECT_EQ(steered.num_cached_tokens, 0);  // the unsteered blocks are not its KV
  EXPECT_EQ(steered.output_ids, run(*plain, "s", prompt, steering).output_ids);
  EXPECT_NE(steered.output_ids, unsteered.output_ids);
  // A second steered request shares the first one's blocks; a second unsteered one the
  // unsteered blocks, with the unsteered text.
  const engine::RequestOutput steered2 = run(*cached, "s2", prompt, steering);
  EXPECT_GE(steered2.num_cached_tokens, 48);
  EXPECT_EQ(steered2.output_ids, steered.output_ids);
  const engine::RequestOutput unsteered2 = run(*cached, "u2", prompt, {});
  EXPECT_GE(unsteered2.num_cached_tokens, 48);
  EXPECT_EQ(unsteered2.output_ids, unsteered.output_ids);
}

// cache_salt isolates tenants: a request reuses only blocks a request of its own salt computed,
// unsteered or steered, and the text is the same whatever the salt.
TEST(PrefixCacheTest, RequestsShareBlocksOnlyWithTheirOwnSalt) {
  auto cached = OpenCached(true);
  ASSERT_TRUE(cached);
  const std::string prompt = std::string(kShared) + "Her mom said";
  auto run = [&](const std::string& id, const std::string& salt) {
    worker::SamplingParams params = Greedy(8);
    params.cache_salt = salt;
    engine::LLMEngine& e = cached->engine();
    EXPECT_TRUE(e.AddRequest(id, Prompt::Text(prompt), params).ok());
    engine::RequestOutput done;
    while (e.HasUnfinished()) {
      for (engine::RequestOutput& out : e.Step()) {
        if (out.finished) done = std::move(out);
      }
    }
    return done;
  };
  const engine::RequestOutput shared = run("shared", "");
  const engine::RequestOutput a = run("a", "tenant-a");
  EXPECT_EQ(a.num_cached_tokens, 0);  // the shared pool's blocks are not tenant-a's
  const engine::RequestOutput b = run("b", "tenant-b");
  EXPECT_EQ(b.num_cached_tokens, 0);
  const engine::RequestOutput a2 = run("a2", "tenant-a");
  EXPECT_GE(a2.num_cached_tokens, 48);
  const engine::RequestOutput shared2 = run("shared2", "");
  EXPECT_GE(shared2.num_cached_tokens, 48);
  for (const auto* out : {&a, &b, &a2, &shared2}) {
    EXPECT_EQ(out->output_ids, shared.output_ids);
  }
}

// Records of one request, as comparable values.
std::vector<std::tuple<std::string, int, int64_t, std::vector<float>>> Records(
    const std::vector<ActivationRecord>& all, const std::string& id) {
  std::vector<std::tuple<std::string, int, int64_t, std::vector<float>>> out;
  for (const ActivationRecord& r : testing::RecordLog::Of(all, id)) {
    out.emplace_back(r.point, r.layer, r.token_pos, r.values);
  }
  return out;
}

TEST(PrefixCacheTest, PromptPositionRecordsAreIdenticalWithAndWithoutTheCache) {
  const std::string spec = R"(version: "1"
extraction_points:
  - {name: first, layers: [0, 4], tensor_type: residual_stream, position: "prompt[0]",
     probe_type: recorder, probe_kind: single_shot}
  - {name: last, layers: [1, 3], tensor_type: residual_stream, position: "prompt[-1]",
     probe_type: recorder, probe_kind: single_shot}
  - {name: mid, layers: [2], tensor_type: residual_stream, position: 20,
     probe_type: recorder, probe_kind: single_shot}
  - {name: gen, layers: [2], tensor_type: residual_stream, position: "generated[0:3]",
     probe_type: trajectory_recorder, probe_kind: trajectory}
)";
  auto cached = OpenCached(true);
  auto plain = OpenCached(false);
  ASSERT_TRUE(cached && plain);
  auto cached_session = testing::MakeSession(spec, cached->engine().config());
  auto plain_session = testing::MakeSession(spec, plain->engine().config());
  ASSERT_TRUE(cached_session && plain_session);
  const std::vector<GenerateRequest> requests = SharedPrefixRequests(2, "p");
  // The first request fills the cache; the second has the same prefix.
  const testing::ProbedRun warm = testing::RunProbed(*cached, *cached_session, {requests[0]});
  const testing::ProbedRun hit = testing::RunProbed(*cached, *cached_session, {requests[1]});
  const testing::ProbedRun reference = testing::RunProbed(*plain, *plain_session, {requests[1]});
  const auto got = Records(hit.records, "p1");
  const auto want = Records(reference.records, "p1");
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(got.size(), 2u + 2u + 1u + 3u);
  EXPECT_TRUE(got == want) << "records differ with the prefix cache";
  EXPECT_EQ(hit.results[0].output.output_ids, reference.results[0].output.output_ids);
  EXPECT_EQ(hit.results[0].output.num_cached_tokens, 0);  // the spec reads prompt positions

  // A spec on generated positions only: the cache serves the prompt (so the test above would
  // lose its prompt records if the engine served it regardless of the spec).
  auto generated_only = testing::MakeSession(R"(version: "1"
extraction_points:
  - {name: gen, layers: [2], tensor_type: residual_stream, position: "generated[0:3]",
     probe_type: trajectory_recorder, probe_kind: trajectory}
)",
                                             cached->engine().config());
  ASSERT_NE(generated_only, nullptr);
  const testing::ProbedRun served = testing::RunProbed(*cached, *generated_only, {requests[1]});
  EXPECT_GE(served.results[0].output.num_cached_tokens, 48);
  const auto gen_got = Records(served.records, "p1");
  std::vector<std::tuple<std::string, int, int64_t, std::vector<float>>> gen_want;
  for (const auto& r : want) {
    if (std::get<0>(r) == "gen") gen_want.push_back(r);
  }
  EXPECT_TRUE(gen_got == gen_want) << "generated records differ with the prefix cache";
}

}  // namespace
}  // namespace uc
