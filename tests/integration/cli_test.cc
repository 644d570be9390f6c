// The command line's public surface through the real binary: `--version`, `--help` on every
// subcommand, the exit codes (0 success, 1 reported failure, 2 usage, 130 interrupted),
// `inspect-model` (text, JSON, --emit-spec that `validate` accepts, config-only models, bad
// paths) and `bench` (text and JSON).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <thread>

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

// stdout only (stderr discarded), for JSON output.
CliResult RunCliStdout(const std::string& args) {
  CliResult r;
  r.exit_code = testing::RunCommand(
      "{ " + testing::CliBinary().string() + " " + args + " 2>/dev/null; }", &r.output);
  return r;
}

// The largest --threads the commands accept (flag_checks.h).
constexpr int kThreadsFlagMax = 1024;

// The bundled model (a Hugging Face directory).
const std::string kModel = std::string(UC_SOURCE_DIR) + "/models/stories260K";

std::string Read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The subcommand names listed in `undercurrent --help`.
std::vector<std::string> Subcommands() {
  const CliResult help = RunCli("--help");
  std::vector<std::string> names;
  std::istringstream lines(help.output);
  std::string line;
  bool in_list = false;
  while (std::getline(lines, line)) {
    if (line.rfind("SUBCOMMANDS:", 0) == 0 || line.rfind("Subcommands:", 0) == 0) {
      in_list = true;
      continue;
    }
    if (in_list) {
      std::smatch m;
      if (std::regex_search(line, m, std::regex(R"(^\s+([a-z][a-z-]*)\s)"))) {
        names.push_back(m[1]);
      } else if (!line.empty() && line[0] != ' ') {
        in_list = false;
      }
    }
  }
  return names;
}

TEST(CliTest, VersionPrintsNameAndVersion) {
  const CliResult r = RunCli("--version");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(std::regex_match(r.output, std::regex(R"(undercurrent \d+\.\d+\.\d+\n)")))
      << r.output;
}

TEST(CliTest, EverySubcommandHasHelpAndExitsZero) {
  const CliResult top = RunCli("--help");
  EXPECT_EQ(top.exit_code, 0);
  EXPECT_NE(top.output.find("Exit codes: 0 success, 1 reported failure"), std::string::npos)
      << top.output;
  const std::vector<std::string> names = Subcommands();
  for (const char* expected : {"generate", "validate", "schema", "inspect-model", "bench"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), expected), names.end())
        << expected << " missing from:\n"
        << top.output;
  }
  for (const std::string& name : names) {
    const CliResult r = RunCli(name + " --help");
    EXPECT_EQ(r.exit_code, 0) << name << ":\n" << r.output;
    EXPECT_NE(r.output.find(name), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("--help"), std::string::npos) << r.output;
    EXPECT_EQ(RunCli(name + " -h").exit_code, 0) << name;
  }
}

TEST(CliTest, UsageErrorsExitTwo) {
  EXPECT_EQ(RunCli("").exit_code, 2);
  EXPECT_EQ(RunCli("no-such-command").exit_code, 2);
  EXPECT_EQ(RunCli("--no-such-flag").exit_code, 2);
  EXPECT_EQ(RunCli("inspect-model").exit_code, 2);
  EXPECT_EQ(RunCli("inspect-model " + kModel + " --format yaml").exit_code, 2);
  EXPECT_EQ(RunCli("bench").exit_code, 2);
  EXPECT_EQ(RunCli("bench --model " + kModel + " --batch 0").exit_code, 2);
  EXPECT_EQ(RunCli("validate").exit_code, 2);
  EXPECT_EQ(RunCli("generate --model " + kModel).exit_code, 2);  // no prompt
  const CliResult matmul = RunCli("generate --model " + kModel + " --prompt x --matmul fast");
  EXPECT_EQ(matmul.exit_code, 2);
  EXPECT_NE(matmul.output.find("--matmul"), std::string::npos) << matmul.output;
  // Durations past 1e6 s would overflow the deadlines' integer clocks into "at once".
  for (const std::string& flags :
       {"generate --model " + kModel + " --prompt x --probe-drain-timeout 1e30",
        "generate --model " + kModel + " --prompt x --step-timeout 1e300",
        "generate --model " + kModel + " --prompt x --metrics-interval 0",
        "serve --model " + kModel + " --drain-timeout 1e30",
        "serve --model " + kModel + " --probe-result-timeout -1"}) {
    const CliResult r = RunCli(flags);
    EXPECT_EQ(r.exit_code, 2) << flags << "\n" << r.output;
    EXPECT_NE(r.output.find("not in range"), std::string::npos) << flags << "\n" << r.output;
  }
}

