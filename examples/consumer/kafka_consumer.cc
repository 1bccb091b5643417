// A Kafka consumer against an installed idem::messaging: each message's effect is
// applied once, though Kafka delivers at least once.
//   kafka_consumer STORE_URL   (e.g. sqlite:///tmp/kafka_consumer.db)
//
// It starts librdkafka's mock cluster in this process (a stand-in for real brokers:
// a real consumer gives KafkaOptions::brokers its bootstrap servers instead) and
// produces four refund orders to the topic `refunds`, R-2 twice (a producer that
// retried), each with its order number in the header `event_id`. The runner
// (idem::messaging::Runner) consumes them: the effect, one ledger row, runs in the
// same store transaction as the message's idempotency record, so the second R-2 is
// a duplicate and applies nothing. A second consumer group then reads the whole
// topic again (a replay, as after an offset reset): every message is a duplicate.
//
// Prints one line per pass, then one `applied ORDER` line per ledger row (a double
// effect would show as two lines), and exits 0 when each order was applied exactly
// once; 1 on an error (one line on stderr). The library logs the group's
// rebalances on stdout too (spdlog's default logger).
#include <chrono>
#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "idem/idem.h"
#include "idem/messaging/kafka_transport.h"
#include "idem/messaging/runner.h"
#include "librdkafka/rdkafka.h"
#include "librdkafka/rdkafka_mock.h"

namespace {

constexpr char kTopic[] = "refunds";
// The orders produced, in order: R-2 twice.
const std::vector<std::string> kProduced = {"R-1", "R-2", "R-3", "R-2", "R-4"};

int Fail(const std::string& what) {
  std::fprintf(stderr, "kafka_consumer: %s\n", what.c_str());
  return 1;
}

// librdkafka's mock cluster with the topic, and a producer to it.
class MockCluster {
 public:
  bool Start(std::string* error) {
    char err[512];
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "log_level", "3", err, sizeof err);
    owner_ = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    if (owner_ == nullptr) return *error = err, false;
    cluster_ = rd_kafka_mock_cluster_new(owner_, 1);
    if (cluster_ == nullptr) return *error = "cannot start the mock cluster", false;
    brokers_ = rd_kafka_mock_cluster_bootstraps(cluster_);
    if (rd_kafka_mock_topic_create(cluster_, kTopic, 1, 1) != RD_KAFKA_RESP_ERR_NO_ERROR) {
      return *error = "cannot create the topic", false;
    }
    conf = rd_kafka_conf_new();
    if (rd_kafka_conf_set(conf, "bootstrap.servers", brokers_.c_str(), err, sizeof err) !=
            RD_KAFKA_CONF_OK ||
        rd_kafka_conf_set(conf, "log_level", "3", err, sizeof err) != RD_KAFKA_CONF_OK) {
      rd_kafka_conf_destroy(conf);
      return *error = err, false;
    }
    producer_ = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    if (producer_ == nullptr) return *error = err, false;
    return true;
  }

  // Produces one order (header event_id, a JSON payload) and waits for the broker.
  bool Produce(const std::string& order, std::string* error) {
    const std::string payload = "{\"order_no\":\"" + order + "\",\"amount\":\"12.50\"}";
    rd_kafka_headers_t* headers = rd_kafka_headers_new(1);
    rd_kafka_header_add(headers, "event_id", -1, order.data(), static_cast<ssize_t>(order.size()));
    rd_kafka_resp_err_t err = rd_kafka_producev(
        producer_, RD_KAFKA_V_TOPIC(kTopic), RD_KAFKA_V_KEY(order.data(), order.size()),
        RD_KAFKA_V_VALUE(const_cast<char*>(payload.data()), payload.size()),
        RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_HEADERS(headers), RD_KAFKA_V_END);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      rd_kafka_headers_destroy(headers);
    } else {
      err = rd_kafka_flush(producer_, 10000);
    }
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) return *error = rd_kafka_err2str(err), false;
    return true;
  }

  const std::string& brokers() const { return brokers_; }

  ~MockCluster() {
    if (producer_ != nullptr) rd_kafka_destroy(producer_);
    if (cluster_ != nullptr) rd_kafka_mock_cluster_destroy(cluster_);
    if (owner_ != nullptr) rd_kafka_destroy(owner_);
  }

 private:
  rd_kafka_t* owner_ = nullptr;
  rd_kafka_mock_cluster_t* cluster_ = nullptr;
  rd_kafka_t* producer_ = nullptr;
  std::string brokers_;
};

