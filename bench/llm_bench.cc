// llm_bench: end-to-end prefill and decode throughput of real checkpoints, llama-bench style,
// with the memory-bandwidth roofline measured in the same run.
//
//   llm_bench --model DIR_OR_FILE [--model ...] [--threads 1,2] [--prompt-tokens 128]
//             [--gen-tokens 32] [--repetitions 3] [--json FILE]
//   llm_bench --bandwidth-only [--threads 1,2] [--json FILE]
//   llm_bench --compute-only [--threads 1,2] [--json FILE]
//
// For each model and thread count: read bandwidth (median of several 1 GiB streaming reads on
// that many threads), prefill tokens/s (one forward over --prompt-tokens tokens), decode
// tokens/s (--gen-tokens single-token steps after the prompt), each the median of
// --repetitions runs, and the roofline fraction = decode tok/s × bytes read per token /
// bandwidth, where bytes per token = weight bytes (as stored) + the KV cache read. The
// bandwidth is the best of every read loop the CPU has (kernels/bandwidth.h); --bandwidth-only
// prints each loop's (bench/vs_llamacpp.py uses it, beside the bandwidth llama.cpp's decode
// implies). --compute-only prints the peak of every multiply-add instruction the kernels use
// (kernels/compute_peak.h), the compute roofline bench/vs_llamacpp.py sets prefill against.
// Token ids are random, so any checkpoint works, tokenizer or not.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "kernels/bandwidth.h"
#include "kernels/compute_peak.h"
#include "kernels/ops.h"
#include "models/checkpoint.h"
#include "models/llama_model.h"