// --matmul reaches the engine: bench reports the precision it ran with, on a Q4_0 file.
TEST(CliTest, BenchRunsEitherMatMulPrecision) {
  const std::string model = testing::TestData("gguf/q4_0/tiny-gqa2-Q4_0.gguf").string();
  for (const std::string precision : {"exact", "int8"}) {
    const CliResult r = RunCliStdout("bench --model " + model +
                                     " --batch 2 --prompt-len 8 --max-tokens 4 --repetitions 1 "
                                     "--threads 1 --format json --matmul " +
                                     precision);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const nlohmann::json j = nlohmann::json::parse(r.output);
    EXPECT_EQ(j["matmul"], precision);
    EXPECT_GT(j["decode_tokens_per_second"].get<double>(), 0.0);
  }
}

// --batch-invariant is the default; of --batch-invariant and --no-batch-invariant the last given
// wins, and --help lists each on its own line.
TEST(CliTest, TheLastBatchInvarianceFlagWins) {
  const struct {
    std::string flags;
    bool invariant;
  } cases[] = {{"", true},
               {"--no-batch-invariant", false},
               {"--no-batch-invariant --batch-invariant", true},
               {"--batch-invariant --no-batch-invariant", false}};
  for (const auto& c : cases) {
    const CliResult r = RunCliStdout("bench --model " + kModel +
                                     " --batch 1 --prompt-len 8 --max-tokens 2 --repetitions 1 "
                                     "--threads 1 --format json " +
                                     c.flags);
    ASSERT_EQ(r.exit_code, 0) << c.flags << ": " << r.output;
    EXPECT_EQ(nlohmann::json::parse(r.output)["batch_invariant"], c.invariant) << c.flags;
  }
  const CliResult help = RunCli("bench --help");
  EXPECT_NE(help.output.find("\n  --batch-invariant "), std::string::npos) << help.output;
  EXPECT_NE(help.output.find("\n  --no-batch-invariant "), std::string::npos) << help.output;
}

// llama.cpp's control-vector flags: a steered greedy run differs from the plain one, the flags
// combine, and a file that does not fit the model is named (exit 1).
TEST(CliTest, ControlVectorFlagsSteerTheGeneration) {
  const std::string base = "generate --model " + kModel +
                           " --prompt 'Once upon a time' --temperature 0 "
                           "--max-tokens 24 --json";
  const std::string a = testing::TestData("steering/vectors_a.gguf").string();
  const std::string b = testing::TestData("steering/vectors_b.safetensors").string();
  auto ids = [](const CliResult& r) {
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return r.exit_code == 0 ? nlohmann::json::parse(r.output)["ids"] : nlohmann::json();
  };
  const nlohmann::json plain = ids(RunCliStdout(base));
  const nlohmann::json steered = ids(RunCliStdout(base + " --control-vector-scaled " + a + " 3"));
  const nlohmann::json combined =
      ids(RunCliStdout(base + " --control-vector " + a + " --control-vector-scaled " + b +
                       " -2 --control-vector-layer-range 2 4"));
  EXPECT_NE(plain, steered);
  EXPECT_NE(plain, combined);
  EXPECT_NE(steered, combined);
  const std::string bad = testing::TestData("steering/bad_hidden.gguf").string();
  const CliResult r = RunCli(base + " --control-vector " + bad);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find(bad + ": tensor 'direction.2' has 48 values"), std::string::npos)
      << r.output;
  EXPECT_EQ(RunCli(base + " --control-vector-scaled " + a + " strong").exit_code, 2);
}

