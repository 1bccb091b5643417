// Bridge: Kafka (any Transport) → an HTTP endpoint, once per event
// (`idem bridge kafka`). Each message is sent with an Idempotency-Key derived from
// the message itself (MessageKey: the same on every redelivery, so the target can
// dedupe too), and each delivery is recorded in the store in lease mode:
//
//   claim the key → kReplayed: delivered before, not sent again (skipped)
//                 → kAcquired: send, retrying with the retry policy;
//                   2xx → Complete (the answer is stored), commit;
//                   final 4xx, or a request the deliverer refuses with a
//                   final error (kInvalidArgument) → Fail (cached), dead-letter, commit;
//                   attempts used up on 5xx/timeouts → Fail(retryable) (the key is
//                   released), back off, claim again: the message is never
//                   committed past until it was delivered or dead-lettered
//                 → kInProgress: another bridge holds a live lease: wait for it.
//
// A bridge killed mid-delivery leaves a PROCESSING record; its lease expires and
// the next claim takes it over and sends again with the same key. Offsets are
// committed after the batch (on Stop(), the delivered prefix of it).
//
// Thread safety: as Runner. `transport`, `store`, the deliverer's captures and
// `options.clock` must outlive the Bridge.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "idem/clock.h"
#include "idem/guard.h"
#include "idem/messaging/message_key.h"
#include "idem/messaging/transport.h"
#include "idem/retry.h"
#include "idem/store.h"

namespace idem::messaging {

struct HttpAnswer {
  int status = 0;
  std::string body;
};

// Sends `message` to the target with the header `Idempotency-Key: idempotency_key`.
// Returns the answer (any status); an error means no usable answer (kUnavailable,
// kDeadlineExceeded: retried). Called on the bridge's thread.
using Deliverer =
    std::function<absl::StatusOr<HttpAnswer>(const Message& message, std::string_view key)>;

struct BridgeOptions {
  MessageKey key;
  std::string tenant = "default";
  std::string biz_type = "bridge";
  size_t max_batch = 100;
  std::chrono::milliseconds poll_timeout{200};
  RetryPolicy retry;  // one round of attempts per claim
  // The claim's lease: longer than one round of attempts (the CLI checks it).
  absl::Duration lease = absl::Seconds(60);
  const Clock* clock = Clock::Real();  // not owned
  Random* random = Random::Default();  // not owned
};

struct BridgeStats {
  int64_t polled = 0;
  int64_t delivered = 0;      // 2xx answers recorded
  int64_t skipped = 0;        // already delivered (kReplayed): not sent again
  int64_t dead_lettered = 0;  // final 4xx, no usable key (MessageKey::Derive), or a key the
                              // store or the deliverer refuses
  int64_t attempts = 0;       // HTTP requests sent
  int64_t rounds_failed = 0;  // rounds whose attempts all failed retryably
  int64_t takeovers = 0;      // claims of an expired lease (a killed bridge's)
  int64_t commits = 0;
  int64_t commit_failures = 0;
  int64_t rebalances = 0;  // assigned + revoked + lost
  int64_t assigned = 0;    // partition assignments
  int64_t revoked = 0;     // revocations (a cooperative leave, a rebalance)
  int64_t lost = 0;        // partitions lost (session timed out, fenced)
};

class Bridge {
 public:
  // kInvalidArgument for bad options (retry policy, tenant, biz_type, lease).
  static absl::StatusOr<std::unique_ptr<Bridge>> Create(Transport& transport, Store& store,
                                                        Deliverer deliver, BridgeOptions options);

  // One poll, its messages delivered (or dead-lettered) in order, then committed.
  // Returns the messages handled. Errors: kFailedPrecondition (a fatal transport
  // error), kUnavailable (poll failed: retry), kCancelled (Stop() during the
  // batch: its delivered prefix was committed, the rest will be redelivered).
  absl::StatusOr<size_t> RunOnce();

  // RunOnce until Stop(); OK then, else the fatal error.
  absl::Status Run();

  void Stop() { stop_.store(true, std::memory_order_relaxed); }
  bool stopping() const { return stop_.load(std::memory_order_relaxed); }
  BridgeStats stats() const;

 private:
  Bridge(Transport& transport, Store& store, Deliverer deliver, BridgeOptions options);
  // Delivers one message, or dead-letters it; kCancelled on Stop().
  absl::Status DeliverOne(const Message& message);
  absl::Status SendDeadLetter(const Message& message, std::string_view reason);
  // One round of attempts to deliver `message` under `key` (the claim held): OK on a
  // 2xx, kFailedPrecondition on a final answer (in `answer`), else why the round failed.
  absl::Status SendRound(const Message& message, const std::string& key, Retrier& retrier,
                         HttpAnswer* answer);
  // Ends the claim (`token`) after a round that ended in `sent`: the status DeliverOne
  // returns, or nullopt when the round failed retryably and the key was released.
  std::optional<absl::Status> SettleRound(const Message& message, const Request& request,
                                          int64_t token, const absl::Status& sent,
                                          const HttpAnswer& answer);
  // Runs `record` (ending a claim) until it is not retryable, kAborted or Stop().
  absl::Status RetryRecording(const std::function<absl::Status()>& record);
  // Sleeps for `d` in short steps, returning early on Stop().
  void Pause(absl::Duration d);

  Transport& transport_;
  Guard guard_;
  Deliverer deliver_;
  BridgeOptions options_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> polled_{0}, delivered_{0}, skipped_{0}, dead_lettered_{0}, attempts_{0},
      rounds_failed_{0}, takeovers_{0}, commits_{0}, commit_failures_{0};
  RebalanceCounters rebalances_;
};

}  // namespace idem::messaging
