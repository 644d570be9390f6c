#include "apps/cli/commands/serve_command.h"

#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <thread>

#include "apps/cli/exit_codes.h"
#include "apps/cli/flag_checks.h"
#include "apps/cli/kv_cache_flags.h"
#include "apps/cli/launch.h"
#include "apps/cli/probing_flags.h"
#include "apps/server/http_server.h"
#include "base/logging.h"
#include "distributed/mpi/mpi_runtime.h"
#include "engine/deployment.h"
#include "engine/llm_engine.h"
#include "engine/model_fingerprint.h"
#include "engine/prompts_file.h"
#include "probe/probes/registry.h"
#include "probe/runtime/probe_sets.h"
#include "probe/sinks/metrics.h"
#include "probe/spec/spec.h"

namespace uc::cli {
namespace {

// Set by the supervisor (RunUnderMpirun) for the ranks it starts: world rank 0 drains and stops
// when its standard input (mpirun forwards the supervisor's pipe to rank 0) reaches EOF.
constexpr char kStdinShutdownMarker[] = "UNDERCURRENT_SERVE_STOP_ON_STDIN_EOF";

struct ServeOptions {
  server::ServerOptions server;
  engine::EngineOptions engine;
  std::string model;
  std::string tokenizer;
  std::vector<std::string> specs;  // FILE or NAME=FILE
  std::string default_probe_set;
  std::string chat_template;
  std::vector<std::string> probe_plugins;
  KvCacheFlags kv_cache;
  std::string max_body_size = "8MiB";
  int tensor_parallel_size = 1;
  int pipeline_parallel_size = 1;
  double step_timeout = 120.0;
  ProbingFlags probing;                       // async settings, sinks, --metrics-file
  std::vector<std::string> steering_modules;  // NAME=FILE
};

// --steering-module NAME=FILE: reads each control vector file against the model into
// o.server.steering_modules. InvalidArgument naming the flag value or the file.
Status LoadSteeringModules(ServeOptions& o, const models::ModelConfig& config) {
  for (const std::string& spec : o.steering_modules) {
    const size_t eq = spec.find('=');
    if (eq == 0 || eq == std::string::npos || eq + 1 == spec.size()) {
      return InvalidArgumentError("--steering-module '" + spec + "': expected NAME=FILE");
    }
    const std::string name = spec.substr(0, eq);
    const std::filesystem::path file = spec.substr(eq + 1);
    if (o.server.steering_modules.count(name) != 0) {
      return InvalidArgumentError("--steering-module: the name '" + name + "' is given twice");
    }
    UC_ASSIGN_OR_RETURN(models::LayerVectors vectors,
                        models::ReadControlVectorFile(file, static_cast<int>(config.hidden_size),
                                                      config.num_hidden_layers));
    auto steering = std::make_shared<worker::SteeringConfig>();
    for (auto& [layer, values] : vectors) {
      steering->vectors.push_back({.layer = layer, .values = std::move(values)});
    }
    o.server.steering_modules[name] = {file, std::move(steering)};
  }
  return OkStatus();
}

// --spec FILE | NAME=FILE (repeatable): the probe sets. A value naming an existing file is a
// file (named "default"); otherwise NAME=FILE. InvalidArgument naming the flag value.
StatusOr<std::vector<probe::ProbeSetSource>> ProbeSetSources(const ServeOptions& o) {
  std::vector<probe::ProbeSetSource> sources;
  for (const std::string& value : o.specs) {
    probe::ProbeSetSource source;
    const size_t eq = value.find('=');
    if (std::filesystem::is_regular_file(value) || eq == std::string::npos) {
      source = {"default", value};
    } else {
      if (eq == 0 || eq + 1 == value.size()) {
        return InvalidArgumentError("--spec '" + value + "': expected FILE or NAME=FILE");
      }
      source = {value.substr(0, eq), value.substr(eq + 1)};
    }
    if (!std::filesystem::is_regular_file(source.file)) {
      return InvalidArgumentError("--spec '" + value + "': no such file: " + source.file.string());
    }
    for (const probe::ProbeSetSource& s : sources) {
      if (s.name == source.name) {
        return InvalidArgumentError("--spec: the probe set name '" + source.name +
                                    "' is given twice (name them NAME=FILE)");
      }
    }
    sources.push_back(std::move(source));
  }
  return sources;
}

// The engine of this process: alone, or as the driver of a multi-rank deployment. The other
// ranks serve steps until the driver shuts them down, then get null.
StatusOr<std::unique_ptr<engine::LLMEngine>> OpenEngine(const ServeOptions& o) {
  if (o.tensor_parallel_size * o.pipeline_parallel_size == 1 && !distributed::LaunchedUnderMpi()) {
    return engine::LLMEngine::Open(o.engine);
  }
  UC_RETURN_IF_ERROR(distributed::MpiRuntime::Init(nullptr, nullptr));
  distributed::MpiBackend backend;
  engine::DeploymentOptions d;
  d.model_path = o.engine.model_path;
  d.tensor_parallel_size = o.tensor_parallel_size;
  d.pipeline_parallel_size = o.pipeline_parallel_size;
  d.num_threads = o.engine.num_threads;
  d.load = o.engine.load;
  d.step_timeout_seconds = o.step_timeout;
  UC_ASSIGN_OR_RETURN(std::unique_ptr<engine::Deployment> deployment,
                      engine::Deployment::Create(d, &backend));
  if (!deployment->is_driver()) {
    // The last stage samples under pipeline parallelism: it enforces constrained requests. A
    // tokenizer that fails here fails the driver's engine the same way, which then shuts this
    // rank's Loop down: so it still enters the Loop.
    const Status prepared = engine::PrepareFollower(*deployment, o.engine);
    if (!prepared.ok()) {
      UC_LOG(WARNING) << prepared.ToString();
    }
    deployment->worker().Loop();
    return std::unique_ptr<engine::LLMEngine>();
  }
  engine::EngineOptions options = o.engine;
  options.followers_enforce_grammars = true;
  return engine::LLMEngine::OpenDriver(options, std::move(deployment));
}

// The name clients pass as `model`: the model directory's name, or the file's without extension.
std::string DefaultModelName(const std::string& model) {
  std::filesystem::path path = std::filesystem::path(model).lexically_normal();
  if (path.filename().empty()) path = path.parent_path();
  return std::filesystem::is_directory(path) ? path.filename().string() : path.stem().string();
}

// Turns SIGTERM / SIGINT into Server::Shutdown calls, and SIGHUP into a reload of the probe
// sets, on a thread of its own. The signals must be blocked in every thread
// (BlockShutdownSignals before any thread starts).
class SignalWatcher {
 public:
  explicit SignalWatcher(server::Server* server)
      : thread_([this, server] {
          sigset_t set = WatchedSignals();
          for (;;) {
            int signal = 0;
            if (sigwait(&set, &signal) != 0) continue;
            if (done_) return;
            if (signal == SIGHUP) {
              const StatusOr<int64_t> version = server->ReloadProbeSets();
              if (version.ok()) {
                std::fprintf(stderr,
                             "undercurrent serve: SIGHUP: probe sets reloaded (version %lld)\n",
                             static_cast<long long>(*version));
              } else {
                std::fprintf(stderr, "undercurrent serve: SIGHUP: %s\n",
                             version.status().message().c_str());
              }
              continue;
            }
            std::fprintf(stderr, "undercurrent serve: %s received, draining\n",
                         signal == SIGINT ? "SIGINT" : "SIGTERM");
            server->Shutdown();
          }
        }) {}
  ~SignalWatcher() {
    done_ = true;
    pthread_kill(thread_.native_handle(), SIGTERM);
    thread_.join();
  }
  static sigset_t ShutdownSignals() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    return set;
  }
  static sigset_t WatchedSignals() {
    sigset_t set = ShutdownSignals();
    sigaddset(&set, SIGHUP);
    return set;
  }

