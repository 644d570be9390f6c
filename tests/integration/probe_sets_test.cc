// Probe sets (probe/runtime/probe_sets.h) driving the real engine on stories260K:
//   - requests of two sets share every step, and each is probed and steered by its own set's
//     spec: the steered set's requests give transformers' ids for that conditional vector, the
//     other set's the unsteered ids (tools/reference/make_request_steering_reference.py);
//   - a reload while requests run: those in flight finish on the version they started with
//     (every one of their generated tokens seen by that version's point, none by the new one),
//     later ones get the new version, and the replaced version is shut down once it drained;
//   - a reload that fails (a YAML error, a layer the model lacks) changes nothing and says
//     which set and file;
//   - unknown set names and bad set lists are refused with the names known.
#include "probe/runtime/probe_sets.h"

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "common/steering_util.h"
#include "common/test_util.h"
#include "engine/llm.h"

namespace uc {
namespace {

using testing::JsonInts;

// A flagging norm_gate at layer 1 on generated[3], and optionally the spec steering entry of
// spec_steering_test (p_layer2.gguf, switched on by the flag).
std::string GateSpec(bool steered) {
  std::string text = R"(version: "1"
extraction_points:
  - name: gate
    layers: [1]
    tensor_type: residual_stream
    position: "generated[3]"
    probe_type: norm_gate
    probe_kind: single_shot
    probe_args: {threshold: 0.001, action: flag}
)";
  if (steered) {
    text += R"(steering:
  - name: p
    vector: p_layer2.gguf
    when: {point: gate, signal: flag, action: start}
)";
  }
  return text;
}

// A point named `name` on every generated token that never fires: its verdict's "n" counts the
// generated tokens it saw.
std::string CountingSpec(const std::string& name) {
  return R"(version: "1"
extraction_points:
  - name: )" +
         name + R"(
    layers: [2]
    tensor_type: residual_stream
    position: "generated[*]"
    probe_type: norm_gate
    probe_kind: single_shot
    probe_args: {threshold: 1000000000.0, action: flag}
)";
}

const nlohmann::json& CaseNamed(const std::string& name) {
  for (const auto& c : testing::RequestSteeringReference()["cases"]) {
    if (c["name"] == name) return c;
  }
  ADD_FAILURE() << "no reference case " << name;
  return testing::RequestSteeringReference()["cases"][0];
}

// One engine with probe sets; runs requests by hand so that reloads can happen mid-flight.
class Harness {
 public:
  Harness(std::vector<probe::ProbeSetSource> sources, const std::string& default_set = "") {
    engine::EngineOptions options;
    options.model_path = std::string(UC_SOURCE_DIR) + "/models/stories260K";
    options.num_threads = 2;
    options.max_model_len = 64;
    options.max_prefill_chunk = 8;
    auto llm = engine::LLM::Open(options);
    EXPECT_TRUE(llm.ok()) << llm.status().ToString();
    llm_ = std::move(llm).value();
    auto sets = probe::ProbeSets::Create(std::move(sources), default_set,
                                         probe::ProbeRegistry::Global(), engine().config(), {});
    EXPECT_TRUE(sets.ok()) << sets.status().ToString();
    sets_ = std::move(sets).value();
    sets_->SetResultCallback([this](probe::RequestProbeResults r) {
      std::lock_guard<std::mutex> lock(mu_);
      results_[r.request_id] = std::move(r);
    });
    sets_->AttachTo(engine());
  }
  ~Harness() {
    sets_->Shutdown(/*wait=*/true);
    engine().SetObserver(nullptr);
  }

  engine::LLMEngine& engine() { return llm_->engine(); }
  probe::ProbeSets& sets() { return *sets_; }

  // Assigns and adds one request; the set and version it got.
  probe::ProbeSetAssignment Add(const std::string& id, const std::string& set,
                                const std::vector<int32_t>& prompt, int max_tokens) {
    StatusOr<probe::ProbeSetAssignment> a = sets_->Assign({id}, set);
    EXPECT_TRUE(a.ok()) << a.status().ToString();
    engine::RequestSteering steering;
    steering.base = a->steering;
    EXPECT_TRUE(
        engine()
            .AddRequest(id, engine::Prompt::Ids(prompt), testing::Greedy(max_tokens), steering)
            .ok());
    return *a;
  }
  // Steps `steps` times (all: until nothing is unfinished), keeping finished outputs.
  void Step(int steps = -1) {
    for (int i = 0; (steps < 0 || i < steps) && engine().HasUnfinished(); ++i) {
      for (engine::RequestOutput& out : engine().Step()) {
        if (out.finished) outputs_[out.request_id] = std::move(out);
      }
    }
  }
  const engine::RequestOutput& output(const std::string& id) { return outputs_.at(id); }
  // Waits (bounded) for the request's results; sessions deliver them on the engine thread or a
  // worker.
  probe::RequestProbeResults results(const std::string& id) {
    for (int i = 0; i < 500; ++i) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = results_.find(id);
        if (it != results_.end()) return it->second;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ADD_FAILURE() << "no probe results for " << id;
    return {};
  }

