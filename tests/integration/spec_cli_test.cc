// `undercurrent validate` and `undercurrent schema` through the real binary: exit codes (0 all
// valid, 1 any invalid, 2 usage), the text and JSON reports, --strict, and the schema on stdout
// or in a file.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "common/test_util.h"

namespace uc {
namespace {

namespace fs = std::filesystem;

struct CliResult {
  int exit_code;
  std::string output;  // stdout and stderr
};

CliResult RunCli(const std::string& args) {
  CliResult r;
  r.exit_code = testing::RunCommand(testing::CliBinary().string() + " " + args, &r.output);
  return r;
}

std::string Read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

class SpecCliTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::ScratchDir("spec_cli"); }

  // Writes `text` to DIR/name; returns the quoted path for a command line.
  std::string Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
    return Path(name);
  }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

const char kGood[] = R"(version: "1"
extraction_points:
  - name: gate
    layers: 3
    tensor_type: residual_stream
    position: "prompt[-1]"
    probe_type: linear
    probe_kind: single_shot
  - name: watch
    layers: [1, 2]
    tensor_type: mlp_out
    position: "generated[*]"
    probe_type: ema
    probe_kind: trajectory
    execution_mode: async
)";

const char kDeprecated[] = R"(extraction_points:
  - name: old
    layer: 3
    tensor_type: residual_stream
    position: 5
    probe_type: linear
    probe_kind: single_shot
)";

const char kBad[] = R"(extraction_points:
  - name: p
    layers: -1
    tensor_type: residual_stream
    position: "prompt[-1]"
    probe_type: linear
    probe_kind: single_shot
    stride: 2
)";

TEST_F(SpecCliTest, ValidSpecsExitZero) {
  const std::string good = Write("good.yaml", kGood);
  const CliResult r = RunCli("validate " + good);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, good + ": OK (2 extraction points)\n");
  const std::string one = Write("one.json",
                                R"({"extraction_points": [{"name": "j", "layers": 0,
      "tensor_type": "kv", "position": 1, "probe_type": "t", "probe_kind": "single_shot"}]})");
  EXPECT_EQ(RunCli("validate " + one).output, one + ": OK (1 extraction point)\n");
}

TEST_F(SpecCliTest, AnyInvalidSpecExitsOneAndListsEveryIssue) {
  const std::string good = Write("good.yaml", kGood);
  const std::string bad = Write("bad.yaml", kBad);
  const CliResult r = RunCli("validate " + good + " " + bad);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(r.output,
            good + ": OK (2 extraction points)\n" + bad + ": ERROR 2 issues\n  - " + bad +
                ":3: extraction_points[0] 'p'.layers: 'layers' entries must be >= 0 (got -1). "
                "Count layers from 0; final_norm is addressed as layer num_hidden_layers\n  - " +
                bad +
                ":8: extraction_points[0] 'p'.stride: only meaningful for a continuous position "
                "('generated[*]' or a slice like 'generated[5:]'), not for position "
                "'prompt[-1]'. Remove stride, or use a continuous position\n");
  const CliResult missing = RunCli("validate " + Path("missing.yaml"));
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_EQ(missing.output, Path("missing.yaml") + ": ERROR 1 issue\n  - " + Path("missing.yaml") +
                                ": file not found; check the path (relative paths are resolved "
                                "against the current directory)\n");
  const CliResult yaml =
      RunCli("validate " + Write("syntax.yaml", "extraction_points: [a: b: c\n"));
  EXPECT_EQ(yaml.exit_code, 1);
  EXPECT_NE(yaml.output.find(": ERROR 1 issue\n  - " + Path("syntax.yaml") + ":1: invalid YAML: "),
            std::string::npos)
      << yaml.output;
}

TEST_F(SpecCliTest, WarningsAreShownAndStrictMakesThemErrors) {
  const std::string spec = Write("old.yaml", kDeprecated);
  const std::string warning =
      spec + ":3: extraction_points[0] 'old'.layer: 'layer' is deprecated; rename it to 'layers'";
  const CliResult lenient = RunCli("validate " + spec);
  EXPECT_EQ(lenient.exit_code, 0);
  EXPECT_EQ(lenient.output, spec + ": OK (1 extraction point)\n  warning: " + warning + "\n");
  const CliResult strict = RunCli("validate --strict " + spec);
  EXPECT_EQ(strict.exit_code, 1);
  EXPECT_EQ(strict.output, spec + ": ERROR 1 issue\n  - " + warning + "\n");
}