 private:
  std::atomic<bool> done_{false};
  std::thread thread_;
};

// Runs `argv` on `world_size` ranks under mpirun as a child and supervises it. mpirun turns a
// SIGTERM into killing the job, so it is shielded from signals (its own process group) and a
// SIGTERM / SIGINT here closes the pipe mpirun forwards to rank 0's stdin instead: rank 0
// drains and shuts the other ranks down, and the job exits 0. A second signal SIGTERMs mpirun.
// Returns mpirun's exit status.
int RunUnderMpirun(int world_size, int argc, char** argv) {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::vector<std::string> cmd =
      MpirunCommand(world_size, ec ? std::string(argv[0]) : self.string(), {argv + 1, argv + argc});
  setenv("UNDERCURRENT_REEXEC", "1", 1);  // as ReexecUnderMpirun: never launch twice
  setenv(kStdinShutdownMarker, "1", 1);
  if (getuid() == 0) {
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  }
  sigset_t signals = SignalWatcher::ShutdownSignals();
  sigaddset(&signals, SIGCHLD);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  int stdin_pipe[2];
  if (pipe(stdin_pipe) != 0) return kExitFailure;
  const pid_t child = fork();
  if (child < 0) return kExitFailure;
  if (child == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);  // the job ends when its supervisor does
    dup2(stdin_pipe[0], 0);
    close(stdin_pipe[0]);
    close(stdin_pipe[1]);
    sigset_t none;
    sigemptyset(&none);
    pthread_sigmask(SIG_SETMASK, &none, nullptr);
    std::vector<char*> c_args;
    for (const std::string& a : cmd) c_args.push_back(const_cast<char*>(a.c_str()));
    c_args.push_back(nullptr);
    execvp("mpirun", c_args.data());
    std::fprintf(stderr, "error: cannot run mpirun (install openmpi-bin)\n");
    _exit(kExitFailure);
  }
  close(stdin_pipe[0]);
  int signals_seen = 0;
  for (;;) {
    int status = 0;
    if (waitpid(child, &status, WNOHANG) == child) {
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    const timespec poll = {0, 200'000'000};
    const int signal = sigtimedwait(&signals, nullptr, &poll);
    if (signal != SIGTERM && signal != SIGINT) continue;
    if (++signals_seen == 1) {
      close(stdin_pipe[1]);
    } else {
      kill(child, SIGTERM);
    }
  }
}

// On rank 0 of a supervised job: stdin reaching EOF is a SIGTERM (the SignalWatcher drains).
void WatchStdinForShutdown() {
  std::thread([] {
    char buf[256];
    while (read(0, buf, sizeof(buf)) > 0) {
    }
    kill(getpid(), SIGTERM);
  }).detach();
}

void BlockShutdownSignals() {
  sigset_t set = SignalWatcher::WatchedSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  // A client that disconnects must not kill the server with SIGPIPE.
  signal(SIGPIPE, SIG_IGN);
}

int RunServe(ServeOptions& o) {
  o.engine.model_path = o.model;
  if (!o.tokenizer.empty()) o.engine.tokenizer_path = o.tokenizer;
  StatusOr<int64_t> body_bytes = engine::ParseByteSize(o.max_body_size);
  if (!body_bytes.ok()) {
    std::fprintf(stderr, "error: --max-body-size: %s\n", body_bytes.status().message().c_str());
    return kExitUsage;
  }
  o.engine.kv_cache_bytes = o.kv_cache.kv_cache_bytes();
  o.engine.max_model_len = o.kv_cache.max_model_len;
  o.server.max_body_bytes = *body_bytes;
  o.server.model_path = o.model;
  if (o.server.served_model_name.empty()) o.server.served_model_name = DefaultModelName(o.model);
  if (o.server.api_key.empty()) {
    if (const char* key = std::getenv("UNDERCURRENT_API_KEY")) o.server.api_key = key;
  }
  // Before any thread exists (MPI's, the engine's pools), so every thread inherits the mask;
  // ranks other than the driver keep them blocked and leave when the driver shuts them down.
  BlockShutdownSignals();

  StatusOr<std::vector<probe::ProbeSetSource>> sources = ProbeSetSources(o);
  if (!sources.ok()) {
    std::fprintf(stderr, "error: %s\n", sources.status().message().c_str());
    return FinishMpi(kExitUsage);
  }
  if (!sources->empty()) {
    for (const std::string& plugin : o.probe_plugins) {
      const Status status = probe::ProbeRegistry::Global().LoadPlugin(plugin);
      if (!status.ok()) return FailOnDriver(status.message());
    }
    // Specs are checked before the model loads: a typo fails in a second, not a minute.
    for (const probe::ProbeSetSource& source : *sources) {
      StatusOr<probe::Spec> parsed = probe::ParseSpecFile(source.file);
      if (!parsed.ok()) return FailOnDriver(parsed.status().message());
    }
  }
  StatusOr<std::unique_ptr<engine::LLMEngine>> engine = OpenEngine(o);
  if (!engine.ok()) return FailOnDriver(engine.status().message());
  if (*engine == nullptr) return FinishMpi(kExitOk);  // a follower rank, shut down by the driver
  if (const Status loaded = LoadSteeringModules(o, (*engine)->config()); !loaded.ok()) {
    engine->reset();
    return FailOnDriver(loaded.message());
  }

  StatusOr<std::unique_ptr<server::ChatPrompt>> chat =
      server::ChatPrompt::Load(o.model, o.chat_template);
  if (!chat.ok()) {
    engine->reset();
    return FailOnDriver(chat.status().message());
  }
  if (!(*chat)->unavailable_reason().empty()) {
    std::fprintf(stderr, "undercurrent serve: %s\n", (*chat)->unavailable_reason().c_str());
  }
  // Sinks and metrics (served at /metrics, and --metrics-file); outlive the session.
  StatusOr<std::unique_ptr<ProbingRuntime>> runtime = ProbingRuntime::Create(o.probing);
  if (!runtime.ok()) {
    engine->reset();
    std::fprintf(stderr, "error: %s\n", runtime.status().message().c_str());
    return FinishMpi(kExitUsage);
  }
  probe::Metrics& metrics = (*runtime)->metrics();
  std::unique_ptr<probe::ProbeSets> sets;
  if (!sources->empty()) {
    probe::ProbingOptions options;
    (*runtime)->Apply(&options);
    options.model_name = o.server.served_model_name;
    options.stop_token_ids = (*engine)->eos_token_ids();
    options.model_fingerprint = engine::ModelFingerprint(**engine);
    options.tokenizer = &(*engine)->tokenizer();
    StatusOr<std::unique_ptr<probe::ProbeSets>> created =
        probe::ProbeSets::Create(*sources, o.default_probe_set, probe::ProbeRegistry::Global(),
                                 (*engine)->config(), options);
    if (!created.ok()) {
      engine->reset();
      return FailOnDriver(created.status().message());
    }
    sets = std::move(created).value();
    sets->AttachTo(**engine);
  } else if (!o.default_probe_set.empty()) {
    engine->reset();
    return FailOnDriver("--default-probe-set needs --spec");
  }
  int code = kExitOk;
  {
    server::Server server(engine->get(), sets.get(), &metrics, std::move(chat).value(), o.server);
    const Status bound = server.Bind();
    if (!bound.ok()) {
      std::fprintf(stderr, "error: %s\n", bound.message().c_str());
      code = kExitFailure;
    } else {
      std::printf("undercurrent serve: listening on http://%s:%d (model '%s')\n",
                  o.server.host.c_str(), server.port(), o.server.served_model_name.c_str());
      std::fflush(stdout);
      SignalWatcher watcher(&server);
      if (std::getenv(kStdinShutdownMarker) != nullptr) WatchStdinForShutdown();
      const Status served = server.Serve();
      if (!served.ok()) {
        std::fprintf(stderr, "error: %s\n", served.message().c_str());
        code = kExitFailure;
      }
    }
    // The engine has stopped stepping: async probes drain their queues and every request's
    // results reach the sinks. Before the server goes: late results still find its callback.
    if (sets != nullptr) sets->Shutdown(/*wait=*/true);
  }
  (*engine)->SetObserver(nullptr);
  sets.reset();
  const Status flushed = (*runtime)->Close(o.probing.webhook_timeout * 4 + 5);
  if (!flushed.ok()) std::fprintf(stderr, "warning: %s\n", flushed.message().c_str());
  engine->reset();  // shuts the other ranks down
  if (code == kExitOk) std::fprintf(stderr, "undercurrent serve: stopped\n");
  return FinishMpi(code);
}

}  // namespace