 private:
  std::unique_ptr<engine::LLM> llm_;
  std::unique_ptr<probe::ProbeSets> sets_;
  std::mutex mu_;
  std::map<std::string, probe::RequestProbeResults> results_;
  std::map<std::string, engine::RequestOutput> outputs_;
};

std::vector<int32_t> ReferencePrompt() {
  return JsonInts(testing::RequestSteeringReference()["input_ids"]);
}

TEST(ProbeSetsTest, EachRequestIsProbedAndSteeredByTheSetItPicks) {
  const auto dir = testing::ScratchDir("probe_sets_pick");
  std::filesystem::copy_file(testing::TestData("steering/p_layer2.gguf"), dir / "p_layer2.gguf",
                             std::filesystem::copy_options::overwrite_existing);
  std::ofstream(dir / "plain.yaml") << GateSpec(false);
  std::ofstream(dir / "steered.yaml") << GateSpec(true);
  Harness h({{"plain", dir / "plain.yaml"}, {"steered", dir / "steered.yaml"}});
  const std::vector<int32_t> prompt = ReferencePrompt();
  // Interleaved, one batch: the default set (plain) when none is named.
  for (int i = 0; i < 6; ++i) {
    const std::string set = i % 2 == 0 ? "" : "steered";
    const probe::ProbeSetAssignment a = h.Add("r" + std::to_string(i), set, prompt, 16);
    EXPECT_EQ(a.set, i % 2 == 0 ? "plain" : "steered");
    EXPECT_EQ(a.version, 1);
    EXPECT_EQ(a.steering != nullptr, i % 2 == 1);
  }
  h.Step();
  const std::vector<int32_t> plain = JsonInts(CaseNamed("none")["greedy"]);
  const std::vector<int32_t> steered = JsonInts(CaseNamed("from_generated_4")["greedy"]);
  ASSERT_NE(plain, steered);
  for (int i = 0; i < 6; ++i) {
    const std::string id = "r" + std::to_string(i);
    EXPECT_EQ(h.output(id).output_ids, i % 2 == 0 ? plain : steered) << id;
    const probe::RequestProbeResults r = h.results(id);
    EXPECT_EQ(r.probe_set, i % 2 == 0 ? "plain" : "steered");
    EXPECT_EQ(r.probe_set_version, 1);
    ASSERT_NE(r.spec, nullptr);
    ASSERT_EQ(r.results.size(), 1u);
    EXPECT_EQ(r.results[0].point, "gate");
    EXPECT_EQ(r.results[0].verdict.value("flagged", false), true) << r.results[0].verdict;
  }
}

