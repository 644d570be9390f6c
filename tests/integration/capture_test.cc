// `undercurrent capture` through the real binary: the dataset holds exactly the records the
// probing layer delivers for the same spec (order, tokens, values) and numpy reads it; a capture
// killed with SIGKILL midway and rerun gives the same files as an uninterrupted one; bad input
// is a clear error (exit 1 or 2) naming the file, line or field, never a crash; and the
// README's train-and-deploy loop runs as written.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "common/capture_util.h"
#include "common/probing_util.h"
#include "common/test_util.h"
#include "engine/llm.h"
#include "engine/prompts_file.h"
#include "io/safetensors/safetensors.h"

namespace uc {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kSource = UC_SOURCE_DIR;
const fs::path kSpec = kSource / "tests" / "testdata" / "capture" / "capture_spec.yaml";

std::string Quote(const fs::path& p) { return "'" + p.string() + "'"; }

std::string ModelArgs() { return "--model " + Quote(kSource / "models" / "stories260K"); }

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

json Manifest(const fs::path& dir) {
  const json m = json::parse(ReadFile(dir / "manifest.json"), nullptr, false);
  return m.is_discarded() ? json::object() : m;
}

// The dataset's rows hold the records a recording probe gets for the same spec and prompts, in
// (token_pos, layer, point) order per prompt and prompts in file order, with the right tokens.
TEST(CaptureTest, DatasetHoldsTheRecordsProbesSee) {
  const fs::path out = testing::ScratchDir("capture/records");
  const fs::path prompts = kSource / "examples" / "data" / "animals_heldout.jsonl";
  const testing::CliRun run = testing::RunCapture(
      ModelArgs() + " --spec " + Quote(kSpec) + " --prompts " + Quote(prompts) + " --out " +
      Quote(out) + " --temperature 0 --max-tokens 5 --shard-size 8KiB --progress lines");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("records/s"), std::string::npos) << run.output;
  const testing::LoadedDataset dataset = testing::LoadDataset(out);
  const json& manifest = dataset.manifest;
  ASSERT_GT(manifest["shards"].size(), 2u);
  for (const json& shard : manifest["shards"]) {
    EXPECT_LE(shard["rows"].get<int64_t>() * manifest["row_bytes"].get<int64_t>(), 8 * 1024);
  }

  // The oracle: the same prompts through the engine in this process, with recording probes
  // on the same points (all inline here).
  std::string yaml = ReadFile(kSpec);
  yaml.erase(yaml.find("    execution_mode: async\n"),
             std::string("    execution_mode: async\n").size());
  worker::SamplingParams params;
  params.temperature = 0;
  params.max_tokens = 5;
  auto requests = engine::ReadPromptsFile(prompts, params);
  ASSERT_TRUE(requests.ok());
  engine::EngineOptions options;
  options.model_path = kSource / "models" / "stories260K";
  auto llm = engine::LLM::Open(options);
  ASSERT_TRUE(llm.ok()) << llm.status().message();
  auto session = testing::MakeSession(yaml, (*llm)->engine().config());
  ASSERT_NE(session, nullptr);
  const testing::ProbedRun oracle = testing::RunProbed(**llm, *session, *requests);
  const std::map<std::string, int> point_order = {
      {"resid", 0}, {"gen", 1}, {"first", 2}, {"last", 3}};

