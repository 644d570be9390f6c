// File: server_metrics.h
// -----------------------------------------------------------------------------
// ServerMetrics: the series behind GET /metrics (Prometheus text exposition format 0.0.4). The
// engine and probe series are probe::Metrics' (KV blocks in use and in total, running and
// waiting requests, tokens, steps, preemptions, finished requests by finish_reason, every
// extraction point and sink); the server adds HTTP responses by route and status code and its
// open connections.
//
// Thread-safety: every method is thread-safe.
#pragma once

#include <memory>
#include <string>

#include "probe/sinks/metrics.h"

namespace prometheus {
class Counter;
class Gauge;
template <typename T>
class Family;
}  // namespace prometheus

namespace uc::server {

class ServerMetrics {
 public:
  // `metrics` (not owned) must outlive this object.
  explicit ServerMetrics(probe::Metrics* metrics);

  probe::Metrics& metrics() { return *metrics_; }
  // When an HTTP response is sent (`route` is one of a fixed set of labels).
  void RecordHttpResponse(const std::string& route, int status);
  // The number of open client connections (set before each scrape).
  void SetOpenConnections(int connections);
  // The text exposition format.
  std::string Serialize() const { return metrics_->Serialize(); }

 private:
  probe::Metrics* const metrics_;
  prometheus::Family<prometheus::Counter>* http_ = nullptr;
  prometheus::Gauge* connections_ = nullptr;
};

}  // namespace uc::server
