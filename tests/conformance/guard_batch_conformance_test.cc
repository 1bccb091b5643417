// Guard::RunIn (a consumer's batch: many keys in one caller-owned transaction,
// each individually idempotent) against every SQL backend: PostgreSQL aborts a
// transaction at its first failed statement, so a failing message must be confined
// by its savepoint there as on SQLite and MySQL.
#include <memory>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "conformance/store_factory.h"
#include "idem/idem.h"
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
    absl::StatusOr<Result> a = guard_->RunIn(*tx, Req(p + "E1"), Inserting({p + "O-1"}, "r1"), confine);
    absl::StatusOr<Result> b = guard_->RunIn(*tx, Req(p + "E2"), Inserting({p + "O-2"}), confine);
    runs_ = 0;
    // The same event again in the same batch: replayed from the uncommitted record.
    absl::StatusOr<Result> again = guard_->RunIn(*tx, Req(p + "E1"), Inserting({p + "O-9"}), confine);
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
  ASSERT_OK(guard_->RunIn(*tx, Req("E1"), Inserting({"O-1"})));
  // Inserts O-2, then breaks the primary key: its error aborts nothing but itself.
  EXPECT_THAT(guard_->RunIn(*tx, Req("E2"), Inserting({"O-2", "O-1"})),
              StatusIs(absl::StatusCode::kInvalidArgument));
  absl::StatusOr<Result> c = guard_->RunIn(*tx, Req("E3"), Inserting({"O-3"}));
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
  EXPECT_THAT(guard_->RunIn(*tx, Req("E1"), flaky), StatusIs(absl::StatusCode::kUnavailable));
  ASSERT_OK(guard_->RunIn(*tx, Req("E2"), Inserting({"O-2"})));
  ASSERT_OK(tx->Commit());
  EXPECT_EQ(Ledger(), std::vector<std::string>{"O-2"});
  absl::StatusOr<Result> retried = guard_->Run(Req("E1"), Inserting({"O-1"}));
  ASSERT_OK(retried);
  EXPECT_EQ(retried->outcome, Outcome::kExecuted);
}

TEST_P(GuardBatchTest, RollingTheBatchBackUndoesEveryClaimAndEffect) {
  std::unique_ptr<StoreTransaction> tx = *store_->Begin();
  ASSERT_OK(guard_->RunIn(*tx, Req("E1"), Inserting({"O-1"}), /*confine=*/false));
  ASSERT_OK(guard_->RunIn(*tx, Req("E2"), Inserting({"O-2"}), /*confine=*/false));
  tx->Rollback();
  EXPECT_TRUE(Ledger().empty());
  absl::StatusOr<Result> again = guard_->Run(Req("E1"), Inserting({"O-1"}));
  ASSERT_OK(again);
  EXPECT_EQ(again->outcome, Outcome::kExecuted);
}

INSTANTIATE_TEST_SUITE_P(SqlBackends, GuardBatchTest, ::testing::ValuesIn(testing::SqlBackends()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace idem
