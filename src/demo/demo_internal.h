// Internal to the refund demo (refund_demo.cc, refund_kafka.cc): the child-process
// plumbing both transports share, and the Kafka transport's entry points. Not an
// API: include "demo/refund_demo.h".
//
// Thread safety: as refund_demo.h: whole-process helpers for main's thread.
#pragma once

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "demo/refund_demo.h"
#include "idem/store.h"
#include "refund/channel_client.h"
#include "refund/refund_operation.h"

namespace idem::refund::internal {

// The runner's lease: how long a SIGKILLed runner's operation stays blocked
// before its successor may take it. Longer than the channel timeout below (a step
// must finish inside it); short, because a killed runner's successor should not
// wait long for it.
inline constexpr absl::Duration kRunnerLease = absl::Milliseconds(200);
inline constexpr absl::Duration kChannelTimeout = absl::Milliseconds(150);
// A "timeout" fault at the channel answers this late: well past kChannelTimeout.
inline constexpr absl::Duration kChannelFaultDelay = absl::Milliseconds(400);
// --naive: a message is delivered at most this often, then dead-lettered.
inline constexpr int kNaiveMaxDeliveries = 10;

std::string Errno(std::string_view what);

struct Child {
  pid_t pid = -1;
  int stdout_fd = -1;  // our end of its stdout, when captured
  int events_fd = -1;  // our end of its failpoint reports
  int acks_fd = -1;    // our end of the verdicts
};

void CloseFd(int& fd);

// fork + exec of `exe args...`. With `capture_stdout` its stdout is a pipe to
// us; with `kill_pipes` it gets two more pipes, whose numbers are appended to
// its arguments as --events-fd N --acks-fd M. stderr is shared. The child dies
// with the demo (PR_SET_PDEATHSIG).
absl::StatusOr<Child> Spawn(const std::string& exe, std::vector<std::string> args,
                            bool capture_stdout, bool kill_pipes);

// Reads one '\n'-terminated line from `fd` (buffered in `buf`) within `timeout`
// (kDeadlineExceeded). std::nullopt at EOF.
absl::StatusOr<std::optional<std::string>> ReadLine(int fd, std::string& buf,
                                                    absl::Duration timeout);

// Waits for `pid`: its exit status, or 128 + the signal that killed it.
int WaitExit(pid_t pid);

// In a child: reports every `steps.*` and `kafka.*` failpoint on `events_fd` and
// waits for a byte on `acks_fd` (or the SIGKILL) before going on.
void ReportFailpointsToParent(int events_fd, int acks_fd);

// --naive's effect of one delivery under dedupe key `key`: the reversal at the
// channel, the ledger row and the notification in `tx`, with the injected faults.
absl::StatusOr<std::string> NaiveRefundEffect(const ChannelClient& channel, FaultInjector& faults,
                                              const std::string& key, const Order& order,
                                              Transaction& tx);

// --transport kafka (refund_kafka.cc): starts librdkafka's mock cluster in this
// process, produces the run's orders, and runs `idem demo refund-consumer`
// children in one consumer group until the group has committed every message:
// one SIGKILLed right after its first batch's effects (before the offset
// commit: a redelivery to its successor), others at random step failpoints at
// `--kill-runner`, and a second consumer that joins mid-run (a rebalance).
// `records` is the SQL store of the runner's message records (its own: the
// effects run in their own transactions on `store`). Errors: kUnavailable (the
// cluster or a child could not be started), kDeadlineExceeded, kInternal (a
// consumer exited on its own).
absl::Status RunOverKafka(const DemoOptions& options, const std::string& store,
                          const std::string& records, const std::string& channel_url,
                          const std::string& run_id, DemoReport& report);

// --naive over Kafka: "SUCCESS" for each order of the run with a ledger row
// (its message was handled), the others absent (missing in the audit).
absl::StatusOr<std::map<std::string, std::string>> NaiveStatuses(Store& store,
                                                                 const std::string& run_id);

}  // namespace idem::refund::internal
