// The spec format: Undercurrent v0.1 compatibility (a corpus of spec files with v0.1's own
// verdicts), every validation rule with its message pinned, deprecated keys, the canonical
// writer's round trip, and the JSON Schema's agreement with the parser.
#include "probe/spec/spec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>

namespace uc::probe {
namespace {

namespace fs = std::filesystem;

const fs::path kCorpus = fs::path(UC_SOURCE_DIR) / "tests/testdata/spec_compat";

// A valid point (as YAML lines under "  - "), with `extra` lines appended.
std::string Spec1(const std::string& extra = "", const std::string& position = "\"prompt[-1]\"") {
  return "version: \"1\"\n"
         "extraction_points:\n"
         "  - name: p\n"
         "    layers: 3\n"
         "    tensor_type: residual_stream\n"
         "    position: " +
         position +
         "\n"
         "    probe_type: linear\n"
         "    probe_kind: single_shot\n" +
         extra;
}

// The trajectory variant: a continuous position and a trajectory probe (lines 6 and 8).
std::string Trajectory(const std::string& extra = "") {
  return "version: \"1\"\n"
         "extraction_points:\n"
         "  - name: t\n"
         "    layers: [1, 2]\n"
         "    tensor_type: mlp_out\n"
         "    position: \"generated[*]\"\n"
         "    probe_type: ema\n"
         "    probe_kind: trajectory\n" +
         extra;
}

std::string Problems(std::string_view text, const std::string& name = "spec.yaml") {
  const StatusOr<Spec> spec = ParseSpecText(text, name);
  if (spec.ok()) return "OK";
  EXPECT_EQ(spec.status().code(), StatusCode::kInvalidArgument);
  return spec.status().message();
}

Spec Parsed(std::string_view text) {
  StatusOr<Spec> spec = ParseSpecText(text, "spec.yaml");
  EXPECT_TRUE(spec.ok()) << spec.status().message();
  return spec.ok() ? *spec : Spec();
}

std::string Replaced(std::string text, std::string_view from, std::string_view to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

std::string ReadText(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// ---------------------------------------------------------------------------------------------
// Compatibility with Undercurrent v0.1.

// UC_SPEC_COMPAT_DUMP=FILE writes v0.1's message and ours for every case, to review wording.
void DumpSideBySide(const nlohmann::json& manifest, const char* path) {
  std::ofstream out(path);
  for (const nlohmann::json& c : manifest["cases"]) {
    const SpecReport report = CheckSpecFile(kCorpus / c["file"].get<std::string>());
    out << "== " << c["file"].get<std::string>() << "\n";
    if (!c["v0_1_message"].is_null()) {
      out << "v0.1: " << c["v0_1_message"].get<std::string>() << "\n";
    }
    if (!report.spec.has_value()) {
      out << "ours: " << CombineSpecProblems(report.problems) << "\n";
      continue;
    }
    for (const std::string& w : report.spec->warnings) out << "warn: " << w << "\n";
  }
}

TEST(SpecCompatTest, SameVerdictAsV01ExceptDeliberateDifferences) {
  const nlohmann::json manifest = nlohmann::json::parse(ReadText(kCorpus / "manifest.json"));
  ASSERT_GE(manifest["cases"].size(), 300u);
  int accepted = 0;
  int differences = 0;
  std::string mismatches;
  for (const nlohmann::json& c : manifest["cases"]) {
    const std::string file = c["file"];
    const bool v01 = c["accepted_by_v0_1"];
    const bool deliberate = c.contains("deliberate_difference");
    const SpecReport report = CheckSpecFile(kCorpus / file);
    const bool ours = report.spec.has_value();
    accepted += ours;
    differences += deliberate;
    if (ours != (v01 != deliberate)) {
      mismatches += "\n" + file + ": v0.1 " + (v01 ? "accepts" : "rejects") + ", we " +
                    (ours ? "accept" : "reject") + (deliberate ? " (listed as a difference)" : "");
      if (!ours) mismatches += "\n    ours: " + CombineSpecProblems(report.problems);
      if (!v01) mismatches += "\n    v0.1: " + c["v0_1_message"].get<std::string>();
    }
  }
  EXPECT_EQ(mismatches, "");
  if (const char* dump = std::getenv("UC_SPEC_COMPAT_DUMP")) DumpSideBySide(manifest, dump);
  EXPECT_GT(accepted, 100);
  EXPECT_GT(differences, 10);
}

TEST(SpecCompatTest, V01ExampleSpecsParse) {
  for (const char* name :
       {"example_classic_single_token", "example_continuous_trajectory",
        "example_offset_dual_position", "example_sliced_range", "example_content_safety_gpt2",
        "example_content_safety_llama", "example_final_norm_llama31"}) {
    const StatusOr<Spec> spec = ParseSpecFile(kCorpus / (std::string(name) + ".yaml"));
    ASSERT_TRUE(spec.ok()) << name << ": " << spec.status().message();
    EXPECT_TRUE(spec->warnings.empty()) << name;
    EXPECT_EQ(spec->source, kCorpus / (std::string(name) + ".yaml"));
  }
  const Spec t = *ParseSpecFile(kCorpus / "example_continuous_trajectory.yaml");
  ASSERT_EQ(t.extraction_points.size(), 1u);
  const ExtractionPoint& p = t.extraction_points[0];
  EXPECT_EQ(p.name, "generation_trajectory");
  EXPECT_EQ(p.layers, (std::vector<int>{4, 8, 12}));
  EXPECT_EQ(p.tensor_type, TensorType::kMlpOut);
  EXPECT_EQ(p.position.ToString(), "generated[*]");
  EXPECT_EQ(p.stride, 2);
  EXPECT_EQ(p.until, Until::kGenerationEnd);
  EXPECT_EQ(p.probe_kind, ProbeKind::kTrajectory);
  EXPECT_EQ(p.execution_mode, ExecutionMode::kAsync);
  EXPECT_EQ(p.queue_depth, 8);
  EXPECT_EQ(p.line, 5);
}

// ---------------------------------------------------------------------------------------------
// What a valid spec parses to.

TEST(SpecParseTest, MinimalPointGetsTheDefaults) {
  const Spec spec = Parsed(Spec1());
  EXPECT_EQ(spec.version, "1");
  EXPECT_TRUE(spec.warnings.empty());
  EXPECT_TRUE(spec.source.empty());
  ASSERT_EQ(spec.extraction_points.size(), 1u);
  const ExtractionPoint& p = spec.extraction_points[0];
  EXPECT_EQ(p.name, "p");
  EXPECT_EQ(p.layers, std::vector<int>{3});
  EXPECT_EQ(p.tensor_type, TensorType::kResidualStream);
  EXPECT_EQ(p.position, *PositionSelector::Parse("prompt[-1]"));
  EXPECT_FALSE(p.stride.has_value());
  EXPECT_FALSE(p.until.has_value());
  EXPECT_FALSE(p.count.has_value());
  EXPECT_EQ(p.probe_type, "linear");
  EXPECT_EQ(p.probe_kind, ProbeKind::kSingleShot);
  EXPECT_EQ(p.probe_args, nlohmann::json::object());
  EXPECT_EQ(p.execution_mode, ExecutionMode::kInline);
  EXPECT_FALSE(p.queue_depth.has_value());
  EXPECT_FALSE(p.overflow_policy.has_value());
  EXPECT_FALSE(p.intervention.has_value());
  EXPECT_EQ(p.line, 3);
}

// TransformerLens hook names stand for our tensor types: hook_resid_pre of block L is the
// residual stream after L - 1, hook_resid_post / hook_attn_out / hook_mlp_out the same layer;
// "blocks.L.<hook>" names the layer itself. What cannot be a tap is an error saying why.
TEST(SpecParseTest, TransformerLensHookNamesAreAliases) {
  const auto point = [](const std::string& layers, const std::string& type) {
    return "version: \"1\"\n"
           "extraction_points:\n"
           "  - name: p\n" +
           (layers.empty() ? "" : "    layers: " + layers + "\n") + "    tensor_type: " + type +
           "\n"
           "    position: \"prompt[-1]\"\n"
           "    probe_type: linear\n"
           "    probe_kind: single_shot\n";
  };
  const struct {
    std::string layers, type;
    std::vector<int> want_layers;
    TensorType want_type;
  } cases[] = {
      {"[1, 3]", "hook_resid_pre", {0, 2}, TensorType::kResidualStream},
      {"2", "hook_resid_post", {2}, TensorType::kResidualStream},
      {"[0, 4]", "hook_attn_out", {0, 4}, TensorType::kAttnOut},
      {"5", "hook_mlp_out", {5}, TensorType::kMlpOut},
      {"", "blocks.1.hook_resid_pre", {0}, TensorType::kResidualStream},
      {"", "blocks.12.hook_attn_out", {12}, TensorType::kAttnOut},
      {"", "blocks.0.hook_resid_post", {0}, TensorType::kResidualStream},
      {"3", "hook_resid_mid", {3}, TensorType::kResidMid},
      {"", "blocks.0.hook_resid_mid", {0}, TensorType::kResidMid},
  };
  for (const auto& c : cases) {
    const Spec spec = Parsed(point(c.layers, c.type));
    ASSERT_EQ(spec.extraction_points.size(), 1u) << c.type;
    EXPECT_EQ(spec.extraction_points[0].layers, c.want_layers) << c.type;
    EXPECT_EQ(spec.extraction_points[0].tensor_type, c.want_type) << c.type;
    // Written back (resid_mid by its hook name, the only spelling a spec has for it), the spec
    // parses to the same point.
    const Spec again = Parsed(WriteSpecYaml(spec));
    ASSERT_EQ(again.extraction_points.size(), 1u) << c.type;
    EXPECT_EQ(again.extraction_points[0].layers, c.want_layers) << c.type;
    EXPECT_EQ(again.extraction_points[0].tensor_type, c.want_type) << c.type;
  }
  EXPECT_NE(Problems(point("3", "resid_mid")).find("is not a valid tensor_type"),
            std::string::npos);
  EXPECT_EQ(Problems(point("", "blocks.0.hook_resid_pre")),
            "spec.yaml:4: extraction_points[0] 'p'.tensor_type: blocks.0.hook_resid_pre is the "
            "embedding output, which is not a tap site; the first tap is "
            "blocks.0.hook_resid_post (residual_stream of layer 0)");
  EXPECT_NE(Problems(point("[0, 2]", "hook_resid_pre")).find("embedding output"),
            std::string::npos);
  EXPECT_NE(Problems(point("3", "blocks.3.hook_mlp_out")).find("names its block; drop 'layers'"),
            std::string::npos);
  EXPECT_NE(Problems(point("", "hook_mlp_out")).find("layers"), std::string::npos);
  EXPECT_NE(Problems(point("1", "blocks.x.hook_mlp_out")).find("is not a valid tensor_type"),
            std::string::npos);
}

TEST(SpecParseTest, EveryField) {
  const Spec spec = Parsed(R"(version: "2"
extraction_points:
  - name: all
    layers: [0, 5, 5]
    tensor_type: final_norm
    position: "generated[2:9]+1"
    stride: 2
    until: fixed_count
    count: 3
    probe_type: mlp
    probe_kind: trajectory
    execution_mode: async
    queue_depth: 4
    overflow_policy: drop_newest
    intervention: {mode: reject}
    probe_args: {weights: w.safetensors, threshold: 0.25, layers: [1, 2], "on": yes, none: ~}
  - name: blocking
    layers: 1
    tensor_type: attn_out
    position: 7
    probe_type: linear
    probe_kind: single_shot
    execution_mode: inline
    intervention: {mode: block_until_signal, timeout_ms: 50, on_timeout: abort}
)");
  EXPECT_EQ(spec.version, "2");
  ASSERT_EQ(spec.extraction_points.size(), 2u);
  const ExtractionPoint& a = spec.extraction_points[0];
  EXPECT_EQ(a.layers, (std::vector<int>{0, 5, 5}));
  EXPECT_EQ(a.tensor_type, TensorType::kFinalNorm);
  EXPECT_EQ(a.position.ToString(), "generated[2:9]+1");
  EXPECT_EQ(a.stride, 2);
  EXPECT_EQ(a.until, Until::kFixedCount);
  EXPECT_EQ(a.count, 3);
  EXPECT_EQ(a.execution_mode, ExecutionMode::kAsync);
  EXPECT_EQ(a.queue_depth, 4);
  EXPECT_EQ(a.overflow_policy, OverflowPolicy::kDropNewest);
  ASSERT_TRUE(a.intervention.has_value());
  EXPECT_EQ(*a.intervention, InterventionPolicy{});
  EXPECT_EQ(a.probe_args, nlohmann::json::parse(R"({"weights": "w.safetensors",
      "threshold": 0.25, "layers": [1, 2], "on": true, "none": null})"));
  const ExtractionPoint& b = spec.extraction_points[1];
  EXPECT_EQ(b.position, PositionSelector::Absolute(7));
  EXPECT_EQ(b.line, 17);
  ASSERT_TRUE(b.intervention.has_value());
  EXPECT_EQ(b.intervention->mode, InterventionMode::kBlockUntilSignal);
  EXPECT_EQ(b.intervention->timeout_ms, 50);
  EXPECT_EQ(b.intervention->on_timeout, OnTimeout::kAbort);
}

TEST(SpecParseTest, ReadsValuesTheWayV01Does) {
  // pydantic's lax ints: integer strings and floats without a fraction.
  EXPECT_EQ(Parsed(Spec1("", "5.0")).extraction_points[0].position, PositionSelector::Absolute(5));
  const std::string lax = R"(extraction_points:
  - {name: p, layers: ["3", 4.0, " 5 ", "6.00", "1_0"], tensor_type: kv, position: 0x1F,
     probe_type: x, probe_kind: trajectory, execution_mode: async, queue_depth: "7"}
)";
  const ExtractionPoint p = Parsed(lax).extraction_points[0];
  EXPECT_EQ(p.layers, (std::vector<int>{3, 4, 5, 6, 10}));
  EXPECT_EQ(p.position, PositionSelector::Absolute(31));  // YAML 1.1 hex
  EXPECT_EQ(p.queue_depth, 7);
  // YAML 1.1: 017 is octal, 1:30 is base 60; quoted scalars stay strings.
  EXPECT_EQ(Parsed(Spec1("", "017")).extraction_points[0].position, PositionSelector::Absolute(15));
  EXPECT_EQ(Parsed(Spec1("", "1:30")).extraction_points[0].position,
            PositionSelector::Absolute(90));
  EXPECT_EQ(Parsed(Spec1("", "\"7\"")).extraction_points[0].position,
            PositionSelector::Absolute(7));
}

TEST(SpecParseTest, JsonSpecsParse) {
  const Spec spec = Parsed(R"({
  "version": "1",
  "extraction_points": [
    {"name": "j", "layers": [1, 2], "tensor_type": "attn_out", "position": "generated[*]",
     "stride": 2, "probe_type": "ema", "probe_kind": "trajectory", "execution_mode": "async",
     "probe_args": {"alpha": 0.3, "threshold": 1e-3, "tags": ["a"]}}
  ]
})");
  ASSERT_EQ(spec.extraction_points.size(), 1u);
  const ExtractionPoint& p = spec.extraction_points[0];
  EXPECT_EQ(p.layers, (std::vector<int>{1, 2}));
  EXPECT_EQ(p.line, 4);
  EXPECT_EQ(p.probe_args["alpha"], 0.3);
  // As in v0.1 (PyYAML, YAML 1.1): a float needs a '.', so 1e-3 is the string "1e-3".
  EXPECT_EQ(p.probe_args["threshold"], "1e-3");
}

TEST(SpecParseTest, MergeKeysAnchorsAndDuplicateKeys) {
  const Spec spec = Parsed(R"(extraction_points:
  - &base
    name: a
    layers: 1
    tensor_type: kv
    position: 1
    probe_type: t
    probe_kind: single_shot
  - <<: *base
    name: b
    layers: [2]
    name: c
)");
  ASSERT_EQ(spec.extraction_points.size(), 2u);
  EXPECT_EQ(spec.extraction_points[1].name, "c");  // the last duplicate wins, as in PyYAML
  EXPECT_EQ(spec.extraction_points[1].layers, std::vector<int>{2});
  EXPECT_EQ(spec.extraction_points[1].tensor_type, TensorType::kKv);
  EXPECT_EQ(spec.warnings,
            std::vector<std::string>{"spec.yaml:12: extraction_points[1] 'c': duplicate key "
                                     "'name' (first on line 10); the last value is used"});
}

TEST(SpecParseTest, FilesAndErrors) {
  const fs::path dir = fs::path(UC_BINARY_DIR) / "probe_spec_test";
  fs::create_directories(dir);
  const fs::path file = dir / "ok.yaml";
  std::ofstream(file) << Spec1();
  const StatusOr<Spec> spec = ParseSpecFile(file);
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_EQ(spec->source, file);
  const StatusOr<Spec> missing = ParseSpecFile(dir / "missing.yaml");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("missing.yaml"), std::string::npos);
  const SpecReport report = CheckSpecFile(dir / "missing.yaml");
  EXPECT_FALSE(report.spec.has_value());
  EXPECT_EQ(report.problems,
            std::vector<std::string>{(dir / "missing.yaml").string() +
                                     ": file not found; check the path (relative paths are "
                                     "resolved against the current directory)"});
  const fs::path bad = dir / "bad.yaml";
  std::ofstream(bad) << Spec1("    queue_depth: 2\n");
  EXPECT_EQ(ParseSpecFile(bad).status().message(),
            bad.string() +
                ":9: extraction_points[0] 'p'.queue_depth: only valid with "
                "execution_mode 'async' (got execution_mode 'inline'). Remove "
                "queue_depth, or set execution_mode: async");
}

// ---------------------------------------------------------------------------------------------
// Problems: every rule of v0.1's §2.1-2.3 and of our extensions, with pinned messages.

TEST(SpecErrorTest, OneProblemIsOneLineWithFileAndLine) {
  EXPECT_EQ(Problems(Spec1("    execution_mode: async\n")),
            "spec.yaml:9: extraction_points[0] 'p'.execution_mode: execution_mode 'async' is not "
            "valid with probe_kind 'single_shot': async execution implies a probe that keeps "
            "state across calls; use probe_kind: trajectory, or execution_mode: inline");
  // No file name: the line alone, as v0.1 does for YAML text.
  EXPECT_EQ(Problems(Spec1("    stride: 2\n"), ""),
            "line 9: extraction_points[0] 'p'.stride: only meaningful for a continuous position "
            "('generated[*]' or a slice like 'generated[5:]'), not for position 'prompt[-1]'. "
            "Remove stride, or use a continuous position");
}

TEST(SpecErrorTest, ManyProblemsAreListedByLine) {
  EXPECT_EQ(Problems(R"(version: 1
extraction_points:
  - name: p
    layers: [1, -2]
    tensor_type: resid
    position: "prompt[*]"
    stride: 0
    probe_type: ""
    probe_kind: single_shot
    queue_depth: 2
  - name: p
    layers: 1
    tensor_type: kv
    position: 5
    probe_type: x
    probe_kind: trajectory
    bogus: 1
)"),
            "9 problems in the spec:\n"
            "  - spec.yaml:1: version: expected a string (got 1); quote it: version: \"1\"\n"
            "  - spec.yaml:4: extraction_points[0] 'p'.layers[1]: 'layers' entries must be >= 0 "
            "(got -2). Count layers from 0; final_norm is addressed as layer num_hidden_layers\n"
            "  - spec.yaml:5: extraction_points[0] 'p'.tensor_type: 'resid' is not a valid "
            "tensor_type. Use 'residual_stream', 'attn_out', 'mlp_out', 'kv', 'final_norm', "
            "'router_logits' or 'expert_weights'.\n"
            "  - spec.yaml:6: extraction_points[0] 'p'.position: invalid position 'prompt[*]': "
            "there is no wildcard or slice over the prompt; capture prompt tokens with one "
            "extraction point each (e.g. 'prompt[-1]', 'prompt[0]')\n"
            "  - spec.yaml:7: extraction_points[0] 'p'.stride: 'stride' must be >= 1 (got 0); "
            "stride: 1 captures every position\n"
            "  - spec.yaml:8: extraction_points[0] 'p'.probe_type: 'probe_type' must be a "
            "non-empty string (got '')\n"
            "  - spec.yaml:10: extraction_points[0] 'p'.queue_depth: only valid with "
            "execution_mode 'async' (got execution_mode 'inline'). Remove queue_depth, or set "
            "execution_mode: async\n"
            "  - spec.yaml:11: extraction_points[1] 'p'.name: duplicate name 'p' (also "
            "extraction_points[0]); names must be unique, rename one of them\n"
            "  - spec.yaml:17: extraction_points[1] 'p': unknown key 'bogus'. Valid keys: name, "
            "layers, tensor_type, tensor_types, combine, position, stride, until, count, "
            "probe_type, probe_kind, execution_mode, queue_depth, overflow_policy, intervention, "
            "probe_args, escalation.");
}

TEST(SpecErrorTest, UnknownKeysAndBadEnumValuesSuggestTheClosest) {
  EXPECT_EQ(Problems(Replaced(Spec1(), "layers: 3", "layr: 3")),
            "2 problems in the spec:\n"
            "  - spec.yaml:3: extraction_points[0] 'p': missing required key 'layers'.\n"
            "  - spec.yaml:4: extraction_points[0] 'p': unknown key 'layr'. Did you mean "
            "'layers'? Valid keys: name, layers, tensor_type, tensor_types, combine, position, "
            "stride, until, count, probe_type, probe_kind, execution_mode, queue_depth, "
            "overflow_policy, intervention, probe_args, escalation.");
  EXPECT_EQ(Problems("extraction_point: []\n"),
            "2 problems in the spec:\n"
            "  - spec.yaml:1: unknown key 'extraction_point'. Did you mean 'extraction_points'? "
            "Valid keys: version, extraction_points, steering.\n"
            "  - spec.yaml:1: missing required key 'extraction_points'. List the extraction "
            "points under it, or write extraction_points: [] for none.");
  EXPECT_EQ(Problems(Spec1("", "\"prompt[-1]\"\n    execution_mode: Async")),
            "spec.yaml:7: extraction_points[0] 'p'.execution_mode: 'Async' is not a valid "
            "execution_mode. Did you mean 'async'? Use 'inline' or 'async'.");
  EXPECT_NE(Problems(Trajectory("    until: generation-end\n"))
                .find("'generation-end' is not a valid until. Did you mean 'generation_end'? Use "
                      "'generation_end', 'fixed_count' or 'stop_token'."),
            std::string::npos);
  EXPECT_EQ(Problems(Trajectory("    execution_mode: async\n    overflow_policy: drop_old\n")),
            "spec.yaml:10: extraction_points[0] 't'.overflow_policy: 'drop_old' is not a valid "
            "overflow_policy. Did you mean 'drop_oldest'? Use 'drop_oldest', 'drop_newest' or "
            "'block'.");
  EXPECT_EQ(Problems(Spec1("    intervention: {mode: reject, timeout: 5}\n")),
            "spec.yaml:9: extraction_points[0] 'p'.intervention: unknown key 'timeout'. Did you "
            "mean 'timeout_ms'? Valid keys: mode, timeout_ms, on_timeout.");
  EXPECT_EQ(Problems(Replaced(Spec1("    probe_kind: 5\n"), "    probe_kind: single_shot\n", "")),
            "spec.yaml:8: extraction_points[0] 'p'.probe_kind: 5 is not a valid probe_kind. Use "
            "'single_shot' or 'trajectory'.");
}

TEST(SpecErrorTest, MissingKeysAndWrongTypes) {
  EXPECT_EQ(Problems("extraction_points:\n  - name: p\n"),
            "5 problems in the spec:\n"
            "  - spec.yaml:2: extraction_points[0] 'p': missing required key 'layers'.\n"
            "  - spec.yaml:2: extraction_points[0] 'p': missing required key 'tensor_type'. Set "
            "it to 'residual_stream', 'attn_out', 'mlp_out', 'kv', 'final_norm', 'router_logits' "
            "or 'expert_weights'.\n"
            "  - spec.yaml:2: extraction_points[0] 'p': missing required key 'position'.\n"
            "  - spec.yaml:2: extraction_points[0] 'p': missing required key 'probe_type'.\n"
            "  - spec.yaml:2: extraction_points[0] 'p': missing required key 'probe_kind'. Set "
            "it to 'single_shot' or 'trajectory'.");
  // One merged message for a union-typed field.
  EXPECT_EQ(Problems(Replaced(Spec1(), "layers: 3", "layers: null")),
            "spec.yaml:4: extraction_points[0] 'p'.layers: expected an int or a list of ints "
            "(got None)");
  EXPECT_EQ(Problems(Replaced(Spec1(), "layers: 3", "layers: 3.5")),
            "spec.yaml:4: extraction_points[0] 'p'.layers: expected an int or a list of ints "
            "(got 3.5, which has a fractional part)");
  EXPECT_EQ(Problems(Replaced(Spec1(), "layers: 3", "layers: [1, x]")),
            "spec.yaml:4: extraction_points[0] 'p'.layers[1]: expected an int (got 'x')");
  EXPECT_EQ(Problems(Replaced(Spec1(), "layers: 3", "layers: []")),
            "spec.yaml:4: extraction_points[0] 'p'.layers: 'layers' list must not be empty. List "
            "at least one layer index, e.g. layers: [6]");
  EXPECT_EQ(Problems(Spec1("", "null")),
            "spec.yaml:6: extraction_points[0] 'p'.position: expected an int or a string (got "
            "None)");
  EXPECT_EQ(Problems(Replaced(Spec1(), "name: p", "name: 5")),
            "spec.yaml:3: extraction_points[0].name: expected a string (got 5)");
  EXPECT_EQ(Problems(Replaced(Spec1(), "name: p", "name: '  '")),
            "spec.yaml:3: extraction_points[0] '  '.name: 'name' must be a non-empty string "
            "(got '  ')");
  EXPECT_EQ(Problems(Spec1("    probe_args: [1]\n")),
            "spec.yaml:9: extraction_points[0] 'p'.probe_args: expected a mapping of keys to "
            "values, got a list.");
  EXPECT_EQ(Problems(Spec1("    probe_args: {1: x}\n")),
            "spec.yaml:9: extraction_points[0] 'p'.probe_args: keys must be strings (got 1)");
  EXPECT_EQ(Problems("extraction_points:\n  - just text\n"),
            "spec.yaml:2: extraction_points[0]: expected a mapping of keys to values, got 'just "
            "text'. Each extraction point is a mapping with name, layers, tensor_type, position, "
            "...");
  EXPECT_EQ(Problems("extraction_points: 5\n"),
            "spec.yaml:1: extraction_points: expected a list of extraction points (got 5)");
}

TEST(SpecErrorTest, BooleansAndHugeNumbersAreNotInts) {
  // v0.1 reads `true` as 1 here (pydantic lax mode); we refuse it (a deliberate difference).
  EXPECT_EQ(Problems(Spec1("", "yes")),
            "spec.yaml:6: extraction_points[0] 'p'.position: expected an int or a string (got "
            "True; YAML reads unquoted yes/no/true/false/on/off as booleans)");
  EXPECT_EQ(Problems(Trajectory("    stride: true\n")),
            "spec.yaml:9: extraction_points[0] 't'.stride: expected an int (got True; YAML reads "
            "unquoted yes/no/true/false/on/off as booleans)");
  EXPECT_EQ(Problems(Replaced(Spec1(), "layers: 3", "layers: 2147483648")),
            "spec.yaml:4: extraction_points[0] 'p'.layers: 'layers' entries must be <= "
            "2147483647 (got 2147483648)");
  EXPECT_EQ(Problems(Spec1("", "99999999999999999999")),
            "spec.yaml:6: extraction_points[0] 'p'.position: invalid position "
            "99999999999999999999: the index is out of range");
  EXPECT_EQ(Problems(Trajectory("    execution_mode: async\n    queue_depth: 1e30\n")),
            "spec.yaml:10: extraction_points[0] 't'.queue_depth: expected an int (got '1e30')");
  EXPECT_EQ(Problems(Trajectory("    execution_mode: async\n    queue_depth: 1.0e+30\n")),
            "spec.yaml:10: extraction_points[0] 't'.queue_depth: 'queue_depth' must be <= "
            "2147483647 (got 1e+30)");
}

// Inventory §10 scenario 1's invalid values, as they arrive from YAML.
TEST(SpecErrorTest, EveryInvalidPositionOfTheInventoryIsRejected) {
  for (const char* value :
       {"\"prompt[]\"", "\"generated[]\"", "\"generated[*\"", "\"generated[5:2]\"", "\"foo[1]\"",
        "\"prompt[1.5]\"", "\"\"", "\"   \"", "null", "1.5", "true", "[1]", "\"prompt[*]\"",
        "\"prompt[0:4]\"", "\"generated[:5]\"", "\"generated[-3:]\"", "\"generated[3:3]\"",
        "\"5+1\""}) {
    const std::string problems = Problems(Spec1("", value));
    EXPECT_EQ(problems.rfind("spec.yaml:6: extraction_points[0] 'p'.position: ", 0), 0u)
        << value << ": " << problems;
  }
}

TEST(SpecErrorTest, CrossFieldRules) {
  EXPECT_EQ(Problems(Trajectory("    queue_depth: 4\n")),
            "spec.yaml:9: extraction_points[0] 't'.queue_depth: only valid with execution_mode "
            "'async' (got execution_mode 'inline'). Remove queue_depth, or set execution_mode: "
            "async");
  EXPECT_EQ(Problems(Trajectory("    overflow_policy: block\n")),
            "spec.yaml:9: extraction_points[0] 't'.overflow_policy: only valid with "
            "execution_mode 'async' (got execution_mode 'inline'). Remove overflow_policy, or set "
            "execution_mode: async");
  EXPECT_EQ(Problems(Spec1("    until: stop_token\n")),
            "spec.yaml:9: extraction_points[0] 'p'.until: only meaningful for a continuous "
            "position ('generated[*]' or a slice like 'generated[5:]'), not for position "
            "'prompt[-1]'. Remove until, or use a continuous position");
  EXPECT_EQ(Problems(Spec1("    every_n: 2\n", "generated[3]")),
            "spec.yaml:9: extraction_points[0] 'p'.every_n: only meaningful for a continuous "
            "position ('generated[*]' or a slice like 'generated[5:]'), not for position "
            "'generated[3]'. Remove every_n, or use a continuous position");
  EXPECT_EQ(Problems(Trajectory("    count: 4\n")),
            "spec.yaml:9: extraction_points[0] 't'.count: only valid with until: fixed_count "
            "(until is not set). Set until: fixed_count, or remove count");
  EXPECT_EQ(Problems(Trajectory("    until: generation_end\n    count: 4\n")),
            "spec.yaml:10: extraction_points[0] 't'.count: only valid with until: fixed_count "
            "(got until 'generation_end'). Set until: fixed_count, or remove count");
  EXPECT_EQ(Problems(Trajectory("    until: fixed_count\n    count: 0\n")),
            "spec.yaml:10: extraction_points[0] 't'.count: 'count' must be >= 1 (got 0); it is "
            "how many positions to capture");
  EXPECT_EQ(Problems(Trajectory("    execution_mode: async\n"
                                "    intervention:\n"
                                "      mode: block_until_signal\n"
                                "      timeout_ms: 20\n")),
            "spec.yaml:11: extraction_points[0] 't'.intervention.mode: execution_mode 'async' "
            "cannot use intervention mode 'block_until_signal': an async probe only observes and "
            "cannot hold generation. Remove the intervention block, or set execution_mode: "
            "inline");
}

void ExpectSameMeaning(const Spec& a, const Spec& b, const std::string& context);

// The extensions combine and tensor_types: one record of several layers and tensor types.
TEST(SpecParseTest, CombineConcatReadsSeveralLayersAndTensorTypes) {
  const Spec a = Parsed(Replaced(Trajectory("    combine: concat\n"), "    tensor_type: mlp_out\n",
                                 "    tensor_types: [mlp_out, residual_stream]\n"));
  const ExtractionPoint& p = a.extraction_points[0];
  EXPECT_EQ(p.combine, Combine::kConcat);
  EXPECT_EQ(p.tensor_type, TensorType::kMlpOut);  // the first
  EXPECT_EQ(p.tensor_types,
            (std::vector<TensorType>{TensorType::kMlpOut, TensorType::kResidualStream}));
  EXPECT_EQ(p.Inputs(), (std::vector<PointInput>{{1, TensorType::kMlpOut},
                                                 {1, TensorType::kResidualStream},
                                                 {2, TensorType::kMlpOut},
                                                 {2, TensorType::kResidualStream}}));
  const std::string written = WriteSpecYaml(a);
  EXPECT_NE(written.find("    tensor_types: [mlp_out, residual_stream]\n    combine: concat\n"),
            std::string::npos)
      << written;
  ExpectSameMeaning(a, Parsed(written), written);
  // Without combine, a point is one record per layer, as in v0.1.
  EXPECT_EQ(Parsed(Trajectory()).extraction_points[0].combine, Combine::kNone);
  EXPECT_EQ(Parsed(Trajectory()).extraction_points[0].Inputs().size(), 2u);
}

TEST(SpecErrorTest, CombineRules) {
  EXPECT_EQ(Problems(Replaced(Trajectory(), "    tensor_type: mlp_out\n",
                              "    tensor_types: [mlp_out, attn_out]\n")),
            "spec.yaml:5: extraction_points[0] 't'.tensor_types: only valid with combine: concat "
            "(several tensor types in one record). Add combine: concat, or use tensor_type and "
            "one point per tensor type");
  EXPECT_EQ(Problems(Trajectory("    combine: concat\n    tensor_types: [attn_out]\n")),
            "spec.yaml:10: extraction_points[0] 't'.tensor_types: give tensor_type or "
            "tensor_types, not both (tensor_types lists every tensor type of a combine: concat "
            "point)");
  EXPECT_EQ(Problems(Replaced(Trajectory("    combine: concat\n"), "layers: [1, 2]",
                              "layers: [1, 2, 1]")),
            "spec.yaml:4: extraction_points[0] 't'.layers: combine: concat reads each layer once; "
            "remove the repeated layer");
  EXPECT_EQ(Problems(Trajectory("    combine: concatenate\n")),
            "spec.yaml:9: extraction_points[0] 't'.combine: 'concatenate' is not a valid "
            "combine. Did you mean 'concat'? Use 'none' or 'concat'.");
  EXPECT_EQ(Problems(Replaced(Trajectory("    combine: concat\n"), "    tensor_type: mlp_out\n",
                              "    tensor_types: [mlp_out, resid, mlp_out]\n")),
            "2 problems in the spec:\n"
            "  - spec.yaml:5: extraction_points[0] 't'.tensor_types[1]: 'resid' is not a valid "
            "tensor_type. Use 'residual_stream', 'attn_out', 'mlp_out', 'kv', 'final_norm', "
            "'router_logits' or 'expert_weights'.\n"
            "  - spec.yaml:5: extraction_points[0] 't'.tensor_types[2]: 'mlp_out' is listed "
            "twice");
  EXPECT_EQ(Problems(Replaced(Trajectory("    combine: concat\n"), "    tensor_type: mlp_out\n",
                              "    tensor_types: []\n")),
            "spec.yaml:5: extraction_points[0] 't'.tensor_types: 'tensor_types' list must not "
            "be empty, e.g. tensor_types: [residual_stream, mlp_out]");
}

TEST(SpecErrorTest, InterventionRules) {
  EXPECT_EQ(Problems(Spec1("    intervention: {mode: block_until_signal}\n")),
            "spec.yaml:9: extraction_points[0] 'p'.intervention: timeout_ms is required when "
            "mode is 'block_until_signal': a probe must never be able to hang generation. Add "
            "e.g. timeout_ms: 50");
  EXPECT_EQ(Problems(Spec1("    intervention:\n      mode: block_until_signal\n"
                           "      timeout_ms: 0\n")),
            "spec.yaml:11: extraction_points[0] 'p'.intervention.timeout_ms: must be >= 1 (got "
            "0); it is how many milliseconds generation waits for the probe, e.g. timeout_ms: 50");
  EXPECT_EQ(Problems(Spec1("    intervention: {mode: reject, timeout_ms: 50}\n")),
            "spec.yaml:9: extraction_points[0] 'p'.intervention.timeout_ms: only valid with mode "
            "'block_until_signal' (got mode 'reject'). Set mode: block_until_signal, or remove "
            "timeout_ms");
  EXPECT_EQ(Problems(Spec1("    intervention: {on_timeout: abort}\n")),
            "spec.yaml:9: extraction_points[0] 'p'.intervention.on_timeout: only meaningful with "
            "mode 'block_until_signal' (got mode 'reject'). Set mode: block_until_signal, or "
            "remove on_timeout");
  EXPECT_EQ(Problems(Spec1("    intervention: reject\n")),
            "spec.yaml:9: extraction_points[0] 'p'.intervention: expected a mapping with mode, "
            "timeout_ms and on_timeout (got 'reject')");
  EXPECT_EQ(Problems(Spec1("    intervention: {mode: null}\n")),
            "spec.yaml:9: extraction_points[0] 'p'.intervention.mode: None is not a valid mode. "
            "Use 'reject' or 'block_until_signal'.");
}

TEST(SpecErrorTest, AliasBombsAreRefused) {
  std::string bomb = "    probe_args:\n      a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 9; ++i) {
    bomb += "      a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int j = 0; j < 10; ++j) bomb += (j ? ", *a" : "*a") + std::to_string(i - 1);
    bomb += "]\n";
  }
  EXPECT_EQ(Problems(Spec1(bomb)),
            "spec.yaml:9: extraction_points[0] 'p'.probe_args: too large: more than 1000000 "
            "values once YAML aliases are expanded");
}