  size_t row = 0;
  for (size_t p = 0; p < requests->size(); ++p) {
    const std::string& id = (*requests)[p].id;
    const engine::RequestOutput& output = oracle.results[p].output;
    std::vector<probe::ActivationRecord> want = testing::RecordLog::Of(oracle.records, id);
    std::stable_sort(want.begin(), want.end(), [&](const auto& a, const auto& b) {
      return std::make_tuple(a.token_pos, a.layer, point_order.at(a.point)) <
             std::make_tuple(b.token_pos, b.layer, point_order.at(b.point));
    });
    ASSERT_FALSE(want.empty());
    for (const probe::ActivationRecord& r : want) {
      ASSERT_LT(row, dataset.index.size());
      const json& got = dataset.index[row];
      SCOPED_TRACE(dataset.index_lines[row]);
      EXPECT_EQ(got["row"].get<size_t>(), row);
      EXPECT_EQ(got["prompt_index"].get<size_t>(), p);
      EXPECT_EQ(got["prompt_id"], id);
      EXPECT_EQ(got["label"].is_boolean(), true);
      EXPECT_EQ(got["point"], r.point);
      EXPECT_EQ(got["layer"].get<int>(), r.layer);
      EXPECT_EQ(got["token_pos"].get<int64_t>(), r.token_pos);
      EXPECT_EQ(got["is_generated"].get<bool>(), r.is_generated);
      const auto prompt_len = static_cast<int64_t>(output.prompt_ids.size());
      if (r.is_generated) {
        EXPECT_EQ(got["generated_index"].get<int64_t>(), r.token_pos - prompt_len);
        EXPECT_EQ(got["token_id"].get<int32_t>(),
                  output.output_ids[static_cast<size_t>(r.token_pos - prompt_len)]);
      } else {
        EXPECT_TRUE(got["generated_index"].is_null());
        EXPECT_EQ(got["token_id"].get<int32_t>(),
                  output.prompt_ids[static_cast<size_t>(r.token_pos)]);
      }
      EXPECT_EQ(got["token_text"],
                (*llm)->engine().tokenizer().TokenToPiece(got["token_id"].get<int32_t>()));
      const testing::Diff diff = testing::MaxAbsDiff(dataset.values[row], r.values);
      EXPECT_LE(diff.max_abs, 1e-6);
      ++row;
    }
  }
  EXPECT_EQ(row, dataset.index.size());

  // numpy reads the same dataset: same rows, same sum of every activation.
  double sum = 0.0;
  for (const auto& values : dataset.values) {
    for (const float v : values) sum += v;
  }
  std::string python;
  ASSERT_EQ(testing::RunPythonCompare(out, out, 0.0, &python), 0) << python;
  const json summary = json::parse(python.substr(python.find('{')));
  EXPECT_EQ(summary["rows"].get<size_t>(), dataset.index.size());
  EXPECT_NEAR(summary["sum_a"].get<double>(), sum, 1e-6 * std::max(1.0, std::fabs(sum)));
}

// Starts a capture with every engine step slowed down, waits until `shards` shards are
// committed, and kills it with SIGKILL. Returns the shards committed when it died.
int CaptureAndKill(const std::string& args, const fs::path& out, int shards) {
  const fs::path log = out.parent_path() / (out.filename().string() + ".log");
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, STDOUT_FILENO);
    ::dup2(fd, STDERR_FILENO);
    ::setenv("UC_CAPTURE_STEP_DELAY_MS", "10", 1);
    const std::string command = "exec '" + testing::CliBinary().string() + "' capture " + args;
    ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int committed = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline) {
    const json m = Manifest(out);
    committed = m.contains("shards") ? static_cast<int>(m["shards"].size()) : 0;
    if (committed >= shards || m.value("complete", false)) break;
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      ADD_FAILURE() << "the capture exited early:\n" << ReadFile(log);
      return committed;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << ReadFile(log);
  return committed;
}

