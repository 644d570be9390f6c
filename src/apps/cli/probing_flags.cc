#include "apps/cli/probing_flags.h"

#include "apps/cli/flag_checks.h"
#include "base/logging.h"
#include "engine/prompts_file.h"
#include "probe/probes/trained/artifact.h"
#include "probe/sinks/ndjson_file_sink.h"
#include "probe/sinks/webhook_sink.h"

namespace uc::cli {

void AddProbingFlags(CLI::App* cmd, ProbingFlags* f) {
  const std::string g = "Probing (async, sinks, metrics)";
  cmd->add_option("--probe-artifact-policy", f->artifact_policy,
                  "Probe weights whose metadata names another model, layer or site: ignore, "
                  "warn (load them, with a warning) or refuse")
      ->check(CLI::IsMember({"ignore", "warn", "refuse"}))
      ->capture_default_str()
      ->group(g);
  cmd->add_option("--async-workers", f->async_workers,
                  "Threads serving every async probe queue, fairly")
      ->check(CLI::PositiveNumber)
      ->capture_default_str()
      ->group(g);
  cmd->add_option("--queue-depth", f->queue_depth,
                  "Queue depth of async points without their own queue_depth")
      ->check(CLI::PositiveNumber)
      ->capture_default_str()
      ->group(g);
  cmd->add_option("--overflow-policy", f->overflow_policy,
                  "What a full async queue does, for points without overflow_policy")
      ->check(CLI::IsMember({"drop_oldest", "drop_newest", "block"}))
      ->capture_default_str()
      ->group(g);
  cmd->add_option("--probe-drain-timeout", f->drain_timeout,
                  "Seconds a finished request's async queues may take to drain")
      ->check(Seconds())
      ->capture_default_str()
      ->group(g);
  cmd->add_option("--sink-file", f->sink_files,
                  "NDJSON file receiving probe signals and results (repeatable)")
      ->group(g);
  cmd->add_option("--sink-file-max-bytes", f->sink_file_max_bytes,
                  "Rotate a sink file before it grows past this size, e.g. 100MiB (0: never)")
      ->capture_default_str()
      ->group(g);
  cmd->add_option("--sink-file-keep", f->sink_file_keep, "Rotated sink files kept")
      ->check(CLI::PositiveNumber)
      ->capture_default_str()
      ->group(g);
  cmd->add_option("--webhook", f->webhook_url,
                  "POST every probe signal and result as JSON to this http(s) URL")
      ->group(g);
  cmd->add_option("--webhook-dead-letter", f->webhook_dead_letter,
                  "NDJSON file for records the webhook could not deliver")
      ->group(g);
  cmd->add_option("--webhook-token-env", f->webhook_token_env,
                  "Environment variable holding a bearer token for the webhook")
      ->group(g);
  cmd->add_option("--webhook-retries", f->webhook_retries, "Retries after a failed POST")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str()
      ->group(g);
  cmd->add_option("--webhook-timeout", f->webhook_timeout, "Seconds per POST attempt")
      ->check(Seconds(0.001))
      ->capture_default_str()
      ->group(g);
  cmd->add_option("--webhook-backoff", f->webhook_backoff,
                  "Seconds before the first retry (doubles each time, jittered)")
      ->check(Seconds())
      ->capture_default_str()
      ->group(g);
  cmd->add_option("--webhook-queue", f->webhook_queue,
                  "Records waiting for the webhook at most (more go to the dead-letter file)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str()
      ->group(g);
  cmd->add_flag("--include-prompt-text", f->include_prompt_text,
                "Send prompt text to the webhook (redacted by default)")
      ->group(g);
  cmd->add_option("--redact-key", f->redact_keys,
                  "Replace this key's value in sink records (a.b matches a nested path)")
      ->group(g);
  cmd->add_option("--drop-key", f->drop_keys, "Remove this key from sink records")->group(g);
  cmd->add_option("--metrics-file", f->metrics_file,
                  "Write Prometheus metrics (text format) to this file, refreshed while running")
      ->group(g);
  cmd->add_option("--metrics-interval", f->metrics_interval,
                  "Seconds between --metrics-file refreshes")
      ->check(Seconds(0.001))
      ->capture_default_str()
      ->group(g);
}

StatusOr<std::unique_ptr<ProbingRuntime>> ProbingRuntime::Create(const ProbingFlags& flags) {
  std::unique_ptr<ProbingRuntime> rt(new ProbingRuntime());
  rt->flags_ = flags;
  rt->metrics_ = std::make_unique<probe::Metrics>();
  probe::RedactionOptions redaction;
  redaction.redact_prompt_text = false;  // files keep everything unless asked
  redaction.redact_keys = flags.redact_keys;
  redaction.drop_keys = flags.drop_keys;
  StatusOr<probe::Redactor> file_redactor = probe::Redactor::Create(redaction);
  if (!file_redactor.ok())
    return InvalidArgumentError("--redact-key/--drop-key: " + file_redactor.status().message());
  StatusOr<int64_t> max_bytes = flags.sink_file_max_bytes == "0"
                                    ? StatusOr<int64_t>(int64_t{0})  // never rotate
                                    : engine::ParseByteSize(flags.sink_file_max_bytes);
  if (!max_bytes.ok()) {
    return InvalidArgumentError("--sink-file-max-bytes: " + max_bytes.status().message());
  }
  for (const std::string& path : flags.sink_files) {
    probe::NdjsonFileOptions options;
    options.max_bytes = *max_bytes;
    options.max_files = flags.sink_file_keep;
    options.redactor = *file_redactor;
    StatusOr<std::shared_ptr<probe::NdjsonFileSink>> sink =
        probe::NdjsonFileSink::Open(path, options, rt->metrics_.get());
    if (!sink.ok()) return InvalidArgumentError("--sink-file: " + sink.status().message());
    rt->sinks_.push_back(std::move(sink).value());
  }
  if (!flags.webhook_url.empty()) {
    probe::WebhookOptions options;
    options.url = flags.webhook_url;
    options.max_retries = flags.webhook_retries;
    options.request_timeout_seconds = flags.webhook_timeout;
    options.backoff_base_seconds = flags.webhook_backoff;
    options.queue_max = static_cast<size_t>(flags.webhook_queue);
    options.dead_letter_path = flags.webhook_dead_letter;
    options.bearer_token_env = flags.webhook_token_env;
    options.redaction.redact_prompt_text = !flags.include_prompt_text;
    options.redaction.redact_keys = flags.redact_keys;
    options.redaction.drop_keys = flags.drop_keys;
    StatusOr<std::shared_ptr<probe::WebhookSink>> sink =
        probe::WebhookSink::Open(options, rt->metrics_.get());
    if (!sink.ok()) return InvalidArgumentError("--webhook: " + sink.status().message());
    rt->sinks_.push_back(std::move(sink).value());
  } else if (!flags.webhook_dead_letter.empty() || !flags.webhook_token_env.empty()) {
    return InvalidArgumentError("--webhook-dead-letter and --webhook-token-env need --webhook URL");
  }
  if (!flags.metrics_file.empty()) {
    UC_RETURN_IF_ERROR(rt->metrics_->WriteFile(flags.metrics_file));
    rt->metrics_writer_ = std::thread([r = rt.get()] { r->MetricsLoop(); });
  }
  return rt;
}

ProbingRuntime::~ProbingRuntime() { (void)Close(10.0); }

void ProbingRuntime::Apply(probe::ProbingOptions* options) {
  options->async.workers = flags_.async_workers;
  options->async.default_queue_depth = flags_.queue_depth;
  options->async.default_overflow =
      flags_.overflow_policy == "drop_newest" ? probe::OverflowPolicy::kDropNewest
      : flags_.overflow_policy == "block"     ? probe::OverflowPolicy::kBlock
                                              : probe::OverflowPolicy::kDropOldest;
  options->async.drain_timeout_seconds = flags_.drain_timeout;
  options->sinks = sinks_;
  options->metrics = metrics_.get();
  options->artifact_policy = *probe::ParseArtifactPolicy(flags_.artifact_policy);
}

void ProbingRuntime::Attach(engine::LLMEngine& engine) {
  probe::Metrics* m = metrics_.get();
  engine.SetStepListener([m](const engine::EngineStats& stats, double seconds,
                             const std::vector<engine::RequestOutput>& outputs) {
    m->RecordEngineStep(stats, seconds);
    for (const engine::RequestOutput& out : outputs) {
      if (out.finished) m->RecordFinished(std::string(engine::FinishReasonName(out.finish_reason)));
    }
  });
}

void ProbingRuntime::MetricsLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!closed_) {
    cv_.wait_for(lock, std::chrono::duration<double>(flags_.metrics_interval));
    if (closed_) break;
    const Status status = metrics_->WriteFile(flags_.metrics_file);
    if (!status.ok()) {
      UC_LOG(WARNING) << "--metrics-file: " << status.message();
    }
  }
}

Status ProbingRuntime::Close(double timeout_seconds) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return OkStatus();
    closed_ = true;
  }
  cv_.notify_all();
  if (metrics_writer_.joinable()) metrics_writer_.join();
  Status first;
  for (const std::shared_ptr<probe::Sink>& sink : sinks_) {
    Status s = sink->Close(timeout_seconds);
    if (!s.ok() && first.ok()) first = s;
  }
  if (!flags_.metrics_file.empty()) {
    Status s = metrics_->WriteFile(flags_.metrics_file);
    if (!s.ok() && first.ok()) first = s;
  }
  return first;
}

}  // namespace uc::cli
