#include "apps/cli/commands/generate_command.h"

#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>

#include "apps/cli/exit_codes.h"
#include "apps/cli/flag_checks.h"
#include "apps/cli/kv_cache_flags.h"
#include "apps/cli/launch.h"
#include "apps/cli/probing_flags.h"
#include "distributed/mpi/mpi_runtime.h"
#include "engine/deployment.h"
#include "engine/generator.h"
#include "engine/llm.h"
#include "engine/model_fingerprint.h"
#include "engine/prompts_file.h"
#include "io/json_file.h"
#include "probe/probes/registry.h"
#include "probe/runtime/probing_session.h"
#include "probe/spec/spec.h"

namespace uc::cli {
namespace {

struct GenerateOptions {
  engine::GeneratorOptions generator;
  int tensor_parallel_size = 1;
  int pipeline_parallel_size = 1;
  double step_timeout = 120.0;
  std::string model;
  std::string tokenizer;
  std::string prompt;
  std::string request_id;  // --prompt's request id; empty: a fresh unique one
  std::string prompts_file;
  std::string spec_file;
  std::vector<std::string> probe_plugins;
  bool compare_tp_replicas = false;
  engine::EngineOptions engine;
  KvCacheFlags kv_cache;
  worker::SamplingParams sampling;
  int64_t seed = -1;
  bool json = false;
  ProbingFlags probing;
};

nlohmann::json ResultToJson(const engine::GenerationResult& r) {
  return {
      {"prompt_ids", r.prompt_ids},
      {"ids", r.output_ids},
      {"text", r.text},
      {"finish_reason", std::string(engine::FinishReasonName(r.finish_reason))},
      {"stop_reason", r.stop_reason},
      {"usage",
       {{"prompt_tokens", r.timings.prompt_tokens},
        {"completion_tokens", r.timings.generated_tokens}}},
      {"timings",
       {{"prefill_seconds", r.timings.prefill_seconds},
        {"decode_seconds", r.timings.decode_seconds},
        {"prefill_tokens_per_second", r.timings.prefill_tokens_per_second()},
        {"decode_tokens_per_second", r.timings.decode_tokens_per_second()}}},
  };
}

// Sets up this rank's share of a multi-rank deployment. Under MPI every rank gets here; the
// non-driver ranks serve steps until the driver shuts them down, and return null.
StatusOr<std::unique_ptr<engine::Deployment>> OpenDeployment(GenerateOptions& o) {
  UC_RETURN_IF_ERROR(distributed::MpiRuntime::Init(nullptr, nullptr));
  distributed::MpiBackend backend;
  engine::DeploymentOptions d;
  d.model_path = o.generator.model_path;
  d.tensor_parallel_size = o.tensor_parallel_size;
  d.pipeline_parallel_size = o.pipeline_parallel_size;
  d.num_threads = o.generator.num_threads;
  d.load = o.generator.load;
  d.step_timeout_seconds = o.step_timeout;
  UC_ASSIGN_OR_RETURN(std::unique_ptr<engine::Deployment> deployment,
                      engine::Deployment::Create(d, &backend));
  if (!deployment->is_driver()) {
    deployment->worker().Loop();
    return std::unique_ptr<engine::Deployment>();
  }
  return deployment;
}

bool SingleProcess(const GenerateOptions& o) {
  return o.tensor_parallel_size * o.pipeline_parallel_size == 1 && !distributed::LaunchedUnderMpi();
}

StatusOr<std::unique_ptr<engine::Generator>> OpenGenerator(GenerateOptions& o, bool* served) {
  *served = false;
  if (SingleProcess(o)) return engine::Generator::Open(o.generator);
  UC_ASSIGN_OR_RETURN(std::unique_ptr<engine::Deployment> deployment, OpenDeployment(o));
  if (deployment == nullptr) {
    *served = true;
    return std::unique_ptr<engine::Generator>();
  }
  return engine::Generator::OpenDriver(o.generator, std::move(deployment));
}

StatusOr<std::unique_ptr<engine::LLM>> OpenLLM(GenerateOptions& o, bool* served) {
  *served = false;
  if (SingleProcess(o)) return engine::LLM::Open(o.engine);
  UC_ASSIGN_OR_RETURN(std::unique_ptr<engine::Deployment> deployment, OpenDeployment(o));
  if (deployment == nullptr) {
    *served = true;
    return std::unique_ptr<engine::LLM>();
  }
  UC_ASSIGN_OR_RETURN(std::unique_ptr<engine::LLMEngine> engine,
                      engine::LLMEngine::OpenDriver(o.engine, std::move(deployment)));
  return std::make_unique<engine::LLM>(std::move(engine));
}

// Ends MPI (when it was started) and passes `code` through.
nlohmann::json OutputToJson(const engine::RequestOutput& r) {
  nlohmann::json j = {
      {"id", r.request_id},
      {"prompt_ids", r.prompt_ids},
      {"ids", r.output_ids},
      {"text", r.text},
      {"finish_reason", std::string(engine::FinishReasonName(r.finish_reason))},
      {"stop_reason", r.stop_reason},
      {"usage",
       {{"prompt_tokens", r.prompt_ids.size()}, {"completion_tokens", r.output_ids.size()}}},
      {"metrics",
       {{"time_to_first_token_seconds", r.metrics.time_to_first_token()},
        {"latency_seconds", r.metrics.finish_seconds - r.metrics.arrival_seconds},
        {"preemptions", r.metrics.num_preemptions}}},
  };
  if (r.abort.has_value()) {
    j["abort"] = {{"by", r.abort->by}, {"reason", r.abort->reason}};
    if (!r.abort->point.empty()) {
      j["abort"]["point"] = r.abort->point;
      j["abort"]["token_pos"] = r.abort->token_pos;
      if (r.abort->confidence.has_value()) j["abort"]["confidence"] = *r.abort->confidence;
    }
  }
  return j;
}

// {point: {verdict, signals, flagged, aborted}} for one request's probe results.
nlohmann::json ProbingToJson(const probe::RequestProbeResults& results) {
  nlohmann::json j = nlohmann::json::object();
  for (const probe::ProbeResult& r : results.results) {
    int flags = 0, aborts = 0;
    for (const probe::ProbeSignal& s : r.signal_history) {
      flags += s.action == probe::ProbeAction::kFlag;
      aborts += s.action == probe::ProbeAction::kAbort;
    }
    j[r.point] = {
        {"verdict", r.verdict},
        {"signals", r.signal_history.size()},
        {"flag_signals", flags},
        {"abort_signals", aborts},
        {"aborted_generation", results.abort.has_value() && results.abort->point == r.point}};
    if (!r.metadata.empty()) j[r.point]["metadata"] = r.metadata;
  }
  return j;
}

void PrintVerdicts(const probe::RequestProbeResults& results) {
  for (const probe::ProbeResult& r : results.results) {
    std::printf("  probe '%s': %s (%zu signals)\n", r.point.c_str(), r.verdict.dump().c_str(),
                r.signal_history.size());
  }
  if (results.abort.has_value()) std::printf("  %s\n", results.abort->reason.c_str());
}

// Parses the spec and loads plugins; every rank does it, so a bad spec fails everywhere alike.
StatusOr<probe::Spec> LoadSpec(const GenerateOptions& o) {
  for (const std::string& plugin : o.probe_plugins) {
    UC_RETURN_IF_ERROR(probe::ProbeRegistry::Global().LoadPlugin(plugin));
  }
  return probe::ParseSpecFile(o.spec_file);
}

// A request id no other run gives: "prompt-" and 16 random hex digits. Runs that append to one
// sink file then never collide.
std::string UniqueRequestId() {
  std::random_device device;
  std::mt19937_64 rng(
      (static_cast<uint64_t>(device()) << 32) ^ device() ^
      static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count()));
  char id[32];
  std::snprintf(id, sizeof(id), "prompt-%016llx", static_cast<unsigned long long>(rng()));
  return id;
}

// Runs every prompt of a JSONL file through the batched engine; prints each result as it
// finishes. Exit 1 when the file is malformed (nothing runs) or any request was rejected (the
// others still run).
int RunPrompts(GenerateOptions& o) {
  StatusOr<std::vector<engine::GenerateRequest>> requests =
      o.prompts_file.empty()
          ? StatusOr<std::vector<engine::GenerateRequest>>(std::vector<engine::GenerateRequest>{
                {o.request_id.empty() ? UniqueRequestId() : o.request_id,
                 engine::Prompt::Text(o.prompt), o.sampling}})
          : engine::ReadPromptsFile(o.prompts_file, o.sampling);
  const bool rank0 =
      !distributed::MpiRuntime::initialized() || distributed::MpiRuntime::world_rank() == 0;
  if (!requests.ok()) {
    if (rank0) std::fprintf(stderr, "error: %s\n", requests.status().message().c_str());
    return FinishMpi(kExitFailure);
  }
  std::optional<probe::Spec> spec;
  if (!o.spec_file.empty()) {
    StatusOr<probe::Spec> parsed = LoadSpec(o);
    if (!parsed.ok()) {
      if (rank0) std::fprintf(stderr, "error: %s\n", parsed.status().message().c_str());
      return FinishMpi(kExitFailure);
    }
    spec = std::move(parsed).value();
  }
  bool served = false;
  StatusOr<std::unique_ptr<engine::LLM>> llm = OpenLLM(o, &served);
  const bool driver =
      !distributed::MpiRuntime::initialized() || distributed::MpiRuntime::world_rank() == 0;
  if (!llm.ok()) {
    if (driver) std::fprintf(stderr, "error: %s\n", llm.status().message().c_str());
    return FinishMpi(kExitFailure);
  }
  if (served) return FinishMpi(kExitOk);
  StatusOr<std::unique_ptr<ProbingRuntime>> runtime = ProbingRuntime::Create(o.probing);
  if (!runtime.ok()) {
    std::fprintf(stderr, "error: %s\n", runtime.status().message().c_str());
    llm->reset();
    return FinishMpi(kExitUsage);
  }
  (*runtime)->Attach((*llm)->engine());
  std::unique_ptr<probe::ProbingSession> session;
  if (spec.has_value()) {
    probe::ProbingOptions options;
    options.model_name = o.model;
    options.stop_token_ids = (*llm)->engine().eos_token_ids();
    options.model_fingerprint = engine::ModelFingerprint((*llm)->engine());
    options.compare_tp_replicas = o.compare_tp_replicas;
    (*runtime)->Apply(&options);
    StatusOr<std::unique_ptr<probe::ProbingSession>> created = probe::ProbingSession::Create(
        *spec, probe::ProbeRegistry::Global(), (*llm)->engine().config(), options);
    if (!created.ok()) {
      std::fprintf(stderr, "error: %s\n", created.status().message().c_str());
      llm->reset();
      return FinishMpi(kExitFailure);
    }
    session = std::move(created).value();
  }
  // A request's line is printed once both its output and (with a spec) its probe results are
  // in: async results arrive after the request's queues drain, on another thread.
  std::mutex print_mu;
  std::map<std::string, engine::RequestOutput> outputs;
  std::map<std::string, probe::RequestProbeResults> probing;
  auto print = [&](const engine::RequestOutput& output,
                   const probe::RequestProbeResults* verdicts) {
    if (o.json) {
      nlohmann::json j = OutputToJson(output);
      if (verdicts != nullptr) j["probing"] = ProbingToJson(*verdicts);
      std::cout << j.dump() << std::endl;
    } else {
      std::printf("[%s] %s\n[%s: %zu tokens, %s]\n", output.request_id.c_str(), output.text.c_str(),
                  output.request_id.c_str(), output.output_ids.size(), output.stop_reason.c_str());
      if (verdicts != nullptr) PrintVerdicts(*verdicts);
      std::printf("\n");
      std::fflush(stdout);
    }
  };
  if (session != nullptr) {
    session->SetResultCallback([&](probe::RequestProbeResults r) {
      std::lock_guard<std::mutex> lock(print_mu);
      auto out = outputs.find(r.request_id);
      if (out == outputs.end()) {
        const std::string id = r.request_id;
        probing[id] = std::move(r);
        return;
      }
      print(out->second, &r);
      outputs.erase(out);
    });
    if (const Status attached = session->AttachTo((*llm)->engine()); !attached.ok()) {
      std::fprintf(stderr, "error: %s\n", attached.message().c_str());
      llm->reset();
      return FinishMpi(kExitFailure);
    }
  }
  const std::string source = o.prompts_file.empty() ? "--prompt" : o.prompts_file;
  int rejected = 0;
  (*llm)->Generate(*requests, [&](const engine::GenerateResult& result) {
    std::lock_guard<std::mutex> lock(print_mu);
    if (!result.status.ok()) {
      ++rejected;
      std::fprintf(stderr, "error: %s: request '%s': %s\n", source.c_str(), result.id.c_str(),
                   result.status.message().c_str());
      if (o.json) {
        std::cout << nlohmann::json{{"id", result.id}, {"error", result.status.message()}}.dump()
                  << std::endl;
      }
      return;
    }
    if (session == nullptr) {
      print(result.output, nullptr);
      return;
    }
    auto verdicts = probing.find(result.id);
    if (verdicts == probing.end()) {
      outputs[result.id] = result.output;  // its probe results are still draining
      return;
    }
    print(result.output, &verdicts->second);
    probing.erase(verdicts);
  });
  if (session != nullptr) {
    session->Shutdown(/*wait=*/true);  // every async queue drains; every result is printed
    std::lock_guard<std::mutex> lock(print_mu);
    for (const auto& [id, output] : outputs) print(output, nullptr);
  }
  const Status closed = (*runtime)->Close(o.probing.webhook_timeout * 4 + 5);
  if (!closed.ok()) std::fprintf(stderr, "warning: %s\n", closed.message().c_str());
  (*llm)->engine().SetObserver(nullptr);
  llm->reset();  // shuts the other ranks down
  return FinishMpi(rejected == 0 ? kExitOk : kExitFailure);
}

int RunGenerate(GenerateOptions& o) {
  o.generator.model_path = o.model;
  o.engine.model_path = o.model;
  o.engine.num_threads = o.generator.num_threads;
  o.engine.load = o.generator.load;
  // --prompt and --prompts size the cache and the context alike
  // (engine/scheduling/kv_cache_plan.h).
  o.generator.max_model_len = o.engine.max_model_len = o.kv_cache.max_model_len;
  o.generator.kv_cache_bytes = o.engine.kv_cache_bytes = o.kv_cache.kv_cache_bytes();
  if (!o.tokenizer.empty()) o.engine.tokenizer_path = o.tokenizer;
  if (!o.tokenizer.empty()) o.generator.tokenizer_path = o.tokenizer;
  if (o.seed >= 0) o.sampling.seed = static_cast<uint64_t>(o.seed);
  if (!o.prompts_file.empty() || !o.spec_file.empty() || !o.probing.metrics_file.empty()) {
    return RunPrompts(o);
  }
  bool served = false;
  StatusOr<std::unique_ptr<engine::Generator>> gen = OpenGenerator(o, &served);
  const bool rank0 =
      !distributed::MpiRuntime::initialized() || distributed::MpiRuntime::world_rank() == 0;
  if (!gen.ok()) {
    if (rank0) std::fprintf(stderr, "error: %s\n", gen.status().message().c_str());
    return FinishMpi(kExitFailure);
  }
  if (served) return FinishMpi(kExitOk);
  engine::TextCallback stream = nullptr;
  if (!o.json) {
    stream = [](std::string_view text) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
      return true;
    };
  }
  StatusOr<engine::GenerationResult> result = (*gen)->Generate(o.prompt, o.sampling, stream);
  gen->reset();  // shuts the other ranks down
  if (!result.ok()) {
    std::fprintf(stderr, "error: %s\n", result.status().message().c_str());
    return FinishMpi(kExitFailure);
  }
  if (o.json) {
    std::cout << ResultToJson(*result).dump() << std::endl;
  } else {
    std::printf("\n");
    std::fprintf(stderr,
                 "[%d prompt tokens, %.1f tok/s prefill; %d generated, %.1f tok/s decode; %s]\n",
                 result->timings.prompt_tokens, result->timings.prefill_tokens_per_second(),
                 result->timings.generated_tokens, result->timings.decode_tokens_per_second(),
                 result->stop_reason.c_str());
  }
  return FinishMpi(kExitOk);
}

}  // namespace

