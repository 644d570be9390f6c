#include "probe/sinks/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <fstream>

namespace uc::probe {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;
using prometheus::Counter;
using prometheus::Family;
using prometheus::Gauge;
using prometheus::Histogram;

// 0.5 ms .. 10 s: a norm probe takes microseconds, a remote classifier seconds.
Histogram::BucketBoundaries LatencyBuckets() {
  return {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0};
}

Histogram::BucketBoundaries StepBuckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0};
}

// Advances a counter to a cumulative total it mirrors (never backwards).
void AdvanceTo(Counter* counter, int64_t previous, int64_t now) {
  if (now > previous) counter->Increment(static_cast<double>(now - previous));
}

}  // namespace

struct Metrics::Families {
  explicit Families(prometheus::Registry& r)
      : activations(BuildCounter()
                        .Name("undercurrent_probe_activations_total")
                        .Help("Activations handed to a probe (OnActivation calls)")
                        .Register(r)),
        errors(BuildCounter()
                   .Name("undercurrent_probe_errors_total")
                   .Help("Probe calls that threw")
                   .Register(r)),
        latency(BuildHistogram()
                    .Name("undercurrent_probe_activation_seconds")
                    .Help("Wall time inside a probe's OnActivation")
                    .Register(r)),
        signals(BuildCounter()
                    .Name("undercurrent_probe_signals_total")
                    .Help("Signals returned by probes, by action")
                    .Register(r)),
        escalations(BuildCounter()
                        .Name("undercurrent_escalations_total")
                        .Help("Requests held while an external classifier decides")
                        .Register(r)),
        escalation_decisions(BuildCounter()
                                 .Name("undercurrent_escalation_decisions_total")
                                 .Help("Escalation outcomes: the classifier's continue / abort, "
                                       "or timeout / error (on_timeout applied)")
                                 .Register(r)),
        escalation_hold(BuildHistogram()
                            .Name("undercurrent_escalation_hold_seconds")
                            .Help("Time a request was held for an escalation decision")
                            .Register(r)),
        generation_aborts(BuildCounter()
                              .Name("undercurrent_generation_aborts_total")
                              .Help("Generations stopped by an inline probe")
                              .Register(r)),
        timeouts(BuildCounter()
                     .Name("undercurrent_intervention_timeouts_total")
                     .Help("block_until_signal calls that ran past their timeout")
                     .Register(r)),
        fallbacks(BuildCounter()
                      .Name("undercurrent_intervention_fallbacks_total")
                      .Help("Fallback signals used instead of a probe's answer, by reason")
                      .Register(r)),
        breaker_state(
            BuildGauge()
                .Name("undercurrent_circuit_breaker_state")
                .Help("Circuit breaker of a blocking point: 0 closed, 1 open, 2 half-open")
                .Register(r)),
        breaker_trips(BuildCounter()
                          .Name("undercurrent_circuit_breaker_trips_total")
                          .Help("Times a point's circuit breaker opened")
                          .Register(r)),
        breaker_skipped(BuildCounter()
                            .Name("undercurrent_circuit_breaker_skipped_total")
                            .Help("Activations not sent to a probe because its breaker was open")
                            .Register(r)),
        queue_depth(BuildGauge()
                        .Name("undercurrent_queue_depth")
                        .Help("Activations waiting in a point's async queues")
                        .Register(r)),
        queue_capacity(BuildGauge()
                           .Name("undercurrent_queue_capacity")
                           .Help("Total capacity of a point's live async queues")
                           .Register(r)),
        drops(BuildCounter()
                  .Name("undercurrent_queue_drops_total")
                  .Help("Activations an async queue discarded, by reason")
                  .Register(r)),
        sink_records(BuildCounter()
                         .Name("undercurrent_sink_records_total")
                         .Help("Records a sink handled, by outcome")
                         .Register(r)),
        sink_retries(BuildCounter()
                         .Name("undercurrent_sink_retries_total")
                         .Help("Delivery attempts a sink repeated")
                         .Register(r)),
        sink_queue_depth(BuildGauge()
                             .Name("undercurrent_sink_queue_depth")
                             .Help("Records waiting in a sink's queue")
                             .Register(r)),
        running(BuildGauge()
                    .Name("undercurrent_requests_running")
                    .Help("Requests in the running batch")
                    .Register(r)
                    .Add({})),
        waiting(BuildGauge()
                    .Name("undercurrent_requests_waiting")
                    .Help("Requests waiting to be scheduled")
                    .Register(r)
                    .Add({})),
        kv_in_use(BuildGauge()
                      .Name("undercurrent_kv_blocks_in_use")
                      .Help("KV cache blocks holding a request's tokens")
                      .Register(r)
                      .Add({})),
        kv_total(BuildGauge()
                     .Name("undercurrent_kv_blocks_capacity")
                     .Help("KV cache blocks in the pool")
                     .Register(r)
                     .Add({})),
        prompt_tokens(BuildCounter()
                          .Name("undercurrent_prompt_tokens_total")
                          .Help("Prompt tokens run through the model (recomputation included)")
                          .Register(r)
                          .Add({})),
        generation_tokens(BuildCounter()
                              .Name("undercurrent_generation_tokens_total")
                              .Help("Tokens generated")
                              .Register(r)
                              .Add({})),
        steps(BuildCounter()
                  .Name("undercurrent_engine_steps_total")
                  .Help("Engine steps run")
                  .Register(r)
                  .Add({})),
        preemptions(BuildCounter()
                        .Name("undercurrent_preemptions_total")
                        .Help("Requests preempted for lack of KV blocks")
                        .Register(r)
                        .Add({})),
        prefix_queries(BuildCounter()
                           .Name("undercurrent_prefix_cache_queries_total")
                           .Help("Prompt tokens of admissions that could read the prefix cache")
                           .Register(r)
                           .Add({})),
        prefix_hits(BuildCounter()
                        .Name("undercurrent_prefix_cache_hits_total")
                        .Help("Prompt tokens served from the prefix cache (hit rate: hits / "
                              "queries)")
                        .Register(r)
                        .Add({})),
        step_seconds(BuildHistogram()
                         .Name("undercurrent_engine_step_seconds")
                         .Help("Wall time of one engine step")
                         .Register(r)
                         .Add({}, StepBuckets())),
        finished(BuildCounter()
                     .Name("undercurrent_requests_finished_total")
                     .Help("Requests finished, by finish reason")
                     .Register(r)) {}

