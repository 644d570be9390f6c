// probe_bench: what probing costs the decode loop. For one model, in one process, runs the
// same batch of requests with no spec, with 8 inline `linear` probes on residual_stream at
// generated[*], and with 32, and reports decode tokens/s of each as a ratio to the no-spec run
// (medians of --repetitions runs, interleaved so drift hits every configuration alike).
//
//   probe_bench --model DIR_OR_FILE [--tokenizer FILE] [--batch 8] [--prompt-tokens 16]
//               [--gen-tokens 64] [--threads 2] [--repetitions 3] [--probes 0,8,32]
//
// The probes' weights are random vectors of the model's hidden size written to a temporary
// directory; point i reads layer i mod num_layers. Decode tokens/s counts generated tokens
// after the first (which prefill makes) over the time from the first token to the last.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "base/logging.h"
#include "engine/llm_engine.h"
#include "probe/probing_session.h"
#include "probe/registry.h"
#include "probe/spec.h"

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

// Decode tokens/s of one batch run.
double RunOnce(uc::engine::LLMEngine& engine, int batch, int prompt_tokens, int gen_tokens,
               int round) {
  std::mt19937 rng(static_cast<uint32_t>(round));
  for (int b = 0; b < batch; ++b) {
    std::vector<int32_t> ids = {1};
    for (int i = 1; i < prompt_tokens; ++i) {
      ids.push_back(static_cast<int32_t>(3 + rng() % (engine.config().vocab_size - 3)));
    }
    uc::worker::SamplingParams p;
    p.temperature = 0.0f;
    p.max_tokens = gen_tokens;
    p.ignore_eos = true;
    const uc::Status s = engine.AddRequest("b" + std::to_string(round) + "-" + std::to_string(b),
                                           uc::engine::Prompt::Ids(ids), p);
    UC_CHECK(s.ok(), "%s", s.ToString().c_str());
  }
  int64_t tokens = 0;
  Clock::time_point first{};
  bool started = false;
  while (engine.HasUnfinished()) {
    for (const uc::engine::RequestOutput& out : engine.Step()) {
      if (!started && !out.new_token_ids.empty()) {
        started = true;
        first = Clock::now();
        continue;  // made by prefill
      }
      tokens += static_cast<int64_t>(out.new_token_ids.size());
    }
  }
  return static_cast<double>(tokens) / std::chrono::duration<double>(Clock::now() - first).count();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Decode throughput with 0, 8 and 32 inline linear probes");
  std::string model, tokenizer;
  std::vector<int> configs = {0, 8, 32};
  int batch = 8, prompt_tokens = 16, gen_tokens = 64, threads = 2, repetitions = 3;
  app.add_option("--model", model, "Model directory or file")->required();
  app.add_option("--tokenizer", tokenizer, "Tokenizer (for models without one)");
  app.add_option("--probes", configs, "Probe counts to compare")->delimiter(',');
  app.add_option("--batch", batch, "Concurrent requests");
  app.add_option("--prompt-tokens", prompt_tokens, "Prompt length");
  app.add_option("--gen-tokens", gen_tokens, "Tokens generated per request");
  app.add_option("--threads", threads, "Threads");
  app.add_option("--repetitions", repetitions, "Runs per configuration (median reported)");
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
  std::printf("| probes | decode tok/s (median of %d) | × no spec |\n|---|---|---|\n", repetitions);
  for (size_t c = 0; c < configs.size(); ++c) {
    std::printf("| %d | %.1f | %.3f |\n", configs[c], median(tps[c]), median(tps[c]) / base);
  }
  return 0;
}
