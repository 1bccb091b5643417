// The Guard/Store contract (keys, outcomes and their order, the two modes;
// include/idem/guard.h), run against every backend.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "conformance/store_factory.h"
#include "idem/idem.h"
#include "store/backend.h"
#include "testing/fake_clock.h"
#include "testing/status_matchers.h"
#include "testing/temp_dir.h"

namespace idem {
namespace {

using ::idem::testing::FakeClock;
using ::idem::testing::StatusIs;
using ::testing::HasSubstr;

// A store decorator that is down: every call answers kUnavailable.
class DownStore final : public StoreBackend {
 public:
  absl::StatusOr<std::unique_ptr<StoreTransaction>> Begin() override {
    return absl::UnavailableError("store is down");
  }
  absl::StatusOr<std::optional<Record>> Get(std::string_view, std::string_view) override {
    return absl::UnavailableError("store is down");
  }
  absl::Status Ping() override { return absl::UnavailableError("store is down"); }
  bool SupportsSql() const override { return true; }
  std::string_view url() const override { return "down://"; }
};

class GuardConformanceTest : public ::testing::TestWithParam<testing::Backend> {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<Store>> store = testing::OpenBackendStore(GetParam(), GetParam().url(dir_.path()));
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    guard_ = std::make_unique<Guard>(*store_, GuardOptions{.clock = &clock_});
    if (store_->SupportsSql()) {
      std::unique_ptr<StoreTransaction> tx = *store_->Begin();
      ASSERT_OK(tx->Exec(
          "CREATE TABLE ledger (order_no VARCHAR(64) PRIMARY KEY, amount INTEGER NOT NULL, "
          "status VARCHAR(16) NOT NULL DEFAULT 'PENDING', version INTEGER NOT NULL DEFAULT 0)"));
      ASSERT_OK(tx->Commit());
    }
  }

  // A handler that counts its runs and returns `result`.
  Handler Counting(std::string result, absl::Status error = absl::OkStatus()) {
    return [this, result, error](Transaction&) -> absl::StatusOr<std::string> {
      ++runs_;
      if (!error.ok()) return error;
      return result;
    };
  }

  int64_t LedgerRows() {
    std::unique_ptr<StoreTransaction> tx = *store_->Begin();
    absl::StatusOr<Rows> rows = tx->Query("SELECT COUNT(*) FROM ledger");
    EXPECT_TRUE(rows.ok()) << rows.status();
    return rows.ok() ? rows->rows[0][0].as_int() : -1;
  }

  static Request Req(std::string key, std::string biz_type = "refund", std::string fp = "") {
    return Request{.biz_type = std::move(biz_type), .key = std::move(key),
                   .fingerprint = std::move(fp)};
  }