TEST(SpecErrorTest, DuplicateNamesNameBothIndices) {
  const std::string point =
      "  - {name: dup, layers: 1, tensor_type: kv, position: 1, "
      "probe_type: t, probe_kind: single_shot}\n";
  EXPECT_EQ(Problems("extraction_points:\n" + point + point + point),
            "2 problems in the spec:\n"
            "  - spec.yaml:3: extraction_points[1] 'dup'.name: duplicate name 'dup' (also "
            "extraction_points[0]); names must be unique, rename one of them\n"
            "  - spec.yaml:4: extraction_points[2] 'dup'.name: duplicate name 'dup' (also "
            "extraction_points[0]); names must be unique, rename one of them");
}

TEST(SpecErrorTest, DocumentLevelProblems) {
  const std::string not_a_mapping =
      ". Start the spec with `extraction_points:` followed by a list of extraction points.";
  EXPECT_EQ(Problems(""),
            "spec.yaml: expected a YAML mapping with an 'extraction_points' key at the top level, "
            "got an empty document" +
                not_a_mapping);
  EXPECT_EQ(Problems("# only a comment\n", ""),
            "expected a YAML mapping with an 'extraction_points' key at the top level, got an "
            "empty document" +
                not_a_mapping);
  EXPECT_EQ(Problems("- a\n- b\n"),
            "spec.yaml: expected a YAML mapping with an 'extraction_points' key at the top level, "
            "got a list" +
                not_a_mapping);
  EXPECT_EQ(Problems("version: \"1\"\n"),
            "spec.yaml:1: missing required key 'extraction_points'. List the extraction points "
            "under it, or write extraction_points: [] for none.");
  EXPECT_EQ(Problems("extraction_points: []\n---\nextraction_points: []\n"),
            "spec.yaml:3: invalid YAML: expected a single document, but found another document. "
            "Keep one spec per file.");
  EXPECT_EQ(Problems(Replaced(Spec1(), "name: p", "name: !foo p")),
            "spec.yaml:3: invalid YAML: could not determine a constructor for the tag '!foo'");
  EXPECT_EQ(Problems("extraction_points: []\nbad: \xff\n"),
            "spec.yaml:2: invalid YAML: not UTF-8 text (byte 27)");
}

