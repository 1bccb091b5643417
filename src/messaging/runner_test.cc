// The runner over a fake Transport on SQLite: one store transaction per batch,
// each message idempotent inside it, process-then-commit, and what happens on
// retryable store errors, failing dead letters and failing commits.
#include "idem/messaging/runner.h"

#include <deque>
#include <map>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "idem/idem.h"
#include "messaging/bridge.h"
#include "testing/temp_dir.h"

namespace idem::messaging {
namespace {

class FakeTransport : public Transport {
 public:
  absl::StatusOr<std::vector<Message>> Poll(size_t max, std::chrono::milliseconds) override {
    std::vector<Message> out;
    while (!queue.empty() && out.size() < max) {
      out.push_back(queue.front());
      queue.pop_front();
    }
    return out;
  }
  absl::Status Commit(const std::vector<Message>& done) override {
    if (commit_failures > 0) {
      --commit_failures;
      return absl::UnavailableError("commit failed");
    }
    committed.push_back(done.size());
    return absl::OkStatus();
  }
  absl::Status DeadLetter(const Message& m, std::string_view reason) override {
    if (dead_letter_failures > 0) {
      --dead_letter_failures;
      return absl::UnavailableError("dlq down");
    }
    dead.emplace_back(m.payload, std::string(reason));
    return absl::OkStatus();
  }
  void SetRebalanceListener(RebalanceListener) override {}
  std::string_view name() const override { return "fake"; }

  void Add(std::string event_id, std::string payload) {
    Message m;
    m.source = "t";
    m.partition = 0;
    m.offset = next_offset++;
    m.payload = std::move(payload);
    if (!event_id.empty()) m.headers = {{"event_id", std::move(event_id)}};
    queue.push_back(std::move(m));
  }

  std::deque<Message> queue;
  int64_t next_offset = 0;
  int commit_failures = 0;
  int dead_letter_failures = 0;
  std::vector<size_t> committed;
  std::vector<std::pair<std::string, std::string>> dead;
};

class RunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = OpenStore("sqlite://" + dir_.file("app.db"));
    ASSERT_TRUE(s.ok());
    store_ = *std::move(s);
    auto tx = *store_->Begin();
    ASSERT_TRUE(tx->Exec("CREATE TABLE effects (payload TEXT NOT NULL)").ok());
    ASSERT_TRUE(tx->Commit().ok());
  }

  std::unique_ptr<Runner> Make(bool batched = true, MessageStatement first = nullptr) {
    RunnerOptions o;
    o.batched = batched;
    // With a first statement, that is the effect's INSERT; the handler only answers.
    const bool inserts = first == nullptr;
    o.first_statement = std::move(first);
    o.retry.initial_delay = absl::Milliseconds(1);
    o.retry.max_delay = absl::Milliseconds(2);
    auto r = Runner::Create(
        transport_, *store_,
        [this, inserts](const Message& m, Transaction& tx) -> absl::StatusOr<std::string> {
          ++handler_calls_;
          if (transient_failures_ > 0 && m.payload == "flaky") {
            --transient_failures_;
            return absl::UnavailableError("flaky effect");
          }
          if (m.payload == "bad") return absl::FailedPreconditionError("bad order");
          if (!inserts) return std::string("done:") + m.payload;
          const Value p[] = {Value(m.payload)};
          auto n = tx.Exec("INSERT INTO effects (payload) VALUES (?)", p);
          if (!n.ok()) return n.status();
          return std::string("done:") + m.payload;
        },
        std::move(o));
    EXPECT_TRUE(r.ok()) << r.status();
    return *std::move(r);
  }

  std::map<std::string, int64_t> Effects() {
    auto tx = *store_->Begin();
    auto rows = tx->Query("SELECT payload, COUNT(*) FROM effects GROUP BY payload");
    std::map<std::string, int64_t> out;
    for (const auto& row : rows->rows) out[row[0].as_text()] = row[1].as_int();
    return out;
  }

  testing::TempDir dir_;
  std::unique_ptr<Store> store_;
  FakeTransport transport_;
  int handler_calls_ = 0;
  int transient_failures_ = 0;
};

TEST_F(RunnerTest, OneBatchOneTransactionEachMessageOnce) {
  transport_.Add("E1", "a");
  transport_.Add("E2", "b");
  transport_.Add("E1", "a");  // the same event again, in the same batch
  transport_.Add("E3", "c");
  auto r = Make();
  EXPECT_EQ(*r->RunOnce(), 4u);
  EXPECT_EQ(Effects(), (std::map<std::string, int64_t>{{"a", 1}, {"b", 1}, {"c", 1}}));
  EXPECT_EQ(r->stats().batches, 1);
  EXPECT_EQ(r->stats().executed, 3);
  EXPECT_EQ(r->stats().replayed, 1);
  EXPECT_EQ(transport_.committed, std::vector<size_t>{4});

  // Redelivered as a whole: replayed, nothing runs.
  transport_.Add("E1", "a");
  transport_.Add("E2", "b");
  handler_calls_ = 0;
  EXPECT_EQ(*r->RunOnce(), 2u);
  EXPECT_EQ(handler_calls_, 0);
  EXPECT_EQ(r->stats().replayed, 3);
}

