#include "messaging/kafka_metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace idem::messaging {
namespace {

using ::testing::HasSubstr;

TEST(KafkaMetricsTest, BridgeCountersAreCountersWithTheirValues) {
  const std::string text = RenderBridgeMetrics({.polled = 7,
                                                .delivered = 4,
                                                .skipped = 1,
                                                .dead_lettered = 2,
                                                .attempts = 9,
                                                .rounds_failed = 3,
                                                .takeovers = 1,
                                                .commits = 5,
                                                .commit_failures = 6,
                                                .rebalances = 4,
                                                .assigned = 2,
                                                .revoked = 1,
                                                .lost = 1});
  EXPECT_THAT(text, HasSubstr("# TYPE idem_bridge_rebalances_total counter\n"
                              "idem_bridge_rebalances_total{kind=\"assign\"} 2\n"
                              "idem_bridge_rebalances_total{kind=\"revoke\"} 1\n"
                              "idem_bridge_rebalances_total{kind=\"lost\"} 1\n"));
  for (const char* line :
       {"idem_bridge_polled_total 7\n", "idem_bridge_deliveries_total 4\n",
        "idem_bridge_skipped_total 1\n", "idem_bridge_dead_letters_total 2\n",
        "idem_bridge_attempts_total 9\n", "idem_bridge_rounds_failed_total 3\n",
        "idem_bridge_takeovers_total 1\n", "idem_bridge_commits_total 5\n",
        "idem_bridge_commit_failures_total 6\n",
        "# TYPE idem_bridge_deliveries_total counter\n"}) {
    EXPECT_THAT(text, HasSubstr(line));
  }
}

TEST(KafkaMetricsTest, RunnerCountersStartAtZero) {
  const std::string text = RenderRunnerMetrics({});
  for (const char* line :
       {"idem_runner_rebalances_total{kind=\"assign\"} 0\n", "idem_runner_polled_total 0\n",
        "idem_runner_executed_total 0\n", "idem_runner_replayed_total 0\n",
        "idem_runner_dead_letters_total 0\n", "idem_runner_batches_total 0\n",
        "idem_runner_store_retries_total 0\n", "idem_runner_commits_total 0\n",
        "idem_runner_commit_failures_total 0\n"}) {
    EXPECT_THAT(text, HasSubstr(line));
  }
}

}  // namespace
}  // namespace idem::messaging