TEST(CliTest, ReportedFailuresExitOne) {
  const CliResult missing = RunCli("inspect-model /no/such/model");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_EQ(missing.output, "error: /no/such/model: no such file or directory\n");
  const fs::path dir = testing::ScratchDir("cli_bad_model");
  std::ofstream(dir / "config.json") << R"({"architectures": ["MambaForCausalLM"]})";
  const CliResult unknown = RunCli("inspect-model " + dir.string());
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_NE(unknown.output.find("unknown architecture 'MambaForCausalLM'"), std::string::npos)
      << unknown.output;
  const fs::path empty = testing::ScratchDir("cli_empty_dir");
  const CliResult no_config = RunCli("inspect-model " + empty.string());
  EXPECT_EQ(no_config.exit_code, 1);
  EXPECT_NE(no_config.output.find("directory has no config.json"), std::string::npos);
  EXPECT_EQ(RunCli("bench --model /no/such/model").exit_code, 1);
  EXPECT_EQ(RunCli("inspect-model " + kModel + " --emit-spec /no/such/dir/spec.yaml").exit_code, 1);
}

// A file read whole must be a regular file: a FIFO used to block forever and /dev/zero to grow
// until memory ran out. Each is refused at once, naming the path and what it is.
TEST(CliTest, NonRegularFilesAreRefused) {
  const fs::path dir = testing::ScratchDir("cli_fifo");
  const fs::path fifo = dir / "fifo";
  fs::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string t = "timeout 20 " + testing::CliBinary().string() + " ";
  struct Case {
    std::string args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"validate /dev/zero", "/dev/zero: is a character device, not a regular file"},
      {"validate " + fifo.string(), fifo.string() + ": is a FIFO, not a regular file"},
      {"generate --model " + kModel + " --prompt x --spec /dev/zero",
       "is a character device, not a regular file"},
      {"generate --model " + kModel + " --prompts " + fifo.string(),
       "prompts file " + fifo.string() + ": is a FIFO, not a regular file"},
      {"serve --model " + kModel + " --port 0 --chat-template /dev/zero",
       "chat template file /dev/zero: is a character device, not a regular file"},
      // capture read its prompts whole with a stream: a FIFO blocked, /dev/urandom grew to
      // gigabytes.
      {"capture --model " + kModel + " --spec " + (dir / "spec.yaml").string() + " --prompts " +
           fifo.string() + " --out " + (dir / "out").string(),
       "prompts file " + fifo.string() + ": is a FIFO, not a regular file"},
      {"capture --model " + kModel + " --spec " + (dir / "spec.yaml").string() +
           " --prompts /dev/urandom --out " + (dir / "out").string(),
       "prompts file /dev/urandom: is a character device, not a regular file"},
  };
  std::ofstream(dir / "spec.yaml")
      << "version: \"1\"\nextraction_points:\n"
         "  - {name: n, layers: [1], tensor_type: residual_stream, position: \"prompt[*]\"}\n";
  for (const Case& c : cases) {
    std::string output;
    const int code = testing::RunCommand(t + c.args, &output);
    EXPECT_EQ(code, 1) << c.args << "\n" << output;
    EXPECT_NE(output.find(c.message), std::string::npos) << c.args << "\n" << output;
  }
}

// NaN or infinite durations are usage errors (exit 2, naming the flag): a NaN deadline used to
// mean "at once" (SIGTERM aborted everything, every connection closed at 0 s).
TEST(CliTest, NonFiniteDurationsAreUsageErrors) {
  for (const std::string& flags :
       {"serve --model " + kModel + " --drain-timeout nan",
        "serve --model " + kModel + " --header-timeout nan",
        "serve --model " + kModel + " --idle-timeout NaN",
        "serve --model " + kModel + " --body-timeout inf",
        "serve --model " + kModel + " --write-timeout -inf",
        "generate --model " + kModel + " --prompt x --probe-drain-timeout nan"}) {
    const CliResult r = RunCli(flags);
    EXPECT_EQ(r.exit_code, 2) << flags << "\n" << r.output;
    EXPECT_NE(r.output.find("is not a finite number of seconds"), std::string::npos)
        << flags << "\n"
        << r.output;
  }
}

// validate used to print OK for a spec whose built-in probe has a NaN or infinite threshold,
// which generate and serve refuse when they build the probe.
TEST(CliTest, ValidateRefusesNonFiniteBuiltinProbeArguments) {
  const fs::path dir = testing::ScratchDir("cli_validate_nan");
  for (const std::string value : {".nan", ".inf", "-.inf"}) {
    SCOPED_TRACE(value);
    std::ofstream(dir / "spec.yaml")
        << "version: \"1\"\nextraction_points:\n"
           "  - {name: n, layers: [1], tensor_type: residual_stream, position: \"generated[*]\", "
           "probe_type: norm_gate, probe_kind: single_shot, probe_args: {threshold: "
        << value << "}}\n";
    const CliResult r = RunCli("validate " + (dir / "spec.yaml").string());
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("'n'.probe_args.threshold: expected a finite number"),
              std::string::npos)
        << r.output;
  }
  std::ofstream(dir / "spec.yaml")
      << "version: \"1\"\nextraction_points:\n"
         "  - {name: n, layers: [1], tensor_type: residual_stream, position: \"generated[*]\", "
         "probe_type: norm_gate, probe_kind: single_shot, probe_args: {threshold: 2.5}}\n";
  const CliResult ok = RunCli("validate " + (dir / "spec.yaml").string());
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
}

