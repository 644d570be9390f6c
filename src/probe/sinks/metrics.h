// File: metrics.h
// -----------------------------------------------------------------------------
// Metrics: Undercurrent's Prometheus metrics (prometheus-cpp), for every extraction point —
// inline and async — for every sink and for the engine. Labels are extraction point, sink and
// outcome names, never request ids, so the series count stays bounded however many requests
// run. Serialize() renders the text exposition format served at /metrics; WriteFile() writes
// it atomically for `--metrics-file`.
//
// Series (all prefixed `undercurrent_`):
//   probe_activations_total{extraction_point,execution_mode}   OnActivation calls
//   probe_errors_total{extraction_point}                        probe threw (any method)
//   probe_activation_seconds{extraction_point,execution_mode}  histogram, 0.5 ms .. 10 s
//   probe_signals_total{extraction_point,action}                continue / flag / abort /
//                                                               escalate
//   escalations_total{extraction_point}                         requests held for the classifier
//   escalation_decisions_total{extraction_point,outcome}        continue / abort (its answers),
//                                                               timeout / error (on_timeout used)
//   escalation_hold_seconds{extraction_point}                   histogram: hold to decision
//   generation_aborts_total{extraction_point}                   requests stopped by a probe
//   intervention_timeouts_total{extraction_point}               block_until_signal timeouts
//   intervention_fallbacks_total{extraction_point,reason}       timeout / exception / overlap
//   circuit_breaker_state{extraction_point}                     0 closed, 1 open, 2 half-open
//   circuit_breaker_trips_total{extraction_point}
//   circuit_breaker_skipped_total{extraction_point}             records skipped while open
//   queue_depth{extraction_point}                               async records queued now
//   queue_capacity{extraction_point}                            sum of the live queues' depth
//   queue_drops_total{extraction_point,reason}                  overflow / drain_timeout /
//                                                               shutdown
//   sink_records_total{sink,outcome}                            delivered / dropped /
//                                                               dead_lettered / redaction_error
//                                                               / write_error
//   sink_retries_total{sink}
//   sink_queue_depth{sink}
//   requests_running, requests_waiting, kv_blocks_in_use, kv_blocks_capacity   gauges
//   prompt_tokens_total, generation_tokens_total, engine_steps_total, preemptions_total
//   engine_step_seconds                                         histogram
//   requests_finished_total{finish_reason}
//
// Thread-safety: every method is thread-safe. Handles returned by Point()/Sink() stay valid for
// the Metrics object's lifetime.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "base/status.h"
#include "engine/llm_engine.h"

namespace prometheus {
class Registry;
class Counter;
class Gauge;
class Histogram;
}  // namespace prometheus

namespace uc::probe {

// The series of one extraction point. Counters and gauges are prometheus-cpp objects
// (atomic); use them directly from any thread.
struct PointMetrics {
  prometheus::Counter* activations = nullptr;
  prometheus::Counter* errors = nullptr;
  prometheus::Histogram* latency = nullptr;  // seconds inside OnActivation
  prometheus::Counter* signals_continue = nullptr;
  prometheus::Counter* signals_flag = nullptr;
  prometheus::Counter* signals_abort = nullptr;
  prometheus::Counter* signals_escalate = nullptr;
  prometheus::Counter* escalations = nullptr;
  prometheus::Counter* escalation_continue = nullptr;
  prometheus::Counter* escalation_abort = nullptr;
  prometheus::Counter* escalation_timeout = nullptr;
  prometheus::Counter* escalation_error = nullptr;
  prometheus::Histogram* escalation_hold = nullptr;  // seconds from hold to decision
  prometheus::Counter* generation_aborts = nullptr;
  prometheus::Counter* timeouts = nullptr;
  prometheus::Counter* fallbacks_timeout = nullptr;
  prometheus::Counter* fallbacks_exception = nullptr;
  prometheus::Gauge* breaker_state = nullptr;
  prometheus::Counter* breaker_trips = nullptr;
  prometheus::Counter* breaker_skipped = nullptr;
  prometheus::Gauge* queue_depth = nullptr;
  prometheus::Gauge* queue_capacity = nullptr;
  prometheus::Counter* drops_overflow = nullptr;
  prometheus::Counter* drops_drain_timeout = nullptr;
  prometheus::Counter* drops_shutdown = nullptr;
};

// The series of one sink.
struct SinkMetrics {
  prometheus::Counter* delivered = nullptr;
  prometheus::Counter* dropped = nullptr;
  prometheus::Counter* dead_lettered = nullptr;
  prometheus::Counter* redaction_errors = nullptr;
  prometheus::Counter* write_errors = nullptr;
  prometheus::Counter* retries = nullptr;
  prometheus::Gauge* queue_depth = nullptr;
};

class Metrics {
 public:
  Metrics();
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // The series of extraction point `name` (created on first use; `inline_point` picks the
  // execution_mode label of its activation series).
  PointMetrics& Point(const std::string& name, bool inline_point);
  // The series of sink `name` (e.g. "file", "webhook").
  SinkMetrics& Sink(const std::string& name);

  // After every engine step: gauges from `stats`, counters advanced by what changed since the
  // previous call, and the step's duration.
  void RecordEngineStep(const engine::EngineStats& stats, double step_seconds);
  // When a request finishes ("stop", "length", "abort", ...).
  void RecordFinished(const std::string& finish_reason);

  // The Prometheus text exposition format (version 0.0.4).
  std::string Serialize() const;
  // Serialize() into `path` via a temporary file and rename, so a reader never sees half.
  Status WriteFile(const std::filesystem::path& path) const;

  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

 private:
  struct Families;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<Families> families_;
  std::mutex mu_;  // guards the maps and last_ (metric objects are atomic themselves)
  std::map<std::string, PointMetrics> points_;
  std::map<std::string, SinkMetrics> sinks_;
  std::map<std::string, prometheus::Counter*> finished_;
  engine::EngineStats last_;
};

}  // namespace uc::probe
