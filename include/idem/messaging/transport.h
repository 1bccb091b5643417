// The seam between idem's consumer runner (runner.h) and a message transport: Kafka
// (KafkaTransport, kafka_transport.h) or Redis Streams (RedisStreamsTransport,
// redis_streams.h), or one of your own.
//
// A Transport delivers messages at least once. The runner polls a batch, runs each
// message's effect through the guard (the effects of one batch commit in one store
// transaction while each message stays individually idempotent), and only after
// that commit calls Commit() with the batch: Kafka commits the next offsets, Redis
// Streams XACKs the entries. A message whose key cannot be derived, or whose
// handler fails for good, goes to DeadLetter() with the reason, and is then
// committed with the rest, so it never blocks its partition and is never dropped
// silently.
//
// Thread safety: a Transport is used by one runner thread at a time; the listener
// is called on that thread, from inside Poll().
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace idem::messaging {

struct Message {
  std::string source;       // Kafka topic or Redis stream name
  int32_t partition = -1;   // Kafka partition; -1 for Redis Streams
  int64_t offset = -1;      // Kafka offset; -1 for Redis Streams
  std::string id;           // Redis Streams entry id ("1700000000000-0"); empty for Kafka
  std::string key;          // the transport's message key (Kafka key); may be empty
  std::string payload;
  std::vector<std::pair<std::string, std::string>> headers;  // Kafka headers / stream fields
  int64_t timestamp_ms = 0;  // broker/append time, 0 when unknown
  int64_t deliveries = 1;    // how many times this message was delivered (Streams); 1 if unknown

  // The first header named `name`, or nullptr.
  const std::string* Header(std::string_view name) const {
    for (const auto& [k, v] : headers) {
      if (k == name) return &v;
    }
    return nullptr;
  }
};

// What a rebalance (Kafka) or a claim of another consumer's pending entries (Redis
// Streams) tells the runner. `partitions` are "topic[partition]" strings.
struct Rebalance {
  enum class Kind { kAssigned, kRevoked, kLost };
  Kind kind;
  std::vector<std::string> partitions;
};

// Rebalances counted by kind: Count() on the transport's thread (the rebalance
// listener), the values read from any thread.
struct RebalanceCounters {
  std::atomic<int64_t> assigned{0}, revoked{0}, lost{0};

  void Count(Rebalance::Kind kind) {
    switch (kind) {
      case Rebalance::Kind::kAssigned:
        assigned.fetch_add(1, std::memory_order_relaxed);
        break;
      case Rebalance::Kind::kRevoked:
        revoked.fetch_add(1, std::memory_order_relaxed);
        break;
      case Rebalance::Kind::kLost:
        lost.fetch_add(1, std::memory_order_relaxed);
        break;
    }
  }
};

// "assigned", "revoked" or "lost", for logs.
inline std::string_view RebalanceKindName(Rebalance::Kind kind) {
  switch (kind) {
    case Rebalance::Kind::kAssigned:
      return "assigned";
    case Rebalance::Kind::kRevoked:
      return "revoked";
    case Rebalance::Kind::kLost:
      return "lost";
  }
  return "?";
}

class Transport {
 public:
  virtual ~Transport() = default;

  // Up to `max` messages, waiting at most `timeout` for the first. An empty batch
  // is not an error. kUnavailable: the broker/server cannot be reached (retry);
  // kFailedPrecondition: a fatal transport error (stop the runner).
  virtual absl::StatusOr<std::vector<Message>> Poll(size_t max,
                                                    std::chrono::milliseconds timeout) = 0;

  // Marks `done` as processed (after their effects committed). Synchronous: returns
  // once the broker/server acknowledged. kUnavailable: retry the same call.
  virtual absl::Status Commit(const std::vector<Message>& done) = 0;

  // Sends `message` to the dead-letter destination with `reason` (and the
  // original source/partition/offset/id) in its headers. Synchronous.
  virtual absl::Status DeadLetter(const Message& message, std::string_view reason) = 0;

  // Called on the runner thread, inside Poll(), for every assignment/revocation.
  // On kRevoked the runner must finish or abandon in-flight work before returning.
  using RebalanceListener = std::function<void(const Rebalance&)>;
  virtual void SetRebalanceListener(RebalanceListener listener) = 0;

  // "kafka" or "redis-streams", for logs and metrics labels.
  virtual std::string_view name() const = 0;
};

}  // namespace idem::messaging