TEST(SpecErrorTest, YamlSyntaxErrorsBecomeOneLine) {
  EXPECT_EQ(Problems("extraction_points: [this: is not, valid: yaml: at all\n"),
            "spec.yaml:1: invalid YAML: end of sequence flow not found (column 46). Check the "
            "indentation and quoting around that line.");
  EXPECT_EQ(Problems("extraction_points:\n  - name: p\n   layers: 3\n"),
            "spec.yaml:3: invalid YAML: end of sequence not found (column 4). Check the "
            "indentation and quoting around that line.");
  // yaml-cpp 0.7 itself takes a quote left open to the end of a file ending in a newline.
  EXPECT_EQ(Problems(Replaced(Spec1(), "probe_kind: single_shot", "probe_kind: \"single_shot")),
            "spec.yaml:8: invalid YAML: found unexpected end of stream: a quoted scalar is never "
            "closed");
  EXPECT_EQ(Problems("extraction_points: []\nversion: 'x\n"),
            "spec.yaml:2: invalid YAML: found unexpected end of stream: a quoted scalar is never "
            "closed");
  EXPECT_EQ(Problems("extraction_points: []\nversion: 'it''s'\n"), "OK");
  EXPECT_EQ(Problems("\xEF\xBB\xBF"
                     "extraction_points: []\nversion: \"a\\\"b\"\n"),
            "OK");
  // A ',' outside brackets: yaml-cpp would return empty documents forever (found by fuzz_spec).
  EXPECT_EQ(Problems(","),
            "spec.yaml:1: invalid YAML: unexpected ',' (column 1). Check the indentation and "
            "quoting around that line.");
  EXPECT_EQ(Problems("extraction_points: []\n...\n  ,--\n"),
            "spec.yaml:3: invalid YAML: unexpected ',' (column 3). Check the indentation and "
            "quoting around that line.");
}

