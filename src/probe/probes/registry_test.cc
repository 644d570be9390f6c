#include "probe/probes/registry.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include "io/io_test_util.h"
#include "probe/probes/probe_test_util.h"

namespace uc::probe {
namespace {

using io::testing::IsError;
using nlohmann::json;
using testing::ConstantRecords;
using testing::Point;
using testing::Record;
using testing::RunProbe;

// A single_shot probe type that continues on everything; records the env it was built with.
class NullProbe : public Probe {
 public:
  std::optional<ProbeSignal> OnActivation(const ActivationRecord&) override { return std::nullopt; }
  ProbeResult OnEnd(const RequestContext& ctx) override {
    ProbeResult result;
    result.request_id = ctx.request_id;
    result.verdict = {{"tag", tag_}};
    return result;
  }
  std::string tag_;
};

class NullType : public ProbeType {
 public:
  explicit NullType(std::string tag) : tag_(std::move(tag)) {}
  ProbeKind kind() const override { return ProbeKind::kSingleShot; }
  std::unique_ptr<Probe> Spawn() const override {
    auto probe = std::make_unique<NullProbe>();
    probe->tag_ = tag_;
    return probe;
  }
  std::string tag_;
};

ProbeFactory Tagged(std::string tag) {
  return [tag](const json&, const ProbeEnv&) -> StatusOr<std::unique_ptr<ProbeType>> {
    return std::unique_ptr<ProbeType>(std::make_unique<NullType>(tag));
  };
}

std::string TagOf(const ProbeRegistry& registry, const std::string& probe_type) {
  const ExtractionPoint point = Point("p", probe_type, ProbeKind::kSingleShot);
  StatusOr<std::unique_ptr<ProbeType>> type = registry.Create(point, ProbeEnv{});
  if (!type.ok()) return type.status().ToString();
  return RunProbe(**type, {}).result.verdict.at("tag").get<std::string>();
}

const std::vector<std::string> kBuiltins = {
    "attention_pool", "cosine",           "ema",          "ema_max", "linear", "mlp",
    "norm_gate",      "rolling_mean_max", "running_mean", "sae"};

TEST(ProbeRegistryTest, StartsWithTheBuiltins) {
  ProbeRegistry registry;
  EXPECT_EQ(registry.List(), kBuiltins);
  EXPECT_EQ(*registry.KindOf("linear"), ProbeKind::kSingleShot);
  EXPECT_EQ(*registry.KindOf("ema"), ProbeKind::kTrajectory);
  EXPECT_EQ(*registry.KindOf("running_mean"), ProbeKind::kTrajectory);
}

TEST(ProbeRegistryTest, GlobalIsOneRegistryWithTheBuiltins) {
  EXPECT_EQ(&ProbeRegistry::Global(), &ProbeRegistry::Global());
  EXPECT_TRUE(ProbeRegistry::Global().KindOf("mlp").ok());
}

TEST(ProbeRegistryTest, DuplicateNameNeedsOverride) {
  ProbeRegistry registry;
  ASSERT_TRUE(registry.Register("mine", ProbeKind::kSingleShot, Tagged("first")).ok());
  EXPECT_TRUE(IsError(registry.Register("mine", ProbeKind::kSingleShot, Tagged("second")),
                      StatusCode::kFailedPrecondition,
                      {"probe_type 'mine' is already registered", "override"}));
  EXPECT_EQ(TagOf(registry, "mine"), "first");
  ASSERT_TRUE(registry.Register("mine", ProbeKind::kSingleShot, Tagged("second"), true).ok());
  EXPECT_EQ(TagOf(registry, "mine"), "second");
}

TEST(ProbeRegistryTest, OverrideReplacesABuiltin) {
  ProbeRegistry registry;
  EXPECT_FALSE(registry.Register("linear", ProbeKind::kSingleShot, Tagged("mine")).ok());
  ASSERT_TRUE(registry.Register("linear", ProbeKind::kSingleShot, Tagged("mine"), true).ok());
  EXPECT_EQ(TagOf(registry, "linear"), "mine");
  EXPECT_EQ(registry.List(), kBuiltins);
}

TEST(ProbeRegistryTest, RejectsEmptyNameAndFactory) {
  ProbeRegistry registry;
  EXPECT_TRUE(IsError(registry.Register("", ProbeKind::kSingleShot, Tagged("x")),
                      StatusCode::kInvalidArgument, {"must not be empty"}));
  EXPECT_TRUE(IsError(registry.Register("x", ProbeKind::kSingleShot, ProbeFactory()),
                      StatusCode::kInvalidArgument, {"'x'", "factory is empty"}));
  EXPECT_TRUE(IsError(registry.RegisterFunction("f", ScoreFunction(), 1.0),
                      StatusCode::kInvalidArgument, {"'f'", "score function is empty"}));
}

TEST(ProbeRegistryTest, UnknownNameListsKnownNamesAndClosestMatches) {
  ProbeRegistry registry;
  const Status status = registry.KindOf("lineer").status();
  EXPECT_EQ(status.code(), StatusCode::kNotFound);
  EXPECT_EQ(status.message(),
            "unknown probe_type 'lineer' (did you mean 'linear'?); registered probe types: "
            "attention_pool, cosine, ema, ema_max, linear, mlp, norm_gate, rolling_mean_max, "
            "running_mean, sae");
  EXPECT_TRUE(IsError(registry.KindOf("norm-gates").status(), StatusCode::kNotFound,
                      {"(did you mean 'norm_gate'?)"}));
  const Status far = registry.KindOf("completely_different").status();
  EXPECT_EQ(far.message().find("did you mean"), std::string::npos) << far.ToString();
}

TEST(ProbeRegistryTest, UnregisterRemovesTheName) {
  ProbeRegistry registry;
  EXPECT_TRUE(registry.Unregister("cosine"));
  EXPECT_FALSE(registry.Unregister("cosine"));
  EXPECT_FALSE(registry.KindOf("cosine").ok());
  EXPECT_EQ(registry.List().size(), kBuiltins.size() - 1);
}

TEST(ProbeRegistryTest, CreateChecksTheKind) {
  ProbeRegistry registry;
  const ExtractionPoint point =
      Point("tox", "linear", ProbeKind::kTrajectory, {{"weights", "w.npy"}});
  const Status status = registry.Create(point, ProbeEnv{}).status();
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "extraction point 'tox': probe_type 'linear' is single_shot but the point says "
            "trajectory");
  const ExtractionPoint ema = Point("drift", "ema", ProbeKind::kSingleShot, {{"alpha", 0.5}});
  EXPECT_TRUE(
      IsError(registry.Create(ema, ProbeEnv{}).status(), StatusCode::kInvalidArgument,
              {"'drift'", "probe_type 'ema' is trajectory but the point says single_shot"}));
}

TEST(ProbeRegistryTest, CreateUnknownNamesThePoint) {
  ProbeRegistry registry;
  const ExtractionPoint point = Point("tox", "cosin", ProbeKind::kSingleShot);
  EXPECT_TRUE(
      IsError(registry.Create(point, ProbeEnv{}).status(), StatusCode::kNotFound,
              {"extraction point 'tox': unknown probe_type 'cosin'", "did you mean 'cosine'?"}));
}

TEST(ProbeRegistryTest, CreatePassesArgsAndEnvAndAnnotatesErrors) {
  ProbeRegistry registry;
  json seen_args;
  ProbeEnv seen_env;
  ASSERT_TRUE(registry
                  .Register("spy", ProbeKind::kSingleShot,
                            [&](const json& args,
                                const ProbeEnv& env) -> StatusOr<std::unique_ptr<ProbeType>> {
                              seen_args = args;
                              seen_env = env;
                              if (args.contains("fail")) return InvalidArgumentError("bad args");
                              return std::unique_ptr<ProbeType>(std::make_unique<NullType>(""));
                            })
                  .ok());
  const ExtractionPoint point = Point("spy_point", "spy", ProbeKind::kSingleShot, {{"k", 1}});
  ProbeEnv env;
  env.hidden_size = 64;
  env.base_dir = "/specs";
  ASSERT_TRUE(registry.Create(point, env).ok());
  EXPECT_EQ(seen_args, json({{"k", 1}}));
  EXPECT_EQ(seen_env.hidden_size, 64);
  EXPECT_EQ(seen_env.base_dir, "/specs");
  EXPECT_EQ(seen_env.point, &point);
  const ExtractionPoint failing = Point("f", "spy", ProbeKind::kSingleShot, {{"fail", true}});
  const Status status = registry.Create(failing, env).status();
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "extraction point 'f': bad args");
}

