// File: sink.h
// -----------------------------------------------------------------------------
// Sinks receive what probes say, as JSON records in Undercurrent v0.1's format (inventory
// §5.1), one per signal or result:
//   {"kind": "signal" | "result", "request_id", "extraction_point_name",
//    "timestamp" (when the record was built, seconds since the Unix epoch), "payload"}
// Signal payload: ProbeSignal::ToJson(); result payload: ProbeResult::ToJson(). Activation
// values never reach a sink.
//
// What the probing session writes: every signal of an async point (in routing order, from the
// worker that ran the probe), every FLAG/ABORT signal and fallback of an inline point, a
// circuit-breaker trip, and one result per (request, point) — inline points included — after
// the request's queues drained.
//
// Sink implementations here: MemorySink (below), NdjsonFileSink (ndjson_file_sink.h),
// WebhookSink (webhook_sink.h).
//
// Thread-safety: Write may be called from several threads at once; implementations must be
// thread-safe, must not block for long (no network round trip on the caller's thread) and must
// never throw — a failing sink never blocks or kills generation; it counts what it lost.
#pragma once

#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"
#include "probe/probes/probe.h"

namespace uc::probe {

class Sink {
 public:
  virtual ~Sink() = default;
  // Takes one record (the format above). Never throws.
  virtual void Write(const nlohmann::json& record) = 0;
  // Delivers or persists everything accepted so far, waiting at most `timeout_seconds`
  // (negative: no limit), and stops taking records. Idempotent. Not-OK when records could not
  // be delivered in time (they were counted).
  virtual Status Close(double timeout_seconds) { return OkStatus(); }
  // Short name for metrics and logs: "memory", "file", "webhook".
  virtual std::string name() const = 0;
};

// The record of one signal.
nlohmann::json SignalRecord(const std::string& request_id, const std::string& point,
                            const ProbeSignal& signal);
// The record of one result.
nlohmann::json ResultRecord(const ProbeResult& result);

// Keeps every record in memory, for embedders and tests.
class MemorySink : public Sink {
 public:
  void Write(const nlohmann::json& record) override;
  std::string name() const override { return "memory"; }
  // A copy of the records so far, in the order written.
  std::vector<nlohmann::json> records() const;
  size_t size() const;

 private:
  mutable std::mutex mu_;
  std::vector<nlohmann::json> records_;
};

// Writes every record to several sinks.
void WriteAll(const std::vector<std::shared_ptr<Sink>>& sinks, const nlohmann::json& record);

}  // namespace uc::probe
