// TransactionalProcessor: the Kafka→Kafka exactly-once mode, following
// librdkafka's transactional contract (rdkafka.h "Transactional producer API",
// INTRODUCTION.md "Transactional Producer"): each poll batch's outputs and its
// input offsets (rd_kafka_send_offsets_to_transaction, with the consumer's group
// metadata) go in ONE Kafka transaction; the input is read with
// isolation.level=read_committed. Errors, as the contract sorts them:
//   retriable → the same call again;
//   abortable (rd_kafka_error_txn_requires_abort) → rd_kafka_abort_transaction,
//     rewind the input to the batch's first offsets, and the next RunOnce()
//     processes the batch again in a new transaction;
//   fatal, fenced (another producer with the same transactional.id) or anything
//     else → stop: kFailedPrecondition, and the processor must be destroyed.
// A message the transform refuses for good goes to the dead-letter topic inside
// the same transaction (with the reason in headers), so it too is written once.
//
// Use it when both sides are Kafka: no database is involved, so the guard is not
// needed. With a database effect, use Runner (runner.h).
//
//   auto p = TransactionalProcessor::Create(options, transform);
//   (*p)->Run();
//
// Thread safety: Run/RunOnce on one thread; Stop() and stats() from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "idem/messaging/kafka_transport.h"

namespace idem::messaging {

struct OutputMessage {
  std::string topic;
  int32_t partition = -1;  // -1: the partitioner chooses (by key)
  std::string key;
  std::string payload;
  std::vector<std::pair<std::string, std::string>> headers;
};

// What one input message becomes. An error is final for that message: it is
// dead-lettered (in the transaction) with the error as the reason.
using Transform = std::function<absl::StatusOr<std::vector<OutputMessage>>(const Message&)>;

struct TransactionalOptions {
  KafkaOptions input;  // read_committed is forced on
  // transactional.id: stable for this instance across restarts (a restarted
  // instance fences its zombie predecessor). One per consumer instance (brokers ≥
  // 2.5, KIP-447), e.g. "<group>-<instance>".
  std::string transactional_id;
  std::vector<std::pair<std::string, std::string>> producer_config;
  size_t max_batch = 500;
  std::chrono::milliseconds poll_timeout{200};
  std::chrono::milliseconds call_timeout{30000};  // each transactional API call
};

struct TransactionalStats {
  int64_t polled = 0;
  int64_t produced = 0;
  int64_t dead_lettered = 0;
  int64_t committed = 0;  // transactions
  int64_t aborted = 0;    // transactions aborted and rewound
  int64_t retried = 0;    // retriable errors of the transactional calls
};

class TransactionalProcessor {
 public:
  // Creates the input consumer and the transactional producer and calls
  // rd_kafka_init_transactions (which fences an older producer with the same id).
  // kInvalidArgument for bad options; kFailedPrecondition for a fatal error;
  // kUnavailable when the coordinator cannot be reached in time.
  static absl::StatusOr<std::unique_ptr<TransactionalProcessor>> Create(
      TransactionalOptions options, Transform transform);
  ~TransactionalProcessor();

  // One batch in one transaction. Returns the messages committed (0 after an
  // empty poll or an abort, which rewinds). kFailedPrecondition: fatal (stop and
  // destroy); kUnavailable: the poll failed (retry).
  absl::StatusOr<size_t> RunOnce();
  // RunOnce until Stop() (OK) or a fatal error (returned).
  absl::Status Run();
  void Stop() { stop_.store(true, std::memory_order_relaxed); }
  TransactionalStats stats() const;

  // The transport the processor reads its input from.
  KafkaTransport& input() { return *input_; }

 private:
  TransactionalProcessor(TransactionalOptions options, Transform transform)
      : options_(std::move(options)), transform_(std::move(transform)) {}
  enum class Next { kCommitted, kAbort, kFatal };
  // Produces the batch's outputs, sends its offsets and commits; `fatal` gets
  // the reason when it answers kFatal.
  Next Transact(const std::vector<Message>& batch, absl::Status* fatal);
  absl::Status AbortAndRewind(const std::vector<Message>& batch);

  TransactionalOptions options_;
  Transform transform_;
  std::unique_ptr<KafkaTransport> input_;
  struct rd_kafka_s* producer_ = nullptr;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> polled_{0}, produced_{0}, dead_lettered_{0}, committed_{0}, aborted_{0},
      retried_{0};
};

}  // namespace idem::messaging