TEST(ProbeSetsTest, ReloadKeepsRequestsInFlightOnTheirVersion) {
  const auto dir = testing::ScratchDir("probe_sets_reload");
  std::ofstream(dir / "main.yaml") << CountingSpec("p1");
  Harness h({{"main", dir / "main.yaml"}});
  const std::vector<int32_t> prompt = ReferencePrompt();
  for (int i = 0; i < 4; ++i) h.Add("old" + std::to_string(i), "main", prompt, 20);
  h.Step(4);  // prefill and a few tokens
  ASSERT_TRUE(h.engine().HasUnfinished());

  std::ofstream(dir / "main.yaml", std::ios::trunc) << CountingSpec("p2");
  StatusOr<int64_t> version = h.sets().Reload();
  ASSERT_TRUE(version.ok()) << version.status().ToString();
  EXPECT_EQ(*version, 2);
  for (int i = 0; i < 4; ++i) h.Add("new" + std::to_string(i), "main", prompt, 20);
  h.Step();

  for (const std::string prefix : {"old", "new"}) {
    for (int i = 0; i < 4; ++i) {
      const std::string id = prefix + std::to_string(i);
      const probe::RequestProbeResults r = h.results(id);
      EXPECT_EQ(r.probe_set, "main");
      EXPECT_EQ(r.probe_set_version, prefix == "old" ? 1 : 2) << id;
      ASSERT_EQ(r.results.size(), 1u) << id;
      EXPECT_EQ(r.results[0].point, prefix == "old" ? "p1" : "p2") << id;
      // Every generated token went through the one version's point.
      EXPECT_EQ(r.results[0].verdict.value("n", -1),
                static_cast<int>(h.output(id).output_ids.size()))
          << id << " " << r.results[0].verdict;
    }
  }
  // Version 1 had requests when it was replaced: it is shut down once they ended.
  for (int i = 0; i < 500 && h.sets().stats().retired < 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const probe::ProbeSetStats stats = h.sets().stats();
  EXPECT_EQ(stats.retired, 1);
  EXPECT_EQ(stats.version, 2);
  EXPECT_EQ(stats.reloads_ok, 1);
  const std::vector<probe::ProbeSetInfo> info = h.sets().Describe();
  ASSERT_EQ(info.size(), 1u);
  EXPECT_EQ(info[0].version, 2);
  EXPECT_EQ(info[0].points, std::vector<std::string>{"p2"});
  EXPECT_TRUE(info[0].is_default);
}

TEST(ProbeSetsTest, AReloadThatFailsChangesNothing) {
  const auto dir = testing::ScratchDir("probe_sets_broken");
  std::ofstream(dir / "a.yaml") << CountingSpec("a1");
  std::ofstream(dir / "b.yaml") << CountingSpec("b1");
  Harness h({{"a", dir / "a.yaml"}, {"b", dir / "b.yaml"}}, "b");
  // Set a would load; set b names a layer the model does not have: neither changes.
  std::ofstream(dir / "a.yaml", std::ios::trunc) << CountingSpec("a2");
  std::string broken = CountingSpec("b2");
  broken.replace(broken.find("layers: [2]"), 11, "layers: [9]");
  std::ofstream(dir / "b.yaml", std::ios::trunc) << broken;
  StatusOr<int64_t> failed = h.sets().Reload();
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("nothing changed"), std::string::npos);
  EXPECT_NE(failed.status().message().find("probe set 'b'"), std::string::npos)
      << failed.status().message();
  EXPECT_NE(failed.status().message().find("b.yaml"), std::string::npos);
  EXPECT_NE(failed.status().message().find("layers"), std::string::npos);
  // A YAML error is reported with its line.
  std::ofstream(dir / "b.yaml", std::ios::trunc) << "version: \"1\"\nextraction_points: [\n";
  StatusOr<int64_t> yaml = h.sets().Reload();
  ASSERT_FALSE(yaml.ok());
  EXPECT_NE(yaml.status().message().find("b.yaml:"), std::string::npos) << yaml.status().message();

  probe::ProbeSetStats stats = h.sets().stats();
  EXPECT_EQ(stats.version, 1);
  EXPECT_EQ(stats.reloads_failed, 2);
  EXPECT_EQ(stats.last_error,
            yaml.status().message().substr(std::string("reload failed, nothing changed: ").size()));
  // Requests still get version 1 of both sets; the default is b.
  h.Add("x", "", ReferencePrompt(), 5);
  h.Add("y", "a", ReferencePrompt(), 5);
  h.Step();
  EXPECT_EQ(h.results("x").results.at(0).point, "b1");
  EXPECT_EQ(h.results("y").results.at(0).point, "a1");
  EXPECT_EQ(h.results("y").probe_set_version, 1);

  // Fixed: the next reload takes both files.
  std::ofstream(dir / "b.yaml", std::ios::trunc) << CountingSpec("b2");
  StatusOr<int64_t> ok = h.sets().Reload();
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(*ok, 2);
  stats = h.sets().stats();
  EXPECT_TRUE(stats.last_error.empty());
  EXPECT_EQ(stats.reloads_ok, 1);
  h.Add("z", "a", ReferencePrompt(), 5);
  h.Step();
  EXPECT_EQ(h.results("z").results.at(0).point, "a2");
  const std::string metrics = h.sets().metrics().Serialize();
  EXPECT_NE(metrics.find("undercurrent_probe_set_reloads_total{outcome=\"failed\"} 2"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("undercurrent_probe_set_reloads_total{outcome=\"ok\"} 1"),
            std::string::npos);
  EXPECT_NE(metrics.find("undercurrent_probe_set_version{probe_set=\"a\"} 2"), std::string::npos);
}

TEST(ProbeSetsTest, UnknownNamesAreRefusedWithTheNamesKnown) {
  const auto dir = testing::ScratchDir("probe_sets_names");
  std::ofstream(dir / "s.yaml") << CountingSpec("p");
  Harness h({{"steered", dir / "s.yaml"}, {"plain", dir / "s.yaml"}});
  StatusOr<probe::ProbeSetAssignment> a = h.sets().Assign({"r"}, "stered");
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), StatusCode::kNotFound);
  EXPECT_NE(a.status().message().find("did you mean 'steered'"), std::string::npos)
      << a.status().message();
  EXPECT_NE(a.status().message().find("'plain'"), std::string::npos);
  // An id in use is refused, and the refusal assigns nothing.
  ASSERT_TRUE(h.sets().Assign({"r"}, "plain").ok());
  EXPECT_FALSE(h.sets().Assign({"s", "r"}, "plain").ok());
  EXPECT_TRUE(h.sets().Assign({"s"}, "plain").ok());
  h.sets().Unassign("r");
  h.sets().Unassign("s");

  models::ModelConfig config = h.engine().config();
  auto twice = probe::ProbeSets::Create({{"a", dir / "s.yaml"}, {"a", dir / "s.yaml"}}, "",
                                        probe::ProbeRegistry::Global(), config, {});
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("'a' is given twice"), std::string::npos);
  auto bad_default = probe::ProbeSets::Create({{"a", dir / "s.yaml"}}, "b",
                                              probe::ProbeRegistry::Global(), config, {});
  ASSERT_FALSE(bad_default.ok());
  EXPECT_NE(bad_default.status().message().find("default probe set 'b'"), std::string::npos);
  auto missing = probe::ProbeSets::Create({{"a", dir / "missing.yaml"}}, "",
                                          probe::ProbeRegistry::Global(), config, {});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("missing.yaml"), std::string::npos);
}

}  // namespace
}  // namespace uc