// --threads far above the machine's cores is accepted with a warning (the parse warns before
// the command runs; here the model is missing, so nothing else starts).
TEST(CliTest, ThreadsFarAboveTheCoresWarn) {
  if (std::thread::hardware_concurrency() * 4 >= kThreadsFlagMax) {
    GTEST_SKIP() << "this machine has enough cores for --threads " << kThreadsFlagMax;
  }
  const CliResult r = RunCli("generate --model /nonexistent --prompt x --threads " +
                             std::to_string(kThreadsFlagMax));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("warning: --threads " + std::to_string(kThreadsFlagMax) +
                          " is far above this machine's"),
            std::string::npos)
      << r.output;
  const CliResult quiet = RunCli("generate --model /nonexistent --prompt x --threads 1");
  EXPECT_EQ(quiet.output.find("warning: --threads"), std::string::npos) << quiet.output;
}

// Sizes a file states are checked against sane bounds before anything is allocated for them:
// 10^9 layers used to abort with bad_alloc, 2x10^7 to grow to 14 GB.
TEST(CliTest, AbsurdConfigSizesAreOneLineErrors) {
  const fs::path src = testing::TestData("stories260K-hf");
  for (const auto& [field, value] :
       std::vector<std::pair<std::string, int64_t>>{{"num_hidden_layers", 1000000000},
                                                    {"num_hidden_layers", 20000000},
                                                    {"vocab_size", 2000000000},
                                                    {"hidden_size", 1 << 30}}) {
    SCOPED_TRACE(field + " " + std::to_string(value));
    const fs::path dir = testing::ScratchDir("cli_absurd_config");
    for (const char* file : {"model.safetensors", "tokenizer.model"}) {
      fs::copy_file(src / file, dir / file, fs::copy_options::overwrite_existing);
    }
    nlohmann::json config = nlohmann::json::parse(Read(src / "config.json"));
    config[field] = value;
    std::ofstream(dir / "config.json") << config.dump();
    for (const std::string command :
         {"generate --max-tokens 2 --prompt x --model ", "inspect-model "}) {
      const CliResult r = RunCli(command + dir.string());
      EXPECT_EQ(r.exit_code, 1) << command << r.output;
      EXPECT_NE(r.output.find(field + " is " + std::to_string(value) + ", more than the"),
                std::string::npos)
          << command << r.output;
    }
  }
}

// A chat template that cannot render a plain conversation within its budgets stops `serve` at
// start-up, with the reason, instead of hanging every chat request later.
TEST(CliTest, ServeRefusesAChatTemplateThatRunsAway) {
  const fs::path dir = testing::ScratchDir("cli_hostile_template");
  std::ofstream(dir / "loop.jinja")
      << "{% for m in messages %}{% for i in range(100000) %}{% for j in range(100000) %}"
         "{% endfor %}{% endfor %}{{ m.content }}{% endfor %}";
  std::ofstream(dir / "double.jinja")
      << "{% set ns = namespace(s=messages[0].content) %}{% for i in range(80) %}"
         "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}";
  for (const char* name : {"loop.jinja", "double.jinja"}) {
    const auto started = std::chrono::steady_clock::now();
    const CliResult r =
        RunCli("serve --model " + kModel + " --port 0 --chat-template " + (dir / name).string());
    EXPECT_EQ(r.exit_code, 1) << name << "\n" << r.output;
    EXPECT_NE(r.output.find("the chat template cannot render a sample conversation"),
              std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("budget"), std::string::npos) << r.output;
    EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(60)) << name;
  }
}

