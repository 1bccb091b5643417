// The messaging chaos runs: consumer processes (chaos-consumer, the
// consumer runner of idem/messaging/runner.h) in one group read events from Kafka
// (librdkafka's mock cluster over TCP, in this process) or a Redis stream (on the
// redis-server of IDEM_TEST_REDIS_URL; the stream is private to the run) while a producer keeps
// adding events and the fault scheduler (driver.h ScheduleFaults, seeded) hits them:
//   kill consumer       SIGKILL mid-batch, a replacement starts after the hold:
//                       what it had not committed is redelivered
//   crash at failpoint  a consumer that dies at kafka.runner.after_effects_commit or
//                       after_offsets_commit on its Nth batch (IDEM_FAILPOINTS)
//   stall consumer      SIGSTOP past the session timeout / the claim idle time: its
//                       partitions move (its entries are claimed) while it holds a
//                       batch, which it finishes when SIGCONT comes
//   join and leave      an extra consumer joins, later leaves with SIGTERM: rebalances
//   cut redis conns     (streams) CLIENT KILL of every consumer's connection
//   broker down         (kafka) the mock broker down and up
//   commit errors       (kafka) the next OffsetCommits fail (COORDINATOR_LOAD_IN_PROGRESS)
//   forced rebalance    (kafka) the next Heartbeats answer REBALANCE_IN_PROGRESS
// Events are re-produced under the same event_id now and then (a producer retry),
// and some are poison (refused by the handler: dead-lettered). After the run the
// faults are healed, the group drains what is left, and the checker judges:
//   kEffectOnce   no event's effect happened twice (rows of chaos_effects, written
//                 in the batch's transaction; or the external effect file);
//   kNoneLost     every event's effect happened, and every poison event is in the
//                 dead-letter destination and has no effect;
//   kDrained      the group consumed to the end: Kafka's committed offsets reached
//                 every partition's end, nothing is pending on the stream.
//
// Thread safety: one run at a time per process.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "chaos/checker.h"

namespace idem::chaos {

inline constexpr std::string_view kEffectOnce = "each event's effect once";
inline constexpr std::string_view kNoneLost = "no event lost, poison dead-lettered";
inline constexpr std::string_view kDrained = "consumed to the end";

struct MessagingOptions {
  std::string transport;     // "kafka" or "streams"
  std::string work_dir;      // wiped and used for the store, the consumers' logs
  std::string consumer_bin;  // the chaos-consumer binary
  // The consumers' store; "" = sqlite://WORK_DIR/messaging.db (shared by the processes).
  std::string store_url;
  uint64_t seed = 1;
  std::chrono::milliseconds duration{20000};  // how long events are produced, faults injected
  std::chrono::milliseconds drain_timeout{90000};
  int consumers = 3;       // the group's size outside faults
  int partitions = 4;      // kafka
  int events_per_second = 100;
  double duplicate_probability = 0.05;  // an event produced again under its id
  double poison_probability = 0.01;
  int batch = 20;
  std::chrono::microseconds effect_delay{2000};  // per event: batches overlap the faults
  bool inject_faults = true;
  // The seeded bug: the effect goes to a file outside the batch's transaction.
  bool external_effect = false;
};

struct MessagingResult {
  uint64_t seed = 0;
  int64_t produced = 0;  // messages, re-produced ones included
  int64_t events = 0;    // distinct event ids
  int64_t poison = 0;    // of which poison
  int64_t effects = 0;   // effects recorded
  int64_t consumers_started = 0;
  // Consumers that exited by themselves other than at an armed failpoint ("c3 exited
  // with status 1"): not a property, but a consumer the harness did not expect to
  // lose (its stderr log is in the work dir).
  std::vector<std::string> unexpected_exits;
  std::map<std::string, int> faults;   // fault kind → times injected and healed
  std::vector<std::string> fault_log;  // "+1234ms kill consumer (hold 300ms)", in order
  std::chrono::milliseconds elapsed{0};
  Report report;  // kEffectOnce, kNoneLost, kDrained

  // "seed=S transport=T: produced, events, effects, faults by kind" and the table.
  std::string Summary() const;
};

// Runs one messaging chaos run (above). Returns kInvalidArgument for bad options,
// kUnavailable when the store, a consumer or Redis cannot be set up, and the error
// of a fault that could not be injected or healed (prefixed with the seed). A run
// that breaks a property is not an error: see MessagingResult::report.
absl::StatusOr<MessagingResult> RunMessaging(const MessagingOptions& options);

}  // namespace idem::chaos