// --- Function probes (inventory §3.5, scenario 10) ---------------------------------------------

// Scores a record by its first value.
std::optional<double> FirstValue(const ActivationRecord& record, const json&) {
  return record.values.empty() ? std::nullopt : std::optional<double>(record.values[0]);
}

std::unique_ptr<ProbeType> CreateOrDie(const ProbeRegistry& registry,
                                       const ExtractionPoint& point) {
  StatusOr<std::unique_ptr<ProbeType>> type = registry.Create(point, ProbeEnv{});
  EXPECT_TRUE(type.ok()) << type.status().ToString();
  return type.ok() ? std::move(type).value() : nullptr;
}

TEST(FunctionProbeTest, ScoreOverThresholdAborts) {
  ProbeRegistry registry;
  ASSERT_TRUE(registry.RegisterFunction("big_value", FirstValue, 150.0).ok());
  const ExtractionPoint point = Point("gate", "big_value", ProbeKind::kSingleShot);
  const auto type = CreateOrDie(registry, point);
  const auto run = RunProbe(*type, {Record({200.0f})}, &point);
  ASSERT_TRUE(run.signals[0].has_value());
  const ProbeSignal& signal = *run.signals[0];
  EXPECT_EQ(signal.action, ProbeAction::kAbort);
  EXPECT_EQ(signal.confidence, 200.0);
  EXPECT_EQ(signal.metadata, json({{"score", 200.0}, {"probe", "big_value"}}));
  EXPECT_GT(signal.timestamp, 0.0);
  EXPECT_EQ(run.result.verdict, json({{"flagged", true}, {"max_score", 200}, {"n", 1}}));
  ASSERT_EQ(run.result.signal_history.size(), 1u);
  EXPECT_EQ(run.result.signal_history[0].ToJson(), signal.ToJson());
  EXPECT_EQ(run.result.request_id, "req-1");
  EXPECT_EQ(run.result.point, "gate");
}

