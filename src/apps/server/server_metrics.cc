#include "apps/server/server_metrics.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

namespace uc::server {

ServerMetrics::ServerMetrics(probe::Metrics* metrics) : metrics_(metrics) {
  http_ = &prometheus::BuildCounter()
               .Name("undercurrent_http_responses_total")
               .Help("HTTP responses sent, by route and status code")
               .Register(*metrics_->registry());
  connections_ = &prometheus::BuildGauge()
                      .Name("undercurrent_http_connections")
                      .Help("Open client connections")
                      .Register(*metrics_->registry())
                      .Add({});
}

void ServerMetrics::SetOpenConnections(int connections) {
  connections_->Set(static_cast<double>(connections));
}

void ServerMetrics::RecordHttpResponse(const std::string& route, int status) {
  // Family::Add is thread-safe and returns the existing series for known labels.
  http_->Add({{"route", route}, {"code", std::to_string(status)}}).Increment();
}

}  // namespace uc::server
