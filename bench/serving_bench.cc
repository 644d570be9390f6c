// serving_bench: throughput of the serving engine under continuous batching, for several
// concurrency levels, in one run, so the levels can be compared as ratios.
//
//   serving_bench --model DIR_OR_FILE [--tokenizer FILE] [--concurrency 1,4,16,64]
//                 [--requests N] [--prompt-tokens 32:96] [--output-tokens 16:48]
//                 [--threads 2] [--repetitions 1] [--json FILE]
//
// Each level is a closed loop of `c` clients: c requests are in flight at any time, and a new
// one arrives as soon as one finishes, until N (default max(2c, 8)) have completed. One request
// runs first to warm up (page in the weights). Prompts are
// random token ids with lengths drawn uniformly from --prompt-tokens, outputs are exactly a
// length drawn from --output-tokens (EOS ignored); the same seeded request list serves every
// level. Reported per level (median over --repetitions): requests/s, output tokens/s, time to
// first token (mean, p50, p90, from arrival), and the ratio of each throughput to the
// single-request level measured in the same run.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "base/logging.h"
#include "engine/llm_engine.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Range {
  int lo = 0, hi = 0;
};

Range ParseRange(const std::string& s) {
  const size_t colon = s.find(':');
  if (colon == std::string::npos) return {std::stoi(s), std::stoi(s)};
  return {std::stoi(s.substr(0, colon)), std::stoi(s.substr(colon + 1))};
}

struct Work {
  std::vector<int32_t> prompt;
  int output_tokens;
};

std::vector<Work> MakeWork(int n, Range prompt, Range output, int vocab) {
  std::mt19937 rng(1234);
  std::vector<Work> work(static_cast<size_t>(n));
  for (Work& w : work) {
    const int len = std::uniform_int_distribution<int>(prompt.lo, prompt.hi)(rng);
    w.prompt.push_back(1);
    for (int i = 1; i < len; ++i) {
      w.prompt.push_back(
          static_cast<int32_t>(std::uniform_int_distribution<int>(3, vocab - 1)(rng)));
    }
    w.output_tokens = std::uniform_int_distribution<int>(output.lo, output.hi)(rng);
  }
  return work;
}

struct Result {
  int concurrency = 0, requests = 0;
  double seconds = 0, requests_per_s = 0, output_tps = 0, ttft_mean = 0, ttft_p50 = 0, ttft_p90 = 0,
         mean_batch = 0;
  int64_t output_tokens = 0, prompt_tokens = 0, preemptions = 0;
};

double Percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