// ---------------------------------------------------------------------------------------------
// Deprecated keys.

TEST(SpecDeprecationTest, OldKeysAreAcceptedWithAWarning) {
  const Spec spec = Parsed(R"(extraction_points:
  - name: old
    layer: [1, 2]
    tensor: attn_out
    position: "generated[*]"
    every_n: 4
    probe_type: x
    probe_kind: trajectory
)");
  ASSERT_EQ(spec.extraction_points.size(), 1u);
  const ExtractionPoint& p = spec.extraction_points[0];
  EXPECT_EQ(p.layers, (std::vector<int>{1, 2}));
  EXPECT_EQ(p.tensor_type, TensorType::kAttnOut);
  EXPECT_EQ(p.stride, 4);
  EXPECT_EQ(spec.warnings,
            (std::vector<std::string>{
                "spec.yaml:3: extraction_points[0] 'old'.layer: 'layer' is deprecated; rename it "
                "to 'layers'",
                "spec.yaml:4: extraction_points[0] 'old'.tensor: 'tensor' is deprecated; rename "
                "it to 'tensor_type'",
                "spec.yaml:6: extraction_points[0] 'old'.every_n: 'every_n' is deprecated; "
                "rename it to 'stride'"}));
  // The canonical writer uses the new names only.
  EXPECT_EQ(WriteSpecYaml(spec).find("every_n"), std::string::npos);
  EXPECT_TRUE(Parsed(WriteSpecYaml(spec)).warnings.empty());
}

