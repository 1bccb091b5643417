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

#include <optional>
#include <string_view>

#include "http/handler.h"
#include "http/metrics.h"

namespace idem::http {

class MetricsEndpoint final : public Handler {
 public:
  explicit MetricsEndpoint(Metrics& metrics) : metrics_(metrics) {}

  // GET (or HEAD) /metrics: the exposition text of Metrics::Render(). Never blocks
  // on I/O (the sections must not either).
  Reply Handle(const HttpRequest& request) override;
  // Never called: nothing here waits.
  Reply Poll(const WaitingClaim& waiting) override;
  // No target here takes a body: answered at once, before it is read.
  std::optional<Reply> BeforeBody(std::string_view target,
                                  std::string_view authorization) const override;
  Metrics& metrics() override { return metrics_; }

 private:
  Metrics& metrics_;
};

}  // namespace idem::http