// Killed midway (once, then again during the resumed run) and rerun, a capture writes the same
// bytes as an uninterrupted one: manifest, index and every shard.
// --sae: every row is stored as the named features of a standard SAE (saved by sae-lens), each
// equal to relu((x - b_dec) W_enc + b_enc) computed here in double from the raw capture's rows
// and the SAE's own tensors; the index lines are the raw dataset's.
TEST(CaptureTest, SaeFeaturesInsteadOfRows) {
  const fs::path raw_dir = testing::ScratchDir("capture/sae_raw");
  const fs::path sae_dir = testing::ScratchDir("capture/sae_features");
  const fs::path prompts = kSource / "examples" / "data" / "animals_heldout.jsonl";
  const fs::path sae = kSource / "tests" / "testdata" / "probes" / "sae" / "standard";
  const std::string common = ModelArgs() + " --spec " + Quote(kSpec) + " --prompts " +
                             Quote(prompts) + " --temperature 0 --max-tokens 4 --progress none";
  const testing::CliRun raw = testing::RunCapture(common + " --out " + Quote(raw_dir));
  ASSERT_EQ(raw.exit_code, 0) << raw.output;
  const std::vector<int64_t> features = {3, 17, 200, 255, 0};
  const testing::CliRun encoded =
      testing::RunCapture(common + " --out " + Quote(sae_dir) + " --sae " + Quote(sae) +
                          " --sae-features 3,17,200,255,0");
  ASSERT_EQ(encoded.exit_code, 0) << encoded.output;
  const testing::LoadedDataset a = testing::LoadDataset(raw_dir);
  const testing::LoadedDataset b = testing::LoadDataset(sae_dir);
  EXPECT_EQ(b.manifest["hidden_size"], 5);
  EXPECT_EQ(b.manifest["fingerprint"]["sae"]["features"], json(features));
  ASSERT_EQ(a.index_lines.size(), b.index_lines.size());
  ASSERT_GT(a.index_lines.size(), 100u);

  auto file = io::SafetensorsFile::Open(sae / "sae_weights.safetensors");
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  auto w_enc = (*file)->Get("W_enc");
  auto b_enc = (*file)->Get("b_enc");
  auto b_dec = (*file)->Get("b_dec");
  ASSERT_TRUE(w_enc.ok() && b_enc.ok() && b_dec.ok());
  const int64_t d_in = 64, d_sae = 256;
  int active = 0;
  double worst = 0.0;
  for (size_t row = 0; row < a.values.size(); ++row) {
    EXPECT_EQ(a.index[row]["point"], b.index[row]["point"]);
    EXPECT_EQ(a.index[row]["token_pos"], b.index[row]["token_pos"]);
    ASSERT_EQ(b.values[row].size(), features.size());
    for (size_t k = 0; k < features.size(); ++k) {
      const int64_t f = features[k];
      double pre = b_enc->data<float>()[f];
      for (int64_t i = 0; i < d_in; ++i) {
        pre += (double{a.values[row][i]} - b_dec->data<float>()[i]) *
               w_enc->data<float>()[i * d_sae + f];
      }
      const double want = std::max(0.0, pre);
      active += want > 0.0;
      worst = std::max(worst, std::abs(b.values[row][k] - want) / std::max(std::abs(want), 0.1));
    }
  }
  EXPECT_LE(worst, 1e-5);
  EXPECT_GT(active, 0);  // some features fire, so the comparison is not all zeros

  // Bad flags are named.
  const testing::CliRun no_list =
      testing::RunCapture(common + " --out " + Quote(sae_dir / "x") + " --sae " + Quote(sae));
  EXPECT_NE(no_list.exit_code, 0);
  EXPECT_NE(no_list.output.find("--sae needs --sae-features"), std::string::npos) << no_list.output;
  const testing::CliRun out_of_range = testing::RunCapture(
      common + " --out " + Quote(sae_dir / "y") + " --sae " + Quote(sae) + " --sae-features 9,256");
  EXPECT_NE(out_of_range.exit_code, 0);
  EXPECT_NE(out_of_range.output.find("feature 256 is out of range"), std::string::npos)
      << out_of_range.output;
}

TEST(CaptureTest, SigkillMidwayThenRerunGivesTheSameDataset) {
  const fs::path prompts = kSource / "examples" / "data" / "animals_train.jsonl";
  // Sampled (each prompt's seed derived from its id) and a small batch, so that shards are
  // committed throughout the run.
  const std::string common = ModelArgs() + " --spec " + Quote(kSpec) + " --prompts " +
                             Quote(prompts) +
                             " --temperature 0.8 --max-tokens 6 --shard-size 16KiB "
                             "--max-num-seqs 8 --progress none --out ";
  const fs::path reference = testing::ScratchDir("capture/kill") / "reference";
  const fs::path resumed = reference.parent_path() / "resumed";
  const testing::CliRun full = testing::RunCapture(common + Quote(reference));
  ASSERT_EQ(full.exit_code, 0) << full.output;
  const int total_shards = static_cast<int>(Manifest(reference)["shards"].size());
  ASSERT_GE(total_shards, 20);

  const int first = CaptureAndKill(common + Quote(resumed), resumed, 4);
  ASSERT_GE(first, 4);
  ASSERT_LT(first, total_shards);
  EXPECT_FALSE(Manifest(resumed)["complete"].get<bool>());
  EXPECT_FALSE(fs::exists(resumed / "index.ndjson"));
  const int second = CaptureAndKill(common + Quote(resumed), resumed, first + 4);
  ASSERT_GT(second, first);
  ASSERT_LT(second, total_shards);

  const testing::CliRun rerun = testing::RunCapture(common + Quote(resumed));
  ASSERT_EQ(rerun.exit_code, 0) << rerun.output;
  EXPECT_NE(rerun.output.find("resuming"), std::string::npos) << rerun.output;
  const auto want = testing::DirectoryFiles(reference);
  const auto got = testing::DirectoryFiles(resumed);
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, bytes] : want) {
    ASSERT_TRUE(got.count(name)) << name;
    EXPECT_TRUE(got.at(name) == bytes) << name << " differs";
  }
  // A rerun of a complete dataset has nothing to do and changes nothing.
  const testing::CliRun again = testing::RunCapture(common + Quote(resumed));
  EXPECT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("already complete"), std::string::npos) << again.output;
  EXPECT_TRUE(testing::DirectoryFiles(resumed) == want);
}

