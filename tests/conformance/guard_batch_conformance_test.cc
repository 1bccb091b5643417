// RunIn (core/guard_batch.h: a consumer's batch: many keys in one caller-owned transaction,
// each individually idempotent) against every SQL backend: PostgreSQL aborts a
// transaction at its first failed statement, so a failing message must be confined
// by its savepoint there as on SQLite and MySQL.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "conformance/store_factory.h"
#include "core/guard_batch.h"
#include "idem/idem.h"
#include "store/backend.h"
#include "testing/status_matchers.h"
#include "testing/temp_dir.h"

namespace idem {
namespace {

using ::idem::testing::StatusIs;

class GuardBatchTest : public ::testing::TestWithParam<testing::Backend> {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<Store>> store =
        testing::OpenBackendStore(GetParam(), GetParam().url(dir_.path()));
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    guard_ = std::make_unique<Guard>(*store_);
    std::unique_ptr<StoreTransaction> tx = *store_->Begin();
    ASSERT_OK(tx->Exec("CREATE TABLE ledger (order_no VARCHAR(64) PRIMARY KEY)"));
    ASSERT_OK(tx->Commit());
  }

  // Inserts each of `orders` into the ledger, then answers `result`.
  Handler Inserting(std::vector<std::string> orders, std::string result = "{}") {
    return [this, orders, result](Transaction& tx) -> absl::StatusOr<std::string> {
      ++runs_;
      for (const std::string& o : orders) {
        IDEM_RETURN_IF_ERROR(tx.Exec("INSERT INTO ledger (order_no) VALUES (?)", {Value(o)}));
      }
      return result;
    };
  }

  std::vector<std::string> Ledger() {
    std::unique_ptr<StoreTransaction> tx = *store_->Begin();
    absl::StatusOr<Rows> rows = tx->Query("SELECT order_no FROM ledger ORDER BY order_no");
    EXPECT_TRUE(rows.ok()) << rows.status();
    std::vector<std::string> out;
    if (rows.ok()) {
      for (const auto& r : rows->rows) out.push_back(r[0].as_text());
    }
    return out;
  }

  static Request Req(std::string key) { return Request{.biz_type = "event", .key = std::move(key)}; }

