// Runner: the idempotent at-least-once consumer over any Transport
// (transport.h: Kafka, Redis Streams). Process, then commit:
//
//   1. poll a batch;
//   2. derive each message's key (MessageKey; never the partition/offset);
//   3. run each message's effect through the Guard in transactional mode, all of
//      the batch in ONE store transaction, each message under its own claim and
//      savepoint: a redelivered or re-produced event is
//      kReplayed and its effect does not run again;
//   4. commit that transaction; then dead-letter the messages that could not be
//      keyed or whose effect failed for good (with the reason); then commit the
//      batch on the transport (Kafka: the next offsets; Streams: XACK).
//
// A crash anywhere leaves either nothing of the batch (redelivered, run again) or
// all of its effects and records (redelivered, replayed). A retryable store error
// rolls the whole batch back and runs it again after a backoff (the retry
// policy), until it works or Stop() is called (then the batch is abandoned
// uncommitted, and redelivered to whoever owns its partitions next).
//
//   auto runner = Runner::Create(*transport, *store, handler, options);
//   (*runner)->Run();   // until Stop() or a fatal transport error
//
// Thread safety: Run/RunOnce on one thread at a time; Stop() and stats() from any
// thread (Stop is async-signal-safe). `transport`, `store` and `options.clock`
// must outlive the Runner.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "idem/clock.h"
#include "idem/guard.h"
#include "idem/messaging/message_key.h"
#include "idem/messaging/transport.h"
#include "idem/retry.h"
#include "idem/store.h"

namespace idem::messaging {

// The effect of one message, in the batch's transaction (`tx` is the same one as
// the message's dedupe record). Returns the result to store (replayed verbatim to
// a duplicate), or an error: retryable (kUnavailable, kAborted, ...) rolls the
// batch back and retries it; any other is final: the message's writes are undone,
// the failure is cached, and the message goes to the dead-letter destination.
using MessageHandler = std::function<absl::StatusOr<std::string>(const Message&, Transaction& tx)>;

// The first SQL statement of a message's effect, known from the message alone
// (e.g. the one INSERT of a ledger row). An error is the message's final failure
// (dead-lettered) unless it is retryable.
using MessageStatement = std::function<absl::StatusOr<Statement>(const Message&)>;

struct RunnerOptions {
  MessageKey key;
  // When set, each first arrival's effect begins with first_statement(message), run
  // in the batch's transaction before the handler (which then does the rest, if
  // anything, and returns the result): a batch sends the first statements of all
  // its first arrivals together (the Guard's batch claim; one round trip per 100 on
  // PostgreSQL) instead of one round trip each. Duplicates run neither.
  MessageStatement first_statement;
  std::string tenant = "default";
  std::string biz_type = "message";
  size_t max_batch = 500;
  std::chrono::milliseconds poll_timeout{200};
  // true: one store transaction and one transport commit per poll batch. false:
  // one of each per message (for comparison: bench/consume.sh).
  bool batched = true;
  // Checks the payload against the first one seen under the key: the same key with
  // another payload is kFingerprintMismatch and dead-lettered.
  bool fingerprint_payload = true;
  // Backoff between attempts of a batch whose store transaction failed retryably,
  // and the attempts of one transport commit.
  RetryPolicy retry;
  const Clock* clock = Clock::Real();  // not owned
  Random* random = Random::Default();  // not owned
};

struct RunnerStats {
  int64_t polled = 0;         // messages received (redeliveries included)
  int64_t executed = 0;       // effects that ran (first arrivals)
  int64_t replayed = 0;       // duplicates answered from their record
  int64_t dead_lettered = 0;  // sent to the dead-letter destination
  int64_t batches = 0;        // store transactions committed
  int64_t store_retries = 0;  // batch attempts rolled back for a retryable error
  int64_t commits = 0;        // transport commits acknowledged
  int64_t commit_failures = 0;
  int64_t assigned = 0;       // rebalances: assignments, revocations, losses
  int64_t revoked = 0;
  int64_t lost = 0;
};

class Runner {
 public:
  // kFailedPrecondition when `store` runs no SQL (the effects share its
  // transaction); kInvalidArgument for bad options (max_batch 0, a bad tenant or
  // biz_type, an invalid retry policy). Sets the transport's rebalance listener.
  static absl::StatusOr<std::unique_ptr<Runner>> Create(Transport& transport, Store& store,
                                                        MessageHandler handler,
                                                        RunnerOptions options);

  // One round: polls up to max_batch messages and processes and commits them.
  // Returns how many messages it handled (0 after an empty poll). Errors:
  // kFailedPrecondition for a fatal transport error (stop); kUnavailable when the
  // transport could not be polled (retry); kCancelled when Stop() was called while
  // the batch waited for the store or the transport (the batch was abandoned
  // uncommitted). Blocks.
  absl::StatusOr<size_t> RunOnce();

  // RunOnce until Stop() or a fatal error; retries kUnavailable polls with the
  // backoff. Returns OK after Stop(), else the fatal error. Blocks.
  absl::Status Run();

  void Stop() { stop_.store(true, std::memory_order_relaxed); }
  bool stopping() const { return stop_.load(std::memory_order_relaxed); }

  RunnerStats stats() const;

 private:
  Runner(Transport& transport, Store& store, MessageHandler handler, RunnerOptions options);
  struct DeadLetterItem {
    size_t index;
    std::string reason;
  };
  // Processes `messages` in one store transaction, then dead-letters and commits
  // them on the transport.
  absl::Status ProcessChunk(absl::Span<const Message> messages);
  // One attempt at the chunk's store transaction; fills `dead`. With `confine`
  // false (the fast path, the Guard's batch claim: no savepoints, the batch's claims and
  // results sent together) it gives up with kAborted when a message fails.
  absl::Status TryChunk(absl::Span<const Message> messages,
                        const std::vector<absl::StatusOr<std::string>>& keys, bool confine,
                        std::vector<DeadLetterItem>* dead, RunnerStats* counted);
  absl::Status Account(size_t i, const Message& m, const std::string& key,
                       const absl::StatusOr<Result>& r, std::vector<DeadLetterItem>* dead,
                       RunnerStats* counted);
  // Runs `fn` until it succeeds, with the backoff between attempts, while it
  // fails with kUnavailable; gives up after the policy's attempts when `bounded`,
  // and on Stop() (kCancelled).
  absl::Status Retry(const char* what, bool bounded, const std::function<absl::Status()>& fn);
  void OnRebalance(const Rebalance& rebalance);

  Transport& transport_;
  Store& store_;
  Guard guard_;
  MessageHandler handler_;
  RunnerOptions options_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> polled_{0}, executed_{0}, replayed_{0}, dead_lettered_{0}, batches_{0},
      store_retries_{0}, commits_{0}, commit_failures_{0};
  RebalanceCounters rebalances_;
};

}  // namespace idem::messaging
