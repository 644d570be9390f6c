#include "apps/cli/commands/bench_command.h"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "apps/cli/exit_codes.h"
#include "apps/cli/flag_checks.h"
#include "apps/cli/kv_cache_flags.h"
#include "engine/batch_benchmark.h"
#include "probe/probes/registry.h"
#include "probe/runtime/probing_session.h"
#include "probe/spec/spec.h"

namespace uc::cli {
namespace {

struct BenchOptions {
  std::string model;
  std::string tokenizer;
  engine::BatchShape shape;
  int repetitions = 3;
  int threads = 0;
  models::LoadOptions load;
  KvCacheFlags kv_cache;  // --kv-cache-memory; the context comes from the shape
  std::string spec_file;
  std::vector<std::string> probe_plugins;
  std::string format = "text";
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int RunBench(const BenchOptions& o) {
  std::optional<probe::Spec> spec;
  if (!o.spec_file.empty()) {
    for (const std::string& plugin : o.probe_plugins) {
      const Status loaded = probe::ProbeRegistry::Global().LoadPlugin(plugin);
      if (!loaded.ok()) return Fail(loaded);
    }
    StatusOr<probe::Spec> parsed = probe::ParseSpecFile(o.spec_file);
    if (!parsed.ok()) return Fail(parsed.status());
    spec = std::move(parsed).value();
  }
  engine::EngineOptions options;
  options.model_path = o.model;
  if (!o.tokenizer.empty()) options.tokenizer_path = o.tokenizer;
  options.num_threads = o.threads;
  options.load = o.load;
  options.max_num_seqs = o.shape.batch;
  options.max_model_len = o.shape.prompt_tokens + o.shape.max_tokens + 8;
  options.kv_cache_bytes = o.kv_cache.kv_cache_bytes();
  StatusOr<std::unique_ptr<engine::LLMEngine>> opened = engine::LLMEngine::Open(options);
  if (!opened.ok()) {
    // bench has no --max-model-len: its context is the shape's, so say which flags shorten it.
    std::string message = opened.status().message();
    const std::string engine_flag = "--max-model-len";
    for (size_t at = message.find(engine_flag); at != std::string::npos;
         at = message.find(engine_flag, at)) {
      const std::string shape_flags = "--prompt-len / --max-tokens";
      message.replace(at, engine_flag.size(), shape_flags);
      at += shape_flags.size();
    }
    return Fail(Status(opened.status().code(), message));
  }
  engine::LLMEngine& llm = **opened;
  std::unique_ptr<probe::ProbingSession> session;
  if (spec.has_value()) {
    StatusOr<std::unique_ptr<probe::ProbingSession>> created =
        probe::ProbingSession::Create(*spec, probe::ProbeRegistry::Global(), llm.config());
    if (!created.ok()) return Fail(created.status());
    session = std::move(created).value();
    if (const Status attached = session->AttachTo(llm); !attached.ok()) return Fail(attached);
  }
  engine::BatchShape warmup = o.shape;
  warmup.max_tokens = std::min(o.shape.max_tokens, 4);
  StatusOr<engine::BatchThroughput> warm = engine::MeasureBatch(llm, warmup, 0);
  if (!warm.ok()) return Fail(warm.status());
  std::vector<engine::BatchThroughput> runs;
  for (int rep = 0; rep < o.repetitions; ++rep) {
    StatusOr<engine::BatchThroughput> run =
        engine::MeasureBatch(llm, o.shape, static_cast<uint32_t>(rep + 1));
    if (!run.ok()) return Fail(run.status());
    runs.push_back(*run);
  }
  llm.SetObserver(nullptr);
  std::vector<double> prefill, decode;
  for (const engine::BatchThroughput& r : runs) {
    prefill.push_back(r.prefill_tokens_per_second());
    decode.push_back(r.decode_tokens_per_second());
  }
  const int points = spec.has_value() ? static_cast<int>(spec->extraction_points.size()) : 0;
  if (o.format == "json") {
    nlohmann::ordered_json j = {
        {"model", o.model},
        {"batch", o.shape.batch},
        {"prompt_len", o.shape.prompt_tokens},
        {"max_tokens", o.shape.max_tokens},
        {"repetitions", o.repetitions},
        {"threads", o.threads},
        {"matmul", o.load.matmul_precision == kernels::MatMulPrecision::kInt8 ? "int8" : "exact"},
        {"batch_invariant", o.load.batch_invariant},
        // The multiply-add each kind of weight runs on here (kernels::MatMulArithmetic).
        {"matmul_arithmetic",
         {{"f16", kernels::MatMulArithmetic(DType::kF16, o.load.matmul_precision)},
          {"bf16", kernels::MatMulArithmetic(DType::kBF16, o.load.matmul_precision)},
          {"quantized", kernels::MatMulArithmetic(DType::kQ4_K, o.load.matmul_precision)}}},
        {"spec", o.spec_file.empty() ? nlohmann::ordered_json(nullptr)
                                     : nlohmann::ordered_json(o.spec_file)},
        {"extraction_points", points},
        {"prefill_tokens_per_second", Median(prefill)},
        {"decode_tokens_per_second", Median(decode)},
        {"runs", nlohmann::ordered_json::array()},
    };
    for (const engine::BatchThroughput& r : runs) {
      j["runs"].push_back({{"prefill_tokens_per_second", r.prefill_tokens_per_second()},
                           {"decode_tokens_per_second", r.decode_tokens_per_second()},
                           {"prefill_seconds", r.prefill_seconds},
                           {"decode_seconds", r.decode_seconds},
                           {"generated_tokens", r.generated_tokens}});
    }
    std::cout << j.dump(2) << "\n";
  } else {
    std::printf(
        "model %s: batch %d, prompt %d tokens, %d generated each, matmul %s%s, median of %d "
        "runs%s\n",
        o.model.c_str(), o.shape.batch, o.shape.prompt_tokens, o.shape.max_tokens,
        o.load.matmul_precision == kernels::MatMulPrecision::kInt8 ? "int8" : "exact",
        o.load.batch_invariant ? " (batch invariant)" : "", o.repetitions,
        spec.has_value()
            ? (", spec " + o.spec_file + " (" + std::to_string(points) + " points)").c_str()
            : "");
    std::printf("prefill: %10.1f tokens/s  (runs %.1f .. %.1f)\n", Median(prefill),
                *std::min_element(prefill.begin(), prefill.end()),
                *std::max_element(prefill.begin(), prefill.end()));
    std::printf("decode:  %10.1f tokens/s  (runs %.1f .. %.1f)\n", Median(decode),
                *std::min_element(decode.begin(), decode.end()),
                *std::max_element(decode.begin(), decode.end()));
  }
  std::fflush(stdout);
  return kExitOk;
}

}  // namespace

void AddBenchCommand(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand(
      "bench",
      "Measure prefill and decode tokens/s of a batch of random prompts (with --spec: "
      "with probing)");
  cmd->add_option("--model,-m", o->model,
                  "Model: a Hugging Face directory, a .gguf file or a llama2.c .bin")
      ->required();
  cmd->add_option("--tokenizer", o->tokenizer,
                  "Tokenizer file (default: the one that comes with the model)");
  cmd->add_option("--batch", o->shape.batch, "Requests run together")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--prompt-len", o->shape.prompt_tokens, "Prompt tokens per request")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--max-tokens", o->shape.max_tokens, "Tokens generated per request")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--repetitions", o->repetitions, "Measured runs (the median is reported)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--threads", o->threads, "Threads (0: all cores)")
      ->check(Threads())
      ->capture_default_str();
  AddModelLoadFlags(cmd, &o->load);
  AddKvCacheFlags(cmd, &o->kv_cache, /*with_max_model_len=*/false);
  cmd->add_option("--spec", o->spec_file, "Probe spec to run during the benchmark")
      ->check(CLI::ExistingFile);
  cmd->add_option("--probe-plugin", o->probe_plugins,
                  "Shared library that registers probe types (repeatable)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--format", o->format, "Output format")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  cmd->callback([o] { throw CLI::RuntimeError(RunBench(*o)); });
}

}  // namespace uc::cli