  testing::TempDir dir_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Guard> guard_;
  int runs_ = 0;
};

TEST_P(GuardBatchTest, KeysOfOneTransactionCommitTogetherEachOnce) {
  for (bool confine : {true, false}) {
    SCOPED_TRACE(confine ? "with savepoints" : "fast path");
    const std::string p = confine ? "c-" : "f-";
    std::unique_ptr<StoreTransaction> tx = *store_->Begin();
    absl::StatusOr<Result> a =
        RunIn(*guard_, *tx, Req(p + "E1"), Inserting({p + "O-1"}, "r1"), confine);
    absl::StatusOr<Result> b = RunIn(*guard_, *tx, Req(p + "E2"), Inserting({p + "O-2"}), confine);
    runs_ = 0;
    // The same event again in the same batch: replayed from the uncommitted record.
    absl::StatusOr<Result> again =
        RunIn(*guard_, *tx, Req(p + "E1"), Inserting({p + "O-9"}), confine);
    ASSERT_OK(a);
    ASSERT_OK(b);
    ASSERT_OK(again);
    EXPECT_EQ(a->outcome, Outcome::kExecuted);
    EXPECT_EQ(again->outcome, Outcome::kReplayed);
    EXPECT_EQ(again->value, "r1");
    EXPECT_EQ(runs_, 0);
    ASSERT_OK(tx->Commit());
    absl::StatusOr<Result> later = guard_->Run(Req(p + "E1"), Inserting({p + "O-9"}));
    ASSERT_OK(later);
    EXPECT_EQ(later->outcome, Outcome::kReplayed);
  }
  EXPECT_EQ(Ledger(), (std::vector<std::string>{"c-O-1", "c-O-2", "f-O-1", "f-O-2"}));
}

TEST_P(GuardBatchTest, AFailingMessageUndoesOnlyItsOwnWritesAndIsCached) {
  std::unique_ptr<StoreTransaction> tx = *store_->Begin();
  ASSERT_OK(RunIn(*guard_, *tx, Req("E1"), Inserting({"O-1"})));
  // Inserts O-2, then breaks the primary key: its error aborts nothing but itself.
  EXPECT_THAT(RunIn(*guard_, *tx, Req("E2"), Inserting({"O-2", "O-1"})),
              StatusIs(absl::StatusCode::kInvalidArgument));
  absl::StatusOr<Result> c = RunIn(*guard_, *tx, Req("E3"), Inserting({"O-3"}));
  ASSERT_OK(c);
  EXPECT_EQ(c->outcome, Outcome::kExecuted);
  ASSERT_OK(tx->Commit());
  EXPECT_EQ(Ledger(), (std::vector<std::string>{"O-1", "O-3"}));
  runs_ = 0;
  absl::StatusOr<Result> cached = guard_->Run(Req("E2"), Inserting({"O-2"}));
  ASSERT_OK(cached);
  EXPECT_EQ(cached->outcome, Outcome::kCachedFailure);
  EXPECT_EQ(runs_, 0);
}

TEST_P(GuardBatchTest, RetryableErrorLeavesNoRecordAndTheTransactionGoesOn) {
  std::unique_ptr<StoreTransaction> tx = *store_->Begin();
  Handler flaky = [](Transaction& t) -> absl::StatusOr<std::string> {
    IDEM_RETURN_IF_ERROR(t.Exec("INSERT INTO ledger (order_no) VALUES (?)", {Value("O-x")}));
    return absl::UnavailableError("downstream timeout");
  };
  EXPECT_THAT(RunIn(*guard_, *tx, Req("E1"), flaky), StatusIs(absl::StatusCode::kUnavailable));
  ASSERT_OK(RunIn(*guard_, *tx, Req("E2"), Inserting({"O-2"})));
  ASSERT_OK(tx->Commit());
  EXPECT_EQ(Ledger(), std::vector<std::string>{"O-2"});
  absl::StatusOr<Result> retried = guard_->Run(Req("E1"), Inserting({"O-1"}));
  ASSERT_OK(retried);
  EXPECT_EQ(retried->outcome, Outcome::kExecuted);
}

TEST_P(GuardBatchTest, RollingTheBatchBackUndoesEveryClaimAndEffect) {
  std::unique_ptr<StoreTransaction> tx = *store_->Begin();
  ASSERT_OK(RunIn(*guard_, *tx, Req("E1"), Inserting({"O-1"}), /*confine=*/false));
  ASSERT_OK(RunIn(*guard_, *tx, Req("E2"), Inserting({"O-2"}), /*confine=*/false));
  tx->Rollback();
  EXPECT_TRUE(Ledger().empty());
  absl::StatusOr<Result> again = guard_->Run(Req("E1"), Inserting({"O-1"}));
  ASSERT_OK(again);
  EXPECT_EQ(again->outcome, Outcome::kExecuted);
}

// RunBatchIn: the batch's claims and results sent together, each key still its
// own: new keys run once, a committed key replays, a key under another's live lease
// is in progress, a key repeated in the batch replays the batch's own result.
TEST_P(GuardBatchTest, BatchRunsEachNewKeyOnceAndAnswersTheOthers) {
  ASSERT_OK(guard_->Run(Req("E-old"), Inserting({"O-old"}, "old")));
  absl::StatusOr<Result> held = guard_->Claim(Req("E-held"), absl::Minutes(5));
  ASSERT_OK(held);
  ASSERT_EQ(held->outcome, Outcome::kAcquired);
  runs_ = 0;
  const std::vector<Request> batch = {Req("E1"), Req("E-old"), Req("E2"),
                                      Req("E-held"), Req("E1"), Req("E3")};
  std::vector<size_t> ran;
  std::unique_ptr<StoreTransaction> tx = *store_->Begin();
  absl::StatusOr<std::vector<Result>> results =
      RunBatchIn(*guard_, *tx, batch, [&](size_t i, Transaction& t) -> absl::StatusOr<std::string> {
        ran.push_back(i);
        IDEM_RETURN_IF_ERROR(
            t.Exec("INSERT INTO ledger (order_no) VALUES (?)", {Value("O-" + batch[i].key)}));
        return "r-" + batch[i].key;
      });
  ASSERT_OK(results);
  ASSERT_EQ(results->size(), batch.size());
  EXPECT_EQ(ran, (std::vector<size_t>{0, 2, 5}));
  const Outcome expected[] = {Outcome::kExecuted,   Outcome::kReplayed, Outcome::kExecuted,
                              Outcome::kInProgress, Outcome::kReplayed, Outcome::kExecuted};
  for (size_t i = 0; i < batch.size(); ++i) {
    EXPECT_EQ((*results)[i].outcome, expected[i]) << i << " " << batch[i].key;
  }
  EXPECT_EQ((*results)[0].value, "r-E1");
  EXPECT_EQ((*results)[1].value, "old");
  EXPECT_EQ((*results)[4].value, "r-E1");
  ASSERT_OK(tx->Commit());
  EXPECT_EQ(Ledger(), (std::vector<std::string>{"O-E1", "O-E2", "O-E3", "O-old"}));
  for (const char* key : {"E1", "E2", "E3"}) {
    absl::StatusOr<Result> later = guard_->Run(Req(key), Inserting({"O-never"}));
    ASSERT_OK(later);
    EXPECT_EQ(later->outcome, Outcome::kReplayed) << key;
    EXPECT_EQ(later->value, std::string("r-") + key);
  }
  EXPECT_EQ(runs_, 0);
  // The lease holder still owns its key.
  ASSERT_OK(guard_->Complete(Req("E-held"), held->token, "done"));
}

// A handler failing inside a batch fails the batch, which rolls back whole, and
// rerun key by key under savepoints (what the consumer runner does) the failure is
// confined to its key: the others run once, nothing is doubled or lost.
TEST_P(GuardBatchTest, AFailingHandlerFailsTheBatchAndTheRerunConfinesIt) {
  const std::vector<Request> batch = {Req("E1"), Req("E2"), Req("E3")};
  // E2 inserts its row, then O-1 again: a primary-key violation, a final error.
  const std::vector<std::vector<std::string>> rows = {{"O-1"}, {"O-2", "O-1"}, {"O-3"}};
  {
    std::unique_ptr<StoreTransaction> tx = *store_->Begin();
    absl::StatusOr<std::vector<Result>> results = RunBatchIn(
        *guard_, *tx, batch, [&](size_t i, Transaction& t) { return Inserting(rows[i])(t); });
    EXPECT_THAT(results, StatusIs(absl::StatusCode::kInvalidArgument));
    tx->Rollback();
  }
  EXPECT_TRUE(Ledger().empty());
  EXPECT_EQ(*store_->Get("default", "E1"), std::nullopt);
  std::unique_ptr<StoreTransaction> tx = *store_->Begin();
  std::vector<Outcome> outcomes;
  for (size_t i = 0; i < batch.size(); ++i) {
    absl::StatusOr<Result> r = RunIn(*guard_, *tx, batch[i], Inserting(rows[i]));
    if (i == 1) {
      EXPECT_THAT(r, StatusIs(absl::StatusCode::kInvalidArgument));
    } else {
      ASSERT_OK(r);
      EXPECT_EQ(r->outcome, Outcome::kExecuted);
    }
  }
  ASSERT_OK(tx->Commit());
  EXPECT_EQ(Ledger(), (std::vector<std::string>{"O-1", "O-3"}));
  absl::StatusOr<Result> cached = guard_->Run(Req("E2"), Inserting({"O-2"}));
  ASSERT_OK(cached);
  EXPECT_EQ(cached->outcome, Outcome::kCachedFailure);
}

// A bad key anywhere in a batch is refused before anything is written.
TEST_P(GuardBatchTest, ABadKeyFailsTheBatchBeforeAnyWrite) {
  const std::vector<Request> batch = {Req("E1"), Req("")};
  std::unique_ptr<StoreTransaction> tx = *store_->Begin();
  runs_ = 0;
  EXPECT_THAT(RunBatchIn(*guard_, *tx, batch,
                         [&](size_t, Transaction& t) { return Inserting({"O-1"})(t); }),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(runs_, 0);
  ASSERT_OK(tx->Commit());
  EXPECT_EQ(*store_->Get("default", "E1"), std::nullopt);
}

// First statements: run, all sent together, only for the keys the batch claimed,
// each handler told its statement's row count; a failing one fails the batch.
TEST_P(GuardBatchTest, FirstStatementsRunOnlyForClaimedKeys) {
  ASSERT_OK(guard_->Run(Req("E-old"), Inserting({"O-old"}, "old")));
  // More than one PostgreSQL round trip's worth (100), and a repeat of E0.
  std::vector<Request> batch;
  std::vector<Statement> firsts;
  for (int i = 0; i < 130; ++i) {
    batch.push_back(Req("E" + std::to_string(i)));
    firsts.push_back(
        {"INSERT INTO ledger (order_no) VALUES (?)", {Value("O" + std::to_string(i))}});
  }
  batch.push_back(Req("E-old"));
  firsts.push_back({"INSERT INTO ledger (order_no) VALUES (?)", {Value("O-never")}});
  batch.push_back(Req("E0"));
  firsts.push_back({"INSERT INTO ledger (order_no) VALUES (?)", {Value("O-never-2")}});
  std::vector<size_t> ran;
  std::unique_ptr<StoreTransaction> tx = *store_->Begin();
  absl::StatusOr<std::vector<Result>> results =
      RunBatchIn(*guard_, *tx, batch, firsts,
                 [&](size_t i, Transaction&, int64_t rows) -> absl::StatusOr<std::string> {
                   EXPECT_EQ(rows, 1) << i;
                   ran.push_back(i);
                   return "r" + std::to_string(i);
                 });
  ASSERT_OK(results);
  EXPECT_EQ(ran.size(), 130u);
  EXPECT_EQ((*results)[130].outcome, Outcome::kReplayed);
  EXPECT_EQ((*results)[130].value, "old");
  EXPECT_EQ((*results)[131].outcome, Outcome::kReplayed);
  EXPECT_EQ((*results)[131].value, "r0");
  ASSERT_OK(tx->Commit());
  std::vector<std::string> ledger = Ledger();
  EXPECT_EQ(ledger.size(), 131u);
  EXPECT_EQ(std::count(ledger.begin(), ledger.end(), "O-never"), 0);
  EXPECT_EQ(std::count(ledger.begin(), ledger.end(), "O-never-2"), 0);

  // A first statement that fails (O1 again: the primary key) fails the batch.
  const std::vector<Request> again = {Req("F1"), Req("F2")};
  const std::vector<Statement> bad = {
      {"INSERT INTO ledger (order_no) VALUES (?)", {Value("P1")}},
      {"INSERT INTO ledger (order_no) VALUES (?)", {Value("O1")}}};
  tx = *store_->Begin();
  EXPECT_THAT(RunBatchIn(*guard_, *tx, again, bad,
                         [](size_t, Transaction&, int64_t) -> absl::StatusOr<std::string> {
                           return std::string("never");
                         }),
              StatusIs(absl::StatusCode::kInvalidArgument));
  tx->Rollback();
  EXPECT_EQ(Ledger().size(), 131u);
  EXPECT_EQ(*store_->Get("default", "F1"), std::nullopt);
  // One statement per request, or none.
  tx = *store_->Begin();
  EXPECT_THAT(RunBatchIn(*guard_, *tx, again, absl::MakeConstSpan(bad).subspan(0, 1),
                         [](size_t, Transaction&, int64_t) -> absl::StatusOr<std::string> {
                           return std::string("never");
                         }),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// RecordTransaction::ExecMany: each statement as Exec, in order (each sees the ones
// before it), row counts in order; the first error stops it.
TEST_P(GuardBatchTest, ExecManyRunsEachStatementInOrder) {
  std::vector<Statement> statements;
  for (int i = 0; i < 150; ++i) {
    statements.push_back(
        {"INSERT INTO ledger (order_no) VALUES (?)", {Value("X" + std::to_string(i))}});
  }
  statements.push_back({"DELETE FROM ledger WHERE order_no LIKE ?", {Value("X1%")}});
  std::unique_ptr<StoreTransaction> tx = *store_->Begin();
  absl::StatusOr<std::vector<int64_t>> rows = Records(*tx).ExecMany(statements);
  ASSERT_OK(rows);
  ASSERT_EQ(rows->size(), 151u);
  EXPECT_EQ((*rows)[0], 1);
  EXPECT_EQ((*rows)[149], 1);
  EXPECT_EQ((*rows)[150], 61);  // X1, X10-X19, X100-X149
  ASSERT_OK(tx->Commit());
  EXPECT_EQ(Ledger().size(), 89u);

  const std::vector<Statement> failing = {
      {"INSERT INTO ledger (order_no) VALUES (?)", {Value("Y1")}},
      {"INSERT INTO ledger (order_no) VALUES (?)", {Value("X2")}},
      {"INSERT INTO ledger (order_no) VALUES (?)", {Value("Y2")}}};
  tx = *store_->Begin();
  EXPECT_THAT(Records(*tx).ExecMany(failing), StatusIs(absl::StatusCode::kInvalidArgument));
  tx->Rollback();
  EXPECT_EQ(Ledger().size(), 89u);
}

INSTANTIATE_TEST_SUITE_P(SqlBackends, GuardBatchTest, ::testing::ValuesIn(testing::SqlBackends()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace idem