TEST_F(RunnerTest, PerMessageModeCommitsEachMessage) {
  for (int i = 0; i < 5; ++i) transport_.Add("E" + std::to_string(i), std::to_string(i));
  auto r = Make(/*batched=*/false);
  EXPECT_EQ(*r->RunOnce(), 5u);
  EXPECT_EQ(r->stats().batches, 5);
  EXPECT_EQ(transport_.committed, std::vector<size_t>(5, 1));
  EXPECT_EQ(Effects().size(), 5u);
}

TEST_F(RunnerTest, RetryableErrorRollsTheWholeBatchBackAndRunsItAgain) {
  transport_.Add("E1", "a");
  transport_.Add("E2", "flaky");
  transport_.Add("E3", "c");
  transient_failures_ = 2;
  auto r = Make();
  EXPECT_EQ(*r->RunOnce(), 3u);
  EXPECT_EQ(Effects(), (std::map<std::string, int64_t>{{"a", 1}, {"c", 1}, {"flaky", 1}}));
  // The first failure leaves the savepoint-free fast path (redone at once with
  // savepoints, no backoff); the second is a retry of the batch.
  EXPECT_EQ(r->stats().store_retries, 1);
  EXPECT_EQ(r->stats().batches, 1);
  EXPECT_EQ(r->stats().executed, 3);
}

TEST_F(RunnerTest, FinalFailureIsCachedDeadLetteredAndTheRestCommits) {
  transport_.Add("E1", "a");
  transport_.Add("E2", "bad");
  transport_.Add("", "unkeyed");
  transport_.Add("E3", "c");
  transport_.dead_letter_failures = 2;  // retried until it is dead-lettered
  auto r = Make();
  EXPECT_EQ(*r->RunOnce(), 4u);
  EXPECT_EQ(Effects(), (std::map<std::string, int64_t>{{"a", 1}, {"c", 1}}));
  ASSERT_EQ(transport_.dead.size(), 2u);
  EXPECT_EQ(transport_.dead[0].first, "bad");
  EXPECT_THAT(transport_.dead[0].second, ::testing::HasSubstr("bad order"));
  EXPECT_EQ(transport_.dead[1].first, "unkeyed");
  EXPECT_EQ(transport_.committed, std::vector<size_t>{4});
  // Its failure is cached: a redelivery does not run the handler, and goes to the
  // dead-letter destination again.
  transport_.Add("E2", "bad");
  handler_calls_ = 0;
  EXPECT_EQ(*r->RunOnce(), 1u);
  EXPECT_EQ(handler_calls_, 0);
  ASSERT_EQ(transport_.dead.size(), 3u);
  EXPECT_THAT(transport_.dead[2].second, ::testing::HasSubstr("cached failure"));
}

TEST_F(RunnerTest, FingerprintMismatchIsDeadLettered) {
  transport_.Add("E1", "a");
  transport_.Add("E1", "another payload");
  auto r = Make();
  EXPECT_EQ(*r->RunOnce(), 2u);
  ASSERT_EQ(transport_.dead.size(), 1u);
  EXPECT_THAT(transport_.dead[0].second, ::testing::HasSubstr("fingerprint_mismatch"));
}

TEST_F(RunnerTest, FailingCommitIsRetriedThenCountedNotFatal) {
  transport_.Add("E1", "a");
  transport_.commit_failures = 100;
  auto r = Make();
  EXPECT_EQ(*r->RunOnce(), 1u);
  EXPECT_EQ(r->stats().commit_failures, 1);
  EXPECT_EQ(Effects().size(), 1u);
  transport_.commit_failures = 1;
  transport_.Add("E2", "b");
  EXPECT_EQ(*r->RunOnce(), 1u);
  EXPECT_EQ(r->stats().commits, 1);
}

// The effect as a first statement: a batch sends those of its first arrivals
// together; duplicates run nothing; one that fails is confined to its message on
// the rerun with savepoints, cached and dead-lettered.
TEST_F(RunnerTest, FirstStatementsRunOncePerEventAndAFailingOneIsDeadLettered) {
  transport_.Add("E1", "a");
  transport_.Add("E2", "b");
  transport_.Add("E1", "a");
  transport_.Add("E3", "no statement");
  transport_.Add("E4", "bad sql");
  transport_.Add("E5", "c");
  auto r = Make(true, [](const Message& m) -> absl::StatusOr<Statement> {
    if (m.payload == "no statement") return absl::InvalidArgumentError("unparseable payload");
    if (m.payload == "bad sql") return Statement{"INSERT INTO effects (payload) VALUES (NULL)", {}};
    return Statement{"INSERT INTO effects (payload) VALUES (?)", {Value(m.payload)}};
  });
  EXPECT_EQ(*r->RunOnce(), 6u);
  EXPECT_EQ(Effects(), (std::map<std::string, int64_t>{{"a", 1}, {"b", 1}, {"c", 1}}));
  ASSERT_EQ(transport_.dead.size(), 2u);
  EXPECT_EQ(transport_.dead[0].first, "no statement");
  EXPECT_THAT(transport_.dead[0].second, ::testing::HasSubstr("unparseable payload"));
  EXPECT_EQ(transport_.dead[1].first, "bad sql");
  EXPECT_EQ(r->stats().executed, 3);
  EXPECT_EQ(r->stats().replayed, 1);
  EXPECT_EQ(transport_.committed, std::vector<size_t>{6});

  // Redelivered: neither the statements nor the handler run again.
  transport_.Add("E1", "a");
  transport_.Add("E5", "c");
  handler_calls_ = 0;
  EXPECT_EQ(*r->RunOnce(), 2u);
  EXPECT_EQ(handler_calls_, 0);
  EXPECT_EQ(r->stats().replayed, 3);
  EXPECT_EQ(Effects().size(), 3u);
}

