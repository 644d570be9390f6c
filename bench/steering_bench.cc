// steering_bench: what per-request steering costs the decode loop. For one model, in one
// process, runs the same batch with no steering, with steering configured but unused (every
// request carries a conditional config that is never switched on), with every request steered
// (one config, a vector on every block's residual stream), and mixed (half the requests steered
// by 4 distinct configs, half unsteered), at each batch size; reports decode tokens/s of each as
// a ratio to no steering (medians of --repetitions runs, interleaved so drift hits every
// configuration alike, each repetition starting at another configuration), and the best run's
// ratio (what interference on a shared machine cannot inflate), and the ratio of the process's
// CPU seconds per batch (the same work in every mode except the steering itself).
//
//   steering_bench --model DIR_OR_FILE [--batches 1,8,32] [--prompt-tokens 16]
//                  [--gen-tokens 32] [--threads 2] [--repetitions 3] [--matmul exact|int8]
//
// Decode tokens/s is engine::MeasureBatch's: the tokens generated after every request has its
// first one, over the time from then on. Then the forward pass alone, with and without a vector
// on every block for every row (fastest of --forward-iterations), which isolates the steering
// arithmetic from the noise of a shared machine.
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/logging.h"
#include "engine/batch_benchmark.h"
#include "engine/llm_engine.h"
#include "models/checkpoint.h"
#include "models/llama_model.h"

namespace {

using uc::engine::RequestSteering;
using uc::worker::SteeringConfig;

// A vector of norm `norm` on every block's residual stream, seeded by `seed`.
std::shared_ptr<const SteeringConfig> EveryBlock(const uc::models::ModelConfig& config, int seed,
                                                 float norm) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto steering = std::make_shared<SteeringConfig>();
  for (int layer = 0; layer < config.num_hidden_layers; ++layer) {
    uc::worker::SteeringVector v;
    v.layer = layer;
    v.values.resize(static_cast<size_t>(config.hidden_size));
    double sum = 0.0;
    for (float& x : v.values) {
      x = normal(rng);
      sum += double{x} * x;
    }
    for (float& x : v.values) x = static_cast<float>(x * norm / std::sqrt(sum));
    steering->vectors.push_back(std::move(v));
  }
  return steering;
}

double CpuSeconds() {
  rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
}

