// MockKafka: librdkafka's mock cluster (rdkafka_mock.h) in the test process, on
// real TCP, for the `kafka` tests: a consumer in another process (SIGKILLed at a
// failpoint) reaches it like any broker. Produces test messages synchronously,
// reads whole topics back (the dead-letter topic), reads a group's committed
// offsets, and takes brokers down and up or injects request errors.
//
// What the 2.0.2 mock does not do (tests must not rely on it): hide aborted
// transactions from read_committed consumers, store the offsets sent with
// send_offsets_to_transaction, fence a second producer with the same
// transactional.id. Its group coordinator waits ~3 s before the first join.
//
// Header-only. Thread safety: not thread-safe, except that the cluster itself
// serves any number of clients.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "idem/messaging/transport.h"
#include "librdkafka/rdkafka.h"
#include "librdkafka/rdkafka_mock.h"

namespace idem::testing {

class MockKafka {
 public:
  explicit MockKafka(int brokers = 1) {
    char err[512];
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "log_level", "3", err, sizeof err);
    owner_ = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    cluster_ = rd_kafka_mock_cluster_new(owner_, brokers);
    bootstraps_ = rd_kafka_mock_cluster_bootstraps(cluster_);
    conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", bootstraps_.c_str(), err, sizeof err);
    rd_kafka_conf_set(conf, "linger.ms", "0", err, sizeof err);
    rd_kafka_conf_set(conf, "log_level", "3", err, sizeof err);
    producer_ = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
  }
  ~MockKafka() {
    rd_kafka_flush(producer_, 2000);
    rd_kafka_destroy(producer_);
    rd_kafka_mock_cluster_destroy(cluster_);
    rd_kafka_destroy(owner_);
  }
  MockKafka(const MockKafka&) = delete;
  MockKafka& operator=(const MockKafka&) = delete;

  const std::string& brokers() const { return bootstraps_; }
  rd_kafka_mock_cluster_t* cluster() { return cluster_; }

  void CreateTopic(const std::string& topic, int partitions) {
    ASSERT_EQ(rd_kafka_mock_topic_create(cluster_, topic.c_str(), partitions, 1),
              RD_KAFKA_RESP_ERR_NO_ERROR);
  }

  // Produces one message and waits until the broker has it.
  void Produce(const std::string& topic, int32_t partition, const std::string& key,
               const std::string& payload,
               const std::vector<std::pair<std::string, std::string>>& headers = {}) {
    rd_kafka_headers_t* h = rd_kafka_headers_new(headers.size());
    for (const auto& [k, v] : headers) {
      rd_kafka_header_add(h, k.c_str(), -1, v.data(), static_cast<ssize_t>(v.size()));
    }
    const rd_kafka_resp_err_t err = rd_kafka_producev(
        producer_, RD_KAFKA_V_TOPIC(topic.c_str()), RD_KAFKA_V_PARTITION(partition),
        RD_KAFKA_V_KEY(key.data(), key.size()),
        RD_KAFKA_V_VALUE(const_cast<char*>(payload.data()), payload.size()),
        RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_HEADERS(h), RD_KAFKA_V_END);
    ASSERT_EQ(err, RD_KAFKA_RESP_ERR_NO_ERROR) << rd_kafka_err2str(err);
    ASSERT_EQ(rd_kafka_flush(producer_, 10000), RD_KAFKA_RESP_ERR_NO_ERROR);
  }