// When the system refuses threads (here: an address-space limit too small for 400 thread
// stacks), the command reports it and exits 1 instead of aborting; --threads is bounded.
TEST(CliTest, RefusedThreadsAreReportedNotACrash) {
  const std::string command = "bash -c 'ulimit -v 600000; exec " + testing::CliBinary().string() +
                              " generate --model " + kModel +
                              " --prompt x --max-tokens 2 --kv-cache-memory 4MiB --threads 400'";
  std::string output;
  const int code = testing::RunCommand(command, &output);
  EXPECT_EQ(code, 1) << output;
  // Some threads started before the refusal; they were stopped, not left to terminate().
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      output, m,
      std::regex("error: the system refused a resource: cannot start thread ([0-9]+) of 400")))
      << output;
  EXPECT_GT(std::stoi(m[1]), 1) << output;
  EXPECT_EQ(RunCli("generate --model " + kModel + " --prompt x --threads 100000").exit_code, 2);
}

TEST(CliTest, InterruptExitsOneHundredThirty) {
  // SIGINT while the benchmark runs (or still loads): the process exits with 130.
  const CliResult r = RunCli("bench --model " + kModel +
                             " --repetitions 100000 & pid=$!; "
                             "sleep 1; kill -INT $pid; wait $pid; exit $?");
  EXPECT_EQ(r.exit_code, 130) << r.output;
}