struct BadCase {
  std::string name;
  std::string args;  // after `capture`
  int exit_code;
  std::vector<std::string> messages;  // each must appear in the output
};

TEST(CaptureTest, BadInputIsAClearErrorNeverACrash) {
  const fs::path dir = testing::ScratchDir("capture/bad");
  const fs::path prompts = kSource / "examples" / "data" / "animals_heldout.jsonl";
  const fs::path bad_prompts = dir / "bad.jsonl";
  std::ofstream(bad_prompts) << "{\"id\": 1, \"prompt\": \"Once\"}\n"
                                "{\"id\": 2, \"prompt\": \"upon\", \"lable\": true}\n"
                                "not json\n";
  const fs::path far_layer = dir / "far_layer.yaml";
  std::ofstream(far_layer) << "version: \"1\"\nextraction_points:\n"
                              "  - name: deep\n    layers: [9]\n    tensor_type: residual_stream\n"
                              "    position: \"prompt[-1]\"\n    probe_type: linear\n"
                              "    probe_kind: single_shot\n";
  const fs::path typo = dir / "typo.yaml";
  std::ofstream(typo) << "version: \"1\"\nextraction_points:\n"
                         "  - name: p\n    layers: [1]\n    tensor_typ: residual_stream\n"
                         "    position: \"prompt[-1]\"\n    probe_type: linear\n"
                         "    probe_kind: single_shot\n";
  const fs::path small = dir / "small.yaml";
  std::ofstream(small) << "version: \"1\"\nextraction_points:\n"
                          "  - name: p\n    layers: [1]\n    tensor_type: residual_stream\n"
                          "    position: \"prompt[-1]\"\n    probe_type: linear\n"
                          "    probe_kind: single_shot\n";
  const fs::path other_spec = dir / "other.yaml";
  std::ofstream(other_spec) << "version: \"1\"\nextraction_points:\n"
                               "  - name: p\n    layers: [2]\n    tensor_type: residual_stream\n"
                               "    position: \"prompt[-1]\"\n    probe_type: linear\n"
                               "    probe_kind: single_shot\n";
  const fs::path not_dataset = dir / "not_dataset";
  fs::create_directories(not_dataset);
  std::ofstream(not_dataset / "notes.txt") << "mine";
  // A dataset of `small` to run into with another spec, model and prompts file.
  const fs::path existing = dir / "existing";
  const std::string base = " --temperature 0 --max-tokens 1 --progress none";
  const testing::CliRun made =
      testing::RunCapture(ModelArgs() + " --spec " + Quote(small) + " --prompts " + Quote(prompts) +
                          " --out " + Quote(existing) + base);
  ASSERT_EQ(made.exit_code, 0) << made.output;
  const std::string ok_prompts = " --prompts " + Quote(prompts);
  const std::string out = " --out " + Quote(dir / "out");

  const std::vector<BadCase> cases = {
      {"missing spec",
       ModelArgs() + " --spec " + Quote(dir / "nope.yaml") + ok_prompts + out,
       2,
       {"nope.yaml"}},
      {"missing --out", ModelArgs() + " --spec " + Quote(small) + ok_prompts, 2, {"--out"}},
      {"bad dtype",
       ModelArgs() + " --spec " + Quote(small) + ok_prompts + out + " --dtype f16",
       2,
       {"--dtype"}},
      {"bad shard size",
       ModelArgs() + " --spec " + Quote(small) + ok_prompts + out + " --shard-size lots",
       2,
       {"--shard-size"}},
      {"malformed prompts",
       ModelArgs() + " --spec " + Quote(small) + " --prompts " + Quote(bad_prompts) + out,
       1,
       {"bad.jsonl:2: unknown field 'lable'", "did you mean 'label'",
        "bad.jsonl:3: not valid JSON"}},
      {"spec typo",
       ModelArgs() + " --spec " + Quote(typo) + ok_prompts + out,
       1,
       {"typo.yaml:5", "tensor_typ"}},
      {"layer the model lacks",
       ModelArgs() + " --spec " + Quote(far_layer) + ok_prompts + out,
       1,
       {"far_layer.yaml:3", "deep", "layers"}},
      {"not a dataset directory",
       ModelArgs() + " --spec " + Quote(small) + ok_prompts + " --out " + Quote(not_dataset),
       1,
       {"holds no activation dataset", "notes.txt"}},
      {"another spec's dataset",
       ModelArgs() + " --spec " + Quote(other_spec) + ok_prompts + " --out " + Quote(existing) +
           base,
       1,
       {"holds the dataset of another capture: its spec differs"}},
      {"another model's dataset",
       "--model " + Quote(testing::TestData("tiny-gqa2/hf")) + " --spec " + Quote(small) +
           ok_prompts + " --out " + Quote(existing) + base,
       1,
       {"its model differs"}},
      {"another prompts file's dataset",
       ModelArgs() + " --spec " + Quote(small) + " --prompts " +
           Quote(kSource / "examples" / "data" / "animals_train.jsonl") + " --out " +
           Quote(existing) + base,
       1,
       {"its prompts differs"}},
      {"other sampling",
       ModelArgs() + " --spec " + Quote(small) + ok_prompts + " --out " + Quote(existing) +
           " --temperature 0 --max-tokens 2 --progress none",
       1,
       {"its sampling differs"}},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.name);
    const testing::CliRun run = testing::RunCapture(c.args);
    EXPECT_EQ(run.exit_code, c.exit_code) << run.output;
    for (const std::string& m : c.messages) {
      EXPECT_NE(run.output.find(m), std::string::npos) << "missing '" << m << "' in:\n"
                                                       << run.output;
    }
  }
  EXPECT_TRUE(fs::exists(not_dataset / "notes.txt"));
  EXPECT_TRUE(Manifest(existing)["complete"].get<bool>());  // untouched by the refusals
}

