// The consumer runner over Kafka (docs/messaging.md), on librdkafka's mock cluster over real
// TCP (testing/kafka_mock.h). Every scenario asserts no double effect (each
// payload has exactly one effects row) and no lost message (every payload has
// one, or is in the dead-letter topic), plus what the scenario is about.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "idem/idem.h"
#include "idem/messaging/kafka_transport.h"
#include "idem/messaging/runner.h"
#include "integration/kafka_effects.h"
#include "testing/idem_process.h"
#include "testing/kafka_mock.h"
#include "testing/temp_dir.h"
#include "testing/wait_until.h"

namespace idem::messaging {
namespace {

using ::idem::testing::EffectCounts;
using ::idem::testing::MockKafka;
using ::testing::HasSubstr;

std::string Payload(int i) { return "order-" + std::to_string(i); }

class KafkaRunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_url_ = "sqlite://" + dir_.file("app.db");
    auto store = OpenStore(store_url_);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    ASSERT_TRUE(testing::CreateEffectsTable(*store_).ok());
  }

  std::unique_ptr<KafkaTransport> Transport(const std::string& topic, const std::string& group) {
    auto t = KafkaTransport::Create({.brokers = kafka_.brokers(),
                                     .group = group,
                                     .topics = {topic},
                                     .consumer_config = testing::FastGroupConfig(),
                                     .rebalance_log = dir_.file("rebalances.log")});
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? *std::move(t) : nullptr;
  }

  std::unique_ptr<Runner> NewRunner(KafkaTransport& t, size_t batch,
                                    std::chrono::microseconds delay = {}) {
    RunnerOptions o;
    o.max_batch = batch;
    o.retry.initial_delay = absl::Milliseconds(20);
    o.retry.max_delay = absl::Milliseconds(200);
    auto r = Runner::Create(t, *store_, testing::EffectHandler(delay), std::move(o));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *std::move(r) : nullptr;
  }

  // RunOnce until `done()` holds (checked between rounds), or 60 s.
  static void RunUntil(Runner& r, const std::function<bool()>& done) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    bool finished = false;
    while (!(finished = done()) && std::chrono::steady_clock::now() < deadline) {
      absl::StatusOr<size_t> n = r.RunOnce();
      if (!n.ok()) {
        ASSERT_EQ(n.status().code(), absl::StatusCode::kUnavailable) << n.status();
      }
    }
    ASSERT_TRUE(finished) << "not done within 60 s";
  }

  void ProduceEvents(const std::string& topic, int n, int partitions = 1) {
    for (int i = 0; i < n; ++i) {
      kafka_.Produce(topic, i % partitions, "", Payload(i), {{"event_id", "E-" + std::to_string(i)}});
    }
  }

  void ExpectEachOnce(int n) {
    std::map<std::string, int> counts = EffectCounts(*store_);
    EXPECT_EQ(counts.size(), static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) EXPECT_EQ(counts[Payload(i)], 1) << Payload(i);
  }

  MockKafka kafka_;
  testing::TempDir dir_;
  std::string store_url_;
  std::unique_ptr<Store> store_;
};

TEST_F(KafkaRunnerTest, SameEventIdAtTwoOffsetsHasOneEffect) {
  kafka_.CreateTopic("orders", 1);
  kafka_.Produce("orders", 0, "", "order-a", {{"event_id", "E-a"}});
  kafka_.Produce("orders", 0, "", "order-b", {{"event_id", "E-b"}});
  kafka_.Produce("orders", 0, "", "order-a", {{"event_id", "E-a"}});  // produced twice
  kafka_.Produce("orders", 0, "", "order-c", {{"event_id", "E-c"}});
  auto t = Transport("orders", "g1");
  auto r = NewRunner(*t, 100);
  RunUntil(*r, [&] { return r->stats().polled >= 4; });
  EXPECT_EQ(r->stats().executed, 3);
  EXPECT_EQ(r->stats().replayed, 1);
  EXPECT_EQ(EffectCounts(*store_), (std::map<std::string, int>{
                                       {"order-a", 1}, {"order-b", 1}, {"order-c", 1}}));
  EXPECT_EQ(kafka_.Committed("g1", "orders", 0), 4);
  // The rebalance log has a line per assignment, starting with an RFC 3339 time.
  EXPECT_THAT(testing::ReadWholeFile(dir_.file("rebalances.log")),
              ::testing::MatchesRegex("[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z kafka rebalance "
                                      "assigned group=g1 partitions=orders\\[0\\]\n"));
  EXPECT_EQ(r->stats().assigned, 1);
}