TEST_F(SpecCliTest, JsonReport) {
  const std::string good = Write("good.yaml", kGood);
  const std::string bad = Write("bad.yaml", kBad);
  const std::string old = Write("old.yaml", kDeprecated);
  const CliResult r = RunCli("validate --format json " + good + " " + bad + " " + old);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  const nlohmann::json report = nlohmann::json::parse(r.output);
  ASSERT_EQ(report.size(), 3u);
  EXPECT_EQ(report[0], nlohmann::json({{"path", good},
                                       {"valid", true},
                                       {"extraction_points", 2},
                                       {"errors", nlohmann::json::array()},
                                       {"warnings", nlohmann::json::array()}}));
  EXPECT_EQ(report[1]["valid"], false);
  EXPECT_TRUE(report[1]["extraction_points"].is_null());
  EXPECT_EQ(report[1]["errors"].size(), 2u);
  EXPECT_EQ(report[2]["valid"], true);
  EXPECT_EQ(report[2]["warnings"].size(), 1u);
  const nlohmann::json strict =
      nlohmann::json::parse(RunCli("validate --strict --format=json " + old).output);
  EXPECT_EQ(strict[0]["valid"], false);
  EXPECT_EQ(strict[0]["extraction_points"], 1);
  EXPECT_EQ(strict[0]["errors"].size(), 1u);
}

TEST_F(SpecCliTest, CheckProbesResolvesEveryProbeType) {
  const std::string spec = Write("probes.yaml", R"(version: "1"
extraction_points:
  - {name: a, layers: 1, tensor_type: residual_stream, position: "prompt[-1]",
     probe_type: linaer, probe_kind: single_shot}
  - {name: b, layers: 1, tensor_type: residual_stream, position: "generated[*]",
     probe_type: ema, probe_kind: single_shot}
  - {name: c, layers: 1, tensor_type: residual_stream, position: "generated[*]",
     probe_type: running_mean, probe_kind: trajectory}
)");
  EXPECT_EQ(RunCli("validate " + spec).exit_code, 0) << "without the flag, names are not checked";
  const CliResult r = RunCli("validate --check-probes " + spec);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find(spec + ":3: extraction_points[0] 'a'.probe_type: unknown probe_type "
                                 "'linaer' (did you mean 'linear'?)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find(spec + ":5: extraction_points[1] 'b'.probe_type: probe_type 'ema' is "
                                 "trajectory but the point says single_shot"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("'c'"), std::string::npos) << r.output;
  EXPECT_EQ(RunCli("validate --probe-plugin " + spec + " " + spec).exit_code, 2)
      << "--probe-plugin needs --check-probes";
}

TEST_F(SpecCliTest, UsageErrorsExitTwo) {
  const std::string good = Write("good.yaml", kGood);
  EXPECT_EQ(RunCli("validate").exit_code, 2);
  EXPECT_EQ(RunCli("validate --format xml " + good).exit_code, 2);
  EXPECT_EQ(RunCli("validate --bogus " + good).exit_code, 2);
  EXPECT_EQ(RunCli("schema --bogus").exit_code, 2);
  EXPECT_EQ(RunCli("validate --help").exit_code, 0);
}

TEST_F(SpecCliTest, SchemaGoesToStdoutOrAFile) {
  const fs::path printed = dir_ / "stdout.json";
  const CliResult r = RunCli("schema > " + printed.string());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "");
  const std::string text = Read(printed);
  const nlohmann::json schema = nlohmann::json::parse(text);
  EXPECT_EQ(schema["$schema"], "https://json-schema.org/draft/2020-12/schema");
  EXPECT_EQ(schema["$id"], "https://undercurrent.dev/schema/probe-spec.schema.json");
  EXPECT_TRUE(schema["$defs"]["ExtractionPoint"]["properties"].contains("overflow_policy"));
  const std::string file = Path("schema.json");
  const CliResult written = RunCli("schema -o " + file);
  EXPECT_EQ(written.exit_code, 0);
  EXPECT_EQ(written.output, "wrote " + file + "\n");
  EXPECT_EQ(Read(file), text);
  EXPECT_EQ(RunCli("schema --output " + Path("no/such/dir/schema.json")).exit_code, 1);
}

TEST_F(SpecCliTest, V01ExampleSpecsValidate) {
  const fs::path corpus = testing::TestData("spec_compat");
  std::string args;
  for (const char* name : {"example_classic_single_token", "example_continuous_trajectory",
                           "example_offset_dual_position", "example_sliced_range",
                           "example_content_safety_gpt2", "example_final_norm_llama31"}) {
    args += " " + (corpus / (std::string(name) + ".yaml")).string();
  }
  const CliResult r = RunCli("validate --strict" + args);
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

}  // namespace
}  // namespace uc
