// The Kafka→Kafka exactly-once mode on the mock cluster. What the 2.0.2 mock can
// show: outputs and commits of transactions, abort-and-rewind on an abortable
// error (the batch is processed again in a new transaction), dead letters inside
// the transaction. What it cannot (docs/messaging.md): it does not hide aborted
// transactions from read_committed readers (so an aborted attempt's outputs are
// visible here), does not store offsets sent with send_offsets_to_transaction, and
// does not fence a second producer with the same transactional.id — those are
// verified on a real cluster only.
#include <chrono>
#include <map>
#include <set>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "idem/messaging/transactional.h"
#include "testing/kafka_mock.h"

namespace idem::messaging {
namespace {

using ::testing::HasSubstr;

class KafkaTransactionalTest : public ::testing::Test {
 protected:
  std::unique_ptr<TransactionalProcessor> Make() {
    TransactionalOptions o;
    o.input = {.brokers = kafka_.brokers(),
               .group = "eos",
               .topics = {"in"},
               .consumer_config = testing::FastGroupConfig()};
    o.transactional_id = "eos-0";
    o.producer_config = {{"log_level", "3"}};
    o.max_batch = 50;
    auto p = TransactionalProcessor::Create(
        std::move(o), [](const Message& m) -> absl::StatusOr<std::vector<OutputMessage>> {
          if (m.payload.rfind("poison", 0) == 0) return absl::InvalidArgumentError("unparseable");
          return std::vector<OutputMessage>{
              {.topic = "out", .partition = 0, .key = m.key, .payload = "processed:" + m.payload}};
        });
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? *std::move(p) : nullptr;
  }
  void RunUntil(TransactionalProcessor& p, int64_t committed_messages) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    int64_t done = 0;
    while (done < committed_messages && std::chrono::steady_clock::now() < deadline) {
      absl::StatusOr<size_t> n = p.RunOnce();
      ASSERT_TRUE(n.ok() || n.status().code() == absl::StatusCode::kUnavailable) << n.status();
      if (n.ok()) done += static_cast<int64_t>(*n);
    }
    ASSERT_EQ(done, committed_messages);
  }

  testing::MockKafka kafka_;
};

TEST_F(KafkaTransactionalTest, OutputsAndOffsetsCommitInOneTransactionPerBatch) {
  kafka_.CreateTopic("in", 1);
  kafka_.CreateTopic("out", 1);
  kafka_.CreateTopic("in.dlq", 1);
  for (int i = 0; i < 10; ++i) kafka_.Produce("in", 0, "k", "m" + std::to_string(i));
  kafka_.Produce("in", 0, "k", "poison");
  auto p = Make();
  RunUntil(*p, 11);
  const TransactionalStats s = p->stats();
  EXPECT_EQ(s.produced, 11);  // 10 outputs + 1 dead letter
  EXPECT_EQ(s.dead_lettered, 1);
  EXPECT_GE(s.committed, 1);
  EXPECT_EQ(s.aborted, 0);
  std::vector<Message> out = kafka_.ReadAll("out", 1, /*expected=*/10);
  ASSERT_EQ(out.size(), 10u);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(out[i].payload, "processed:m" + std::to_string(i));
  std::vector<Message> dead = kafka_.ReadAll("in.dlq", 1, /*expected=*/1);
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_THAT(*dead[0].Header("idem-dlq-reason"), HasSubstr("unparseable"));
}

// AddPartitionsToTxn (API key 24) refused with an authorization error: the
// transaction must be aborted (librdkafka flags it txn_requires_abort), the input
// rewound, and the batch processed again in a new transaction.
TEST_F(KafkaTransactionalTest, AbortableErrorAbortsRewindsAndRedoesTheBatch) {
  kafka_.CreateTopic("in", 1);
  kafka_.CreateTopic("out", 1);
  for (int i = 0; i < 5; ++i) kafka_.Produce("in", 0, "k", "m" + std::to_string(i));
  auto p = Make();
  kafka_.PushErrors(24, 1, RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED);
  RunUntil(*p, 5);
  const TransactionalStats s = p->stats();
  EXPECT_EQ(s.aborted, 1);
  EXPECT_GT(s.polled, 5);  // the aborted batch was read again after the rewind
  // Every input has its output (the mock also shows the aborted attempt's).
  std::set<std::string> payloads;
  for (const Message& m : kafka_.ReadAll("out", 1)) payloads.insert(m.payload);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(payloads.count("processed:m" + std::to_string(i))) << i;
}

}  // namespace
}  // namespace idem::messaging