// The README's capture -> train -> deploy -> check loop, run as written (only the binary's, the
// tests' Python's and the work directory's paths substituted).
TEST(CaptureTest, ReadmeLoopTrainsAndDeploysTheProbe) {
  const std::string readme = ReadFile(kSource / "README.md");
  const std::string marker = "<!-- probe-loop: run by tests/integration/capture_test.cc -->";
  const size_t at = readme.find(marker);
  ASSERT_NE(at, std::string::npos) << "README.md lost the probe loop marker";
  const size_t begin = readme.find("```sh\n", at);
  ASSERT_NE(begin, std::string::npos);
  const size_t end = readme.find("```\n", begin + 6);
  ASSERT_NE(end, std::string::npos);
  std::string script = readme.substr(begin + 6, end - begin - 6);
  const fs::path work = testing::ScratchDir("capture/readme");
  auto replace_all = [&script](const std::string& from, const std::string& to) {
    for (size_t i = script.find(from); i != std::string::npos;
         i = script.find(from, i + to.size())) {
      script.replace(i, from.size(), to);
    }
  };
  replace_all("build/release/bin/undercurrent", Quote(testing::CliBinary()));
  replace_all("build/probe-demo", work.string());
  replace_all("build/venv/bin/python", Quote(UC_TEST_PYTHON));
  const fs::path file = work / "loop.sh";
  std::ofstream(file) << "set -eu\ncd " << Quote(kSource) << "\n" << script;
  std::string output;
  const int code = testing::RunCommand("bash " + Quote(file), &output);
  ASSERT_EQ(code, 0) << output;
  EXPECT_NE(output.find("trained on 200 rows"), std::string::npos) << output;
  EXPECT_NE(output.find("40 prompts: deployed linear probe vs Python model"), std::string::npos)
      << output;
  EXPECT_NE(output.find("40 prompts: deployed EMA-max monitor vs numpy"), std::string::npos)
      << output;
  EXPECT_TRUE(fs::exists(work / "probe" / "probe.safetensors"));
  // The probe's metadata names the model, layer and site it was trained on: they match here
  // (no warning above), and another model refuses it under --probe-artifact-policy refuse.
  EXPECT_EQ(output.find("trained on another model"), std::string::npos) << output;
  EXPECT_EQ(output.find("trained on layers"), std::string::npos) << output;
  std::string refused;
  EXPECT_EQ(testing::RunCommand(Quote(testing::CliBinary()) + " generate --model " +
                                    Quote(testing::TestData("gguf/f16/tiny-gqa2-F16.gguf")) +
                                    " --spec " + Quote(work / "probe" / "spec.yaml") +
                                    " --prompt 'Once upon a time' --max-tokens 1 "
                                    "--probe-artifact-policy refuse",
                                &refused),
            1)
      << refused;
  EXPECT_NE(refused.find("probe.safetensors: trained on another model (hidden_size 64, here "),
            std::string::npos)
      << refused;
}

}  // namespace
}  // namespace uc
