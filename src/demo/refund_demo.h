// The refund demo (`idem demo refund`): the refund incident of docs/steps.md,
// replayed with faults and crashes, with idem's step machine — or, with --naive,
// with the incident's offset-keyed message dedupe for contrast.
//
// RunRefundDemo starts the fake payment channel as a separate process
// (`idem demo channel`), then the step runner as a child process (`idem demo
// refund-runner`). The runner stops at every step failpoint and waits for the
// demo's verdict over a pipe; with probability --kill-runner per step the demo
// SIGKILLs it there and starts a new one, which resumes what the old one left.
// At the end the demo audits the channel, the ledger and the inbox.
//
// Thread safety: RunRefundDemo and RunRefundRunner are whole-process entry points
// (they fork, wait for children and install a failpoint hook); call them from
// main only.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "refund/refund_operation.h"

namespace idem::refund {

struct DemoOptions {
  int orders = 100;         // 1..100000
  double fault_rate = 0.1;  // 0..1: channel timeouts/lost answers/busy, ledger timeouts,
                            // notification failures
  double kill_runner = 0;   // 0..1: probability of a SIGKILL per step
  uint64_t seed = 1;
  std::string store;   // empty: a fresh SQLite file in a temporary directory
  bool naive = false;  // the incident's offset-keyed dedupe instead of the step machine
  // "direct": the runner takes the orders from the demo; "kafka": through
  // librdkafka's mock cluster, consumed by `idem demo refund-consumer` children
  // (redeliveries, a rebalance, kills), keyed by the business key — or, with
  // naive, by (topic, partition, offset) + consumer id.
  std::string transport = "direct";
  std::string self_exe = "/proc/self/exe";      // idem-demo (`idem demo`), for the child processes
  absl::Duration deadline = absl::Minutes(10);  // give up (an error) after this
};

// Checks the options: kInvalidArgument naming the bad one.
absl::Status ValidateDemoOptions(const DemoOptions& options);

struct DemoReport {
  int64_t orders = 0;
  int64_t channel_reversals = 0;   // orders with a net (not cancelled) reversal
  int64_t channel_duplicates = 0;  // extra net reversals
  int64_t ledger_rows = 0;
  int64_t ledger_duplicates = 0;
  int64_t notifications = 0;
  int64_t notification_duplicates = 0;
  int64_t missing = 0;      // orders done without all three effects, or not done
  int64_t compensated = 0;  // operations COMPENSATED
  int64_t manual = 0;       // operations COMPENSATION_REQUIRED
  int64_t runner_kills = 0;
  int64_t rebalance_joins = 0;  // --transport kafka: consumers that joined mid-run
  // Context for the summary.
  int64_t channel_calls = 0;  // reversals the channel made (cancelled included)
  int64_t channel_cancelled = 0;
  int64_t channel_timeouts = 0;  // injected at the channel
  int64_t channel_lost = 0;
  int64_t channel_busy = 0;
  int64_t deliveries = 0;  // --naive: message deliveries in all
  std::string store;       // where the journal and tables were
  double seconds = 0;
};

// Runs the demo. Errors: kInvalidArgument (options), kUnavailable (the store or
// a child process could not be started), kDeadlineExceeded (not finished within
// options.deadline), kInternal (a runner failed for another reason than a kill).
absl::StatusOr<DemoReport> RunRefundDemo(const DemoOptions& options);

// The readable summary table (several lines, ending in a newline).
std::string FormatReport(const DemoOptions& options, const DemoReport& report);

// The --json line: {"orders":…,"channel_reversals":…,…,"runner_kills":…}.
std::string ReportJson(const DemoReport& report);

// True when the report shows no duplicate and nothing missing (what the step
// machine promises whatever the faults and kills).
bool ReportIsClean(const DemoReport& report);

// The child: `idem demo refund-runner`. Runs the refund of orders 1..orders of
// run `run_id` until every one is final. When events_fd/acks_fd are >= 0 it
// reports every step failpoint on events_fd and waits for a byte on acks_fd.
struct RunnerOptions {
  std::string store;
  std::string channel_url;
  std::string run_id;
  int orders = 0;
  double fault_rate = 0;
  uint64_t seed = 1;
  int events_fd = -1;
  int acks_fd = -1;
  absl::Duration deadline = absl::Minutes(10);
};
absl::Status RunRefundRunner(const RunnerOptions& options);

// The child of --transport kafka: `idem demo refund-consumer`. A consumer of
// `topic` in `group` on `brokers` until SIGKILLed/SIGTERMed: with naive false the
// idem Runner (idem/messaging/runner.h) keyed by `{order_no}:{action}`, its message
// records in `records`, each order's refund run as a StepRunner operation on
// `store`; with naive true the incident's consumer, a Guard on `store` keyed by
// (topic, partition, offset) + `consumer_id`. Failpoints go to events_fd/acks_fd
// as RunnerOptions' do.
struct ConsumerOptions {
  std::string brokers;
  std::string group;
  std::string topic;
  std::string consumer_id;
  std::string store;
  std::string records;
  std::string channel_url;
  double fault_rate = 0;
  uint64_t seed = 1;
  bool naive = false;
  int events_fd = -1;
  int acks_fd = -1;
};
absl::Status RunRefundConsumer(const ConsumerOptions& options);

// The order of number `i` (1-based) in run `run_id`, with its amount.
Order DemoOrder(const std::string& run_id, int i);

}  // namespace idem::refund