// The effect: one ledger row for the order, in the message's transaction.
absl::StatusOr<std::string> ApplyRefund(const idem::messaging::Message& message,
                                        idem::Transaction& tx) {
  const idem::Value params[] = {idem::Value(message.key), idem::Value(message.payload)};
  absl::StatusOr<int64_t> inserted =
      tx.Exec("INSERT INTO example_ledger (order_no, payload) VALUES (?, ?)", params);
  if (!inserted.ok()) return inserted.status();
  return std::string(R"({"refunded":true})");
}

// Consumes the topic as consumer group `group` until `expected` messages were
// polled (the mock cluster's coordinator takes a few seconds to form the group).
absl::StatusOr<idem::messaging::RunnerStats> Consume(const std::string& brokers,
                                                     const std::string& group, idem::Store& store,
                                                     int64_t expected) {
  absl::StatusOr<std::unique_ptr<idem::messaging::KafkaTransport>> transport =
      idem::messaging::KafkaTransport::Create(
          {.brokers = brokers, .group = group, .topics = {kTopic}});
  if (!transport.ok()) return transport.status();
  idem::messaging::RunnerOptions options;  // the key: the header event_id
  options.biz_type = "refund";
  absl::StatusOr<std::unique_ptr<idem::messaging::Runner>> runner =
      idem::messaging::Runner::Create(**transport, store, ApplyRefund, std::move(options));
  if (!runner.ok()) return runner.status();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while ((*runner)->stats().polled < expected) {
    if (std::chrono::steady_clock::now() > deadline) {
      return absl::DeadlineExceededError("group " + group +
                                         ": the messages did not arrive in 60 s");
    }
    absl::StatusOr<size_t> handled = (*runner)->RunOnce();
    if (!handled.ok() && !absl::IsUnavailable(handled.status())) return handled.status();
  }
  return (*runner)->stats();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: kafka_consumer STORE_URL\n");
    return 2;
  }
  absl::StatusOr<std::unique_ptr<idem::Store>> store = idem::OpenStore(argv[1]);
  if (!store.ok()) return Fail(std::string(store.status().message()));
  {
    absl::StatusOr<std::unique_ptr<idem::StoreTransaction>> tx = (*store)->Begin();
    if (!tx.ok()) return Fail(std::string(tx.status().message()));
    absl::StatusOr<int64_t> made = (*tx)->Exec(
        "CREATE TABLE IF NOT EXISTS example_ledger "
        "(order_no TEXT NOT NULL, payload TEXT NOT NULL)");
    if (!made.ok()) return Fail(std::string(made.status().message()));
    if (absl::Status s = (*tx)->Commit(); !s.ok()) return Fail(std::string(s.message()));
  }

  MockCluster kafka;
  std::string error;
  if (!kafka.Start(&error)) return Fail("mock cluster: " + error);
  for (const std::string& order : kProduced) {
    if (!kafka.Produce(order, &error)) return Fail("produce " + order + ": " + error);
  }

  const int64_t produced = static_cast<int64_t>(kProduced.size());
  for (const char* group : {"refunds", "refunds-replay"}) {
    absl::StatusOr<idem::messaging::RunnerStats> stats =
        Consume(kafka.brokers(), group, **store, produced);
    if (!stats.ok()) return Fail(std::string(stats.status().message()));
    std::printf("group %s: %lld messages, %lld applied, %lld duplicates\n", group,
                static_cast<long long>(stats->polled), static_cast<long long>(stats->executed),
                static_cast<long long>(stats->replayed));
  }

  absl::StatusOr<std::unique_ptr<idem::StoreTransaction>> tx = (*store)->Begin();
  if (!tx.ok()) return Fail(std::string(tx.status().message()));
  absl::StatusOr<idem::Rows> rows =
      (*tx)->Query("SELECT order_no FROM example_ledger ORDER BY order_no");
  if (!rows.ok()) return Fail(std::string(rows.status().message()));
  (*tx)->Rollback();
  for (const auto& row : rows->rows) std::printf("applied %s\n", row[0].as_text().c_str());
  // Each order once.
  const std::set<std::string> orders(kProduced.begin(), kProduced.end());
  return rows->rows.size() == orders.size() ? 0 : 1;
}