  testing::TempDir dir_;
  FakeClock clock_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Guard> guard_;
  std::atomic<int> runs_{0};
};

TEST_P(GuardConformanceTest, FirstRunExecutesThenReplaysByteIdenticalResult) {
  const std::string result = "{\"refund_id\" : \"F-1\",\n \"amount\":1.50}\x01";
  absl::StatusOr<Result> first = guard_->Run(Req("R-1"), Counting(result));
  ASSERT_OK(first);
  EXPECT_EQ(first->outcome, Outcome::kExecuted);
  EXPECT_EQ(first->value, result);
  absl::StatusOr<Result> again = guard_->Run(Req("R-1"), Counting("other"));
  ASSERT_OK(again);
  EXPECT_EQ(again->outcome, Outcome::kReplayed);
  EXPECT_EQ(again->value, result);
  EXPECT_EQ(runs_.load(), 1);
  absl::StatusOr<Record> record = guard_->Get(Req("R-1"));
  ASSERT_OK(record);
  EXPECT_EQ(record->state, RecordState::kSucceeded);
  EXPECT_EQ(record->result, result);
  EXPECT_EQ(record->biz_type, "refund");
}

TEST_P(GuardConformanceTest, SameKeyOtherBizTypeIsKeyReused) {
  ASSERT_OK(guard_->Run(Req("K"), Counting("a")));
  absl::StatusOr<Result> r = guard_->Run(Req("K", "payment"), Counting("b"));
  ASSERT_OK(r);
  EXPECT_EQ(r->outcome, Outcome::kKeyReused);
  EXPECT_EQ(r->value, "");  // never another's result
  EXPECT_EQ(runs_.load(), 1);
}

TEST_P(GuardConformanceTest, BizTypeIsCheckedBeforeFingerprint) {
  ASSERT_OK(guard_->Run(Req("K", "refund", "fp1"), Counting("a")));
  absl::StatusOr<Result> r = guard_->Run(Req("K", "payment", "fp2"), Counting("b"));
  ASSERT_OK(r);
  EXPECT_EQ(r->outcome, Outcome::kKeyReused);
}

TEST_P(GuardConformanceTest, DifferentFingerprintIsMismatch) {
  ASSERT_OK(guard_->Run(Req("K", "refund", "fp1"), Counting("a")));
  absl::StatusOr<Result> r = guard_->Run(Req("K", "refund", "fp2"), Counting("b"));
  ASSERT_OK(r);
  EXPECT_EQ(r->outcome, Outcome::kFingerprintMismatch);
  EXPECT_EQ(r->value, "");
  EXPECT_EQ(runs_.load(), 1);
}

TEST_P(GuardConformanceTest, FingerprintComparedOnlyWhenBothCarryOne) {
  ASSERT_OK(guard_->Run(Req("K1", "refund", ""), Counting("a")));
  absl::StatusOr<Result> r1 = guard_->Run(Req("K1", "refund", "fp"), Counting("b"));
  ASSERT_OK(r1);
  EXPECT_EQ(r1->outcome, Outcome::kReplayed);
  ASSERT_OK(guard_->Run(Req("K2", "refund", "fp"), Counting("c")));
  absl::StatusOr<Result> r2 = guard_->Run(Req("K2", "refund", ""), Counting("d"));
  ASSERT_OK(r2);
  EXPECT_EQ(r2->outcome, Outcome::kReplayed);
  EXPECT_EQ(r2->value, "c");
}

TEST_P(GuardConformanceTest, RetryableErrorLeavesNoRecord) {
  absl::StatusOr<Result> r = guard_->Run(Req("K"), Counting("", absl::UnavailableError("db slow")));
  EXPECT_THAT(r, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(guard_->Get(Req("K")), StatusIs(absl::StatusCode::kNotFound));
  absl::StatusOr<Result> again = guard_->Run(Req("K"), Counting("ok"));
  ASSERT_OK(again);
  EXPECT_EQ(again->outcome, Outcome::kExecuted);
  EXPECT_EQ(again->value, "ok");
  EXPECT_EQ(runs_.load(), 2);
}

TEST_P(GuardConformanceTest, FinalErrorIsCachedAndReplayedAsCachedFailure) {
  absl::StatusOr<Result> r =
      guard_->Run(Req("K"), Counting("", absl::InvalidArgumentError("card \"expired\"")));
  EXPECT_THAT(r, StatusIs(absl::StatusCode::kInvalidArgument));
  absl::StatusOr<Result> again = guard_->Run(Req("K"), Counting("ok"));
  ASSERT_OK(again);
  EXPECT_EQ(again->outcome, Outcome::kCachedFailure);
  EXPECT_EQ(again->value, R"({"code":"INVALID_ARGUMENT","message":"card \"expired\""})");
  EXPECT_EQ(runs_.load(), 1);
  absl::StatusOr<Record> record = guard_->Get(Req("K"));
  ASSERT_OK(record);
  EXPECT_EQ(record->state, RecordState::kFailed);
}

// A final failure of a handler that took over an expired lease is cached like any
// other: the next arrival gets kCachedFailure, the handler does not run again.
TEST_P(GuardConformanceTest, FinalErrorAfterATakeoverIsCached) {
  ASSERT_OK(guard_->Claim(Req("K"), absl::Seconds(1)));
  clock_.Advance(absl::Seconds(2));
  absl::StatusOr<Result> r =
      guard_->Run(Req("K"), Counting("", absl::InvalidArgumentError("card expired")));
  EXPECT_THAT(r, StatusIs(absl::StatusCode::kInvalidArgument));
  absl::StatusOr<Result> again = guard_->Run(Req("K"), Counting("ok"));
  ASSERT_OK(again);
  EXPECT_EQ(again->outcome, Outcome::kCachedFailure);
  EXPECT_EQ(again->value, R"({"code":"INVALID_ARGUMENT","message":"card expired"})");
  EXPECT_EQ(runs_.load(), 1);
  absl::StatusOr<Record> record = guard_->Get(Req("K"));
  ASSERT_OK(record);
  EXPECT_EQ(record->state, RecordState::kFailed);
  EXPECT_EQ(record->token, 2);
}

TEST_P(GuardConformanceTest, InvalidKeysAreRejectedBeforeTheHandler) {
  EXPECT_THAT(guard_->Run(Req(""), Counting("x")), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(guard_->Run(Req(std::string(256, 'k')), Counting("x")),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(guard_->Run(Req("K", ""), Counting("x")),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(guard_->Run(Req("K", std::string(256, 'b')), Counting("x")),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(guard_->Claim(Req("")), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(runs_.load(), 0);
  absl::StatusOr<Result> max = guard_->Run(Req(std::string(255, 'k')), Counting("x"));
  ASSERT_OK(max);
  EXPECT_EQ(max->outcome, Outcome::kExecuted);
  absl::Status s = guard_->Run(Req(std::string(256, 'k')), Counting("x")).status();
  EXPECT_THAT(std::string(s.message()), HasSubstr("256 bytes"));
}

TEST_P(GuardConformanceTest, KeysAreOpaqueBytes) {
  const std::string with_nul("a\0b\xff", 4);
  ASSERT_OK(guard_->Run(Req(with_nul), Counting("1")));
  absl::StatusOr<Result> prefix = guard_->Run(Req(std::string("a")), Counting("2"));
  ASSERT_OK(prefix);
  EXPECT_EQ(prefix->outcome, Outcome::kExecuted);
  absl::StatusOr<Result> again = guard_->Run(Req(with_nul), Counting("3"));
  ASSERT_OK(again);
  EXPECT_EQ(again->outcome, Outcome::kReplayed);
  EXPECT_EQ(again->value, "1");
}

TEST_P(GuardConformanceTest, TenantsHaveSeparateKeySpaces) {
  Request a = Req("K");
  a.tenant = "acme";
  Request b = Req("K", "payment");
  b.tenant = "beta";
  ASSERT_OK(guard_->Run(a, Counting("A")));
  absl::StatusOr<Result> rb = guard_->Run(b, Counting("B"));
  ASSERT_OK(rb);
  EXPECT_EQ(rb->outcome, Outcome::kExecuted);
  EXPECT_EQ(rb->value, "B");
  Request c = Req("K");
  c.tenant = "gamma";
  EXPECT_THAT(guard_->Get(c), StatusIs(absl::StatusCode::kNotFound));
}

TEST_P(GuardConformanceTest, StoreDownFailsClosed) {
  DownStore down;
  Guard guard(down, GuardOptions{.clock = &clock_});
  EXPECT_THAT(guard.Run(Req("K"), Counting("x")), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(guard.Claim(Req("K")), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(runs_.load(), 0);
}

// ---- lease mode ----

TEST_P(GuardConformanceTest, LeaseClaimCompleteReplay) {
  absl::StatusOr<Result> c = guard_->Claim(Req("L", "refund", "fp"), absl::Seconds(10));
  ASSERT_OK(c);
  EXPECT_EQ(c->outcome, Outcome::kAcquired);
  EXPECT_EQ(c->token, 1);
  EXPECT_FALSE(c->takeover);
  EXPECT_EQ(c->lease_until, clock_.Now() + absl::Seconds(10));
  absl::StatusOr<Record> held = guard_->Get(Req("L"));
  ASSERT_OK(held);
  EXPECT_EQ(held->state, RecordState::kProcessing);
  EXPECT_EQ(held->fingerprint, "fp");

  absl::StatusOr<Result> busy = guard_->Claim(Req("L", "refund", "fp"));
  ASSERT_OK(busy);
  EXPECT_EQ(busy->outcome, Outcome::kInProgress);
  EXPECT_EQ(busy->lease_until, c->lease_until);

  ASSERT_OK(guard_->Complete(Req("L"), c->token, "[1, 2]"));
  absl::StatusOr<Result> replay = guard_->Claim(Req("L", "refund", "fp"));
  ASSERT_OK(replay);
  EXPECT_EQ(replay->outcome, Outcome::kReplayed);
  EXPECT_EQ(replay->value, "[1, 2]");
}

TEST_P(GuardConformanceTest, RunMeetingALiveLeaseIsInProgress) {
  ASSERT_OK(guard_->Claim(Req("L")));
  absl::StatusOr<Result> r = guard_->Run(Req("L"), Counting("x"));
  ASSERT_OK(r);
  EXPECT_EQ(r->outcome, Outcome::kInProgress);
  EXPECT_EQ(runs_.load(), 0);
}

TEST_P(GuardConformanceTest, ExpiredLeaseIsTakenOverAndStaleTokenLoses) {
  absl::StatusOr<Result> first = guard_->Claim(Req("L"), absl::Seconds(5));
  ASSERT_OK(first);
  clock_.Advance(absl::Seconds(6));
  absl::StatusOr<Result> second = guard_->Claim(Req("L"), absl::Seconds(5));
  ASSERT_OK(second);
  EXPECT_EQ(second->outcome, Outcome::kAcquired);
  EXPECT_EQ(second->token, 2);
  EXPECT_TRUE(second->takeover);
  EXPECT_EQ(second->previous_token, 1);

  EXPECT_THAT(guard_->Complete(Req("L"), first->token, "old"),
              StatusIs(absl::StatusCode::kAborted));
  EXPECT_THAT(guard_->Fail(Req("L"), first->token, false, "old"),
              StatusIs(absl::StatusCode::kAborted));
  absl::StatusOr<Record> still = guard_->Get(Req("L"));
  ASSERT_OK(still);
  EXPECT_EQ(still->state, RecordState::kProcessing);
  EXPECT_EQ(still->token, 2);

  ASSERT_OK(guard_->Complete(Req("L"), second->token, "new"));
  absl::StatusOr<Record> done = guard_->Get(Req("L"));
  ASSERT_OK(done);
  EXPECT_EQ(done->result, "new");
}

TEST_P(GuardConformanceTest, ExpiredButNotTakenOverHolderStillCompletes) {
  absl::StatusOr<Result> c = guard_->Claim(Req("L"), absl::Seconds(1));
  ASSERT_OK(c);
  clock_.Advance(absl::Minutes(5));
  ASSERT_OK(guard_->Complete(Req("L"), c->token, "late but fine"));
  absl::StatusOr<Result> replay = guard_->Claim(Req("L"));
  ASSERT_OK(replay);
  EXPECT_EQ(replay->outcome, Outcome::kReplayed);
  EXPECT_EQ(replay->value, "late but fine");
}

TEST_P(GuardConformanceTest, FingerprintIsComparedOnTakeover) {
  ASSERT_OK(guard_->Claim(Req("L", "refund", "fp1"), absl::Seconds(1)));
  clock_.Advance(absl::Seconds(2));
  absl::StatusOr<Result> r = guard_->Claim(Req("L", "refund", "fp2"));
  ASSERT_OK(r);
  EXPECT_EQ(r->outcome, Outcome::kFingerprintMismatch);
}

TEST_P(GuardConformanceTest, RetryableFailReleasesAndTokensKeepGrowing) {
  absl::StatusOr<Result> c1 = guard_->Claim(Req("L"));
  ASSERT_OK(c1);
  ASSERT_OK(guard_->Fail(Req("L"), c1->token, /*retryable=*/true, R"({"why":"timeout"})"));
  ASSERT_OK(guard_->Fail(Req("L"), c1->token, /*retryable=*/true, R"({"why":"timeout"})"));
  EXPECT_THAT(guard_->Get(Req("L")), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(guard_->Complete(Req("L"), c1->token, "x"), StatusIs(absl::StatusCode::kAborted));
  absl::StatusOr<Result> c2 = guard_->Claim(Req("L"));
  ASSERT_OK(c2);
  EXPECT_EQ(c2->outcome, Outcome::kAcquired);
  EXPECT_GT(c2->token, c1->token);
  EXPECT_FALSE(c2->takeover);
  EXPECT_THAT(guard_->Complete(Req("L"), c1->token, "x"), StatusIs(absl::StatusCode::kAborted));
  ASSERT_OK(guard_->Complete(Req("L"), c2->token, "y"));
}

TEST_P(GuardConformanceTest, FinalFailIsCached) {
  absl::StatusOr<Result> c = guard_->Claim(Req("L"));
  ASSERT_OK(c);
  ASSERT_OK(guard_->Fail(Req("L"), c->token, /*retryable=*/false, R"({"code":"card_declined"})"));
  absl::StatusOr<Result> r = guard_->Claim(Req("L"));
  ASSERT_OK(r);
  EXPECT_EQ(r->outcome, Outcome::kCachedFailure);
  EXPECT_EQ(r->value, R"({"code":"card_declined"})");
}

TEST_P(GuardConformanceTest, CompleteIsIdempotentForTheSameResultOnly) {
  absl::StatusOr<Result> c = guard_->Claim(Req("L"));
  ASSERT_OK(c);
  ASSERT_OK(guard_->Complete(Req("L"), c->token, "r1"));
  ASSERT_OK(guard_->Complete(Req("L"), c->token, "r1"));
  EXPECT_THAT(guard_->Complete(Req("L"), c->token, "r2"),
              StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_THAT(guard_->Fail(Req("L"), c->token, false, "e"),
              StatusIs(absl::StatusCode::kAlreadyExists));
  absl::StatusOr<Record> rec = guard_->Get(Req("L"));
  ASSERT_OK(rec);
  EXPECT_EQ(rec->result, "r1");
}

TEST_P(GuardConformanceTest, CompleteOfUnknownKeyOrOtherBizType) {
  EXPECT_THAT(guard_->Complete(Req("nope"), 1, "x"), StatusIs(absl::StatusCode::kNotFound));
  absl::StatusOr<Result> c = guard_->Claim(Req("L"));
  ASSERT_OK(c);
  EXPECT_THAT(guard_->Complete(Req("L", "payment"), c->token, "x"),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(guard_->Get(Req("L", "payment")), StatusIs(absl::StatusCode::kFailedPrecondition));
}

// ---- transactional mode with business rows: SQL stores only ----

class SqlGuardConformanceTest : public GuardConformanceTest {};

TEST_P(SqlGuardConformanceTest, BusinessRowsCommitWithTheRecord) {
  auto handler = [&](Transaction& tx) -> absl::StatusOr<std::string> {
    ++runs_;
    IDEM_RETURN_IF_ERROR(
        tx.Exec("INSERT INTO ledger (order_no, amount) VALUES (?, ?)", {Value("O-1"), Value(42)}));
    return std::string(R"({"ok":true})");
  };
  ASSERT_OK(guard_->Run(Req("O-1"), handler));
  absl::StatusOr<Result> again = guard_->Run(Req("O-1"), handler);
  ASSERT_OK(again);
  EXPECT_EQ(again->outcome, Outcome::kReplayed);
  EXPECT_EQ(runs_.load(), 1);
  EXPECT_EQ(LedgerRows(), 1);
}

TEST_P(SqlGuardConformanceTest, RetryableErrorRollsBackBusinessRows) {
  auto handler = [&](Transaction& tx) -> absl::StatusOr<std::string> {
    IDEM_RETURN_IF_ERROR(
        tx.Exec("INSERT INTO ledger (order_no, amount) VALUES (?, ?)", {Value("O-1"), Value(1)}));
    return absl::DeadlineExceededError("downstream timeout");
  };
  EXPECT_THAT(guard_->Run(Req("O-1"), handler), StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_EQ(LedgerRows(), 0);
  EXPECT_THAT(guard_->Get(Req("O-1")), StatusIs(absl::StatusCode::kNotFound));
}

TEST_P(SqlGuardConformanceTest, FinalErrorRollsBackBusinessRowsButCachesFailure) {
  auto handler = [&](Transaction& tx) -> absl::StatusOr<std::string> {
    IDEM_RETURN_IF_ERROR(
        tx.Exec("INSERT INTO ledger (order_no, amount) VALUES (?, ?)", {Value("O-1"), Value(1)}));
    // A unique-key conflict is final (not retryable).
    IDEM_RETURN_IF_ERROR(
        tx.Exec("INSERT INTO ledger (order_no, amount) VALUES (?, ?)", {Value("O-1"), Value(1)}));
    return std::string("unreachable");
  };
  EXPECT_THAT(guard_->Run(Req("O-1"), handler), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(LedgerRows(), 0);
  absl::StatusOr<Result> again = guard_->Run(Req("O-1"), handler);
  ASSERT_OK(again);
  EXPECT_EQ(again->outcome, Outcome::kCachedFailure);
}

// A missing schema is the store's fault. With the record table gone
// (dropped, renamed, a wrong database), every guard call fails closed with
// kUnavailable marked IsStoreFault (HTTP 503), never kInvalidArgument (400, which a
// client does not retry: the message would be dropped); Ping fails too (/readyz).
TEST_P(SqlGuardConformanceTest, MissingRecordTableIsTheStoresFault) {
  {
    std::unique_ptr<StoreTransaction> tx = *store_->Begin();
    ASSERT_OK(tx->Exec("ALTER TABLE idem_records RENAME TO idem_records_moved"));
    ASSERT_OK(tx->Commit());
  }
  auto store_fault = [](const absl::Status& s) {
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kUnavailable));
    EXPECT_TRUE(IsStoreFault(s)) << s;
  };
  store_fault(guard_->Run(Req("O-1"), Counting(R"({"ok":1})")).status());
  EXPECT_EQ(runs_.load(), 0);
  store_fault(guard_->Claim(Req("O-2"), absl::Seconds(30)).status());
  store_fault(guard_->Complete(Req("O-2"), 1, "{}"));
  store_fault(guard_->Fail(Req("O-2"), 1, false, "{}"));
  store_fault(guard_->Get(Req("O-2")).status());
  store_fault(store_->Ping());
  // Put back, the store serves again without a reopen.
  {
    std::unique_ptr<StoreTransaction> tx = *store_->Begin();
    ASSERT_OK(tx->Exec("ALTER TABLE idem_records_moved RENAME TO idem_records"));
    ASSERT_OK(tx->Commit());
  }
  EXPECT_OK(store_->Ping());
  absl::StatusOr<Result> r = guard_->Run(Req("O-1"), Counting(R"({"ok":1})"));
  ASSERT_OK(r);
  EXPECT_EQ(r->outcome, Outcome::kExecuted);
}

// A handler whose own table is missing meets a store fault too: it is retryable,
// so nothing is cached and the retry runs the handler again once the table is
// back; a statement that is wrong in itself (a constraint violation) stays final.
TEST_P(SqlGuardConformanceTest, HandlersMissingTableIsRetryableAndCachesNothing) {
  auto handler = [&](Transaction& tx) -> absl::StatusOr<std::string> {
    ++runs_;
    IDEM_RETURN_IF_ERROR(tx.Exec("INSERT INTO ledger_that_is_not_there (order_no) VALUES (?)",
                                 {Value("O-1")}));
    return std::string("{}");
  };
  absl::Status s = guard_->Run(Req("O-1"), handler).status();
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_TRUE(IsStoreFault(s)) << s;
  EXPECT_THAT(guard_->Get(Req("O-1")), StatusIs(absl::StatusCode::kNotFound));
  absl::StatusOr<Result> again = guard_->Run(Req("O-1"), Counting(R"({"ok":1})"));
  ASSERT_OK(again);
  EXPECT_EQ(again->outcome, Outcome::kExecuted);
  EXPECT_EQ(runs_.load(), 2);
}

// The result write must find the record as the claim left it. When it does not
// (here the handler itself moves it on, as a concurrent takeover would), nothing of
// the transaction commits: not the business rows, not the record. PostgreSQL and
// MySQL send that write with the COMMIT in one round trip; this holds there too.
TEST_P(SqlGuardConformanceTest, ResultWriteOnAMovedRecordCommitsNothing) {
  absl::StatusOr<Result> r =
      guard_->Run(Req("G"), [&](Transaction& tx) -> absl::StatusOr<std::string> {
        ++runs_;
        IDEM_RETURN_IF_ERROR(
            tx.Exec("INSERT INTO ledger (order_no, amount) VALUES (?, ?)", {Value("G"), Value(1)})
                .status());
        IDEM_RETURN_IF_ERROR(tx.Exec("UPDATE idem_records SET token = token + 1 WHERE idem_key = ?",
                                     {Value(Blob{"G"})})
                                 .status());
        return std::string("ok");
      });
  EXPECT_THAT(r, StatusIs(absl::StatusCode::kAborted));
  EXPECT_EQ(runs_.load(), 1);
  EXPECT_EQ(LedgerRows(), 0);
  EXPECT_THAT(guard_->Get(Req("G")), StatusIs(absl::StatusCode::kNotFound));
}

// Run with a first statement (sent with the claim where the store can): the same
// outcomes as Run; on a duplicate the statement's effect is rolled back and the
// handler is not called.
Statement InsertLedger(const std::string& order_no, int amount) {
  return Statement{"INSERT INTO ledger (order_no, amount) VALUES (?, ?)",
                   {Value(order_no), Value(amount)}};
}

TEST_P(SqlGuardConformanceTest, FirstStatementRunsOnceAndDuplicatesRollItBack) {
  auto handler = [&](Transaction& tx, int64_t first_rows) -> absl::StatusOr<std::string> {
    ++runs_;
    EXPECT_EQ(first_rows, 1);
    IDEM_RETURN_IF_ERROR(
        tx.Exec("UPDATE ledger SET status = 'DONE' WHERE order_no = ?", {Value("O-1")}));
    return std::string(R"({"ok":true})");
  };
  absl::StatusOr<Result> r = guard_->Run(Req("O-1"), InsertLedger("O-1", 5), handler);
  ASSERT_OK(r);
  EXPECT_EQ(r->outcome, Outcome::kExecuted);
  EXPECT_EQ(r->value, R"({"ok":true})");
  // The duplicate's first statement would violate the ledger's key: it must be
  // rolled back with the claim, never surface, and the handler must not run.
  absl::StatusOr<Result> again = guard_->Run(Req("O-1"), InsertLedger("O-1", 5), handler);
  ASSERT_OK(again);
  EXPECT_EQ(again->outcome, Outcome::kReplayed);
  EXPECT_EQ(again->value, R"({"ok":true})");
  // Another key whose statement does not conflict: still rolled back when the
  // key is reused by another biz_type.
  absl::StatusOr<Result> reused = guard_->Run(Req("O-1", "payment"), InsertLedger("O-2", 7), handler);
  ASSERT_OK(reused);
  EXPECT_EQ(reused->outcome, Outcome::kKeyReused);
  EXPECT_EQ(runs_.load(), 1);
  EXPECT_EQ(LedgerRows(), 1);
}

TEST_P(SqlGuardConformanceTest, FirstStatementErrorCountsAsTheHandlers) {
  int handler_runs = 0;
  auto handler = [&](Transaction&, int64_t) -> absl::StatusOr<std::string> {
    ++handler_runs;
    return std::string("unreachable");
  };
  {
    std::unique_ptr<StoreTransaction> tx = *store_->Begin();
    ASSERT_OK(tx->Exec("INSERT INTO ledger (order_no, amount) VALUES ('TAKEN', 1)"));
    ASSERT_OK(tx->Commit());
  }
  // A unique-key conflict is final: the failure is cached, nothing else is left.
  EXPECT_THAT(guard_->Run(Req("K-1"), InsertLedger("TAKEN", 1), handler),
              StatusIs(absl::StatusCode::kInvalidArgument));
  absl::StatusOr<Result> again = guard_->Run(Req("K-1"), InsertLedger("O-9", 1), handler);
  ASSERT_OK(again);
  EXPECT_EQ(again->outcome, Outcome::kCachedFailure);
  EXPECT_EQ(handler_runs, 0);
  EXPECT_EQ(LedgerRows(), 1);
  // Bad SQL is the caller's mistake, reported as the handler's final error too.
  EXPECT_THAT(guard_->Run(Req("K-2"), Statement{"INSERT INTO ledger VALUS (1)", {}}, handler),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(handler_runs, 0);
  // A missing table is the store's: retryable, nothing cached (fail closed).
  absl::Status missing =
      guard_->Run(Req("K-3"), Statement{"INSERT INTO no_such_table VALUES (1)", {}}, handler)
          .status();
  EXPECT_THAT(missing, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_TRUE(IsStoreFault(missing)) << missing;
  EXPECT_THAT(guard_->Get(Req("K-3")), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(handler_runs, 0);
}

TEST_P(SqlGuardConformanceTest, FirstStatementAfterATakeoverRunsOnce) {
  // A lease-mode claim that expired: the next Run takes the key over and runs
  // the statement and the handler once.
  ASSERT_OK(guard_->Claim(Req("T-1"), absl::Seconds(5)));
  clock_.Advance(absl::Seconds(6));
  auto handler = [&](Transaction&, int64_t first_rows) -> absl::StatusOr<std::string> {
    ++runs_;
    EXPECT_EQ(first_rows, 1);
    return std::string("taken over");
  };
  absl::StatusOr<Result> r = guard_->Run(Req("T-1"), InsertLedger("T-1", 3), handler);
  ASSERT_OK(r);
  EXPECT_EQ(r->outcome, Outcome::kExecuted);
  EXPECT_EQ(r->token, 2);
  EXPECT_EQ(runs_.load(), 1);
  EXPECT_EQ(LedgerRows(), 1);
  // A takeover whose statement fails: the failure is cached under the new token.
  ASSERT_OK(guard_->Claim(Req("T-2"), absl::Seconds(5)));
  clock_.Advance(absl::Seconds(6));
  EXPECT_THAT(guard_->Run(Req("T-2"), InsertLedger("T-1", 3), handler),
              StatusIs(absl::StatusCode::kInvalidArgument));
  absl::StatusOr<Result> cached = guard_->Run(Req("T-2"), InsertLedger("T-9", 3), handler);
  ASSERT_OK(cached);
  EXPECT_EQ(cached->outcome, Outcome::kCachedFailure);
  EXPECT_EQ(runs_.load(), 1);
  EXPECT_EQ(LedgerRows(), 1);
}

TEST_P(SqlGuardConformanceTest, FirstStatementMeetingALiveLeaseIsInProgress) {
  ASSERT_OK(guard_->Claim(Req("L-1"), absl::Seconds(30)));
  auto handler = [&](Transaction&, int64_t) -> absl::StatusOr<std::string> {
    ++runs_;
    return std::string("x");
  };
  absl::StatusOr<Result> r = guard_->Run(Req("L-1"), InsertLedger("L-1", 3), handler);
  ASSERT_OK(r);
  EXPECT_EQ(r->outcome, Outcome::kInProgress);
  EXPECT_EQ(runs_.load(), 0);
  EXPECT_EQ(LedgerRows(), 0);
}

TEST_P(SqlGuardConformanceTest, StateMachineAndVersionHelpers) {
  std::unique_ptr<StoreTransaction> tx = *store_->Begin();
  ASSERT_OK(tx->Exec("INSERT INTO ledger (order_no, amount) VALUES ('O-9', 5)"));
  absl::StatusOr<bool> moved = tx->Transition("ledger", "order_no", "O-9", "status", "PENDING", "PAID");
  ASSERT_OK(moved);
  EXPECT_TRUE(*moved);
  moved = tx->Transition("ledger", "order_no", "O-9", "status", "PENDING", "PAID");
  ASSERT_OK(moved);
  EXPECT_FALSE(*moved);  // already paid: a duplicate, no second charge
  const std::pair<std::string, Value> set[] = {{"amount", Value(7)}};
  absl::StatusOr<bool> updated = tx->UpdateVersioned("ledger", "order_no", "O-9", "version", 0, set);
  ASSERT_OK(updated);
  EXPECT_TRUE(*updated);
  updated = tx->UpdateVersioned("ledger", "order_no", "O-9", "version", 0, set);
  ASSERT_OK(updated);
  EXPECT_FALSE(*updated);
  EXPECT_THAT(tx->Transition("ledger; DROP TABLE ledger", "order_no", "O-9", "status", "A", "B"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  absl::StatusOr<Rows> rows = tx->Query("SELECT status, amount, version FROM ledger");
  ASSERT_OK(rows);
  ASSERT_EQ(rows->rows.size(), 1u);
  EXPECT_EQ(rows->rows[0][0].as_text(), "PAID");
  EXPECT_EQ(rows->rows[0][1].as_int(), 7);
  EXPECT_EQ(rows->rows[0][2].as_int(), 1);
  ASSERT_OK(tx->Commit());
}

// The dedupe journal: a consumer records (biz_id,
// event_type) in its own transaction; a duplicate answers false and leaves the
// transaction usable on every backend (PostgreSQL would otherwise abort it, 25P02).
TEST_P(SqlGuardConformanceTest, RecordEventDedupesInTheCallersTransaction) {
  {
    std::unique_ptr<StoreTransaction> tx = *store_->Begin();
    ASSERT_OK(tx->Exec(
        "CREATE TABLE event_journal (biz_id VARCHAR(64) NOT NULL, event_type VARCHAR(32) NOT "
        "NULL, PRIMARY KEY (biz_id, event_type))"));
    ASSERT_OK(tx->Commit());
  }
  auto record = [](Transaction& tx, const char* biz_id, const char* event) {
    return tx.RecordEvent("event_journal", "biz_id", Value(biz_id), "event_type", Value(event));
  };
  // "new", "dup" or the error.
  auto seen = [&](Transaction& tx, const char* biz_id, const char* event) -> std::string {
    absl::StatusOr<bool> r = record(tx, biz_id, event);
    if (!r.ok()) return r.status().ToString();
    return *r ? "new" : "dup";
  };
  {
    std::unique_ptr<StoreTransaction> tx = *store_->Begin();
    EXPECT_EQ(seen(*tx, "O-1", "paid"), "new");
    EXPECT_EQ(seen(*tx, "O-1", "paid"), "dup");
    EXPECT_EQ(seen(*tx, "O-1", "refunded"), "new");
    // Still usable after the duplicate: the effect and the commit go through.
    ASSERT_OK(tx->Exec("INSERT INTO ledger (order_no, amount) VALUES (?, ?)",
                       {Value("O-1"), Value(5)}));
    ASSERT_OK(tx->Commit());
  }
  // Through the guard's transaction, as a consumer's handler would.
  auto handler = [&](Transaction& tx) -> absl::StatusOr<std::string> {
    IDEM_ASSIGN_OR_RETURN(bool fresh, record(tx, "O-1", "paid"));
    IDEM_ASSIGN_OR_RETURN(bool other, record(tx, "O-2", "paid"));
    return absl::StrCat(fresh ? "fresh" : "dup", ",", other ? "fresh" : "dup");
  };
  absl::StatusOr<Result> r = guard_->Run(Req("E-1"), handler);
  ASSERT_OK(r);
  EXPECT_EQ(r->value, "dup,fresh");
  EXPECT_EQ(LedgerRows(), 1);
  std::unique_ptr<StoreTransaction> tx = *store_->Begin();
  absl::StatusOr<Rows> rows = tx->Query("SELECT COUNT(*) FROM event_journal");
  ASSERT_OK(rows);
  EXPECT_EQ(rows->rows[0][0].as_int(), 3);
  // Bad identifiers and other errors are errors, not duplicates.
  EXPECT_THAT(tx->RecordEvent("event journal", "biz_id", Value("x"), "event_type", Value("y")),
              StatusIs(absl::StatusCode::kInvalidArgument));
  absl::StatusOr<bool> missing =
      tx->RecordEvent("no_such_journal", "biz_id", Value("x"), "event_type", Value("y"));
  EXPECT_THAT(missing, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_TRUE(IsStoreFault(missing.status()));
  // ... and the transaction survives them too.
  EXPECT_EQ(seen(*tx, "O-3", "paid"), "new");
  ASSERT_OK(tx->Commit());
}

// The contract for a failed statement (include/idem/store.h), on every backend:
// after TryExec fails the transaction goes on and commits what came before and
// after, without the failed statement's effects; after Exec fails, Rollback leaves
// nothing of the transaction.
TEST_P(SqlGuardConformanceTest, FailedStatementContract) {
  {
    std::unique_ptr<StoreTransaction> tx = *store_->Begin();
    ASSERT_OK(tx->Exec("INSERT INTO ledger (order_no, amount) VALUES (?, ?)",
                       {Value("A"), Value(1)}));
    // A duplicate key, then a statement that writes a row and then fails.
    absl::StatusOr<int64_t> dup =
        tx->TryExec("INSERT INTO ledger (order_no, amount) VALUES (?, ?)", {Value("A"), Value(2)});
    EXPECT_THAT(dup, StatusIs(absl::StatusCode::kInvalidArgument));
    EXPECT_TRUE(IsUniqueViolation(dup.status())) << dup.status();
    EXPECT_THAT(tx->TryExec("INSERT INTO ledger (order_no, amount) VALUES ('B', 1), ('A', 3)"),
                StatusIs(absl::StatusCode::kInvalidArgument));
    ASSERT_OK(tx->TryExec("INSERT INTO ledger (order_no, amount) VALUES (?, ?)",
                          {Value("C"), Value(4)}));
    ASSERT_OK(tx->Commit());
  }
  {
    std::unique_ptr<StoreTransaction> tx = *store_->Begin();
    absl::StatusOr<Rows> rows = tx->Query("SELECT order_no FROM ledger ORDER BY order_no");
    ASSERT_OK(rows);
    ASSERT_EQ(rows->rows.size(), 2u);  // A and C: nothing of the failed ones (not B)
    EXPECT_EQ(rows->rows[0][0], Value("A"));
    EXPECT_EQ(rows->rows[1][0], Value("C"));
    tx->Rollback();
  }
  {
    std::unique_ptr<StoreTransaction> tx = *store_->Begin();
    ASSERT_OK(tx->Exec("INSERT INTO ledger (order_no, amount) VALUES ('D', 1)"));
    EXPECT_FALSE(tx->Exec("INSERT INTO ledger (order_no, amount) VALUES ('A', 9)").ok());
    tx->Rollback();
  }
  EXPECT_EQ(LedgerRows(), 2);  // D went with the rollback
}

TEST(RecordEventTest, MemoryStoreHasNoSql) {
  absl::StatusOr<std::unique_ptr<Store>> store = OpenStore("memory://");
  ASSERT_OK(store);
  std::unique_ptr<StoreTransaction> tx = *(*store)->Begin();
  EXPECT_THAT(tx->RecordEvent("j", "a", Value("x"), "b", Value("y")),
              StatusIs(absl::StatusCode::kUnimplemented));
}

INSTANTIATE_TEST_SUITE_P(AllBackends, GuardConformanceTest,
                         ::testing::ValuesIn(testing::AllBackends()),
                         [](const auto& info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(SqlBackends, SqlGuardConformanceTest,
                         ::testing::ValuesIn(testing::SqlBackends()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace idem

namespace idem {
namespace {

// Tenants and keys longer than any small-string buffer, read back from many
// threads at once: a store that binds a parameter which dies before its statement
// runs (a temporary) reads freed memory and answers "no record" for a key it has.
// (The sqlite:// store did, for Store::Get and every claim of an existing key.)
TEST_P(GuardConformanceTest, LongTenantsAndKeysReadBackUnderConcurrency) {
  constexpr int kThreads = 6;
  constexpr int kKeys = 40;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kKeys; ++i) {
        Record r;
        r.tenant = "tenant-" + std::string(40, static_cast<char>('a' + t));
        r.key = "key-" + std::to_string(t) + "-" + std::to_string(i) + std::string(60, 'k');
        r.biz_type = "refund";
        r.state = RecordState::kSucceeded;
        r.token = 1;
        r.result = "result-" + r.key;
        r.created_at = r.updated_at = absl::FromUnixSeconds(1700000000);
        absl::StatusOr<std::unique_ptr<StoreTransaction>> tx = store_->Begin();
        if (!tx.ok() || !Records(*(*tx)).InsertOrLoad(r).ok() || !(*tx)->Commit().ok()) {
          failures.fetch_add(1);
          continue;
        }
        absl::StatusOr<std::optional<Record>> got =
            store_->Get(std::string(r.tenant), std::string(r.key));
        if (!got.ok() || !got->has_value() || (*got)->result != r.result) failures.fetch_add(1);
        absl::StatusOr<std::unique_ptr<StoreTransaction>> again = store_->Begin();
        if (!again.ok()) {
          failures.fetch_add(1);
          continue;
        }
        absl::StatusOr<std::optional<Record>> dup = Records(*(*again)).InsertOrLoad(r);
        if (!dup.ok() || !dup->has_value() || (*dup)->key != r.key) failures.fetch_add(1);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

}  // namespace
}  // namespace idem