Result RunLevel(uc::engine::LLMEngine& engine, const std::vector<Work>& work, int c, int n) {
  const uc::engine::EngineStats before = engine.stats();
  Result r;
  r.concurrency = c;
  r.requests = n;
  int next = 0, finished = 0;
  auto add = [&] {
    const Work& w = work[static_cast<size_t>(next)];
    uc::worker::SamplingParams p;
    p.temperature = 0.0f;
    p.max_tokens = w.output_tokens;
    p.ignore_eos = true;
    const uc::Status s = engine.AddRequest("r" + std::to_string(next) + "-c" + std::to_string(c),
                                           uc::engine::Prompt::Ids(w.prompt), p);
    UC_CHECK(s.ok(), "%s", s.ToString().c_str());
    r.prompt_tokens += static_cast<int64_t>(w.prompt.size());
    ++next;
  };
  std::vector<double> ttft;
  const auto start = Clock::now();
  while (next < std::min(c, n)) add();
  while (finished < n) {
    for (const uc::engine::RequestOutput& out : engine.Step()) {
      if (!out.finished) continue;
      ++finished;
      r.output_tokens += static_cast<int64_t>(out.output_ids.size());
      ttft.push_back(out.metrics.time_to_first_token());
      if (next < n) add();
    }
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const uc::engine::EngineStats after = engine.stats();
  r.requests_per_s = n / r.seconds;
  r.output_tps = static_cast<double>(r.output_tokens) / r.seconds;
  double sum = 0;
  for (double t : ttft) sum += t;
  r.ttft_mean = sum / static_cast<double>(ttft.size());
  r.ttft_p50 = Percentile(ttft, 0.5);
  r.ttft_p90 = Percentile(ttft, 0.9);
  r.preemptions = after.num_preemptions - before.num_preemptions;
  r.mean_batch = static_cast<double>(after.generated_tokens - before.generated_tokens) /
                 static_cast<double>(std::max<int64_t>(1, after.num_steps - before.num_steps));
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Continuous-batching throughput at several concurrency levels");
  std::string model, tokenizer, json_path, prompt_range = "32:96", output_range = "16:48";
  std::vector<int> levels = {1, 4, 16, 64};
  int requests = 0, threads = 2, repetitions = 1, batched_tokens = 512;
  app.add_option("--model", model, "Model directory or file")->required();
  app.add_option("--tokenizer", tokenizer, "Tokenizer (for models without one)");
  app.add_option("--concurrency", levels, "Concurrency levels")->delimiter(',');
  app.add_option("--requests", requests, "Requests per level (0: max(2 x concurrency, 8))");
  app.add_option("--prompt-tokens", prompt_range, "Prompt length range lo:hi");
  app.add_option("--output-tokens", output_range, "Output length range lo:hi");
  app.add_option("--threads", threads, "Threads");
  app.add_option("--max-num-batched-tokens", batched_tokens, "Tokens per step at most");
  app.add_option("--repetitions", repetitions, "Runs per level (the median is reported)");
  app.add_option("--json", json_path, "Write the results as JSON");
  CLI11_PARSE(app, argc, argv);

  uc::engine::EngineOptions options;
  options.model_path = model;
  if (!tokenizer.empty()) options.tokenizer_path = tokenizer;
  options.num_threads = threads;
  options.max_num_seqs = *std::max_element(levels.begin(), levels.end());
  options.max_num_batched_tokens = batched_tokens;
  options.max_model_len = ParseRange(prompt_range).hi + ParseRange(output_range).hi + 16;
  auto engine = uc::engine::LLMEngine::Open(options);
  if (!engine.ok()) {
    std::fprintf(stderr, "error: %s\n", engine.status().ToString().c_str());
    return 1;
  }
  const int max_n = std::max(requests, std::max(8, 2 * options.max_num_seqs));
  const std::vector<Work> work = MakeWork(max_n, ParseRange(prompt_range), ParseRange(output_range),
                                          (*engine)->config().vocab_size);
  RunLevel(**engine, work, 1, 1);  // warm-up
  std::vector<Result> results;
  for (int c : levels) {
    const int n = requests > 0 ? requests : std::max(2 * c, 8);
    std::vector<Result> runs;
    for (int rep = 0; rep < repetitions; ++rep) runs.push_back(RunLevel(**engine, work, c, n));
    std::sort(runs.begin(), runs.end(),
              [](const Result& a, const Result& b) { return a.output_tps < b.output_tps; });
    results.push_back(runs[runs.size() / 2]);
    const Result& r = results.back();
    std::fprintf(stderr, "concurrency %d: %.2f req/s, %.1f output tok/s, TTFT p50 %.2f s\n", c,
                 r.requests_per_s, r.output_tps, r.ttft_p50);
  }
  const Result* single = nullptr;
  for (const Result& r : results) {
    if (r.concurrency == 1) single = &r;
  }
  std::printf(
      "| concurrency | requests | req/s | output tok/s | × single (req/s) | "
      "× single (tok/s) | mean batch | TTFT mean | TTFT p50 | TTFT p90 | preemptions |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|\n");
  nlohmann::json out = nlohmann::json::array();
  for (const Result& r : results) {
    const double req_ratio = single ? r.requests_per_s / single->requests_per_s : 0.0;
    const double tok_ratio = single ? r.output_tps / single->output_tps : 0.0;
    std::printf(
        "| %d | %d | %.3f | %.2f | %.2f | %.2f | %.1f | %.2f s | %.2f s | %.2f s | %lld |\n",
        r.concurrency, r.requests, r.requests_per_s, r.output_tps, req_ratio, tok_ratio,
        r.mean_batch, r.ttft_mean, r.ttft_p50, r.ttft_p90, static_cast<long long>(r.preemptions));
    out.push_back({{"concurrency", r.concurrency},
                   {"requests", r.requests},
                   {"seconds", r.seconds},
                   {"requests_per_second", r.requests_per_s},
                   {"output_tokens_per_second", r.output_tps},
                   {"ratio_requests", req_ratio},
                   {"ratio_output_tokens", tok_ratio},
                   {"ttft_mean", r.ttft_mean},
                   {"ttft_p50", r.ttft_p50},
                   {"ttft_p90", r.ttft_p90},
                   {"prompt_tokens", r.prompt_tokens},
                   {"output_tokens", r.output_tokens},
                   {"mean_batch", r.mean_batch},
                   {"preemptions", r.preemptions}});
  }
  if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
  return 0;
}
