// probe_bench: what probing costs the decode loop. For one model, in one process, runs the
// same batch of requests with no spec, with 8 inline `linear` probes on residual_stream at
// generated[*], with 32, and with one slow async probe (--async-slow-ms per activation, queue
// depth --async-depth, drop_oldest), and with a production monitor set (--monitors inline
// `ema_max` linear monitors on generated[*], layer i mod num_layers, plus one `sae` probe of
// --sae-features features of a --sae-width-feature standard SAE at the middle layer), and
// reports decode tokens/s of each as a ratio to the no-spec run (medians of --repetitions runs,
// interleaved so drift hits every configuration alike), with the async queue's accepted /
// processed / dropped counts.
//
//   probe_bench --model DIR_OR_FILE [--tokenizer FILE] [--batch 8] [--prompt-tokens 16]
//               [--gen-tokens 64] [--threads 2] [--repetitions 3] [--probes 0,8,32]
//               [--async-slow-ms 50] [--async-depth 4] [--monitors 32] [--sae-features 16]
//               [--sae-width 16384]
//
// The probes' weights are random vectors of the model's hidden size written to a temporary
// directory; point i reads layer i mod num_layers. Decode tokens/s is engine::MeasureBatch's:
// the tokens generated after every request has its first one, over the time from then on.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/logging.h"
#include "engine/batch_benchmark.h"
#include "engine/llm_engine.h"
#include "io/safetensors/safetensors_writer.h"
#include "probe/probes/registry.h"
#include "probe/runtime/probing_session.h"
#include "probe/spec/spec.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

std::string MakeSpec(int probes, int num_layers, int hidden, const fs::path& dir) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f / std::sqrt(static_cast<float>(hidden)));
  std::string yaml = "version: \"1\"\nextraction_points:\n";
  for (int i = 0; i < probes; ++i) {
    nlohmann::json w = {{"weight", nlohmann::json::array()}, {"bias", 0.0}};
    for (int j = 0; j < hidden; ++j) w["weight"].push_back(normal(rng));
    const fs::path file = dir / ("probe" + std::to_string(i) + ".json");
    std::ofstream(file) << w.dump();
    yaml += "  - {name: p" + std::to_string(i) + ", layers: " + std::to_string(i % num_layers) +
            ", tensor_type: residual_stream, position: \"generated[*]\", probe_type: linear, "
            "probe_kind: single_shot, probe_args: {weights: " +
            file.string() + ", sigmoid: true, threshold: 2.0}}\n";
  }
  return yaml;
}

// A standard SAELens SAE of `width` random features over `hidden` in `dir`.
void WriteSae(const fs::path& dir, int hidden, int width) {
  fs::create_directories(dir);
  std::ofstream(dir / "cfg.json") << nlohmann::json{
      {"architecture", "standard"},
      {"d_in", hidden},
      {"d_sae", width},
      {"apply_b_dec_to_input", true}}.dump();
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f / std::sqrt(static_cast<float>(hidden)));
  std::vector<float> w_enc(static_cast<size_t>(hidden) * width), b_enc(width, -0.05f),
      b_dec(hidden, 0.0f);
  for (float& v : w_enc) v = normal(rng);
  uc::io::SafetensorsWriter writer;
  UC_CHECK(writer.Add("W_enc", uc::Tensor::FromVector(w_enc, {hidden, width})).ok(), "W_enc");
  UC_CHECK(writer.Add("b_enc", uc::Tensor::FromVector(b_enc, {width})).ok(), "b_enc");
  UC_CHECK(writer.Add("b_dec", uc::Tensor::FromVector(b_dec, {hidden})).ok(), "b_dec");
  const uc::Status written = writer.WriteFile(dir / "sae_weights.safetensors");
  UC_CHECK(written.ok(), "%s", written.ToString().c_str());
}