  Family<Counter>& activations;
  Family<Counter>& errors;
  Family<Histogram>& latency;
  Family<Counter>& signals;
  Family<Counter>& escalations;
  Family<Counter>& escalation_decisions;
  Family<Histogram>& escalation_hold;
  Family<Counter>& generation_aborts;
  Family<Counter>& timeouts;
  Family<Counter>& fallbacks;
  Family<Gauge>& breaker_state;
  Family<Counter>& breaker_trips;
  Family<Counter>& breaker_skipped;
  Family<Gauge>& queue_depth;
  Family<Gauge>& queue_capacity;
  Family<Counter>& drops;
  Family<Counter>& sink_records;
  Family<Counter>& sink_retries;
  Family<Gauge>& sink_queue_depth;
  Gauge& running;
  Gauge& waiting;
  Gauge& kv_in_use;
  Gauge& kv_total;
  Counter& prompt_tokens;
  Counter& generation_tokens;
  Counter& steps;
  Counter& preemptions;
  Counter& prefix_queries;
  Counter& prefix_hits;
  Histogram& step_seconds;
  Family<Counter>& finished;
};

Metrics::Metrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      families_(std::make_unique<Families>(*registry_)) {}

Metrics::~Metrics() = default;

PointMetrics& Metrics::Point(const std::string& name, bool inline_point) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = points_.find(name);
  if (it != points_.end()) return it->second;
  Families& f = *families_;
  const std::string mode = inline_point ? "inline" : "async";
  PointMetrics m;
  m.activations = &f.activations.Add({{"extraction_point", name}, {"execution_mode", mode}});
  m.errors = &f.errors.Add({{"extraction_point", name}});
  m.latency =
      &f.latency.Add({{"extraction_point", name}, {"execution_mode", mode}}, LatencyBuckets());
  m.signals_continue = &f.signals.Add({{"extraction_point", name}, {"action", "continue"}});
  m.signals_flag = &f.signals.Add({{"extraction_point", name}, {"action", "flag"}});
  m.signals_abort = &f.signals.Add({{"extraction_point", name}, {"action", "abort"}});
  m.signals_escalate = &f.signals.Add({{"extraction_point", name}, {"action", "escalate"}});
  m.escalations = &f.escalations.Add({{"extraction_point", name}});
  for (auto [counter, outcome] :
       {std::pair{&m.escalation_continue, "continue"}, std::pair{&m.escalation_abort, "abort"},
        std::pair{&m.escalation_timeout, "timeout"}, std::pair{&m.escalation_error, "error"}}) {
    *counter = &f.escalation_decisions.Add({{"extraction_point", name}, {"outcome", outcome}});
  }
  m.escalation_hold = &f.escalation_hold.Add({{"extraction_point", name}}, LatencyBuckets());
  m.generation_aborts = &f.generation_aborts.Add({{"extraction_point", name}});
  m.timeouts = &f.timeouts.Add({{"extraction_point", name}});
  m.fallbacks_timeout = &f.fallbacks.Add({{"extraction_point", name}, {"reason", "timeout"}});
  m.fallbacks_exception = &f.fallbacks.Add({{"extraction_point", name}, {"reason", "exception"}});
  m.breaker_state = &f.breaker_state.Add({{"extraction_point", name}});
  m.breaker_trips = &f.breaker_trips.Add({{"extraction_point", name}});
  m.breaker_skipped = &f.breaker_skipped.Add({{"extraction_point", name}});
  m.queue_depth = &f.queue_depth.Add({{"extraction_point", name}});
  m.queue_capacity = &f.queue_capacity.Add({{"extraction_point", name}});
  m.drops_overflow = &f.drops.Add({{"extraction_point", name}, {"reason", "overflow"}});
  m.drops_drain_timeout = &f.drops.Add({{"extraction_point", name}, {"reason", "drain_timeout"}});
  m.drops_shutdown = &f.drops.Add({{"extraction_point", name}, {"reason", "shutdown"}});
  return points_.emplace(name, m).first->second;
}