TEST(SpecDeprecationTest, OldAndNewKeyTogetherIsAnError) {
  EXPECT_EQ(Problems(Spec1("    layer: 4\n")),
            "spec.yaml:9: extraction_points[0] 'p'.layer: both 'layer' (deprecated) and 'layers' "
            "are set; use only 'layers'");
  EXPECT_EQ(Problems(Trajectory("    stride: 2\n    every_n: 2\n")),
            "spec.yaml:10: extraction_points[0] 't'.every_n: both 'every_n' (deprecated) and "
            "'stride' are set; use only 'stride'");
  EXPECT_EQ(Problems(Spec1("    tensor: kv\n")),
            "spec.yaml:9: extraction_points[0] 'p'.tensor: both 'tensor' (deprecated) and "
            "'tensor_type' are set; use only 'tensor_type'");
  // A bad value under the old key is named by the old key.
  EXPECT_EQ(Problems(Replaced(Spec1(), "tensor_type: residual_stream", "tensor: resid_stream")),
            "spec.yaml:5: extraction_points[0] 'p'.tensor: 'resid_stream' is not a valid "
            "tensor_type. Did you mean 'residual_stream'? Use 'residual_stream', 'attn_out', "
            "'mlp_out', 'kv', 'final_norm', 'router_logits' or 'expert_weights'.");
}

