// MetricsEndpoint: a Handler (handler.h) that serves only GET /metrics, for a
// process whose work is not HTTP (`idem bridge kafka --metrics-listen`): the same
// Server and the same Metrics as `idem serve`, with the process's own counters
// added as a Metrics section. Every other path is 404, another method 405.
//
//   http::Metrics metrics(http::BuildInfo{.version = ...});
//   metrics.AddSection([&] { return messaging::RenderBridgeMetrics(bridge.stats()); });
//   http::MetricsEndpoint endpoint(metrics);
//   http::Server server(endpoint, {.host = "127.0.0.1", .port = 9464});
//
// Thread safety: safe for concurrent use (Metrics is). `metrics` must outlive the
// endpoint.
#pragma once

#include <memory>

#include "http/server/handler.h"
#include "http/server/metrics.h"

namespace idem::http {

class MetricsEndpoint final : public Handler {
 public:
  explicit MetricsEndpoint(Metrics& metrics) : metrics_(metrics) {}

  // GET (or HEAD) /metrics: the exposition text of Metrics::Render(), answered on
  // the pool, which never blocks on I/O (the sections must not either). No target
  // here takes a body: a request with one is answered before it is read.
  std::unique_ptr<Call> Begin(HttpRequest request) override;
  Metrics& metrics() override { return metrics_; }

 private:
  Metrics& metrics_;
};

}  // namespace idem::http
