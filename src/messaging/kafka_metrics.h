// The Prometheus exposition text (version 0.0.4) of the consumer runner's and the
// bridge's counters (RunnerStats, BridgeStats), for a process that exports them:
// `idem bridge kafka --metrics-listen` adds RenderBridgeMetrics as a section of
// http::Metrics (served by http::MetricsEndpoint); a program running a Runner
// does the same with RenderRunnerMetrics. Every series is a counter and appears
// from the start at 0:
//
//   idem_bridge_rebalances_total{kind="assign|revoke|lost"}
//   idem_bridge_polled_total, idem_bridge_deliveries_total (2xx answers recorded),
//   idem_bridge_skipped_total (delivered before: not sent again),
//   idem_bridge_dead_letters_total, idem_bridge_attempts_total (HTTP requests sent),
//   idem_bridge_rounds_failed_total, idem_bridge_takeovers_total,
//   idem_bridge_commits_total, idem_bridge_commit_failures_total
//
//   idem_runner_rebalances_total{kind="assign|revoke|lost"}
//   idem_runner_polled_total, idem_runner_executed_total, idem_runner_replayed_total,
//   idem_runner_dead_letters_total, idem_runner_batches_total,
//   idem_runner_store_retries_total, idem_runner_commits_total,
//   idem_runner_commit_failures_total
//
// Thread safety: pure functions.
#pragma once

#include <string>

#include "idem/messaging/runner.h"
#include "messaging/bridge.h"

namespace idem::messaging {

std::string RenderBridgeMetrics(const BridgeStats& stats);
std::string RenderRunnerMetrics(const RunnerStats& stats);

}  // namespace idem::messaging