// ---------------------------------------------------------------------------------------------
// The canonical writer.

void ExpectSameMeaning(const Spec& a, const Spec& b, const std::string& context) {
  EXPECT_EQ(a.version, b.version) << context;
  ASSERT_EQ(a.extraction_points.size(), b.extraction_points.size()) << context;
  for (size_t i = 0; i < a.extraction_points.size(); ++i) {
    const ExtractionPoint& x = a.extraction_points[i];
    const ExtractionPoint& y = b.extraction_points[i];
    EXPECT_EQ(x.name, y.name) << context;
    EXPECT_EQ(x.layers, y.layers) << context;
    EXPECT_EQ(x.tensor_type, y.tensor_type) << context;
    EXPECT_EQ(x.position, y.position) << context;
    EXPECT_EQ(x.stride, y.stride) << context;
    EXPECT_EQ(x.until, y.until) << context;
    EXPECT_EQ(x.count, y.count) << context;
    EXPECT_EQ(x.probe_type, y.probe_type) << context;
    EXPECT_EQ(x.probe_kind, y.probe_kind) << context;
    EXPECT_EQ(x.probe_args, y.probe_args) << context;
    EXPECT_EQ(x.execution_mode, y.execution_mode) << context;
    EXPECT_EQ(x.queue_depth, y.queue_depth) << context;
    EXPECT_EQ(x.overflow_policy, y.overflow_policy) << context;
    EXPECT_EQ(x.intervention, y.intervention) << context;
    EXPECT_EQ(x.combine, y.combine) << context;
    EXPECT_EQ(x.tensor_types, y.tensor_types) << context;
  }
}

TEST(SpecWriterTest, CanonicalForm) {
  const Spec spec = Parsed(R"(extraction_points:
  - name: "a"
    layer: [7]
    tensor: mlp_out
    position: ' generated[2:]+01 '
    every_n: 3
    until: fixed_count
    count: 5
    probe_type: "yes"
    probe_kind: trajectory
    execution_mode: async
    queue_depth: "4"
    overflow_policy: block
    probe_args: {w: "x.safetensors", t: 1.0e-5, n: 3, s: "0.5", l: [true, null], o: {}}
  - {name: "b c", layers: [1, 2], tensor_type: kv, position: -1, probe_type: t,
     probe_kind: single_shot, execution_mode: inline, probe_args: {},
     intervention: {mode: block_until_signal, timeout_ms: 9, on_timeout: continue}}
)");
  EXPECT_EQ(WriteSpecYaml(spec),
            "version: \"1\"\n"
            "extraction_points:\n"
            "  - name: a\n"
            "    layers: 7\n"
            "    tensor_type: mlp_out\n"
            "    position: \"generated[2:]+1\"\n"
            "    stride: 3\n"
            "    until: fixed_count\n"
            "    count: 5\n"
            "    probe_type: \"yes\"\n"
            "    probe_kind: trajectory\n"
            "    execution_mode: async\n"
            "    queue_depth: 4\n"
            "    overflow_policy: block\n"
            "    probe_args: {\"l\": [true, null], \"n\": 3, \"o\": {}, \"s\": \"0.5\", \"t\": "
            "1.0e-05, \"w\": \"x.safetensors\"}\n"
            "  - name: \"b c\"\n"
            "    layers: [1, 2]\n"
            "    tensor_type: kv\n"
            "    position: -1\n"
            "    probe_type: t\n"
            "    probe_kind: single_shot\n"
            "    intervention: {mode: block_until_signal, timeout_ms: 9}\n");
  EXPECT_EQ(WriteSpecYaml(Spec{}), "version: \"1\"\nextraction_points: []\n");
}

TEST(SpecWriterTest, RoundTripsEveryAcceptedCorpusSpec) {
  int round_trips = 0;
  for (const fs::directory_entry& entry : fs::directory_iterator(kCorpus)) {
    if (entry.path().filename() == "manifest.json") continue;
    const StatusOr<Spec> spec = ParseSpecFile(entry.path());
    if (!spec.ok()) continue;
    const std::string yaml = WriteSpecYaml(*spec);
    const StatusOr<Spec> again = ParseSpecText(yaml, entry.path().filename().string());
    ASSERT_TRUE(again.ok()) << entry.path() << "\n" << yaml << "\n" << again.status().message();
    ExpectSameMeaning(*spec, *again, entry.path().string() + "\n" + yaml);
    EXPECT_TRUE(again->warnings.empty()) << yaml;
    EXPECT_EQ(WriteSpecYaml(*again), yaml);  // a fixed point
    ++round_trips;
  }
  EXPECT_GT(round_trips, 150);
}

TEST(SpecWriterTest, RoundTripsAwkwardValues) {
  Spec spec;
  spec.version = "v1: \"beta\"";
  const char* names[] = {"yes",  "null", "on",         "123",       "1.5", "-x",  "#x",
                         "a: b", "it's", "tab\there",  "new\nline", "ünï", "[x]", "*",
                         "~",    "",     "2024-01-01", "y",         "0x1F"};
  int i = 0;
  for (const char* name : names) {
    ExtractionPoint p;
    p.name = std::string(name) + (std::string(name).empty() ? "e" : "");
    p.layers = {i, i + 1};
    p.position = *PositionSelector::Parse(i % 2 == 0 ? "generated[*]-2" : "prompt[-3]+4");
    p.probe_type = name[0] == '\0' ? "t" : name;
    p.probe_kind = ProbeKind::kTrajectory;
    p.probe_args = {{name, {{"nested", {1.5, -2, 1e300, 1e-300, 0.1, name}}}},
                    {"big", 18446744073709551615ull},
                    {"neg", -9223372036854775807ll}};
    if (i % 2 == 0) p.stride = i + 1;
    spec.extraction_points.push_back(p);
    ++i;
  }
  const std::string yaml = WriteSpecYaml(spec);
  const StatusOr<Spec> again = ParseSpecText(yaml);
  ASSERT_TRUE(again.ok()) << yaml << "\n" << again.status().message();
  ExpectSameMeaning(spec, *again, yaml);
}

// Mangled valid corpus files (seeded): every outcome is a spec or problems, never a crash or a raw
// YAML exception, and whatever parses round-trips through the writer.
TEST(SpecErrorTest, MangledSpecsNeverEscapeAsExceptions) {
  std::vector<std::string> seeds;
  for (const fs::directory_entry& entry : fs::directory_iterator(kCorpus)) {
    if (entry.path().filename() != "manifest.json" && CheckSpecFile(entry.path()).spec) {
      seeds.push_back(ReadText(entry.path()));
    }
  }
  std::sort(seeds.begin(), seeds.end());
  ASSERT_FALSE(seeds.empty());
  const std::string alphabet = "[]{}:,-'\"&*!|>#%@` \n\t0aZ<~?";
  std::mt19937 rng(20261002);
  int parsed = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string text = seeds[rng() % seeds.size()];
    for (int edits = 1 + rng() % 3; edits > 0 && !text.empty(); --edits) {
      const size_t at = rng() % text.size();
      switch (rng() % 4) {
        case 0:
          text[at] = alphabet[rng() % alphabet.size()];
          break;
        case 1:
          text.erase(at, 1 + rng() % 8);
          break;
        case 2:
          text.insert(at, text.substr(rng() % text.size(), 1 + rng() % 16));
          break;
        default:
          text.resize(at);
      }
    }
    const SpecReport report = CheckSpecText(text, "m.yaml");
    ASSERT_NE(report.spec.has_value(), !report.problems.empty()) << text;
    for (const std::string& problem : report.problems) {
      ASSERT_EQ(problem.rfind("m.yaml", 0), 0u) << problem;
    }
    if (!report.spec.has_value()) continue;
    ++parsed;
    const std::string yaml = WriteSpecYaml(*report.spec);
    const StatusOr<Spec> again = ParseSpecText(yaml);
    ASSERT_TRUE(again.ok()) << text << "\n---\n" << yaml << "\n" << again.status().message();
    ExpectSameMeaning(*report.spec, *again, text);
  }
  EXPECT_GT(parsed, 30);  // most mangled files are (rightly) rejected
}