TEST(CliTest, InspectModelText) {
  const CliResult r =
      RunCli("inspect-model " + testing::TestData("stories260K/stories260K.bin").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string path = testing::TestData("stories260K/stories260K.bin").string();
  EXPECT_EQ(r.output,
            "model:          " + path +
                " (llama2c, configuration only; weights not loaded)\n"
                "architecture:   LlamaForCausalLM (llama)\n"
                "layers:         5\n"
                "hidden size:    64 (intermediate 172)\n"
                "heads:          8 attention, 4 key/value, head_dim 8\n"
                "vocabulary:     512\n"
                "context:        512 positions\n"
                "\n"
                "capturable tensor types (tensor_type: layer indices):\n"
                "  residual_stream  0-4      the residual stream after each decoder layer\n"
                "  attn_out         0-4      the attention block's output (after o_proj)\n"
                "  mlp_out          0-4      the MLP block's output (after down_proj)\n"
                "  final_norm       5        the final RMSNorm's output, addressed as layer "
                "num_layers\n"
                "  kv               no       the KV cache is stored as paged blocks, not as a "
                "per-token activation\n"
                "\n"
                "suggested starting point: residual_stream at layer 2, position prompt[-1]\n"
                "  (--emit-spec FILE writes it as a starter spec)\n"
                "tensor types:   F32 x47 (47 tensors; --tensors lists them)\n");
}

// A Gemma 3 GGUF: which layers slide, what attn_out/mlp_out mean there, and every tensor's
// stored type — also for a type the engine cannot run (the index is read, not the weights).
TEST(CliTest, InspectModelShowsLayerKindsAndTensorTypes) {
  const std::string gemma = testing::TestData("arch/gemma3/model.gguf").string();
  const CliResult text = RunCliStdout("inspect-model " + gemma + " --tensors");
  ASSERT_EQ(text.exit_code, 0) << text.output;
  for (const char* line :
       {"architecture:   Gemma3ForCausalLM (gemma3_text)\n",
        "attention:      sliding window 8 on layers 0-4; global on 5\n",
        "  attn_out         0-5      the attention block's output (after o_proj and its "
        "post-norm)\n",
        "tensor types:   F32 x80 (80 tensors)\n", "blk.5.post_ffw_norm.weight", "[512, 64]"}) {
    EXPECT_NE(text.output.find(line), std::string::npos) << line << "\nin:\n" << text.output;
  }
  const CliResult json = RunCliStdout("inspect-model " + gemma + " --format json");
  ASSERT_EQ(json.exit_code, 0) << json.output;
  const nlohmann::json j = nlohmann::json::parse(json.output);
  EXPECT_EQ(j["attention"]["sliding_window"], 8);
  EXPECT_EQ(j["attention"]["global_layers"], nlohmann::json::array({5}));
  EXPECT_EQ(j["tensor_types"]["F32"], 80);
  ASSERT_EQ(j["tensors"].size(), 80u);
  EXPECT_EQ(j["tensors"][0].size(), 3u);  // name, shape, type

  // A tensor of a type we cannot run is still listed, under its ggml name.
  const fs::path dir = testing::ScratchDir("cli_inspect_iq2");
  const fs::path file = dir / "model.gguf";
  fs::copy_file(gemma, file);
  {
    std::ifstream in(file, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string name = "blk.1.ffn_down.weight";
    const size_t at = bytes.find(name);
    ASSERT_NE(at, std::string::npos);
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(at + name.size() + 4 + 2 * 8));
    f.write("\x10\0\0\0", 4);  // ggml type 16: IQ2_XXS
  }
  const CliResult odd = RunCliStdout("inspect-model " + file.string() + " --format json");
  ASSERT_EQ(odd.exit_code, 0) << odd.output;
  EXPECT_EQ(nlohmann::json::parse(odd.output)["tensor_types"]["IQ2_XXS"], 1);
}

TEST(CliTest, InspectModelJsonKeepsV01KeysInEveryLayout) {
  for (const std::string& model : {testing::TestData("stories260K-hf").string(),
                                   testing::TestData("stories260K/stories260K.gguf").string(),
                                   testing::TestData("stories260K/stories260K.bin").string()}) {
    SCOPED_TRACE(model);
    const CliResult r = RunCliStdout("inspect-model " + model + " --format json");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const nlohmann::json j = nlohmann::json::parse(r.output);
    for (const char* key :
         {"model", "model_class", "model_type", "num_layers", "hidden_size", "num_attention_heads",
          "vocab_size", "weights_loaded", "verified", "note", "support", "suggested"}) {
      EXPECT_TRUE(j.contains(key)) << key;
    }
    EXPECT_EQ(j["model"], model);
    EXPECT_EQ(j["model_class"], "LlamaForCausalLM");
    EXPECT_EQ(j["num_layers"], 5);
    EXPECT_EQ(j["hidden_size"], 64);
    EXPECT_EQ(j["num_attention_heads"], 8);
    EXPECT_EQ(j["num_key_value_heads"], 4);
    EXPECT_EQ(j["vocab_size"], 512);
    EXPECT_EQ(j["weights_loaded"], false);
    const nlohmann::json& support = j["support"]["undercurrent"];
    EXPECT_EQ(support["residual_stream"]["status"], "yes");
    EXPECT_EQ(support["mlp_out"]["layers"], (nlohmann::json{{"first", 0}, {"last", 4}}));
    EXPECT_EQ(support["final_norm"]["layers"], (nlohmann::json{{"first", 5}, {"last", 5}}));
    EXPECT_EQ(support["kv"]["status"], "no");
    EXPECT_FALSE(support["kv"]["reason"].get<std::string>().empty());
    EXPECT_EQ(j["suggested"], (nlohmann::json{{"layers", {2}},
                                              {"tensor_type", "residual_stream"},
                                              {"position", "prompt[-1]"}}));
  }
}

// v0.1's own inspect-model on the same checkpoints, with and without its --backend,
// --trust-remote-code and --revision (recorded by tools/reference/v0_1_behaviour.py): every run
// is accepted here too, every top-level key of v0.1's report is there with v0.1's value (but
// note and model_class, which describe our engine), and support has v0.1's backend keys with
// its tensor types and status/reason shape beside our "undercurrent" table.
TEST(CliTest, InspectModelAsV01ScriptsCallIt) {
  const nlohmann::json recorded =
      nlohmann::json::parse(Read(testing::TestData("v0_1") / "inspect_model.json"));
  ASSERT_GE(recorded["runs"].size(), 10u);
  for (const nlohmann::json& run : recorded["runs"]) {
    std::string flags;
    for (const nlohmann::json& f : run["flags"]) flags += " " + f.get<std::string>();
    SCOPED_TRACE(run["model"].get<std::string>() + flags);
    ASSERT_EQ(run["exit"], 0);
    const std::string cd = "cd '" + testing::TestData("").string() + "' && ";
    std::string output;
    ASSERT_EQ(testing::RunCommand("{ " + cd + testing::CliBinary().string() + " inspect-model " +
                                      run["model"].get<std::string>() + " --format json" + flags +
                                      " 2>/dev/null; }",
                                  &output),
              0)
        << output;
    const nlohmann::json ours = nlohmann::json::parse(output);
    const nlohmann::json& v01 = run["report"];
    for (const auto& [key, value] : v01.items()) {
      ASSERT_TRUE(ours.contains(key)) << key;
      if (key == "support" || key == "note" || key == "model_class") continue;
      EXPECT_EQ(ours[key], value) << key;
    }
    EXPECT_EQ(ours["model_class"], v01["model_class"]);
    ASSERT_TRUE(ours["support"].contains("undercurrent"));
    EXPECT_EQ(ours["support"].size(), v01["support"].size() + 1);
    for (const auto& [backend, table] : v01["support"].items()) {
      ASSERT_TRUE(ours["support"].contains(backend)) << backend;
      const nlohmann::json& mine = ours["support"][backend];
      EXPECT_EQ(mine, ours["support"]["undercurrent"]) << backend;
      EXPECT_EQ(mine.size(), table.size()) << backend;
      for (const auto& [type, cell] : table.items()) {
        ASSERT_TRUE(mine.contains(type)) << backend << " " << type;
        const std::string status = mine[type]["status"];
        EXPECT_TRUE(status == "yes" || status == "no") << status;
        EXPECT_EQ(mine[type]["reason"].is_null(), status == "yes") << type;
      }
    }
  }
  const CliResult revision = RunCli("inspect-model " + kModel + " --revision v2");
  EXPECT_EQ(revision.exit_code, 0);
  EXPECT_NE(revision.output.find("--revision v2 is ignored"), std::string::npos) << revision.output;
  EXPECT_EQ(RunCli("inspect-model " + kModel + " --backend tgi").exit_code, 2);
}

TEST(CliTest, InspectModelNeedsOnlyTheConfig) {
  const fs::path dir = testing::ScratchDir("cli_config_only");
  fs::copy_file(testing::TestData("stories260K-hf/config.json"), dir / "config.json");
  const CliResult r =
      RunCliStdout("inspect-model " + (dir / "config.json").string() + " --format json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(nlohmann::json::parse(r.output)["num_layers"], 5);
}

TEST(CliTest, EmittedStarterSpecValidates) {
  const fs::path dir = testing::ScratchDir("cli_emit_spec");
  const std::string spec = (dir / "starter.yaml").string();
  const CliResult r = RunCli("inspect-model " + kModel + " --emit-spec " + spec);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("wrote " + spec), std::string::npos);
  const std::string text = Read(spec);
  EXPECT_EQ(text.rfind("# yaml-language-server: $schema=", 0), 0u) << text;
  EXPECT_NE(text.find("layers: [2]\n"), std::string::npos) << text;
  EXPECT_NE(text.find("probe_type: my_probe\n"), std::string::npos) << text;
  const CliResult valid = RunCli("validate " + spec);
  EXPECT_EQ(valid.exit_code, 0) << valid.output;
  EXPECT_EQ(valid.output, spec + ": OK (1 extraction point)\n");
}

TEST(CliTest, BenchReportsPrefillAndDecodeRates) {
  const CliResult text = RunCli("bench --model " + kModel +
                                " --batch 2 --prompt-len 16 --max-tokens 8 --repetitions 1");
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_TRUE(std::regex_search(text.output, std::regex(R"(prefill: +[0-9.]+ tokens/s)")))
      << text.output;
  EXPECT_TRUE(std::regex_search(text.output, std::regex(R"(decode: +[0-9.]+ tokens/s)")))
      << text.output;
  const fs::path dir = testing::ScratchDir("cli_bench");
  std::ofstream(dir / "spec.yaml")
      << "version: \"1\"\nextraction_points:\n"
         "  - {name: n, layers: [1], tensor_type: residual_stream, "
         "position: \"generated[*]\", probe_type: norm_gate, "
         "probe_kind: single_shot, probe_args: {threshold: 1000000.0}}\n";
  const CliResult json = RunCliStdout("bench --model " + kModel +
                                      " --batch 2 --prompt-len 16 --max-tokens 8 "
                                      "--repetitions 2 --format json --spec " +
                                      (dir / "spec.yaml").string());
  ASSERT_EQ(json.exit_code, 0) << json.output;
  const nlohmann::json j = nlohmann::json::parse(json.output);
  EXPECT_EQ(j["batch"], 2);
  EXPECT_EQ(j["extraction_points"], 1);
  EXPECT_EQ(j["runs"].size(), 2u);
  EXPECT_GT(j["prefill_tokens_per_second"].get<double>(), 0.0);
  EXPECT_GT(j["decode_tokens_per_second"].get<double>(), 0.0);
  EXPECT_EQ(j["runs"][0]["generated_tokens"], 16);
}

}  // namespace
}  // namespace uc