void AddGenerateCommand(CLI::App& app, int argc, char** argv) {
  auto options = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand(
      "generate", "Generate text for one prompt, or for many at once (--prompts FILE.jsonl)");
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
  cmd->add_option("--model,-m", options->model,
                  "Model: a Hugging Face directory, a .gguf file or a llama2.c .bin")
      ->required();
  cmd->add_option("--tokenizer", options->tokenizer,
                  "Tokenizer file (default: the one that comes with the model)");
  CLI::Option* prompt = cmd->add_option("--prompt,-p", options->prompt, "Prompt text");
  CLI::Option* prompts =
      cmd->add_option("--prompts", options->prompts_file,
                      "JSONL file: one object per line with `id`, `prompt` (or `prompt_ids`) "
                      "and optional sampling fields; all are served together by continuous "
                      "batching")
          ->check(CLI::ExistingFile);
  prompt->excludes(prompts);
  cmd->add_option("--request-id", options->request_id,
                  "Id of the --prompt request in the output, sinks and metrics (default: a fresh "
                  "unique 'prompt-<16 hex digits>', so runs appending to one sink file never "
                  "collide)")
      ->excludes(prompts)
      ->check([](const std::string& id) {
        return id.empty() ? std::string("must not be empty") : std::string();
      });
  cmd->add_option("--spec", options->spec_file,
                  "Extraction-point spec (YAML): capture activations and run probes; prints each "
                  "point's verdict per request")
      ->check(CLI::ExistingFile);
  cmd->add_option("--probe-plugin", options->probe_plugins,
                  "Shared library that registers probe types (repeatable)")
      ->check(CLI::ExistingFile);
  cmd->add_flag("--compare-tp-replicas", options->compare_tp_replicas,
                "Debug: every TP rank captures and the driver fails on any difference");
  AddProbingFlags(cmd, &options->probing);
  cmd->add_option("--max-num-seqs", options->engine.max_num_seqs,
                  "Requests in one batch at most (--prompts)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--max-num-batched-tokens", options->engine.max_num_batched_tokens,
                  "Tokens in one step at most, all requests together (--prompts)")
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
  cmd->add_option("--seed", options->seed, "Random seed (same seed, same output)");
  cmd->add_option("--stop", options->sampling.stop, "Stop string (repeatable)");
  cmd->add_flag("--ignore-eos", options->sampling.ignore_eos, "Keep generating past EOS");
  cmd->add_option("--threads", options->generator.num_threads, "Threads (0: all cores)")
      ->check(Threads())
      ->capture_default_str();
  AddModelLoadFlags(cmd, &options->generator.load);
  cmd->add_flag("--json", options->json,
                "Print one JSON object: ids, text, finish reason and timings (with --prompts: "
                "one line per prompt, as each finishes)");
  cmd->callback([options, argc, argv, prompt, prompts] {
    if (prompt->count() == 0 && prompts->count() == 0) {
      throw CLI::RequiredError("--prompt or --prompts");
    }
    const int world = options->tensor_parallel_size * options->pipeline_parallel_size;
    if (world > 1 && !distributed::LaunchedUnderMpi()) {
      const Status status = ReexecUnderMpirun(world, argc, argv);  // returns only on failure
      std::fprintf(stderr, "error: %s\n", status.message().c_str());
      throw CLI::RuntimeError(kExitFailure);
    }
    throw CLI::RuntimeError(RunGenerate(*options));
  });
}

}  // namespace uc::cli