TEST_F(KafkaRunnerTest, PoisonGoesToTheDeadLetterTopicAndThePartitionKeepsFlowing) {
  kafka_.CreateTopic("orders", 1);
  kafka_.CreateTopic("orders.dlq", 1);
  kafka_.Produce("orders", 0, "", Payload(0), {{"event_id", "E-0"}});
  kafka_.Produce("orders", 0, "", "no key here");                       // no event_id header
  kafka_.Produce("orders", 0, "", "poison pill", {{"event_id", "E-p"}});  // the handler refuses it
  kafka_.Produce("orders", 0, "", Payload(1), {{"event_id", "E-1"}});
  auto t = Transport("orders", "g1");
  auto r = NewRunner(*t, 100);
  // Until every message was handled (not merely polled: on a loaded machine a
  // missed heartbeat can rebalance the group and redeliver a batch, which polled
  // counts again).
  RunUntil(*r, [&] { return r->stats().executed >= 2 && r->stats().dead_lettered >= 2; });
  ExpectEachOnce(2);
  EXPECT_EQ(r->stats().dead_lettered, 2);
  EXPECT_EQ(kafka_.Committed("g1", "orders", 0), 4);

  std::vector<Message> dead = kafka_.ReadAll("orders.dlq", 1, /*expected=*/2);
  ASSERT_EQ(dead.size(), 2u);
  std::map<std::string, const Message*> by_payload;
  for (const Message& m : dead) by_payload[m.payload] = &m;
  ASSERT_TRUE(by_payload.count("no key here"));
  ASSERT_TRUE(by_payload.count("poison pill"));
  const Message& unkeyed = *by_payload["no key here"];
  EXPECT_THAT(*unkeyed.Header("idem-dlq-reason"), HasSubstr("no header 'event_id'"));
  EXPECT_EQ(*unkeyed.Header("idem-dlq-topic"), "orders");
  EXPECT_EQ(*unkeyed.Header("idem-dlq-partition"), "0");
  EXPECT_EQ(*unkeyed.Header("idem-dlq-offset"), "1");
  const Message& poison = *by_payload["poison pill"];
  EXPECT_THAT(*poison.Header("idem-dlq-reason"), HasSubstr("the payload is poison"));
  EXPECT_EQ(*poison.Header("idem-dlq-offset"), "2");
  EXPECT_EQ(*poison.Header("event_id"), "E-p");  // the original headers go along

  // Redelivered (a new group reads from the start): the cached failure is
  // dead-lettered again, never dropped, and the effects are replayed.
  auto t2 = Transport("orders", "g2");
  auto r2 = NewRunner(*t2, 100);
  RunUntil(*r2, [&] { return r2->stats().replayed >= 2 && r2->stats().dead_lettered >= 2; });
  EXPECT_EQ(r2->stats().executed, 0);
  EXPECT_EQ(r2->stats().replayed, 2);
  EXPECT_EQ(r2->stats().dead_lettered, 2);
  ExpectEachOnce(2);
}