// `monitors` inline ema_max monitors (linear scorer, random weights) on every generated token
// and one SAE probe of `features` features: what a production deployment runs on each token.
std::string MonitorSpec(int monitors, int features, int width, int num_layers, int hidden,
                        const fs::path& dir) {
  std::mt19937 rng(13);
  std::normal_distribution<float> normal(0.0f, 1.0f / std::sqrt(static_cast<float>(hidden)));
  std::string yaml = "version: \"1\"\nextraction_points:\n";
  for (int i = 0; i < monitors; ++i) {
    nlohmann::json w = {{"weight", nlohmann::json::array()}, {"bias", 0.0}};
    for (int j = 0; j < hidden; ++j) w["weight"].push_back(normal(rng));
    const fs::path file = dir / ("monitor" + std::to_string(i) + ".json");
    std::ofstream(file) << w.dump();
    yaml += "  - {name: m" + std::to_string(i) + ", layers: " + std::to_string(i % num_layers) +
            ", tensor_type: residual_stream, position: \"generated[*]\", probe_type: ema_max, "
            "probe_kind: trajectory, probe_args: {weights: " +
            file.string() + ", sigmoid: true, alpha: 0.3, threshold: 2.0}}\n";
  }
  if (features > 0) {
    WriteSae(dir / "sae", hidden, width);
    std::string list;
    for (int f = 0; f < features; ++f) {
      list += (f == 0 ? "" : ", ") + std::to_string((f * 7919) % width);
    }
    yaml += "  - {name: sae, layers: " + std::to_string(num_layers / 2) +
            ", tensor_type: residual_stream, position: \"generated[*]\", probe_type: sae, "
            "probe_kind: single_shot, probe_args: {sae: " +
            (dir / "sae").string() + ", features: [" + list + "], threshold: 1000000000.0}}\n";
  }
  return yaml;
}

// Sleeps per activation: a remote classifier, or any probe far slower than a decode step.
class SleepProbe : public uc::probe::Probe {
 public:
  explicit SleepProbe(int ms) : ms_(ms) {}
  std::optional<uc::probe::ProbeSignal> OnActivation(const uc::probe::ActivationRecord&) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms_));
    return std::nullopt;
  }
  uc::probe::ProbeResult OnEnd(const uc::probe::RequestContext&) override { return {}; }

 private:
  int ms_;
};

class SleepType : public uc::probe::ProbeType {
 public:
  explicit SleepType(int ms) : ms_(ms) {}
  uc::probe::ProbeKind kind() const override { return uc::probe::ProbeKind::kTrajectory; }
  std::unique_ptr<uc::probe::Probe> Spawn() const override {
    return std::make_unique<SleepProbe>(ms_);
  }

 private:
  int ms_;
};

std::string AsyncSlowSpec(int layer, int depth) {
  return "version: \"1\"\nextraction_points:\n  - {name: slow, layers: " + std::to_string(layer) +
         ", tensor_type: residual_stream, position: \"generated[*]\", probe_type: bench_sleep, "
         "probe_kind: trajectory, execution_mode: async, queue_depth: " +
         std::to_string(depth) + ", overflow_policy: drop_oldest}\n";
}