TEST_F(RunnerTest, RefusesAStoreWithoutSql) {
  auto memory = OpenStore("memory://");
  auto r = Runner::Create(transport_, **memory,
                          [](const Message&, Transaction&) { return std::string(); }, {});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
}

// The bridge (bridge.h) over the same fake transport: a message whose key could not
// be sent as an Idempotency-Key header is dead-lettered with the reason, counted and
// committed past, never delivered (nor lost); a request the deliverer refuses with a
// final error is dead-lettered too, not retried forever.
class BridgeTest : public RunnerTest {
 protected:
  std::unique_ptr<Bridge> MakeBridge(std::function<absl::Status(std::string_view)> refuse = {}) {
    BridgeOptions o;
    o.retry.initial_delay = absl::Milliseconds(1);
    o.retry.max_delay = absl::Milliseconds(2);
    auto b = Bridge::Create(
        transport_, *store_,
        [this, refuse](const Message& m, std::string_view key) -> absl::StatusOr<HttpAnswer> {
          if (refuse) IDEM_RETURN_IF_ERROR(refuse(key));
          sent_.emplace_back(key, m.payload);
          return HttpAnswer{.status = 200, .body = "{}"};
        },
        std::move(o));
    EXPECT_TRUE(b.ok()) << b.status();
    return *std::move(b);
  }
  std::vector<std::pair<std::string, std::string>> sent_;  // (key, payload)
};

TEST_F(BridgeTest, KeyThatCannotBeAHeaderIsDeadLetteredNotSent) {
  transport_.Add("E1", "a");
  transport_.Add("INJ1\r\nAuthorization: Bearer attacker", "injected");
  transport_.Add("E2 ", "trailing space");
  transport_.Add(std::string(256, 'K'), "long");
  transport_.Add("E3", "c");
  auto b = MakeBridge();
  EXPECT_EQ(*b->RunOnce(), 5u);
  EXPECT_EQ(sent_, (std::vector<std::pair<std::string, std::string>>{{"E1", "a"}, {"E3", "c"}}));
  ASSERT_EQ(transport_.dead.size(), 3u);
  EXPECT_EQ(transport_.dead[0].first, "injected");
  EXPECT_THAT(transport_.dead[0].second,
              ::testing::HasSubstr("the key from header:event_id is refused: key holds the "
                                   "control character \\r at byte 4"));
  EXPECT_EQ(transport_.dead[1].first, "trailing space");
  EXPECT_THAT(transport_.dead[1].second, ::testing::HasSubstr("ends with a space"));
  EXPECT_EQ(transport_.dead[2].first, "long");
  EXPECT_THAT(transport_.dead[2].second, ::testing::HasSubstr("256 bytes, over the limit of 255"));
  EXPECT_EQ(b->stats().dead_lettered, 3);
  EXPECT_EQ(b->stats().delivered, 2);
  EXPECT_EQ(b->stats().attempts, 2);
  EXPECT_EQ(transport_.committed, std::vector<size_t>{5});
}

TEST_F(BridgeTest, RequestTheDelivererRefusesIsDeadLetteredNotRetried) {
  transport_.Add("E1", "a");
  transport_.Add("E2", "b");
  auto b = MakeBridge([](std::string_view key) {
    return key == "E1" ? absl::InvalidArgumentError("not sent to the upstream: refused")
                       : absl::OkStatus();
  });
  EXPECT_EQ(*b->RunOnce(), 2u);
  EXPECT_EQ(sent_, (std::vector<std::pair<std::string, std::string>>{{"E2", "b"}}));
  ASSERT_EQ(transport_.dead.size(), 1u);
  EXPECT_EQ(transport_.dead[0].first, "a");
  EXPECT_THAT(transport_.dead[0].second,
              ::testing::HasSubstr("not sent: not sent to the upstream: refused"));
  EXPECT_EQ(b->stats().attempts, 2);
  EXPECT_EQ(b->stats().rounds_failed, 0);
}

}  // namespace
}  // namespace idem::messaging
