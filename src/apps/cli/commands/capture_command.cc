#include "apps/cli/commands/capture_command.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "apps/cli/capture_support.h"
#include "apps/cli/exit_codes.h"
#include "apps/cli/flag_checks.h"
#include "apps/cli/kv_cache_flags.h"
#include "apps/cli/launch.h"
#include "distributed/mpi/mpi_runtime.h"
#include "engine/deployment.h"
#include "engine/llm.h"
#include "engine/prompts_file.h"
#include "io/mapped_file.h"
#include "io/text_file.h"
#include "probe/datasets/dataset_writer.h"
#include "probe/probes/registry.h"
#include "probe/probes/trained/sae.h"
#include "probe/runtime/capture.h"
#include "probe/runtime/probing_session.h"
#include "probe/spec/spec.h"

namespace uc::cli {
namespace {

// The FNV-1a digest (hex) of a file's bytes, mapped rather than read (a file that was loaded
// already; one that cannot be mapped, e.g. not a regular file, digests as "").
std::string FileDigest(const std::filesystem::path& path) {
  StatusOr<std::shared_ptr<const io::MappedFile>> file = io::MappedFile::Open(path);
  if (!file.ok()) return "";
  return Hex(
      Fnv1a64(std::string_view(reinterpret_cast<const char*>((*file)->data()), (*file)->size())));
}

using nlohmann::json;
using Clock = std::chrono::steady_clock;

struct CaptureOptions {
  int tensor_parallel_size = 1;
  int pipeline_parallel_size = 1;
  double step_timeout = 120.0;
  std::string model;
  std::string tokenizer;
  std::string spec_file;
  std::string prompts_file;
  std::string out;
  std::string dtype = "float32";
  std::string shard_size = "64MiB";
  std::string progress = "auto";
  engine::EngineOptions engine;
  KvCacheFlags kv_cache;
  worker::SamplingParams sampling;
  int64_t seed = -1;
  bool json = false;
  bool bench = false;
  std::string sae_dir;       // store these SAE features instead of the raw rows
  std::string sae_features;  // "3,17,200" or "all"
};

// --sae DIR --sae-features LIST|all: the encoder every captured row goes through, checked
// against the model's hidden size. Null without --sae.
StatusOr<std::shared_ptr<const probe::SaeEncoder>> LoadCaptureSae(const CaptureOptions& o,
                                                                  int64_t hidden_size) {
  if (o.sae_dir.empty()) {
    if (!o.sae_features.empty()) return InvalidArgumentError("--sae-features needs --sae DIR");
    return std::shared_ptr<const probe::SaeEncoder>();
  }
  if (o.sae_features.empty()) {
    return InvalidArgumentError("--sae needs --sae-features (a list of indices, or all)");
  }
  std::vector<int64_t> features;
  if (o.sae_features != "all") {
    std::stringstream list(o.sae_features);
    for (std::string item; std::getline(list, item, ',');) {
      char* end = nullptr;
      const long long f = std::strtoll(item.c_str(), &end, 10);
      if (item.empty() || *end != '\0' || f < 0) {
        return InvalidArgumentError("--sae-features '" + o.sae_features + "': '" + item +
                                    "' is not a feature index (use indices like 3,17 or all)");
      }
      features.push_back(f);
    }
  } else {
    // Every feature: the width comes from the SAE's cfg.json.
    StatusOr<std::string> text =
        io::ReadTextFile(std::filesystem::path(o.sae_dir) / "cfg.json", 16 << 20, "SAE cfg.json");
    if (!text.ok())
      return InvalidArgumentError("--sae " + o.sae_dir + ": " + text.status().message());
    const nlohmann::json cfg = nlohmann::json::parse(*text, nullptr, false);
    if (!cfg.is_object() || !cfg.contains("d_sae") || !cfg["d_sae"].is_number_integer()) {
      return InvalidArgumentError("--sae " + o.sae_dir + ": cfg.json has no integer d_sae");
    }
    for (int64_t f = 0; f < cfg["d_sae"].get<int64_t>(); ++f) features.push_back(f);
  }
  StatusOr<std::shared_ptr<const probe::SaeEncoder>> sae =
      probe::SaeEncoder::Load(o.sae_dir, std::move(features));
  if (!sae.ok()) return InvalidArgumentError("--sae " + o.sae_dir + ": " + sae.status().message());
  if ((*sae)->d_in() != hidden_size) {
    return InvalidArgumentError(
        "--sae " + o.sae_dir + ": the SAE reads " + std::to_string((*sae)->d_in()) +
        " values (d_in); the model's hidden size is " + std::to_string(hidden_size));
  }
  return sae;
}

// This rank's share of a multi-rank deployment; null on the ranks that only serve steps.
StatusOr<std::unique_ptr<engine::Deployment>> OpenDeployment(const CaptureOptions& o) {
  UC_RETURN_IF_ERROR(distributed::MpiRuntime::Init(nullptr, nullptr));
  distributed::MpiBackend backend;
  engine::DeploymentOptions d;
  d.model_path = o.model;
  d.tensor_parallel_size = o.tensor_parallel_size;
  d.pipeline_parallel_size = o.pipeline_parallel_size;
  d.num_threads = o.engine.num_threads;
  d.load = o.engine.load;
  d.step_timeout_seconds = o.step_timeout;
  UC_ASSIGN_OR_RETURN(std::unique_ptr<engine::Deployment> deployment,
                      engine::Deployment::Create(d, &backend));
  if (!deployment->is_driver()) {
    deployment->worker().Loop();
    return std::unique_ptr<engine::Deployment>();
  }
  return deployment;
}

// The engine on the driver; null (with *served) on the other ranks once they are done.
StatusOr<std::unique_ptr<engine::LLMEngine>> OpenEngine(const CaptureOptions& o, bool* served) {
  *served = false;
  if (o.tensor_parallel_size * o.pipeline_parallel_size == 1 && !distributed::LaunchedUnderMpi()) {
    return engine::LLMEngine::Open(o.engine);
  }
  UC_ASSIGN_OR_RETURN(std::unique_ptr<engine::Deployment> deployment, OpenDeployment(o));
  if (deployment == nullptr) {
    *served = true;
    return std::unique_ptr<engine::LLMEngine>();
  }
  return engine::LLMEngine::OpenDriver(o.engine, std::move(deployment));
}

struct RunTotals {
  int64_t prompts = 0;
  int64_t records = 0;
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;
  int64_t rejected = 0;
  double seconds = 0.0;
};

// Plain generation of the prompts the capture will run, for --bench.
StatusOr<RunTotals> GenerateOnly(engine::LLMEngine& engine, const PromptSet& prompts, int64_t begin,
                                 int64_t wave) {
  RunTotals totals;
  const Clock::time_point start = Clock::now();
  UC_RETURN_IF_ERROR(ServeInWaves(
      engine, prompts.requests, begin, wave,
      [&](int64_t index, const Status& rejected, engine::RequestOutput* out) {
        if (index < begin) return OkStatus();
        ++totals.prompts;
        if (!rejected.ok()) return OkStatus();
        totals.prompt_tokens += static_cast<int64_t>(out->prompt_ids.size());
        totals.generated_tokens += static_cast<int64_t>(out->output_ids.size());
        return OkStatus();
      },
      nullptr));
  totals.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return totals;
}

int RunCapture(CaptureOptions& o) {
  o.engine.model_path = o.model;
  if (!o.tokenizer.empty()) o.engine.tokenizer_path = o.tokenizer;
  StatusOr<int64_t> shard_bytes = engine::ParseByteSize(o.shard_size);
  if (!shard_bytes.ok() || *shard_bytes <= 0) {
    if (IsDriverRank()) {
      std::fprintf(
          stderr, "error: --shard-size: %s\n",
          !shard_bytes.ok() ? shard_bytes.status().message().c_str() : "must be more than 0 bytes");
    }
    return FinishMpi(kExitUsage);
  }
  o.engine.kv_cache_bytes = o.kv_cache.kv_cache_bytes();
  o.engine.max_model_len = o.kv_cache.max_model_len;
  if (o.seed >= 0) o.sampling.seed = static_cast<uint64_t>(o.seed);

  // Every rank reads the inputs, so a bad file fails everywhere alike, before any collective.
  StatusOr<PromptSet> prompts = ReadPromptSet(o.prompts_file, o.sampling);
  if (!prompts.ok()) {
    return FailOnDriver(prompts.status().message());
  }
  StatusOr<probe::Spec> spec = probe::ParseSpecFile(o.spec_file);
  if (spec.ok()) {
    if (const Status capturable = probe::CheckCapturable(*spec); !capturable.ok()) {
      spec = capturable;
    }
  }
  if (!spec.ok()) {
    return FailOnDriver(spec.status().message());
  }
  if (IsDriverRank()) {
    for (const std::string& w : spec->warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  }

  bool served = false;
  StatusOr<std::unique_ptr<engine::LLMEngine>> opened = OpenEngine(o, &served);
  if (!opened.ok()) {
    return FailOnDriver(opened.status().message());
  }
  if (served) return FinishMpi(kExitOk);
  std::unique_ptr<engine::LLMEngine> engine = std::move(opened).value();
  // From here on only the driver runs; every early return shuts the other ranks down first.
  auto fail = [&engine](const Status& status) {
    std::fprintf(stderr, "error: %s\n", status.message().c_str());
    engine->SetObserver(nullptr);
    engine.reset();
    return FinishMpi(kExitFailure);
  };

  const probe::Spec capture_spec = probe::CaptureSpec(*spec);
  probe::CaptureCollector collector(*spec);
  probe::ProbeRegistry registry;
  if (Status s = collector.RegisterProbes(registry); !s.ok()) return fail(s);
  probe::ProbingOptions probing;
  probing.model_name = o.model;
  probing.stop_token_ids = engine->eos_token_ids();
  StatusOr<std::unique_ptr<probe::ProbingSession>> session =
      probe::ProbingSession::Create(capture_spec, registry, engine->config(), probing);
  if (!session.ok()) return fail(session.status());

  StatusOr<std::shared_ptr<const probe::SaeEncoder>> sae =
      LoadCaptureSae(o, engine->config().hidden_size);
  if (!sae.ok()) return fail(sae.status());

  probe::DatasetOptions dataset;
  dataset.hidden_size = *sae != nullptr ? static_cast<int>((*sae)->features().size())
                                        : static_cast<int>(engine->config().hidden_size);
  // Router points (router_logits, expert_weights) have rows of num_experts values.
  for (const probe::ExtractionPoint& p : capture_spec.extraction_points) {
    const int64_t width = probe::PointWidth(p, engine->config());
    if (width == engine->config().hidden_size) continue;
    if (*sae != nullptr) {
      return fail(InvalidArgumentError(
          "--sae encodes hidden_size rows, but extraction point '" + p.name + "' captures " +
          std::string(probe::Name(p.tensor_type)) + " (" + std::to_string(width) +
          " values per token); capture it without --sae or in a separate run"));
    }
    dataset.point_widths[p.name] = static_cast<int>(width);
  }
  dataset.dtype = o.dtype == "bf16" ? DType::kBF16 : DType::kF32;
  dataset.shard_bytes = *shard_bytes;
  dataset.num_prompts = static_cast<int64_t>(prompts->requests.size());
  dataset.points = probe::CapturePointsJson(*spec);
  dataset.fingerprint = {
      {"spec", probe::WriteSpecYaml(capture_spec)},
      {"model", ModelFingerprint(*engine)},  // with the context length, which bounds prompts
      {"prompts", {{"count", prompts->requests.size()}, {"fnv1a64", Hex(prompts->hash)}}},
      {"sampling", SamplingJson(o.sampling)},
      {"dtype", o.dtype},
      {"shard_size", *shard_bytes},
  };
  // Activations from the int8 path differ from exact ones: a dataset is resumed only with the
  // precision it was started with (exact datasets keep the fingerprint they always had).
  if (o.engine.load.matmul_precision == kernels::MatMulPrecision::kInt8) {
    dataset.fingerprint["matmul"] = "int8";
  }
  // Rows of SAE features: which SAE (its files' bytes) and which features, in column order.
  if (*sae != nullptr) {
    nlohmann::json files = nlohmann::json::object();
    for (const char* name : {"cfg.json", "sae_weights.safetensors"}) {
      files[name] = FileDigest(std::filesystem::path(o.sae_dir) / name);
    }
    dataset.fingerprint["sae"] = {{"dir", o.sae_dir},
                                  {"d_in", (*sae)->d_in()},
                                  {"d_sae", (*sae)->d_sae()},
                                  {"features", (*sae)->features()},
                                  {"fnv1a64", files}};
  }
  // So are activations captured under control vectors: their files' contents, scales and range.
  if (!o.engine.load.steering.empty()) {
    nlohmann::json steering = {{"layer_start", o.engine.load.steering.layer_start},
                               {"layer_end", o.engine.load.steering.layer_end},
                               {"files", nlohmann::json::array()}};
    for (const models::ControlVectorFile& f : o.engine.load.steering.files) {
      steering["files"].push_back({{"scale", f.scale}, {"fnv1a64", FileDigest(f.path)}});
    }
    dataset.fingerprint["steering"] = std::move(steering);
  }
  StatusOr<std::unique_ptr<probe::DatasetWriter>> writer =
      probe::DatasetWriter::Open(o.out, std::move(dataset));
  if (!writer.ok()) return fail(writer.status());
  const probe::DatasetProgress resumed = (*writer)->committed();
  const int64_t total = static_cast<int64_t>(prompts->requests.size());
  // Waves of several batches: continuous batching within, a fixed composition across reruns.
  const int64_t wave = 4 * int64_t{o.engine.max_num_seqs};

  std::optional<RunTotals> plain;
  if (o.bench && !resumed.complete) {
    StatusOr<RunTotals> generated = GenerateOnly(*engine, *prompts, resumed.next_prompt, wave);
    if (!generated.ok()) return fail(generated.status());
    plain = *generated;
  }

  RunTotals totals;
  if (!resumed.complete) {
    if (resumed.next_prompt > 0) {
      std::fprintf(stderr, "capture: resuming %s at prompt %lld of %lld (%lld rows in %d shards)\n",
                   o.out.c_str(), static_cast<long long>(resumed.next_prompt),
                   static_cast<long long>(total), static_cast<long long>(resumed.num_rows),
                   resumed.num_shards);
    }
    if (const Status attached = (*session)->AttachTo(*engine); !attached.ok()) {
      return fail(attached);
    }
    // Test hook: slows every step so that a test can interrupt a capture midway.
    const char* delay_env = std::getenv("UC_CAPTURE_STEP_DELAY_MS");
    const int delay_ms = delay_env != nullptr ? std::atoi(delay_env) : 0;
    CaptureProgress progress(o.progress, total, resumed.next_prompt);
    const Clock::time_point start = Clock::now();
    const Status served_all = ServeInWaves(
        *engine, prompts->requests, resumed.next_prompt, wave,
        [&](int64_t index, const Status& rejected, engine::RequestOutput* out) -> Status {
          const engine::GenerateRequest& request = prompts->requests[static_cast<size_t>(index)];
          const json& label = prompts->labels[static_cast<size_t>(index)];
          if (index < resumed.next_prompt) {  // replayed only to rebuild its wave's batches
            collector.Take(request.id);
            return OkStatus();
          }
          probe::DatasetPrompt prompt;
          if (!rejected.ok()) {
            std::fprintf(stderr, "\nerror: %s: request '%s': %s\n", o.prompts_file.c_str(),
                         request.id.c_str(), rejected.message().c_str());
            ++totals.rejected;
            prompt.index = index;
            prompt.id = request.id;
            prompt.label = label;
            prompt.error = rejected.message();
          } else {
            totals.prompt_tokens += static_cast<int64_t>(out->prompt_ids.size());
            totals.generated_tokens += static_cast<int64_t>(out->output_ids.size());
            prompt = MakeDatasetPrompt(index, request, label, collector.Take(request.id), *out,
                                       engine->tokenizer());
            if (*sae != nullptr) {
              for (probe::DatasetRow& row : prompt.rows) {
                const std::vector<double> f = (*sae)->Encode(row.values);
                row.values.assign(f.begin(), f.end());
              }
            }
          }
          ++totals.prompts;
          totals.records += static_cast<int64_t>(prompt.rows.size());
          UC_RETURN_IF_ERROR((*writer)->Append(std::move(prompt)));
          progress.Update(totals.prompts, totals.records, (*writer)->committed().num_shards);
          return OkStatus();
        },
        [&](int64_t finished) {
          if (delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
          const int64_t replayed = resumed.next_prompt - resumed.next_prompt / wave * wave;
          progress.Update(std::max<int64_t>(0, finished - replayed), collector.num_records(),
                          (*writer)->committed().num_shards);
        });
    if (!served_all.ok()) return fail(served_all);
    if (Status s = (*writer)->Finish(); !s.ok()) return fail(s);
    totals.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    progress.Update(totals.prompts, totals.records, (*writer)->committed().num_shards, true);
    progress.Done();
    engine->SetObserver(nullptr);
  }
  engine.reset();  // shuts the other ranks down

  const probe::DatasetProgress final_state = (*writer)->committed();
  const double seconds = std::max(totals.seconds, 1e-9);
  json summary = {{"out", o.out},
                  {"prompts", total},
                  {"prompts_captured", totals.prompts},
                  {"prompts_skipped", resumed.next_prompt},
                  {"rejected", totals.rejected},
                  {"records", totals.records},
                  {"rows", final_state.num_rows},
                  {"shards", final_state.num_shards},
                  {"seconds", totals.seconds},
                  {"prompts_per_second", static_cast<double>(totals.prompts) / seconds},
                  {"records_per_second", static_cast<double>(totals.records) / seconds},
                  {"tokens_per_second",
                   static_cast<double>(totals.prompt_tokens + totals.generated_tokens) / seconds}};
  if (plain.has_value()) {
    const double plain_seconds = std::max(plain->seconds, 1e-9);
    summary["bench"] = {
        {"generate_seconds", plain->seconds},
        {"generate_prompts_per_second", static_cast<double>(plain->prompts) / plain_seconds},
        {"generate_tokens_per_second",
         static_cast<double>(plain->prompt_tokens + plain->generated_tokens) / plain_seconds},
        {"capture_seconds", totals.seconds},
        {"capture_vs_generate_throughput", plain->seconds / seconds}};
  }
  if (o.json) {
    std::cout << summary.dump() << std::endl;
  } else if (resumed.complete) {
    std::printf("%s: already complete (%lld prompts, %lld rows in %d shards); nothing to do\n",
                o.out.c_str(), static_cast<long long>(total),
                static_cast<long long>(final_state.num_rows), final_state.num_shards);
  } else {
    std::printf(
        "captured %lld prompts (%lld already in %s), %lld records in %.2f s: %.1f prompts/s, "
        "%.0f records/s; dataset: %lld rows in %d shards\n",
        static_cast<long long>(totals.prompts), static_cast<long long>(resumed.next_prompt),
        o.out.c_str(), static_cast<long long>(totals.records), totals.seconds,
        summary["prompts_per_second"].get<double>(), summary["records_per_second"].get<double>(),
        static_cast<long long>(final_state.num_rows), final_state.num_shards);
    if (plain.has_value()) {
      std::printf(
          "bench: generate only %.2f s (%.1f prompts/s, %.0f tokens/s); capture %.2f s (%.1f "
          "prompts/s, %.0f tokens/s, %.0f records/s); capture runs at %.2fx the plain "
          "generation throughput\n",
          plain->seconds, summary["bench"]["generate_prompts_per_second"].get<double>(),
          summary["bench"]["generate_tokens_per_second"].get<double>(), totals.seconds,
          summary["prompts_per_second"].get<double>(), summary["tokens_per_second"].get<double>(),
          summary["records_per_second"].get<double>(),
          summary["bench"]["capture_vs_generate_throughput"].get<double>());
    }
  }
  return FinishMpi(totals.rejected == 0 ? kExitOk : kExitFailure);
}

}  // namespace

void AddCaptureCommand(CLI::App& app, int argc, char** argv) {
  auto options = std::make_shared<CaptureOptions>();
  CLI::App* cmd = app.add_subcommand(
      "capture",
      "Capture the activations a spec names for every prompt of a JSONL file into a resumable "
      "safetensors dataset");
  cmd->add_option("--model,-m", options->model,
                  "Model: a Hugging Face directory, a .gguf file or a llama2.c .bin")
      ->required();
  cmd->add_option("--tokenizer", options->tokenizer,
                  "Tokenizer file (default: the one that comes with the model)");
  cmd->add_option("--spec", options->spec_file,
                  "Extraction-point spec (YAML): what to capture; its probes are not run")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--prompts", options->prompts_file,
                  "JSONL file: one object per line with `id`, `prompt` (or `prompt_ids`), "
                  "optional `label` and sampling fields")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--out,-o", options->out,
                  "Dataset directory: created, or resumed when it holds this capture's dataset")
      ->required();
  cmd->add_option("--sae", options->sae_dir,
                  "Store SAE feature activations instead of the raw rows: a SAELens directory "
                  "(cfg.json, sae_weights.safetensors) whose d_in is the hidden size")
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--sae-features", options->sae_features,
                  "With --sae: the features to store, in column order (e.g. 3,17,200), or all");
  cmd->add_option("--dtype", options->dtype, "Stored dtype of the activations")
      ->check(CLI::IsMember({"float32", "bf16"}))
      ->capture_default_str();
  cmd->add_option("--shard-size", options->shard_size,
                  "Activation bytes per shard at most, e.g. 64MiB, 1GiB")
      ->capture_default_str();
  cmd->add_option("--progress", options->progress,
                  "Progress on stderr: a bar on a terminal (auto), plain lines, or none")
      ->check(CLI::IsMember({"auto", "bar", "lines", "none"}))
      ->capture_default_str();
  cmd->add_flag("--json", options->json, "Print the summary as one JSON object");
  cmd->add_flag("--bench", options->bench,
                "First generate the same prompts without capture, and report both throughputs");
  cmd->add_option("--tensor-parallel-size,--tp", options->tensor_parallel_size,
                  "Ranks that split every layer (tensor parallelism)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--pipeline-parallel-size,--pp", options->pipeline_parallel_size,
                  "Ranks that split the layers into stages (pipeline parallelism)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--step-timeout", options->step_timeout,
                  "Seconds the driver waits for any rank within one step before aborting")
      ->check(Seconds(0.001))
      ->capture_default_str();
  cmd->add_option("--max-num-seqs", options->engine.max_num_seqs, "Requests in one batch at most")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--max-num-batched-tokens", options->engine.max_num_batched_tokens,
                  "Tokens in one step at most, all requests together")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--prefill-chunk", options->engine.max_prefill_chunk,
                  "Prompt tokens of one request per step at most (chunked prefill)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--block-size", options->engine.block_size, "KV cache block size in tokens")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  AddKvCacheFlags(cmd, &options->kv_cache);
  cmd->add_option("--max-tokens,-n", options->sampling.max_tokens, "Tokens to generate at most")
      ->capture_default_str();
  cmd->add_option("--temperature,-t", options->sampling.temperature,
                  "Sampling temperature; 0 is greedy")
      ->capture_default_str();
  cmd->add_option("--top-k", options->sampling.top_k, "Keep the k most likely tokens (0: all)")
      ->capture_default_str();
  cmd->add_option("--top-p", options->sampling.top_p, "Nucleus sampling threshold")
      ->capture_default_str();
  cmd->add_option("--min-p", options->sampling.min_p,
                  "Drop tokens below min-p times the top probability")
      ->capture_default_str();
  cmd->add_option("--seed", options->seed,
                  "Random seed (default: each sampled prompt's seed is derived from its id)");
  cmd->add_option("--stop", options->sampling.stop, "Stop string (repeatable)");
  cmd->add_flag("--ignore-eos", options->sampling.ignore_eos, "Keep generating past EOS");
  cmd->add_option("--threads", options->engine.num_threads, "Threads (0: all cores)")
      ->check(Threads())
      ->capture_default_str();
  AddModelLoadFlags(cmd, &options->engine.load);
  cmd->callback([options, argc, argv] {
    const int world = options->tensor_parallel_size * options->pipeline_parallel_size;
    if (world > 1 && !distributed::LaunchedUnderMpi()) {
      const Status status = ReexecUnderMpirun(world, argc, argv);  // returns only on failure
      std::fprintf(stderr, "error: %s\n", status.message().c_str());
      throw CLI::RuntimeError(kExitFailure);
    }
    throw CLI::RuntimeError(RunCapture(*options));
  });
}

}  // namespace uc::cli