SinkMetrics& Metrics::Sink(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sinks_.find(name);
  if (it != sinks_.end()) return it->second;
  Families& f = *families_;
  SinkMetrics m;
  m.delivered = &f.sink_records.Add({{"sink", name}, {"outcome", "delivered"}});
  m.dropped = &f.sink_records.Add({{"sink", name}, {"outcome", "dropped"}});
  m.dead_lettered = &f.sink_records.Add({{"sink", name}, {"outcome", "dead_lettered"}});
  m.redaction_errors = &f.sink_records.Add({{"sink", name}, {"outcome", "redaction_error"}});
  m.write_errors = &f.sink_records.Add({{"sink", name}, {"outcome", "write_error"}});
  m.retries = &f.sink_retries.Add({{"sink", name}});
  m.queue_depth = &f.sink_queue_depth.Add({{"sink", name}});
  return sinks_.emplace(name, m).first->second;
}

void Metrics::RecordEngineStep(const engine::EngineStats& stats, double step_seconds) {
  Families& f = *families_;
  std::lock_guard<std::mutex> lock(mu_);
  f.running.Set(stats.num_running);
  f.waiting.Set(stats.num_waiting);
  f.kv_total.Set(stats.num_kv_blocks);
  f.kv_in_use.Set(stats.num_kv_blocks - stats.num_free_kv_blocks);
  AdvanceTo(&f.prompt_tokens, last_.prompt_tokens_computed, stats.prompt_tokens_computed);
  AdvanceTo(&f.generation_tokens, last_.generated_tokens, stats.generated_tokens);
  AdvanceTo(&f.steps, last_.num_steps, stats.num_steps);
  AdvanceTo(&f.preemptions, last_.num_preemptions, stats.num_preemptions);
  AdvanceTo(&f.prefix_queries, last_.prefix_cache_queries, stats.prefix_cache_queries);
  AdvanceTo(&f.prefix_hits, last_.prefix_cache_hits, stats.prefix_cache_hits);
  if (step_seconds >= 0) f.step_seconds.Observe(step_seconds);
  last_ = stats;
}

void Metrics::RecordFinished(const std::string& finish_reason) {
  prometheus::Counter* counter = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = finished_.find(finish_reason);
    if (it == finished_.end()) {
      it = finished_
               .emplace(finish_reason, &families_->finished.Add({{"finish_reason", finish_reason}}))
               .first;
    }
    counter = it->second;
  }
  counter->Increment();
}

std::string Metrics::Serialize() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

Status Metrics::WriteFile(const std::filesystem::path& path) const {
  const std::string text = Serialize();
  std::filesystem::path tmp = path;
  tmp += ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return UnavailableError("cannot write metrics file " + tmp.string());
    out << text;
    out.flush();
    if (!out) return UnavailableError("cannot write metrics file " + tmp.string());
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec)
    return UnavailableError("cannot rename " + tmp.string() + " to " + path.string() + ": " +
                            ec.message());
  return OkStatus();
}

}  // namespace uc::probe