// The consumer is SIGKILLed after its first batch's effects committed and before
// the offsets did: the batch is redelivered to the next consumer and replayed.
TEST_F(KafkaRunnerTest, KilledBeforeTheOffsetCommitIsRedeliveredAndReplayed) {
  kafka_.CreateTopic("orders", 1);
  ProduceEvents("orders", 20);
  const std::string bin = KAFKA_TEST_CONSUMER;
  auto run = [&](bool kill) -> std::pair<int, std::string> {
    const std::string out = dir_.file(kill ? "killed.out" : "resumed.out");
    const pid_t pid = fork();
    if (pid == 0) {
      if (kill) setenv("IDEM_FAILPOINTS", "kafka.runner.after_effects_commit=kill", 1);
      if (freopen(out.c_str(), "w", stdout) == nullptr) _exit(127);
      execl(bin.c_str(), bin.c_str(), kafka_.brokers().c_str(), "orders", "g1", store_url_.c_str(),
            "8", "1500", "40000", static_cast<char*>(nullptr));
      _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return {status, testing::ReadWholeFile(out)};
  };
  auto [killed, killed_out] = run(true);
  ASSERT_TRUE(WIFSIGNALED(killed) && WTERMSIG(killed) == SIGKILL) << killed;
  const std::map<std::string, int> after_kill = EffectCounts(*store_);
  ASSERT_GE(after_kill.size(), 1u);
  EXPECT_EQ(kafka_.Committed("g1", "orders", 0), RD_KAFKA_OFFSET_INVALID);

  auto [resumed, resumed_out] = run(false);
  ASSERT_TRUE(WIFEXITED(resumed) && WEXITSTATUS(resumed) == 0) << resumed;
  EXPECT_THAT(resumed_out, HasSubstr("\"replayed\":" + std::to_string(after_kill.size()) + ","));
  EXPECT_THAT(resumed_out,
              HasSubstr("\"executed\":" + std::to_string(20 - after_kill.size()) + ","));
  ExpectEachOnce(20);
  EXPECT_EQ(kafka_.Committed("g1", "orders", 0), 20);
}

// A second consumer joins the group while the first is in the middle of a batch:
// partitions move, the moved ones are re-read from their committed offsets, and
// nothing runs twice.
TEST_F(KafkaRunnerTest, ASecondConsumerJoiningMidBatchCausesNoDoubleEffect) {
  constexpr int kEvents = 240;
  kafka_.CreateTopic("orders", 4);
  ProduceEvents("orders", kEvents, 4);
  auto ta = Transport("orders", "g1");
  auto a = NewRunner(*ta, 40, std::chrono::milliseconds(3));
  std::unique_ptr<KafkaTransport> tb;
  std::unique_ptr<Runner> b;
  auto all_done = [&] { return EffectCounts(*store_).size() == static_cast<size_t>(kEvents); };
  std::atomic<bool> finished{false};
  std::thread first([&] {
    RunUntil(*a, [&] { return finished.load() || all_done(); });
  });
  ASSERT_TRUE(testing::WaitUntil([&] { return a->stats().executed >= 30; }))
      << "the first runner did not get going";
  tb = Transport("orders", "g1");
  b = NewRunner(*tb, 40, std::chrono::milliseconds(3));
  RunUntil(*b, [&] { return all_done(); });
  finished = true;
  first.join();
  ExpectEachOnce(kEvents);
  const RunnerStats sa = a->stats(), sb = b->stats();
  EXPECT_EQ(sa.executed + sb.executed, kEvents);
  EXPECT_GE(sa.revoked, 1);  // the rebalance happened while `a` ran
  EXPECT_GE(sb.assigned, 1);
  EXPECT_GT(sb.executed + sb.replayed, 0);
}

// The broker goes down and comes back during the run, and offset commits fail
// with injected errors: the run goes on and every effect happens once.
TEST_F(KafkaRunnerTest, BrokerDownAndUpAndCommitErrorsLoseNothingAndDoubleNothing) {
  constexpr int kEvents = 60;
  kafka_.CreateTopic("orders", 1);
  ProduceEvents("orders", kEvents);
  auto t = Transport("orders", "g1");
  auto r = NewRunner(*t, 5, std::chrono::milliseconds(10));
  // OffsetCommit (API key 8): the coordinator is "loading" for the first three.
  kafka_.PushErrors(8, 3, RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS);
  std::thread chaos([&] {
    testing::WaitUntil([&] { return r->stats().executed >= 15; });
    kafka_.BrokerDown();
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // the outage's length
    kafka_.BrokerUp();
  });
  RunUntil(*r, [&] { return EffectCounts(*store_).size() == static_cast<size_t>(kEvents); });
  chaos.join();
  // The last commits may still be behind (failed ones are covered by later ones).
  auto next_check = std::chrono::steady_clock::now();
  RunUntil(*r, [&] {
    if (std::chrono::steady_clock::now() < next_check) return false;
    next_check = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
    return kafka_.Committed("g1", "orders", 0) == kEvents;
  });
  ExpectEachOnce(kEvents);
  EXPECT_EQ(r->stats().executed, kEvents);
}

}  // namespace
}  // namespace idem::messaging
