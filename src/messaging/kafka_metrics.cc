#include "messaging/kafka_metrics.h"

#include <cstdint>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "core/absl_compat.h"

namespace idem::messaging {
namespace {

struct Series {
  std::string_view name;  // after the prefix, before _total
  std::string_view help;
  int64_t value;
};

void AppendCounter(std::string* out, std::string_view prefix, const Series& s) {
  const std::string name = absl::StrCat(AV(prefix), "_", AV(s.name), "_total");
  absl::StrAppend(out, "# HELP ", name, " ", AV(s.help), "\n# TYPE ", name, " counter\n", name,
                  " ", s.value, "\n");
}

void AppendRebalances(std::string* out, std::string_view prefix, int64_t assigned,
                      int64_t revoked, int64_t lost) {
  const std::string name = absl::StrCat(AV(prefix), "_rebalances_total");
  absl::StrAppend(out, "# HELP ", name,
                  " Consumer-group rebalances seen: partitions assigned, revoked, lost.\n",
                  "# TYPE ", name, " counter\n");
  absl::StrAppend(out, name, "{kind=\"assign\"} ", assigned, "\n", name, "{kind=\"revoke\"} ",
                  revoked, "\n", name, "{kind=\"lost\"} ", lost, "\n");
}

}  // namespace

std::string RenderBridgeMetrics(const BridgeStats& s) {
  constexpr std::string_view kPrefix = "idem_bridge";
  std::string out;
  AppendRebalances(&out, kPrefix, s.assigned, s.revoked, s.lost);
  const Series series[] = {
      {"polled", "Messages received (redeliveries included).", s.polled},
      {"deliveries", "Messages delivered: a 2xx answer recorded.", s.delivered},
      {"skipped", "Messages delivered before (their record says so): not sent again.",
       s.skipped},
      {"dead_letters", "Messages sent to the dead-letter topic.", s.dead_lettered},
      {"attempts", "HTTP requests sent to the target.", s.attempts},
      {"rounds_failed", "Rounds of attempts that all failed retryably.", s.rounds_failed},
      {"takeovers", "Deliveries taken over from an expired lease (a killed bridge's).",
       s.takeovers},
      {"commits", "Offset commits acknowledged.", s.commits},
      {"commit_failures", "Offset commits that failed (a redelivery is skipped).",
       s.commit_failures},
  };
  for (const Series& one : series) AppendCounter(&out, kPrefix, one);
  return out;
}

std::string RenderRunnerMetrics(const RunnerStats& s) {
  constexpr std::string_view kPrefix = "idem_runner";
  std::string out;
  AppendRebalances(&out, kPrefix, s.assigned, s.revoked, s.lost);
  const Series series[] = {
      {"polled", "Messages received (redeliveries included).", s.polled},
      {"executed", "Effects that ran (first arrivals).", s.executed},
      {"replayed", "Duplicates answered from their record: the effect did not run again.",
       s.replayed},
      {"dead_letters", "Messages sent to the dead-letter destination.", s.dead_lettered},
      {"batches", "Store transactions committed.", s.batches},
      {"store_retries", "Batch attempts rolled back for a retryable store error.",
       s.store_retries},
      {"commits", "Transport commits acknowledged.", s.commits},
      {"commit_failures", "Transport commits that failed (a redelivery is replayed).",
       s.commit_failures},
  };
  for (const Series& one : series) AppendCounter(&out, kPrefix, one);
  return out;
}

}  // namespace idem::messaging