// Decode tokens/s of one batch run.
double RunOnce(uc::engine::LLMEngine& engine, int batch, int prompt_tokens, int gen_tokens,
               int round) {
  const auto result = uc::engine::MeasureBatch(engine, {batch, prompt_tokens, gen_tokens},
                                               static_cast<uint32_t>(round));
  UC_CHECK(result.ok(), "%s", result.status().ToString().c_str());
  return result->decode_tokens_per_second();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Decode throughput with inline linear probes, a slow async probe and a monitor set");
  std::string model, tokenizer;
  std::vector<int> configs = {0, 8, 32};
  int batch = 8, prompt_tokens = 16, gen_tokens = 64, threads = 2, repetitions = 3;
  int async_slow_ms = 50, async_depth = 4;
  int monitors = 32, sae_features = 16, sae_width = 16384;
  app.add_option("--model", model, "Model directory or file")->required();
  app.add_option("--tokenizer", tokenizer, "Tokenizer (for models without one)");
  app.add_option("--probes", configs, "Probe counts to compare")->delimiter(',');
  app.add_option("--batch", batch, "Concurrent requests");
  app.add_option("--prompt-tokens", prompt_tokens, "Prompt length");
  app.add_option("--gen-tokens", gen_tokens, "Tokens generated per request");
  app.add_option("--threads", threads, "Threads");
  app.add_option("--repetitions", repetitions, "Runs per configuration (median reported)");
  app.add_option("--async-slow-ms", async_slow_ms,
                 "Milliseconds per activation of the slow async probe (0: no such run)");
  app.add_option("--async-depth", async_depth, "Queue depth of the slow async probe");
  app.add_option("--monitors", monitors,
                 "Inline ema_max monitors of the monitor-set run (0 and --sae-features 0: no such "
                 "run)");
  app.add_option("--sae-features", sae_features, "Features of the SAE probe of the monitor set");
  app.add_option("--sae-width", sae_width, "Features of that SAE (d_sae)");
  CLI11_PARSE(app, argc, argv);

  uc::engine::EngineOptions options;
  options.model_path = model;
  if (!tokenizer.empty()) options.tokenizer_path = tokenizer;
  options.num_threads = threads;
  options.max_num_seqs = batch;
  options.max_model_len = prompt_tokens + gen_tokens + 8;
  auto engine = uc::engine::LLMEngine::Open(options);
  if (!engine.ok()) {
    std::fprintf(stderr, "error: %s\n", engine.status().ToString().c_str());
    return 1;
  }
  const uc::models::ModelConfig& config = (*engine)->config();
  const fs::path dir = fs::temp_directory_path() / ("uc_probe_bench_" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::vector<std::unique_ptr<uc::probe::ProbingSession>> sessions;
  for (int probes : configs) {
    if (probes == 0) {
      sessions.push_back(nullptr);
      continue;
    }
    auto spec = uc::probe::ParseSpecText(
        MakeSpec(probes, config.num_hidden_layers, config.hidden_size, dir), "bench");
    UC_CHECK(spec.ok(), "%s", spec.status().ToString().c_str());
    auto session =
        uc::probe::ProbingSession::Create(*spec, uc::probe::ProbeRegistry::Global(), config);
    UC_CHECK(session.ok(), "%s", session.status().ToString().c_str());
    sessions.push_back(std::move(session).value());
  }
  std::vector<std::string> labels;
  for (int probes : configs) labels.push_back(std::to_string(probes) + " inline linear");
  uc::probe::ProbeRegistry registry;
  if (async_slow_ms > 0) {
    const int ms = async_slow_ms;
    UC_CHECK(registry
                 .Register(
                     "bench_sleep", uc::probe::ProbeKind::kTrajectory,
                     [ms](const nlohmann::json&, const uc::probe::ProbeEnv&)
                         -> uc::StatusOr<std::unique_ptr<uc::probe::ProbeType>> {
                       return std::unique_ptr<uc::probe::ProbeType>(new SleepType(ms));
                     },
                     true)
                 .ok());
    auto spec =
        uc::probe::ParseSpecText(AsyncSlowSpec(config.num_hidden_layers / 2, async_depth), "bench");
    UC_CHECK(spec.ok(), "%s", spec.status().ToString().c_str());
    auto session = uc::probe::ProbingSession::Create(*spec, registry, config);
    UC_CHECK(session.ok(), "%s", session.status().ToString().c_str());
    sessions.push_back(std::move(session).value());
    configs.push_back(1);
    labels.push_back("1 async, " + std::to_string(async_slow_ms) + " ms/activation, depth " +
                     std::to_string(async_depth) + ", drop_oldest");
  }
  if (monitors > 0 || sae_features > 0) {
    auto spec =
        uc::probe::ParseSpecText(MonitorSpec(monitors, sae_features, sae_width,
                                             config.num_hidden_layers, config.hidden_size, dir),
                                 "bench");
    UC_CHECK(spec.ok(), "%s", spec.status().ToString().c_str());
    auto session =
        uc::probe::ProbingSession::Create(*spec, uc::probe::ProbeRegistry::Global(), config);
    UC_CHECK(session.ok(), "%s", session.status().ToString().c_str());
    sessions.push_back(std::move(session).value());
    configs.push_back(1);
    labels.push_back(std::to_string(monitors) + " inline ema_max + sae (" +
                     std::to_string(sae_features) + " of " + std::to_string(sae_width) +
                     " features)");
  }
  RunOnce(**engine, batch, prompt_tokens, 8, -1);  // warm-up
  std::vector<std::vector<double>> tps(configs.size());
  for (int rep = 0; rep < repetitions; ++rep) {
    for (size_t c = 0; c < configs.size(); ++c) {
      (*engine)->SetObserver(sessions[c].get());
      tps[c].push_back(RunOnce(**engine, batch, prompt_tokens, gen_tokens, rep));
      (*engine)->SetObserver(nullptr);
    }
  }
  fs::remove_all(dir);
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double base = median(tps[0]);
  std::printf(
      "| probes | decode tok/s (median of %d) | × no spec | async accepted / processed "
      "/ dropped |\n|---|---|---|---|\n",
      repetitions);
  for (size_t c = 0; c < configs.size(); ++c) {
    std::string counts = "-";
    if (sessions[c] != nullptr && sessions[c]->has_async_points()) {
      sessions[c]->Shutdown(/*wait=*/true);
      const uc::probe::ProbingStats s = sessions[c]->stats();
      counts = std::to_string(s.async_accepted) + " / " + std::to_string(s.async_processed) +
               " / " + std::to_string(s.async_dropped);
    }
    std::printf("| %s | %.1f | %.3f | %s |\n", configs[c] == 0 ? "none" : labels[c].c_str(),
                median(tps[c]), median(tps[c]) / base, counts.c_str());
  }
  return 0;
}