  // Every message of `topic` (all of its `partitions`), read without a group until
  // `quiet` passes with nothing new, once at least `expected` messages are in (for
  // those, it waits up to `deadline`: a loaded machine may take longer than `quiet`
  // to connect and fetch the first one).
  std::vector<messaging::Message> ReadAll(
      const std::string& topic, int partitions, size_t expected = 0,
      std::chrono::milliseconds quiet = std::chrono::seconds(2),
      std::chrono::milliseconds deadline = std::chrono::seconds(60)) {
    char err[512];
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", bootstraps_.c_str(), err, sizeof err);
    rd_kafka_conf_set(conf, "group.id", "idem-test-reader", err, sizeof err);
    rd_kafka_conf_set(conf, "log_level", "3", err, sizeof err);
    rd_kafka_t* c = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
    rd_kafka_poll_set_consumer(c);
    rd_kafka_topic_partition_list_t* parts = rd_kafka_topic_partition_list_new(partitions);
    for (int p = 0; p < partitions; ++p) {
      rd_kafka_topic_partition_list_add(parts, topic.c_str(), p)->offset = RD_KAFKA_OFFSET_BEGINNING;
    }
    rd_kafka_assign(c, parts);
    rd_kafka_topic_partition_list_destroy(parts);
    std::vector<messaging::Message> out;
    const auto start = std::chrono::steady_clock::now();
    auto last = start;
    while ((out.size() < expected && std::chrono::steady_clock::now() - start < deadline) ||
           std::chrono::steady_clock::now() - last < quiet) {
      rd_kafka_message_t* m = rd_kafka_consumer_poll(c, 100);
      if (m == nullptr) continue;
      if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        messaging::Message msg;
        msg.source = topic;
        msg.partition = m->partition;
        msg.offset = m->offset;
        msg.payload.assign(static_cast<const char*>(m->payload), m->len);
        rd_kafka_headers_t* h = nullptr;
        if (rd_kafka_message_headers(m, &h) == RD_KAFKA_RESP_ERR_NO_ERROR) {
          const char* name;
          const void* value;
          size_t size;
          for (size_t i = 0; rd_kafka_header_get_all(h, i, &name, &value, &size) ==
                             RD_KAFKA_RESP_ERR_NO_ERROR;
               ++i) {
            msg.headers.emplace_back(name, std::string(static_cast<const char*>(value), size));
          }
        }
        out.push_back(std::move(msg));
        last = std::chrono::steady_clock::now();
      }
      rd_kafka_message_destroy(m);
    }
    rd_kafka_consumer_close(c);
    rd_kafka_destroy(c);
    return out;
  }

  // The committed offset of `group` on topic[partition]; -1001 (RD_KAFKA_OFFSET_INVALID)
  // when none.
  int64_t Committed(const std::string& group, const std::string& topic, int32_t partition) {
    char err[512];
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", bootstraps_.c_str(), err, sizeof err);
    rd_kafka_conf_set(conf, "group.id", group.c_str(), err, sizeof err);
    rd_kafka_conf_set(conf, "log_level", "3", err, sizeof err);
    rd_kafka_t* c = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
    rd_kafka_topic_partition_list_t* parts = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(parts, topic.c_str(), partition);
    int64_t offset = RD_KAFKA_OFFSET_INVALID;
    if (rd_kafka_committed(c, parts, 10000) == RD_KAFKA_RESP_ERR_NO_ERROR) {
      offset = parts->elems[0].offset;
    }
    rd_kafka_topic_partition_list_destroy(parts);
    rd_kafka_destroy(c);
    return offset;
  }

  void BrokerDown(int32_t id = 1) { rd_kafka_mock_broker_set_down(cluster_, id); }
  void BrokerUp(int32_t id = 1) { rd_kafka_mock_broker_set_up(cluster_, id); }

  // The next `count` requests of `api_key` (e.g. 8 = OffsetCommit) fail with `err`.
  void PushErrors(int16_t api_key, size_t count, rd_kafka_resp_err_t err) {
    std::vector<rd_kafka_resp_err_t> errs(count, err);
    rd_kafka_mock_push_request_errors_array(cluster_, api_key, count, errs.data());
  }

 private:
  rd_kafka_t* owner_ = nullptr;
  rd_kafka_mock_cluster_t* cluster_ = nullptr;
  std::string bootstraps_;
  rd_kafka_t* producer_ = nullptr;
};

// The consumer settings the mock needs for fast rebalances (see the header comment).
inline std::vector<std::pair<std::string, std::string>> FastGroupConfig() {
  return {{"session.timeout.ms", "3000"},
          {"heartbeat.interval.ms", "500"},
          {"log_level", "3"},
          {"topic.metadata.refresh.interval.ms", "1000"}};
}

}  // namespace idem::testing