void AddServeCommand(CLI::App& app, int argc, char** argv) {
  auto o = std::make_shared<ServeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "serve", "Serve the model over an OpenAI-compatible HTTP API, with probes");
  cmd->add_option("--model,-m", o->model,
                  "Model: a Hugging Face directory, a .gguf file or a llama2.c .bin")
      ->required();
  cmd->add_option("--tokenizer", o->tokenizer,
                  "Tokenizer file (default: the one that comes with the model)");
  cmd->add_option("--spec", o->specs,
                  "Extraction-point spec (YAML): every request is probed and responses carry the "
                  "verdicts. Repeat as NAME=FILE for several probe sets, which a request picks "
                  "with \"probe_set\"; POST /v1/probes/reload or SIGHUP re-reads them")
      ->type_name("FILE|NAME=FILE");
  cmd->add_option("--default-probe-set", o->default_probe_set,
                  "The probe set of requests that name none (default: the first --spec)");
  cmd->add_option("--probe-plugin", o->probe_plugins,
                  "Shared library that registers probe types (repeatable)")
      ->check(CLI::ExistingFile);
  AddProbingFlags(cmd, &o->probing);
  cmd->add_option("--host", o->server.host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", o->server.port, "Port to listen on (0: any free port)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->add_option("--api-key", o->server.api_key,
                  "Require 'Authorization: Bearer KEY' on /v1 routes and /metrics (default: "
                  "$UNDERCURRENT_API_KEY; none when unset)");
  cmd->add_flag("--metrics-without-key", o->server.metrics_without_key,
                "Serve /metrics without the API key (for a Prometheus scraper on a private "
                "network)");
  cmd->add_option("--served-model-name", o->server.served_model_name,
                  "The model name clients use (default: the model's directory or file name)");
  cmd->add_option("--chat-template", o->chat_template,
                  "Chat template file that replaces the model's own")
      ->check(CLI::ExistingFile);
  cmd->add_option("--tensor-parallel-size,--tp", o->tensor_parallel_size,
                  "Ranks that split every layer (tensor parallelism)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--pipeline-parallel-size,--pp", o->pipeline_parallel_size,
                  "Ranks that split the layers into stages (pipeline parallelism)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--step-timeout", o->step_timeout,
                  "Seconds the driver waits for any rank within one step before aborting")
      ->check(Seconds(0.001))
      ->capture_default_str();
  cmd->add_option("--max-num-seqs", o->engine.max_num_seqs, "Requests in one batch at most")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--max-num-batched-tokens", o->engine.max_num_batched_tokens,
                  "Tokens in one step at most, all requests together")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--prefill-chunk", o->engine.max_prefill_chunk,
                  "Prompt tokens of one request per step at most (chunked prefill)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--block-size", o->engine.block_size, "KV cache block size in tokens")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  AddKvCacheFlags(cmd, &o->kv_cache);
  cmd->add_option("--threads", o->engine.num_threads, "Threads per rank (0: all cores)")
      ->check(Threads())
      ->capture_default_str();
  AddModelLoadFlags(cmd, &o->engine.load);
  cmd->add_option("--steering-module", o->steering_modules,
                  "A control vector file (.gguf, .safetensors, .npy) requests may pick by NAME "
                  "with \"steering_name\" (repeatable; GET /v1/steering lists them)")
      ->type_name("NAME=FILE");
  cmd->add_flag(
      "--no-prefix-caching{false}", o->engine.enable_prefix_caching,
      "Turn off automatic prefix caching (requests sharing a prompt prefix reuse its KV blocks; "
      "records and logprobs are the same either way)");
  cmd->add_option("--max-steering-configs", o->engine.max_steering_configs,
                  "Distinct per-request steering configurations running at once (others wait; "
                  "0: no limit)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--http-threads", o->server.http_threads,
                  "Threads that parse requests and render prompts (connections and streams "
                  "hold none)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--max-connections", o->server.max_connections,
                  "Open connections at most (more get 503)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--max-connections-per-client", o->server.max_connections_per_client,
                  "Open connections from one client address at most (more get 503; default: "
                  "half of --max-connections; 0: no limit; behind a proxy every client has the "
                  "proxy's address)")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--idle-timeout", o->server.idle_timeout_seconds,
                  "Seconds a kept-alive connection may wait for its next request")
      ->check(Seconds(0.01))
      ->capture_default_str();
  cmd->add_option("--header-timeout", o->server.header_timeout_seconds,
                  "Seconds a request's headers may take, from their first byte")
      ->check(Seconds(0.01))
      ->capture_default_str();
  cmd->add_option("--body-timeout", o->server.body_timeout_seconds,
                  "Seconds a request's body may take")
      ->check(Seconds(0.01))
      ->capture_default_str();
  cmd->add_option("--write-timeout", o->server.write_timeout_seconds,
                  "Seconds one write of a response may take (a client that stops reading is "
                  "dropped)")
      ->check(Seconds(0.01))
      ->capture_default_str();
  cmd->add_option("--max-body-size", o->max_body_size, "Largest request body (413 above)")
      ->capture_default_str();
  cmd->add_option("--drain-timeout", o->server.drain_timeout_seconds,
                  "Seconds a shutdown waits for in-flight requests before aborting them")
      ->check(Seconds())
      ->capture_default_str();
  cmd->add_option("--probe-result-timeout", o->server.probe_result_timeout_seconds,
                  "Seconds a finished response waits for its probe results")
      ->check(Seconds())
      ->capture_default_str();
  cmd->callback([o, argc, argv] {
    const int world = o->tensor_parallel_size * o->pipeline_parallel_size;
    if (world > 1 && !distributed::LaunchedUnderMpi()) {
      if (std::getenv("UNDERCURRENT_REEXEC") != nullptr) {
        std::fprintf(stderr,
                     "error: started under mpirun but no MPI launcher environment is "
                     "visible; start the job with mpirun yourself\n");
        throw CLI::RuntimeError(kExitFailure);
      }
      throw CLI::RuntimeError(RunUnderMpirun(world, argc, argv));
    }
    throw CLI::RuntimeError(RunServe(*o));
  });
}

}  // namespace uc::cli