// ---------------------------------------------------------------------------------------------
// The JSON Schema.

const nlohmann::json& PointSchema() {
  static const nlohmann::json point = SpecJsonSchema()["$defs"]["ExtractionPoint"];
  return point;
}

TEST(SpecSchemaTest, IsADraft202012SchemaWithAStableText) {
  const nlohmann::json schema = SpecJsonSchema();
  EXPECT_EQ(schema["$schema"], "https://json-schema.org/draft/2020-12/schema");
  EXPECT_EQ(schema["$id"], "https://undercurrent.dev/schema/probe-spec.schema.json");
  EXPECT_EQ(schema["required"], nlohmann::json({"extraction_points"}));
  EXPECT_EQ(schema["additionalProperties"], false);
  EXPECT_EQ(schema["properties"]["version"]["type"], "string");
  const std::string text = SpecJsonSchemaText();
  EXPECT_EQ(text, SpecJsonSchemaText());
  EXPECT_EQ(nlohmann::json::parse(text), schema);
  EXPECT_EQ(text.rfind("{\n  \"$schema\": ", 0), 0u);
  EXPECT_EQ(text.back(), '\n');
}

TEST(SpecSchemaTest, DescribesEveryKeyAndValue) {
  const nlohmann::json& props = PointSchema()["properties"];
  for (const char* key :
       {"name", "layers", "tensor_type", "tensor_types", "combine", "position", "stride", "until",
        "count", "probe_type", "probe_kind", "execution_mode", "queue_depth", "overflow_policy",
        "intervention", "probe_args", "escalation"}) {
    ASSERT_TRUE(props.contains(key)) << key;
    EXPECT_TRUE(props[key].contains("description")) << key;
    EXPECT_FALSE(props[key].contains("deprecated")) << key;
  }
  for (const char* key : {"layer", "tensor", "every_n"}) {
    ASSERT_TRUE(props.contains(key)) << key;
    EXPECT_EQ(props[key]["deprecated"], true) << key;
    EXPECT_EQ(props[key]["doNotSuggest"], true) << key;
    EXPECT_NE(props[key]["deprecationMessage"].get<std::string>().find("rename it"),
              std::string::npos);
  }
  EXPECT_EQ(PointSchema()["additionalProperties"], false);
  const nlohmann::json schema = SpecJsonSchema();
  const nlohmann::json& defs = schema["$defs"];
  EXPECT_EQ(defs["TensorType"]["enum"],
            nlohmann::json({"residual_stream", "attn_out", "mlp_out", "kv", "final_norm",
                            "router_logits", "expert_weights"}));
  EXPECT_EQ(defs["OverflowPolicy"]["enum"],
            nlohmann::json({"drop_oldest", "drop_newest", "block"}));
  EXPECT_EQ(defs["Until"]["enum"], nlohmann::json({"generation_end", "fixed_count", "stop_token"}));
  EXPECT_EQ(props["stride"]["anyOf"][0]["minimum"], 1);
  EXPECT_EQ(props["layers"]["anyOf"][1]["minItems"], 1);
  EXPECT_EQ(defs["InterventionPolicy"]["if"]["properties"]["mode"]["const"], "block_until_signal");
  const std::string rules = PointSchema()["allOf"].dump();
  for (const char* rule : {R"({"if":{"properties":{"count":{"type":"integer"}})",
                           R"({"if":{"properties":{"overflow_policy":{"type":"string"}})",
                           R"("probe_kind":{"const":"trajectory"})"}) {
    EXPECT_NE(rules.find(rule), std::string::npos) << rule;
  }
}

TEST(SpecSchemaTest, PositionPatternAgreesWithTheParser) {
  const std::regex pattern(
      PointSchema()["properties"]["position"]["anyOf"][1]["pattern"].get<std::string>());
  std::string continuous_text;
  for (const nlohmann::json& rule : PointSchema()["allOf"]) {
    if (rule.contains("if") && rule["if"]["required"] == nlohmann::json({"stride"})) {
      continuous_text = rule["then"]["properties"]["position"]["pattern"];
    }
  }
  ASSERT_FALSE(continuous_text.empty());
  const std::regex continuous(continuous_text);
  for (const char* text : {"5",
                           "-1",
                           "0",
                           " 7 ",
                           "007",
                           "prompt[-1]",
                           "prompt[0]",
                           "prompt[3]+2",
                           "prompt[-0]",
                           "generated[0]",
                           "generated[-1]",
                           "generated[5]-2",
                           "generated[*]",
                           "generated[*]+1",
                           "generated[5:]",
                           "generated[2:8]",
                           "generated[2:]+1",
                           "\tprompt[-1]\n",
                           "prompt[]",
                           "generated[]",
                           "generated[*",
                           "foo[1]",
                           "prompt[1.5]",
                           "",
                           "   ",
                           "prompt[*]",
                           "prompt[0:4]",
                           "generated[:5]",
                           "generated[-3:]",
                           "5+1",
                           "+5",
                           "1.5",
                           "prompt[+1]",
                           "prompt[1]+",
                           "prompt[1]1",
                           "prompt [1]",
                           "prompt[ 1]",
                           "generated[1:2:3]",
                           "generated[a]",
                           "PROMPT[1]",
                           "prompt[1]++1",
                           "prompt[1]]",
                           "prompt[٣]",
                           "1e3",
                           "0x1F",
                           "generated[-1:]",
                           "generated[*]-",
                           "prompt[-1]+1 x"}) {
    const StatusOr<PositionSelector> parsed = PositionSelector::Parse(text);
    EXPECT_EQ(std::regex_search(text, pattern), parsed.ok()) << "'" << text << "'";
    EXPECT_EQ(std::regex_search(text, continuous), parsed.ok() && parsed->continuous())
        << "'" << text << "'";
  }
  // What a regular expression cannot check: the parser stays the authority.
  for (const char* text : {"generated[5:2]", "generated[3:3]", "99999999999999999999"}) {
    EXPECT_TRUE(std::regex_search(text, pattern)) << text;
    EXPECT_FALSE(PositionSelector::Parse(text).ok()) << text;
  }
}

}  // namespace
}  // namespace uc::probe

