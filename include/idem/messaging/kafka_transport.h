// KafkaTransport: the Transport (transport.h) over librdkafka. A consumer in a
// group with enable.auto.commit=false and enable.auto.offset.store=false (the
// runner commits the next offsets, synchronously, after the effects committed),
// a rebalance callback that logs every assignment/revocation with a timestamp and
// tells the runner, and an idempotent producer for the dead-letter topic (the
// reason and the original topic/partition/offset in headers).
//
//   auto t = KafkaTransport::Create({.brokers = "127.0.0.1:9092", .group = "refunds",
//                                    .topics = {"orders"}});
//
// Thread safety: as Transport: one runner thread at a time. The rebalance log and
// callbacks run on that thread, inside Poll().
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "idem/messaging/transport.h"

typedef struct rd_kafka_s rd_kafka_t;
typedef struct rd_kafka_topic_partition_list_s rd_kafka_topic_partition_list_t;

namespace idem::messaging {

struct KafkaCallbacks;

struct KafkaOptions {
  std::string brokers;              // bootstrap.servers
  std::string group;                // group.id
  std::vector<std::string> topics;  // subscribed
  // Where DeadLetter() sends; "" → "<first topic>.dlq".
  std::string dead_letter_topic;
  // Extra librdkafka properties for the consumer ("session.timeout.ms", "3000"),
  // applied after idem's; enable.auto.commit cannot be turned back on.
  std::vector<std::pair<std::string, std::string>> consumer_config;
  // Extra librdkafka properties for the dead-letter producer.
  std::vector<std::pair<std::string, std::string>> producer_config;
  // isolation.level=read_committed (the Kafka→Kafka exactly-once mode's input).
  bool read_committed = false;
  // When set, every assignment/revocation is also appended to this file as one
  // line starting with its RFC 3339 UTC time (for `idem diagnose rebalance`).
  std::string rebalance_log;
  std::chrono::milliseconds dead_letter_timeout{30000};
};

class KafkaTransport final : public Transport {
 public:
  // Creates the consumer (subscribed) and the dead-letter producer. Connects
  // lazily. kInvalidArgument for a bad option or librdkafka property.
  static absl::StatusOr<std::unique_ptr<KafkaTransport>> Create(KafkaOptions options);
  ~KafkaTransport() override;

  absl::StatusOr<std::vector<Message>> Poll(size_t max, std::chrono::milliseconds timeout) override;
  // Commits, per partition, the offset after the last message of `done`, for the
  // partitions still assigned. kAborted when the group generation moved on.
  absl::Status Commit(const std::vector<Message>& done) override;
  absl::Status DeadLetter(const Message& message, std::string_view reason) override;
  void SetRebalanceListener(RebalanceListener listener) override { listener_ = std::move(listener); }
  std::string_view name() const override { return "kafka"; }

  // Where DeadLetter() sends.
  const std::string& dead_letter_topic() const { return options_.dead_letter_topic; }

 private:
  friend class TransactionalProcessor;
  friend struct KafkaCallbacks;  // librdkafka's callbacks (kafka_transport.cc)

  explicit KafkaTransport(KafkaOptions options) : options_(std::move(options)) {}
  void LogRebalance(std::string_view what, const std::vector<std::string>& partitions);

  // For the transactional mode: the consumer handle, and a seek of each partition
  // of `batch` back to the batch's first offset there, so the next Poll() returns
  // the batch again (abort-and-rewind). Partitions no longer assigned are skipped.
  // kUnavailable when a seek failed.
  rd_kafka_t* consumer() const { return consumer_; }
  absl::Status Rewind(const std::vector<Message>& batch);

  // Called from librdkafka's rebalance callback (on the Poll thread).
  void HandleRebalance(int err, rd_kafka_topic_partition_list_t* partitions);

  KafkaOptions options_;
  rd_kafka_t* consumer_ = nullptr;
  rd_kafka_t* producer_ = nullptr;
  RebalanceListener listener_;
  std::set<std::pair<std::string, int32_t>> assigned_;
  std::vector<Message>* collecting_ = nullptr;  // Poll's batch while it is being filled

  // Dead-letter deliveries in flight, by the sequence number given to librdkafka as
  // the message's opaque; the delivery callback (on the DeadLetter thread, inside
  // rd_kafka_flush) fills in the result.
  struct Delivery {
    bool done = false;
    int err = 0;
  };
  void Delivered(uintptr_t seq, int err);
  std::map<uintptr_t, Delivery> deliveries_;
  uintptr_t next_delivery_ = 1;
};

}  // namespace idem::messaging