TEST(FunctionProbeTest, QuietRunContinuesAndReportsMaxScore) {
  ProbeRegistry registry;
  ASSERT_TRUE(registry.RegisterFunction("big_value", FirstValue, 150.0).ok());
  const auto type = CreateOrDie(registry, Point("gate", "big_value", ProbeKind::kSingleShot));
  const auto run = RunProbe(*type, ConstantRecords({10, 20, 30, 40, 90, 50, 60, 70, 80, 5}));
  EXPECT_EQ(run.result.verdict, json({{"flagged", false}, {"max_score", 90}, {"n", 10}}));
  ASSERT_EQ(run.result.signal_history.size(), 10u);  // every score emits, even continue
  for (const ProbeSignal& signal : run.result.signal_history) {
    EXPECT_EQ(signal.action, ProbeAction::kContinue);
  }
  EXPECT_EQ(run.result.signal_history[4].confidence, 90.0);
  EXPECT_EQ(run.result.point, "p");  // from the records when the context names no point
}

TEST(FunctionProbeTest, NoOpinionEmitsNothingAndIsNotCounted) {
  ProbeRegistry registry;
  ASSERT_TRUE(registry.RegisterFunction("first", FirstValue, 1.0).ok());
  const auto type = CreateOrDie(registry, Point("gate", "first", ProbeKind::kSingleShot));
  const auto run = RunProbe(*type, {Record({}), Record({0.5f}), Record({})});
  EXPECT_FALSE(run.signals[0].has_value());
  EXPECT_TRUE(run.signals[1].has_value());
  EXPECT_FALSE(run.signals[2].has_value());
  EXPECT_EQ(run.result.verdict, json({{"flagged", false}, {"max_score", 0.5}, {"n", 1}}));
  EXPECT_EQ(run.result.signal_history.size(), 1u);
}

TEST(FunctionProbeTest, ZeroActivationsGiveADefaultVerdict) {
  ProbeRegistry registry;
  ASSERT_TRUE(registry.RegisterFunction("first", FirstValue, 1.0).ok());
  const auto type = CreateOrDie(registry, Point("gate", "first", ProbeKind::kSingleShot));
  const auto run = RunProbe(*type, {});
  EXPECT_EQ(run.result.verdict, json({{"flagged", false}, {"max_score", nullptr}, {"n", 0}}));
  EXPECT_TRUE(run.result.signal_history.empty());
}