namespace uc::probe {
namespace {

constexpr char kSteeringSpec[] = R"(version: "1"
extraction_points:
  - name: gate
    layers: [1]
    tensor_type: residual_stream
    position: "generated[3]"
    probe_type: norm_gate
    probe_kind: single_shot
    probe_args: {threshold: 0.001, action: flag}
steering:
  - name: calm
    vector: calm.gguf
  - name: late
    vector: dir/late.npy
    layers: [2, 3]
    tensor_type: attn_out
    scale: -2.5
    norm_match: true
    tokens: generated
    when: {point: gate, signal: flag, action: start}
  - name: early
    vector: early.safetensors
    layers: 4
    when: {point: gate, action: stop}
)";

TEST(SpecSteeringTest, EntriesParseWithTheirDefaultsAndRoundTrip) {
  const Spec spec = Parsed(kSteeringSpec);
  ASSERT_EQ(spec.steering.size(), 3u);
  const SteeringEntry& calm = spec.steering[0];
  EXPECT_EQ(calm.name, "calm");
  EXPECT_EQ(calm.vector, "calm.gguf");
  EXPECT_TRUE(calm.layers.empty());
  EXPECT_EQ(calm.tensor_type, TensorType::kResidualStream);
  EXPECT_EQ(calm.scale, 1.0);
  EXPECT_FALSE(calm.norm_match);
  EXPECT_EQ(calm.tokens, "all");
  EXPECT_FALSE(calm.when.has_value());
  EXPECT_EQ(calm.line, 11);
  const SteeringEntry& late = spec.steering[1];
  EXPECT_EQ(late.layers, (std::vector<int>{2, 3}));
  EXPECT_EQ(late.tensor_type, TensorType::kAttnOut);
  EXPECT_EQ(late.scale, -2.5);
  EXPECT_TRUE(late.norm_match);
  EXPECT_EQ(late.tokens, "generated");
  ASSERT_TRUE(late.when.has_value());
  EXPECT_EQ(*late.when, (SteeringTrigger{"gate", SteeringAction::kStart}));
  EXPECT_EQ(spec.steering[2].layers, (std::vector<int>{4}));
  EXPECT_EQ(spec.steering[2].when->action, SteeringAction::kStop);
  // Canonical YAML keeps every entry's meaning.
  const Spec again = Parsed(WriteSpecYaml(spec));
  ASSERT_EQ(again.steering.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(again.steering[i].name, spec.steering[i].name);
    EXPECT_EQ(again.steering[i].vector, spec.steering[i].vector);
    EXPECT_EQ(again.steering[i].layers, spec.steering[i].layers);
    EXPECT_EQ(again.steering[i].tensor_type, spec.steering[i].tensor_type);
    EXPECT_EQ(again.steering[i].scale, spec.steering[i].scale);
    EXPECT_EQ(again.steering[i].norm_match, spec.steering[i].norm_match);
    EXPECT_EQ(again.steering[i].tokens, spec.steering[i].tokens);
    EXPECT_EQ(again.steering[i].when, spec.steering[i].when);
  }
  // A v0.1 spec has none, and its canonical YAML says nothing about steering.
  EXPECT_TRUE(Parsed(Spec1()).steering.empty());
  EXPECT_EQ(WriteSpecYaml(Parsed(Spec1())).find("steering"), std::string::npos);
}

TEST(SpecSteeringTest, ProblemsNameTheEntryFieldAndLine) {
  auto with = [](std::string_view from, std::string_view to) {
    return Problems(Replaced(kSteeringSpec, from, to));
  };
  EXPECT_EQ(with("    vector: calm.gguf\n", ""),
            "spec.yaml:11: steering[0] 'calm': missing required key 'vector' (a control vector "
            "file: .gguf, .safetensors, .npy)");
  EXPECT_EQ(with("tensor_type: attn_out", "tensor_type: final_norm"),
            "spec.yaml:16: steering[1] 'late'.tensor_type: steering goes to 'residual_stream', "
            "'attn_out' or 'mlp_out', not 'final_norm'.");
  EXPECT_EQ(with("when: {point: gate, signal: flag", "when: {point: gat, signal: flag"),
            "spec.yaml:13: steering[1] 'late'.when.point: no extraction point named 'gat'. Did "
            "you mean 'gate'?");
  EXPECT_EQ(with("action: stop}", "action: pause}"),
            "spec.yaml:24: steering[2] 'early'.when.action: expected 'start' or 'stop' (got "
            "'pause')");
  EXPECT_EQ(with("scale: -2.5", "scale: lots"),
            "spec.yaml:17: steering[1] 'late'.scale: expected a finite number (got 'lots')");
  EXPECT_NE(with("    tokens: generated\n", "    tokens: generated\n    colour: red\n")
                .find("spec.yaml:20: steering[1] 'late': unknown key 'colour'"),
            std::string::npos);
  EXPECT_NE(with("probe_args: {threshold: 0.001, action: flag}",
                 "probe_args: {threshold: 0.001, action: flag}\n    execution_mode: async\n"
                 "    probe_kind: trajectory")
                .find("'late'.when.point: extraction point 'gate' is async"),
            std::string::npos);
  EXPECT_NE(
      with("    tokens: generated\n", "    tokens: generated\n    position: \"generated[-2]\"\n")
          .find("'late'.position: 'generated[-2]' counts from the end of the generation"),
      std::string::npos);
  EXPECT_EQ(Parsed(Replaced(kSteeringSpec, "    tokens: generated\n",
                            "    tokens: generated\n    position: \"generated[2:9]+1\"\n"))
                .steering[1]
                .position->ToString(),
            "generated[2:9]+1");
  EXPECT_EQ(with("  - name: early", "  - name: calm"),
            "spec.yaml:21: steering[2] 'calm'.name: duplicate name (also steering[0]); names "
            "must be unique");
}

// Extension: `escalation:` (the classifier an `escalate` signal asks) parses, round-trips
// through the writer, and its problems name the file, line and field.
TEST(SpecEscalationTest, ParsesAndRoundTrips) {
  const Spec spec =
      Parsed(Spec1("    probe_args: {weights: w.npy, threshold: 0.5, action: escalate}\n"
                   "    escalation:\n"
                   "      url: http://127.0.0.1:8080/classify\n"
                   "      timeout_ms: 250\n"
                   "      on_timeout: abort\n"));
  ASSERT_EQ(spec.extraction_points.size(), 1u);
  const ExtractionPoint& p = spec.extraction_points[0];
  ASSERT_TRUE(p.escalation.has_value());
  EXPECT_EQ(p.escalation->url, "http://127.0.0.1:8080/classify");
  EXPECT_EQ(p.escalation->timeout_ms, 250);
  EXPECT_EQ(p.escalation->on_timeout, OnTimeout::kAbort);
  const std::string written = WriteSpecYaml(spec);
  EXPECT_NE(written.find("escalation: {url: \"http://127.0.0.1:8080/classify\", timeout_ms: 250, "
                         "on_timeout: abort}"),
            std::string::npos)
      << written;
  const Spec again = Parsed(written);
  ASSERT_EQ(again.extraction_points.size(), 1u);
  EXPECT_EQ(again.extraction_points[0].escalation, p.escalation);
  // on_timeout defaults to continue; a point without the block has none.
  const Spec defaults =
      Parsed(Spec1("    escalation: {url: \"https://classifier.example/x\", timeout_ms: 9}\n"));
  EXPECT_EQ(defaults.extraction_points[0].escalation->on_timeout, OnTimeout::kContinue);
  EXPECT_FALSE(Parsed(Spec1()).extraction_points[0].escalation.has_value());
  const nlohmann::json& props = PointSchema()["properties"];
  EXPECT_TRUE(props.contains("escalation"));
  EXPECT_EQ(SpecJsonSchema()["$defs"]["Escalation"]["required"],
            nlohmann::json({"url", "timeout_ms"}));
}

TEST(SpecEscalationTest, ProblemsNameFileLineAndField) {
  EXPECT_EQ(Problems(Spec1("    escalation: {timeout_ms: 100}\n")),
            "spec.yaml:9: extraction_points[0] 'p'.escalation.url: required: the classifier's "
            "URL, e.g. url: http://127.0.0.1:8080/classify");
  EXPECT_EQ(Problems(Spec1("    escalation: {url: \"http://127.0.0.1:1/x\"}\n")),
            "spec.yaml:9: extraction_points[0] 'p'.escalation.timeout_ms: required: a held "
            "request must never wait forever. Add e.g. timeout_ms: 2000");
  EXPECT_EQ(Problems(Spec1("    escalation:\n      url: ftp://host/x\n      timeout_ms: 5\n")),
            "spec.yaml:10: extraction_points[0] 'p'.escalation.url: expected an http:// or "
            "https:// URL with a host, e.g. http://127.0.0.1:8080/classify (got 'ftp://host/x')");
  EXPECT_EQ(Problems(Spec1("    escalation:\n      url: \"http://h/x\"\n      timeout_ms: 0\n")),
            "spec.yaml:11: extraction_points[0] 'p'.escalation.timeout_ms: must be >= 1 (got 0); "
            "it is how many milliseconds the request is held at most, e.g. timeout_ms: 2000");
  EXPECT_EQ(Problems(Spec1("    escalation: {url: \"http://h/x\", timeout_ms: 5, "
                           "on_timeout: wait}\n")),
            "spec.yaml:9: extraction_points[0] 'p'.escalation.on_timeout: 'wait' is not a valid "
            "on_timeout. Use 'continue' or 'abort'.");
  EXPECT_EQ(Problems(Spec1("    escalation: {url: \"http://h/x\", timeout_ms: 5, retries: 2}\n"))
                .find("spec.yaml:9: extraction_points[0] 'p'.escalation: "),
            0u);
  EXPECT_EQ(Problems(Spec1("    escalation: http://h/x\n")),
            "spec.yaml:9: extraction_points[0] 'p'.escalation: expected a mapping with url, "
            "timeout_ms and on_timeout (got 'http://h/x')");
  EXPECT_EQ(Problems(Spec1("    probe_args: {weights: w.npy, action: escalate}\n")),
            "spec.yaml:9: extraction_points[0] 'p'.probe_args.action: action 'escalate' needs the "
            "point's escalation block (url, timeout_ms, on_timeout): where the held request's "
            "classifier is. Add e.g. escalation: {url: http://127.0.0.1:8080/classify, "
            "timeout_ms: 2000, on_timeout: abort}");
  EXPECT_EQ(Problems(Trajectory("    execution_mode: async\n"
                                "    escalation: {url: \"http://h/x\", timeout_ms: 5}\n")),
            "spec.yaml:10: extraction_points[0] 't'.escalation: execution_mode 'async' cannot "
            "escalate: an async probe only observes and cannot hold generation. Remove the "
            "escalation block, or set execution_mode: inline");
}

}  // namespace
}  // namespace uc::probe
