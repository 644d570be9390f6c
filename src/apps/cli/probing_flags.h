// File: probing_flags.h
// -----------------------------------------------------------------------------
// The command-line flags every probing command shares (generate, serve): async execution,
// sinks, redaction and metrics; and ProbingRuntime, which builds what they ask for.
//
//   --async-workers N --queue-depth N --overflow-policy drop_oldest|drop_newest|block
//   --probe-drain-timeout SECONDS
//   --sink-file PATH [--sink-file-max-bytes SIZE --sink-file-keep N]
//   --webhook URL [--webhook-dead-letter PATH --webhook-token-env VAR --webhook-retries N
//                  --webhook-timeout S --webhook-backoff S --webhook-queue N]
//   --include-prompt-text --redact-key KEY --drop-key KEY   (sink redaction)
//   --metrics-file PATH [--metrics-interval S]
//
// Thread-safety: ProbingRuntime is used from the thread that owns the engine; the sinks and
// metrics it holds are thread-safe.
#pragma once

#include <CLI/CLI.hpp>
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "engine/llm_engine.h"
#include "probe/runtime/probing_session.h"
#include "probe/sinks/metrics.h"
#include "probe/sinks/sink.h"

namespace uc::cli {

struct ProbingFlags {
  int async_workers = 4;
  int queue_depth = 32;
  std::string overflow_policy = "drop_oldest";
  double drain_timeout = 30.0;
  std::vector<std::string> sink_files;
  std::string sink_file_max_bytes = "0";
  int sink_file_keep = 5;
  std::string webhook_url;
  std::string webhook_dead_letter;
  std::string webhook_token_env;
  int webhook_retries = 2;
  double webhook_timeout = 5.0;
  double webhook_backoff = 0.1;
  int webhook_queue = 1000;
  bool include_prompt_text = false;
  std::vector<std::string> redact_keys;
  std::vector<std::string> drop_keys;
  std::string metrics_file;
  double metrics_interval = 5.0;
  std::string artifact_policy = "warn";  // probe::ArtifactPolicy
};

// Adds the flags above to `cmd`, storing into `flags` (which must outlive parsing).
void AddProbingFlags(CLI::App* cmd, ProbingFlags* flags);

// The sinks and metrics a command runs with.
class ProbingRuntime {
 public:
  // InvalidArgument/NotFound naming the flag when a value is bad or a path unusable.
  static StatusOr<std::unique_ptr<ProbingRuntime>> Create(const ProbingFlags& flags);
  ~ProbingRuntime();  // Close(10 s) if not closed

  // Fills the async settings, sinks and metrics of `options`.
  void Apply(probe::ProbingOptions* options);
  // Records every engine step into the metrics (installs the engine's step listener).
  void Attach(engine::LLMEngine& engine);
  probe::Metrics& metrics() { return *metrics_; }
  const std::vector<std::shared_ptr<probe::Sink>>& sinks() const { return sinks_; }

  // Flushes the sinks (bounded) and writes the metrics file a last time. Call after the
  // probing session shut down. Returns the first problem.
  Status Close(double timeout_seconds);

 private:
  ProbingRuntime() = default;
  void MetricsLoop();

  ProbingFlags flags_;
  std::unique_ptr<probe::Metrics> metrics_;
  std::vector<std::shared_ptr<probe::Sink>> sinks_;
  std::thread metrics_writer_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool closed_ = false;
};

}  // namespace uc::cli