TEST(FunctionProbeTest, ProbeArgsOverrideThresholdAndActionAndReachTheFunction) {
  ProbeRegistry registry;
  ASSERT_TRUE(registry
                  .RegisterFunction(
                      "scaled",
                      [](const ActivationRecord& r, const json& args) {
                        return std::optional<double>(r.values[0] * args.value("scale", 1.0));
                      },
                      /*threshold=*/std::nullopt)
                  .ok());
  const auto none = CreateOrDie(registry, Point("a", "scaled", ProbeKind::kSingleShot));
  EXPECT_EQ(RunProbe(*none, {Record({1000.0f})}).signals[0]->action, ProbeAction::kContinue);

  const ExtractionPoint point = Point("b", "scaled", ProbeKind::kSingleShot,
                                      {{"threshold", 50}, {"action", "flag"}, {"scale", 2.0}});
  const auto type = CreateOrDie(registry, point);
  const auto run = RunProbe(*type, {Record({20.0f}), Record({30.0f})});
  EXPECT_EQ(run.signals[0]->action, ProbeAction::kContinue);
  EXPECT_EQ(run.signals[0]->confidence, 40.0);
  EXPECT_EQ(run.signals[1]->action, ProbeAction::kFlag);
  EXPECT_EQ(run.signals[1]->confidence, 60.0);
  EXPECT_EQ(run.result.verdict, json({{"flagged", true}, {"max_score", 60}, {"n", 2}}));
}

TEST(FunctionProbeTest, BadOverridesAreRejected) {
  ProbeRegistry registry;
  ASSERT_TRUE(registry.RegisterFunction("first", FirstValue, 1.0).ok());
  EXPECT_TRUE(IsError(
      registry.Create(Point("x", "first", ProbeKind::kSingleShot, {{"action", "stop"}}), {})
          .status(),
      StatusCode::kInvalidArgument,
      {"extraction point 'x': probe_type 'first': argument 'action': 'stop' is not one of"}));
  EXPECT_TRUE(IsError(
      registry.Create(Point("x", "first", ProbeKind::kSingleShot, {{"threshold", "high"}}), {})
          .status(),
      StatusCode::kInvalidArgument, {"argument 'threshold': expected a number"}));
  EXPECT_TRUE(IsError(registry.RegisterFunction("cont", FirstValue, 1.0, ProbeAction::kContinue),
                      StatusCode::kInvalidArgument, {"abort or flag"}));
}

TEST(FunctionProbeTest, InstancesDoNotShareState) {
  ProbeRegistry registry;
  ASSERT_TRUE(registry.RegisterFunction("first", FirstValue, 100.0).ok());
  const auto type = CreateOrDie(registry, Point("gate", "first", ProbeKind::kSingleShot));
  std::unique_ptr<Probe> a = type->Spawn();
  std::unique_ptr<Probe> b = type->Spawn();
  a->OnActivation(Record({500.0f}));
  b->OnActivation(Record({5.0f}));
  RequestContext ctx;
  EXPECT_EQ(a->OnEnd(ctx).verdict, json({{"flagged", true}, {"max_score", 500}, {"n", 1}}));
  EXPECT_EQ(b->OnEnd(ctx).verdict, json({{"flagged", false}, {"max_score", 5}, {"n", 1}}));
}

// --- Plugins ----------------------------------------------------------------------------------

TEST(ProbePluginTest, LoadsAndRunsPluginProbes) {
  ProbeRegistry registry;
  ASSERT_TRUE(registry.LoadPlugin(UC_TEST_PROBE_PLUGIN).ok());
  EXPECT_EQ(*registry.KindOf("always_abort"), ProbeKind::kSingleShot);
  const ExtractionPoint point = Point("gate", "always_abort", ProbeKind::kSingleShot);
  const auto type = CreateOrDie(registry, point);
  const auto run = RunProbe(*type, {Record({1.0f}), Record({2.0f})}, &point);
  ASSERT_TRUE(run.signals[0].has_value());
  EXPECT_EQ(run.signals[0]->action, ProbeAction::kAbort);
  EXPECT_EQ(run.result.verdict, json({{"aborts", 2}}));
  EXPECT_EQ(run.result.point, "gate");

  const auto mean = CreateOrDie(registry, Point("m", "plugin_mean", ProbeKind::kSingleShot));
  const auto mean_run = RunProbe(*mean, {Record({0.0f, 1.0f}), Record({2.0f, 4.0f})});
  EXPECT_EQ(mean_run.signals[0]->action, ProbeAction::kContinue);
  EXPECT_EQ(mean_run.signals[1]->action, ProbeAction::kAbort);
  EXPECT_EQ(mean_run.signals[1]->metadata, json({{"score", 3.0}, {"probe", "plugin_mean"}}));
}

