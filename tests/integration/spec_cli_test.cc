// `undercurrent validate` and `undercurrent schema` through the real binary: exit codes (0 all
// valid, 1 any invalid, 2 usage), the text and JSON reports, --strict, --message-style v0.1
// against what Undercurrent v0.1 itself printed (tests/testdata/v0_1/validate.json), and the
// schema on stdout or in a file.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
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
  // One directory per test: ctest runs the tests of this file in parallel processes, and two
  // writing the same file name at once would truncate what the other's CLI is reading.
  void SetUp() override {
    dir_ = testing::ScratchDir(std::string("spec_cli_") +
                               ::testing::UnitTest::GetInstance()->current_test_info()->name());
  }

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

const char kEveryN[] = R"(extraction_points:
  - name: traj
    layers: 1
    tensor_type: residual_stream
    position: "generated[*]"
    every_n: 2
    probe_type: ema
    probe_kind: trajectory
    layers: 2
)";

// v0.1 takes every_n as a plain alias and duplicate keys silently: --strict keeps both warnings.
TEST_F(SpecCliTest, StrictFailsOnlyOnWhatV01WarnsAbout) {
  const std::string spec = Write("every_n.yaml", kEveryN);
  const CliResult strict = RunCli("validate --strict " + spec);
  EXPECT_EQ(strict.exit_code, 0) << strict.output;
  EXPECT_EQ(strict.output,
            spec + ": OK (1 extraction point)\n  warning: " + spec +
                ":6: extraction_points[0] 'traj'.every_n: 'every_n' is deprecated; rename it to "
                "'stride'\n  warning: " +
                spec +
                ":9: extraction_points[0] 'traj': duplicate key 'layers' (first on line 3); "
                "the last value is used\n");
}

TEST_F(SpecCliTest, V01MessageStyle) {
  const std::string old = Write("old.yaml", kDeprecated);
  const std::string bad = Write("bad.yaml", kBad);
  const std::string every_n = Write("every_n.yaml", kEveryN);
  const std::string v01 =
      "deprecated spec keys: extraction point 'old' uses 'layer', rename it to 'layers'";
  const CliResult lenient = RunCli("validate --message-style v0.1 " + old + " " + every_n);
  EXPECT_EQ(lenient.exit_code, 0);
  EXPECT_EQ(lenient.output, old + ": OK (1 extraction point)\n  warning: " + v01 + "\n" + every_n +
                                ": OK (1 extraction point)\n");
  const CliResult strict = RunCli("validate --strict --message-style v0.1 " + old + " " + bad);
  EXPECT_EQ(strict.exit_code, 1);
  EXPECT_EQ(strict.output.substr(0, strict.output.find(bad)),
            old + ": ERROR 1 issue\n  - " + v01 + "\n");
  EXPECT_NE(strict.output.find(bad + ": ERROR 2 issues\n  - line 3: extraction_points[0] "
                                     "'p'.layers: 'layers' entries must be >= 0 (got -1)."),
            std::string::npos)
      << strict.output;
  EXPECT_NE(strict.output.find("\n  - line 8: extraction_points[0] 'p'.stride: "),
            std::string::npos)
      << strict.output;
  const CliResult missing = RunCli("validate --message-style v0.1 " + Path("missing.yaml"));
  EXPECT_EQ(missing.output, Path("missing.yaml") +
                                ": ERROR 1 issue\n  - file not found; check the path (relative "
                                "paths are resolved against the current directory)\n");
  const CliResult json = RunCli("validate --format json --message-style v0.1 " + old);
  EXPECT_EQ(nlohmann::json::parse(json.output)[0]["warnings"], nlohmann::json::array({v01}));
  EXPECT_EQ(RunCli("validate --message-style v01 " + old).exit_code, 2);
}

// Every spec of the compatibility corpus, validated as v0.1 did it (its output recorded by
// tools/reference/v0_1_behaviour.py), plain and --strict: where v0.1 accepts the file, our
// --message-style v0.1 output is v0.1's byte for byte; where it rejects it, we reject it too,
// with problems in v0.1's "line N: ..." form. Our own style agrees on every verdict as well.
// Skipped: the corpus's deliberate differences and the file v0.1 itself crashes on.
TEST_F(SpecCliTest, V01ValidateOutputOnTheWholeCorpus) {
  const fs::path corpus = testing::TestData("spec_compat");
  const nlohmann::json v01 =
      nlohmann::json::parse(Read(testing::TestData("v0_1") / "validate.json"));
  const nlohmann::json manifest = nlohmann::json::parse(Read(corpus / "manifest.json"));
  std::map<std::string, bool> deliberate;
  for (const nlohmann::json& c : manifest["cases"]) {
    deliberate[c["file"]] = c.contains("deliberate_difference");
  }
  std::vector<const nlohmann::json*> cases;
  std::string files;
  for (const nlohmann::json& c : v01["cases"]) {
    if (c["exit"].is_null() || deliberate.at(c["file"].get<std::string>())) continue;
    cases.push_back(&c);
    files += " " + c["file"].get<std::string>();
  }
  ASSERT_GT(cases.size(), 550u);
  // One run per mode over every file; each file's block starts with "FILE: ".
  auto blocks = [&](const std::string& flags) {
    const std::string cd = "cd '" + corpus.string() + "' && ";
    std::string output;
    testing::RunCommand(cd + testing::CliBinary().string() + " validate " + flags + files, &output);
    std::map<std::string, std::string> out;
    size_t at = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
      const std::string file = (*cases[i])["file"];
      EXPECT_EQ(output.compare(at, file.size() + 2, file + ": "), 0) << file;
      size_t end = output.size();
      if (i + 1 < cases.size()) {
        end = output.find("\n" + (*cases[i + 1])["file"].get<std::string>() + ": ", at);
        if (end == std::string::npos) break;
        ++end;
      }
      out[file] = output.substr(at, end - at);
      at = end;
    }
    return out;
  };
  int identical = 0;
  for (const bool strict : {false, true}) {
    const std::string key = strict ? "strict_text" : "text";
    const std::map<std::string, std::string> v01_style =
        blocks(std::string(strict ? "--strict " : "") + "--message-style v0.1");
    const std::map<std::string, std::string> ours = blocks(strict ? "--strict" : "");
    for (const nlohmann::json* c : cases) {
      const std::string file = (*c)["file"];
      const std::string expected = (*c)[key];
      const bool v01_ok = expected.find(file + ": OK") == 0;
      SCOPED_TRACE(file + (strict ? " --strict" : ""));
      ASSERT_EQ(v01_style.count(file), 1u);
      const std::string& got = v01_style.at(file);
      EXPECT_EQ(ours.at(file).find(file + (v01_ok ? ": OK" : ": ERROR")), 0u) << ours.at(file);
      if (v01_ok) {
        EXPECT_EQ(got, expected);
        identical += got == expected;
        continue;
      }
      EXPECT_EQ(got.find(file + ": ERROR "), 0u) << got;
      std::istringstream lines(got);
      std::string line;
      std::getline(lines, line);
      while (std::getline(lines, line)) {
        if (line.rfind("  - ", 0) != 0) continue;  // a continuation of a multi-line message
        EXPECT_EQ(line.find(file), std::string::npos) << "a v0.1-style problem names no file";
      }
    }
  }
  EXPECT_GT(identical, 300);
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