double Median(std::vector<double> v);
double Min(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

// The forward pass alone: m rows of one sequence (a GEMM of m rows, as a decode step of batch
// m), with and without a vector on every block for every row, alternately `iterations` times;
// the ratio of the fastest and of the median times, which the engine's scheduling and threads'
// wake-ups do not blur.
void ForwardCost(const std::string& model, const std::vector<int>& sizes, int threads,
                 int iterations, uc::kernels::MatMulPrecision precision) {
  auto checkpoint = uc::models::OpenCheckpoint(model);
  UC_CHECK(checkpoint.ok(), "%s", checkpoint.status().ToString().c_str());
  auto lm = uc::models::CausalLM::Load(*checkpoint, {.matmul_precision = precision});
  UC_CHECK(lm.ok(), "%s", lm.status().ToString().c_str());
  const uc::models::ModelConfig& config = (*lm)->config();
  const auto steering_config = EveryBlock(config, 1, 4.0f);
  uc::ThreadPool pool(threads);
  std::printf(
      "\n| rows | forward ms, fastest (none / steered) | steered × none, fastest | median |\n"
      "|---|---|---|---|\n");
  for (int m : sizes) {
    std::vector<int32_t> ids(static_cast<size_t>(m)), positions(ids.size()), seq(ids.size(), 0);
    for (int i = 0; i < m; ++i) {
      ids[static_cast<size_t>(i)] = 100 + i;
      positions[static_cast<size_t>(i)] = i;
    }
    uc::models::BatchSteering steering;
    for (const uc::worker::SteeringVector& v : steering_config->vectors) {
      uc::models::SteeringAdd add{.layer = v.layer, .vector = v.values.data()};
      for (int i = 0; i < m; ++i) add.rows.push_back(i);
      steering.adds.push_back(std::move(add));
    }
    uc::models::KvCache cache = (*lm)->NewKvCache(m);
    static constexpr int32_t kOneBlock[1] = {0};
    const std::vector<int32_t> last = {m - 1};
    uc::Tensor logits = uc::Tensor::Empty({1, config.vocab_size}, uc::DType::kF32);
    std::vector<double> none, steered;
    for (int it = 0; it < iterations + 1; ++it) {
      for (const bool steer : {it % 2 == 0, it % 2 != 0}) {
        const uc::models::ForwardBatch batch{
            ids,       positions,
            positions, uc::kernels::PagedKvLayout{cache.block_size, 1, kOneBlock, seq},
            last,      steer ? &steering : nullptr};
        const auto start = std::chrono::steady_clock::now();
        (*lm)->Forward(batch, cache, nullptr, nullptr, &logits, &pool);
        const double ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                .count();
        if (it > 0) (steer ? steered : none).push_back(ms);  // the first round warms up
      }
    }
    std::printf("| %d | %.2f / %.2f | %.4f | %.4f |\n", m, Min(none), Min(steered),
                Min(steered) / Min(none), Median(steered) / Median(none));
  }
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Decode throughput with per-request steering: unused, every request, mixed");
  std::string model, matmul = "exact";
  std::vector<int> batches = {1, 8, 32};
  int prompt_tokens = 16, gen_tokens = 32, threads = 2, repetitions = 3;
  app.add_option("--model", model, "Model directory or file")->required();
  app.add_option("--batches", batches, "Batch sizes")->delimiter(',');
  app.add_option("--prompt-tokens", prompt_tokens, "Prompt length");
  app.add_option("--gen-tokens", gen_tokens, "Tokens generated per request");
  app.add_option("--threads", threads, "Threads");
  app.add_option("--repetitions", repetitions, "Runs per configuration (median reported)");
  app.add_option("--matmul", matmul, "exact or int8")->check(CLI::IsMember({"exact", "int8"}));
  int forward_iterations = 30;
  app.add_option("--forward-iterations", forward_iterations,
                 "Forward passes per mode in the forward-only comparison (0: skip it)");
  std::vector<std::string> only_modes;
  app.add_option("--modes", only_modes, "Run only these modes: none, unused, steered, mixed")
      ->delimiter(',')
      ->check(CLI::IsMember({"none", "unused", "steered", "mixed"}));
  bool warmup = true;
  app.add_flag("!--no-warmup", warmup,
               "Skip the warm-up batch (for instruction counts of one mode under callgrind)");
  CLI11_PARSE(app, argc, argv);

  uc::engine::EngineOptions options;
  options.model_path = model;
  options.num_threads = threads;
  options.max_num_seqs = *std::max_element(batches.begin(), batches.end());
  options.max_model_len = prompt_tokens + gen_tokens + 8;
  options.load.matmul_precision =
      matmul == "int8" ? uc::kernels::MatMulPrecision::kInt8 : uc::kernels::MatMulPrecision::kExact;
  auto engine = uc::engine::LLMEngine::Open(options);
  if (!engine.ok()) {
    std::fprintf(stderr, "error: %s\n", engine.status().ToString().c_str());
    return 1;
  }
  const uc::models::ModelConfig& config = (*engine)->config();
  std::vector<std::shared_ptr<const SteeringConfig>> configs;
  for (int i = 0; i < 4; ++i) configs.push_back(EveryBlock(config, i + 1, 4.0f));
  struct Mode {
    const char* key;
    const char* name;
    std::function<RequestSteering(int)> steering;
  };
  std::vector<Mode> modes = {
      {"none", "none", nullptr},
      {"unused", "configured, unused",
       [&](int) {
         return RequestSteering{configs[0], {0}};
       }},
      {"steered", "every request steered",
       [&](int) {
         return RequestSteering{configs[0], {}};
       }},
      {"mixed", "mixed: half steered, 4 configs",
       [&](int b) {
         return b % 2 == 0 ? RequestSteering{configs[static_cast<size_t>(b / 2 % 4)], {}}
                           : RequestSteering{};
       }},
  };
  if (!only_modes.empty()) {
    std::erase_if(modes, [&](const Mode& m) {
      return std::find(only_modes.begin(), only_modes.end(), m.key) == only_modes.end();
    });
  }
  // Decode tokens/s and the process's CPU seconds for the whole batch (the same work in every
  // mode but the steering itself; less disturbed by other processes than wall time).
  auto run = [&](int batch, const Mode& mode, int round) {
    const double cpu_before = CpuSeconds();
    const auto result = uc::engine::MeasureBatch(**engine, {batch, prompt_tokens, gen_tokens},
                                                 static_cast<uint32_t>(round), mode.steering);
    UC_CHECK(result.ok(), "%s", result.status().ToString().c_str());
    return std::pair{result->decode_tokens_per_second(), CpuSeconds() - cpu_before};
  };
  if (warmup) run(options.max_num_seqs, modes.back(), -1);
  std::printf(
      "| batch | steering | decode tok/s (median of %d) | × none | best run × none's best | "
      "CPU s per batch × none |\n|---|---|---|---|---|---|\n",
      repetitions);
  for (int batch : batches) {
    std::vector<std::vector<double>> tps(modes.size()), cpu(modes.size());
    for (int rep = 0; rep < repetitions; ++rep) {
      // Each repetition starts at another mode, so no mode always runs first.
      for (size_t k = 0; k < modes.size(); ++k) {
        const size_t m = (k + static_cast<size_t>(rep)) % modes.size();
        const auto [rate, seconds] = run(batch, modes[m], rep);
        tps[m].push_back(rate);
        cpu[m].push_back(seconds);
      }
    }
    const double base = Median(tps[0]);
    const double best = *std::max_element(tps[0].begin(), tps[0].end());
    const double base_cpu = Median(cpu[0]);
    for (size_t m = 0; m < modes.size(); ++m) {
      std::printf("| %d | %s | %.1f | %.3f | %.3f | %.3f |\n", batch, modes[m].name, Median(tps[m]),
                  Median(tps[m]) / base, *std::max_element(tps[m].begin(), tps[m].end()) / best,
                  Median(cpu[m]) / base_cpu);
    }
    std::fflush(stdout);
  }
  engine->reset();
  if (forward_iterations > 0) {
    ForwardCost(model, batches, threads, forward_iterations, options.load.matmul_precision);
  }
  return 0;
}