TEST(ProbePluginTest, LoadingTwiceIsANoOp) {
  ProbeRegistry registry;
  ASSERT_TRUE(registry.LoadPlugin(UC_TEST_PROBE_PLUGIN).ok());
  EXPECT_TRUE(registry.LoadPlugin(UC_TEST_PROBE_PLUGIN).ok());
  EXPECT_EQ(registry.List().size(), kBuiltins.size() + 3);  // always_abort, plugin_mean,
                                                            // plugin_slow_count
}

// Whether the dynamic loader has `path` loaded (RTLD_NOLOAD opens nothing new).
bool IsLoaded(const char* path) {
  void* handle = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
  if (handle != nullptr) dlclose(handle);
  return handle != nullptr;
}

// The test plugin is built with -fno-gnu-unique, so dlclose really unloads it and a probe
// that outlived its library would crash here.
TEST(ProbePluginTest, PluginProbesKeepTheLibraryLoaded) {
  ASSERT_FALSE(IsLoaded(UC_TEST_PROBE_PLUGIN));
  std::unique_ptr<ProbeType> type;
  std::unique_ptr<Probe> probe;
  {
    ProbeRegistry registry;
    ASSERT_TRUE(registry.LoadPlugin(UC_TEST_PROBE_PLUGIN).ok());
    type = CreateOrDie(registry, Point("gate", "always_abort", ProbeKind::kSingleShot));
    probe = type->Spawn();
  }
  EXPECT_TRUE(IsLoaded(UC_TEST_PROBE_PLUGIN));
  EXPECT_EQ(probe->OnActivation(Record({1.0f}))->action, ProbeAction::kAbort);
  EXPECT_EQ(RunProbe(*type, {Record({1.0f})}).result.verdict, json({{"aborts", 1}}));
  type.reset();
  EXPECT_TRUE(IsLoaded(UC_TEST_PROBE_PLUGIN));  // `probe` still runs plugin code
  EXPECT_EQ(probe->OnEnd(RequestContext{}).verdict, json({{"aborts", 1}}));
  probe.reset();  // the last reference
  EXPECT_FALSE(IsLoaded(UC_TEST_PROBE_PLUGIN));
}

TEST(ProbePluginTest, UnregisteringReleasesTheLibraryWithTheRegistry) {
  {
    ProbeRegistry registry;
    ASSERT_TRUE(registry.LoadPlugin(UC_TEST_PROBE_PLUGIN).ok());
    EXPECT_TRUE(registry.Unregister("always_abort"));
    EXPECT_TRUE(registry.Unregister("plugin_mean"));
    EXPECT_TRUE(IsLoaded(UC_TEST_PROBE_PLUGIN));  // the registry still holds the handle
  }
  EXPECT_FALSE(IsLoaded(UC_TEST_PROBE_PLUGIN));
}

TEST(ProbePluginTest, MissingFileIsAnError) {
  ProbeRegistry registry;
  const std::string path = "/nonexistent/libnot_there.so";
  EXPECT_TRUE(IsError(registry.LoadPlugin(path), StatusCode::kFailedPrecondition,
                      {"cannot load probe plugin '/nonexistent/libnot_there.so'", "libnot_there"}));
  EXPECT_EQ(registry.List(), kBuiltins);
}

TEST(ProbePluginTest, LibraryWithoutTheEntryPointIsAnError) {
  ProbeRegistry registry;
  EXPECT_TRUE(IsError(registry.LoadPlugin(UC_TEST_NO_ENTRY_PLUGIN), StatusCode::kFailedPrecondition,
                      {UC_TEST_NO_ENTRY_PLUGIN, "does not export undercurrent_register_probes"}));
  EXPECT_EQ(registry.List(), kBuiltins);
}

TEST(ProbePluginTest, FailedRegistrationsAreReported) {
  ProbeRegistry registry;
  ASSERT_TRUE(registry.Register("always_abort", ProbeKind::kSingleShot, Tagged("mine")).ok());
  EXPECT_TRUE(IsError(registry.LoadPlugin(UC_TEST_PROBE_PLUGIN), StatusCode::kFailedPrecondition,
                      {"failed to register", "probe_type 'always_abort' is already registered"}));
  EXPECT_EQ(TagOf(registry, "always_abort"), "mine");
  EXPECT_TRUE(registry.KindOf("plugin_mean").ok());  // the plugin's other probe registered
}

}  // namespace
}  // namespace uc::probe