namespace {

using Clock = std::chrono::steady_clock;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Row {
  std::string model;
  int threads;
  double bandwidth_gbs, prefill_tps, decode_tps, roofline, weight_gib;
};

Row Measure(const std::string& name, uc::models::CausalLM& model, int threads, int prompt_tokens,
            int gen_tokens, int repetitions) {
  uc::ThreadPool pool(threads);
  const auto& config = model.config();
  std::mt19937 rng(42);
  std::vector<int32_t> ids(prompt_tokens + gen_tokens), positions(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<int32_t>(rng() % config.vocab_size);
    positions[i] = static_cast<int32_t>(i);
  }
  uc::Tensor logits = uc::Tensor::Empty({1, config.vocab_size}, uc::DType::kF32);
  std::vector<double> prefill, decode;
  for (int rep = 0; rep < repetitions; ++rep) {
    uc::models::KvCache cache = model.NewKvCache(prompt_tokens + gen_tokens);
    auto t0 = Clock::now();
    model.Forward({ids.data(), static_cast<size_t>(prompt_tokens)},
                  {positions.data(), static_cast<size_t>(prompt_tokens)}, cache, false, logits,
                  &pool);
    auto t1 = Clock::now();
    for (int i = prompt_tokens; i < prompt_tokens + gen_tokens; ++i) {
      model.Forward({&ids[i], 1}, {&positions[i], 1}, cache, false, logits, &pool);
    }
    auto t2 = Clock::now();
    prefill.push_back(prompt_tokens / std::chrono::duration<double>(t1 - t0).count());
    decode.push_back(gen_tokens / std::chrono::duration<double>(t2 - t1).count());
  }
  const double bandwidth = uc::kernels::MeasureReadBandwidth(&pool, int64_t{1} << 30, 5);
  // KV cache bytes read per decode token, averaged over the decode positions.
  const double kv_bytes = 2.0 * config.num_hidden_layers * config.kv_size() * sizeof(float) *
                          (prompt_tokens + gen_tokens / 2.0);
  const double bytes_per_token = static_cast<double>(model.weight_bytes()) + kv_bytes;
  Row row;
  row.model = name;
  row.threads = threads;
  row.bandwidth_gbs = bandwidth / 1e9;
  row.prefill_tps = Median(prefill);
  row.decode_tps = Median(decode);
  row.roofline = row.decode_tps * bytes_per_token / bandwidth;
  row.weight_gib = model.weight_bytes() / double(1ull << 30);
  return row;
}

// One 1 GiB read per loop and thread count (median of 7), printed and written as JSON.
int BandwidthOnly(const std::vector<int>& thread_counts, const std::string& json_path) {
  nlohmann::json out = nlohmann::json::array();
  for (int threads : thread_counts) {
    uc::ThreadPool pool(threads);
    nlohmann::json loops = nlohmann::json::object();
    double best = 0.0;
    for (const auto& r : uc::kernels::MeasureReadLoops(&pool, int64_t{1} << 30, 7)) {
      std::printf("threads %d  %-9s %7.2f GB/s\n", threads, r.loop.c_str(),
                  r.bytes_per_second / 1e9);
      loops[r.loop] = r.bytes_per_second / 1e9;
      best = std::max(best, r.bytes_per_second / 1e9);
    }
    out.push_back({{"threads", threads}, {"loops_gb_s", loops}, {"bandwidth_gb_s", best}});
  }
  if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
  return 0;
}

// Each multiply-add instruction's peak per thread count (median of 7 runs of 0.1 s), printed and
// written as JSON, with the best per kind ("f32", "bf16", "int8").
int ComputeOnly(const std::vector<int>& thread_counts, const std::string& json_path) {
  nlohmann::json out = nlohmann::json::array();
  for (int threads : thread_counts) {
    uc::ThreadPool pool(threads);
    nlohmann::json peaks = nlohmann::json::array();
    nlohmann::json best = nlohmann::json::object();
    for (const auto& p : uc::kernels::MeasureComputePeaks(&pool, 7, 0.1)) {
      const double gops = p.ops_per_second / 1e9;
      std::printf("threads %d  %-14s %-5s %8.1f GOP/s\n", threads, p.instruction.c_str(),
                  p.kind.c_str(), gops);
      peaks.push_back({{"instruction", p.instruction}, {"kind", p.kind}, {"gops", gops}});
      best[p.kind] = std::max(best.value(p.kind, 0.0), gops);
    }
    out.push_back({{"threads", threads}, {"peaks", peaks}, {"best_gops", best}});
  }
  if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Prefill/decode throughput against the measured memory-bandwidth roofline"};
  std::vector<std::string> models;
  std::vector<int> thread_counts = {1, 2};
  int prompt_tokens = 128, gen_tokens = 32, repetitions = 3;
  std::string json_path;
  bool bandwidth_only = false, compute_only = false;
  app.add_option("--model", models, "Checkpoint (repeatable)");
  app.add_flag("--bandwidth-only", bandwidth_only,
               "Only the read bandwidth of every read loop, per thread count");
  app.add_flag("--compute-only", compute_only,
               "Only the peak of every multiply-add instruction the kernels use, per thread count");
  app.add_option("--threads", thread_counts, "Thread counts")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--prompt-tokens", prompt_tokens)->capture_default_str();
  app.add_option("--gen-tokens", gen_tokens)->capture_default_str();
  app.add_option("--repetitions", repetitions)->capture_default_str();
  app.add_option("--json", json_path, "Also write the rows as JSON to this file");
  CLI11_PARSE(app, argc, argv);
  if (bandwidth_only) return BandwidthOnly(thread_counts, json_path);
  if (compute_only) return ComputeOnly(thread_counts, json_path);
  if (models.empty()) {
    std::fprintf(stderr, "error: --model is required (or --bandwidth-only, --compute-only)\n");
    return 2;
  }

  std::printf("kernels: %s\n", uc::kernels::HasAvx2() ? "avx2+fma+f16c" : "portable");
  std::printf("| %-36s | %7s | %9s | %12s | %11s | %10s | %8s |\n", "model", "threads", "weights",
              "bandwidth", "prefill t/s", "decode t/s", "roofline");
  std::printf("|%s|\n", std::string(117, '-').c_str());
  nlohmann::json out = nlohmann::json::array();
  for (const std::string& path : models) {
    auto ckpt = uc::models::OpenCheckpoint(path);
    if (!ckpt.ok()) {
      std::fprintf(stderr, "error: %s\n", ckpt.status().message().c_str());
      return 1;
    }
    auto model = uc::models::CausalLM::Load(*ckpt);
    if (!model.ok()) {
      std::fprintf(stderr, "error: %s\n", model.status().message().c_str());
      return 1;
    }
    const std::string name = std::filesystem::path(path).filename().string();
    for (int threads : thread_counts) {
      const Row r = Measure(name, **model, threads, prompt_tokens, gen_tokens, repetitions);
      std::printf("| %-36s | %7d | %5.2f GiB | %7.2f GB/s | %11.1f | %10.2f | %7.1f%% |\n",
                  r.model.c_str(), r.threads, r.weight_gib, r.bandwidth_gbs, r.prefill_tps,
                  r.decode_tps, 100.0 * r.roofline);
      std::fflush(stdout);
      out.push_back({{"model", r.model},
                     {"threads", r.threads},
                     {"weight_gib", r.weight_gib},
                     {"bandwidth_gb_s", r.bandwidth_gbs},
                     {"prefill_tokens_per_s", r.prefill_tps},
                     {"decode_tokens_per_s", r.decode_tps},
                     {"roofline_fraction", r.roofline}});
    }
  }
  if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
  return 0;
}
