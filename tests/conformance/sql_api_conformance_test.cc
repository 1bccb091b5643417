// The guard's contract (include/idem/guard.h) over PostgreSQL and MariaDB/MySQL, run
// twice on each: through the C++ Guard, and through the SQL API (docs/sql.md) that a
// thin adapter drives over the store's own connections (libpq, the MariaDB
// connector), each claim in the transaction the handler writes in. One contract for
// both. Then the two on one database: a key claimed through either is one record.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "conformance/store_factory.h"
#include "idem/idem.h"
#include "store/absl_compat.h"
#include "store/backend.h"
#include "store/sql/columns.h"
#include "store/sql/sql_api.h"
#include "testing/status_matchers.h"
#include "testing/temp_dir.h"

namespace idem {
namespace {

using ::idem::testing::StatusIs;
using ::testing::HasSubstr;

// What the suite asks of a guard: Guard's calls.
class GuardUnderTest {
 public:
  virtual ~GuardUnderTest() = default;
  virtual absl::StatusOr<Result> Run(const Request& request, const Handler& handler) = 0;
  virtual absl::StatusOr<Result> Claim(const Request& request, absl::Duration lease) = 0;
  virtual absl::Status Complete(const Request& request, int64_t token, std::string_view result) = 0;
  virtual absl::Status Fail(const Request& request, int64_t token, bool retryable,
                            std::string_view error) = 0;
};

class CppGuard final : public GuardUnderTest {
 public:
  explicit CppGuard(Store& store) : guard_(store) {}
  absl::StatusOr<Result> Run(const Request& request, const Handler& handler) override {
    return guard_.Run(request, handler);
  }
  absl::StatusOr<Result> Claim(const Request& request, absl::Duration lease) override {
    return guard_.Claim(request, lease);
  }
  absl::Status Complete(const Request& request, int64_t token, std::string_view result) override {
    return guard_.Complete(request, token, result);
  }
  absl::Status Fail(const Request& request, int64_t token, bool retryable,
                    std::string_view error) override {
    return guard_.Fail(request, token, retryable, error);
  }

 private:
  Guard guard_;
};

// The error bytes a final handler error is cached as: the C++ guard's shape
// (messages in this file hold no character JSON must escape).
std::string FailureJson(const absl::Status& s) {
  return absl::StrCat(R"({"code":")", absl::StatusCodeToString(s.code()), R"(","message":")",
                      s.message(), "\"}");
}

// The SQL API behind Guard's calls. Every value is a bound parameter.
class SqlApiGuard final : public GuardUnderTest {
 public:
  SqlApiGuard(Store& store, bool postgres) : store_(store), postgres_(postgres) {}

  // One call of idem.<routine>_v1 / idem_sql_<routine>_v1 in `tx`, its row as a
  // Result; the API's errors as the codes Guard's calls answer.
  absl::StatusOr<Result> Call(Transaction& tx, std::string_view routine,
                              const std::vector<Value>& args) {
    std::string marks;
    for (size_t i = 0; i < args.size(); ++i) absl::StrAppend(&marks, i == 0 ? "?" : ", ?");
    const std::string sql = postgres_
                                ? absl::StrCat(
                                      "SELECT outcome, result::text, error::text, token, "
                                      "(expires_at AT TIME ZONE 'UTC')::text, "
                                      "(lease_until AT TIME ZONE 'UTC')::text, takeover::int "
                                      "FROM idem.",
                                      AV(routine), "_v1(", marks, ")")
                                : absl::StrCat("CALL idem_sql_", AV(routine), "_v1(", marks, ")");
    absl::StatusOr<Rows> rows = tx.Query(sql, args);
    if (!rows.ok()) return Mapped(rows.status());
    if (rows->rows.size() != 1 || rows->rows[0].size() != 7) {
      return absl::InternalError(
          absl::StrCat(AV(routine), " answered ", rows->rows.size(), " rows"));
    }
    const std::vector<Value>& row = rows->rows[0];
    Result r;
    const std::string outcome = BytesOf(row[0]);
    bool known = false;
    for (Outcome o : {Outcome::kExecuted, Outcome::kAcquired, Outcome::kReplayed,
                      Outcome::kInProgress, Outcome::kKeyReused, Outcome::kFingerprintMismatch,
                      Outcome::kCachedFailure, Outcome::kExpired}) {
      if (OutcomeName(o) == outcome) {
        r.outcome = o;
        known = true;
      }
    }
    if (outcome == "released") {
      r.outcome = Outcome::kExecuted;  // Fail's answer is its status
      known = true;
    }
    if (!known) return absl::InternalError(absl::StrCat("unknown outcome '", outcome, "'"));
    r.value = !row[1].is_null() ? BytesOf(row[1]) : BytesOf(row[2]);
    r.token = row[3].is_null() ? 0 : row[3].as_int();
    r.expires_at = row[4].is_null() ? absl::InfiniteFuture() : Time(row[4]);
    r.lease_until = row[5].is_null() ? absl::InfinitePast() : Time(row[5]);
    r.takeover = row[6].as_int() != 0;
    if (r.takeover) r.previous_token = r.token - 1;
    return r;
  }

  absl::StatusOr<Result> Run(const Request& request, const Handler& handler) override {
    IDEM_ASSIGN_OR_RETURN(std::unique_ptr<StoreTransaction> tx, store_.Begin());
    absl::StatusOr<Result> claimed = Call(*tx, "claim", ClaimArgs(request, std::nullopt));
    if (!claimed.ok() || claimed->outcome != Outcome::kAcquired) {
      tx->Rollback();
      return claimed;
    }
    absl::StatusOr<std::string> value = handler(*tx);
    if (!value.ok()) {
      tx->Rollback();  // a retryable failure is the rollback
      if (IsRetryable(value.status())) return value.status();
      // A final one is cached in a transaction of its own, without the handler's writes.
      IDEM_ASSIGN_OR_RETURN(std::unique_ptr<StoreTransaction> ftx, store_.Begin());
      IDEM_ASSIGN_OR_RETURN(Result again, Call(*ftx, "claim", ClaimArgs(request, std::nullopt)));
      if (again.outcome != Outcome::kAcquired) {
        ftx->Rollback();
        return value.status();
      }
      IDEM_RETURN_IF_ERROR(Call(*ftx, "fail",
                                {Value(request.biz_type), Value(request.key), Bool(false),
                                 Value(FailureJson(value.status())), Value(request.tenant)})
                               .status());
      IDEM_RETURN_IF_ERROR(ftx->Commit());
      return value.status();
    }
    absl::StatusOr<Result> done =
        Call(*tx, "complete",
             {Value(request.biz_type), Value(request.key), Value(*value), Value(request.tenant)});
    if (!done.ok()) {
      tx->Rollback();
      return done.status();
    }
    IDEM_RETURN_IF_ERROR(tx->Commit());
    return done;
  }

  absl::StatusOr<Result> Claim(const Request& request, absl::Duration lease) override {
    IDEM_ASSIGN_OR_RETURN(std::unique_ptr<StoreTransaction> tx, store_.Begin());
    absl::StatusOr<Result> r = Call(*tx, "lease_claim", ClaimArgs(request, lease));
    if (!r.ok()) return r;
    IDEM_RETURN_IF_ERROR(tx->Commit());
    return r;
  }

  absl::Status Complete(const Request& request, int64_t token, std::string_view result) override {
    return Finish("lease_complete",
                  {Value(request.biz_type), Value(request.key),
                   Value(static_cast<long long>(token)), Value(result), Value(request.tenant)});
  }

  absl::Status Fail(const Request& request, int64_t token, bool retryable,
                    std::string_view error) override {
    return Finish("lease_fail", {Value(request.biz_type), Value(request.key),
                                 Value(static_cast<long long>(token)), Bool(retryable),
                                 error.empty() ? Value() : Value(error), Value(request.tenant)});
  }

  // claim / lease_claim's arguments; `lease` set: the lease form's.
  std::vector<Value> ClaimArgs(const Request& request, std::optional<absl::Duration> lease,
                               std::optional<absl::Duration> retention = std::nullopt) const {
    std::vector<Value> args = {Value(request.biz_type), Value(request.key),
                               Value(request.fingerprint), Value(request.tenant),
                               Seconds(retention)};
    if (lease.has_value()) {
      args.push_back(Seconds(*lease <= absl::ZeroDuration() ? absl::Seconds(30) : *lease));
    }
    return args;
  }

  bool postgres() const { return postgres_; }

 private:
  absl::Status Finish(std::string_view routine, const std::vector<Value>& args) {
    IDEM_ASSIGN_OR_RETURN(std::unique_ptr<StoreTransaction> tx, store_.Begin());
    IDEM_RETURN_IF_ERROR(Call(*tx, routine, args).status());
    return tx->Commit();
  }

  // PostgreSQL takes an interval or a boolean as text; MySQL seconds and 0/1.
  Value Seconds(std::optional<absl::Duration> d) const {
    if (!d.has_value()) return Value();
    const int64_t s = absl::ToInt64Seconds(*d);
    return postgres_ ? Value(absl::StrCat(s, " seconds")) : Value(static_cast<long long>(s));
  }
  Value Bool(bool b) const { return postgres_ ? Value(b ? "true" : "false") : Value(b ? 1 : 0); }

  static absl::Time Time(const Value& v) {
    absl::Time t;
    std::string err;
    if (!absl::ParseTime("%Y-%m-%d %H:%M:%E*S", BytesOf(v), absl::UTCTimeZone(), &t, &err)) {
      ADD_FAILURE() << "not a time: " << BytesOf(v) << ": " << err;
    }
    return t;
  }

  // The API's errors (docs/sql.md) as the codes of Guard's calls.
  static absl::Status Mapped(const absl::Status& s) {
    const absl::string_view m = s.message();
    if (absl::StrContains(m, "idem: not_found:")) return absl::NotFoundError(m);
    if (absl::StrContains(m, "idem: key_reused:")) return absl::FailedPreconditionError(m);
    if (absl::StrContains(m, "idem: lease_lost:")) return absl::AbortedError(m);
    if (absl::StrContains(m, "idem: already_finished:")) return absl::AlreadyExistsError(m);
    return s;
  }

  Store& store_;
  const bool postgres_;
};

// The server backends that have stored routines.
std::vector<testing::Backend> ApiBackends() {
  std::vector<testing::Backend> out;
  for (testing::Backend& b : testing::SqlBackends()) {
    if (b.name == "postgres" || b.name == "mysql") out.push_back(std::move(b));
  }
  return out;
}

// A store of `backend` in a fresh schema/database, with a ledger table and the SQL
// API as `idem migrate` installs it.
class ApiFixture {
 protected:
  void Open(const testing::Backend& backend) {
    backend_ = backend;
    url_ = testing::WithParams(backend.url(dir_.path()), backend.short_lock_timeout);
    absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(url_);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    ASSERT_OK(testing::ExecAndCommit(
        *store_,
        "CREATE TABLE ledger (order_no VARCHAR(64) PRIMARY KEY, amount INTEGER NOT NULL)"));
    absl::StatusOr<sql::SqlApiFound> found = sql::FindSqlApi(*store_);
    ASSERT_TRUE(found.ok()) << found.status();
    ASSERT_TRUE(found->api.has_value());
    // One API per database (PostgreSQL: tests share it, each in a schema of its own).
    if (found->state != sql::SqlApiState::kCurrent) {
      ASSERT_OK(sql::RunSqlApiStatements(*store_, found->api->install));
    }
    sql_ = std::make_unique<SqlApiGuard>(*store_, backend.name == "postgres");
  }

  int64_t Count(const std::string& sql) { return testing::QueryScalar(*store_, sql); }

  static Request Req(std::string key, std::string biz_type = "refund", std::string fp = "") {
    return Request{
        .biz_type = std::move(biz_type), .key = std::move(key), .fingerprint = std::move(fp)};
  }

  testing::TempDir dir_;
  testing::Backend backend_;
  std::string url_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<SqlApiGuard> sql_;
};

class SqlApiConformanceTest
    : public ApiFixture,
      public ::testing::TestWithParam<std::tuple<testing::Backend, std::string>> {
 protected:
  void SetUp() override {
    Open(std::get<0>(GetParam()));
    if (HasFatalFailure()) return;
    if (std::get<1>(GetParam()) == "guard") {
      guard_ = std::make_unique<CppGuard>(*store_);
    } else {
      guard_ = std::make_unique<SqlApiGuard>(*store_, backend_.name == "postgres");
    }
  }

  // A handler that inserts a ledger row for `order_no`, counts its runs and returns
  // `result` (or `error`).
  Handler Booking(std::string order_no, std::string result, absl::Status error = absl::OkStatus()) {
    return [this, order_no, result, error](Transaction& tx) -> absl::StatusOr<std::string> {
      ++runs_;
      IDEM_RETURN_IF_ERROR(
          tx.Exec("INSERT INTO ledger (order_no, amount) VALUES (?, 5)", {Value(order_no)})
              .status());
      if (!error.ok()) return error;
      return result;
    };
  }

  int64_t LedgerRows() { return Count("SELECT COUNT(*) FROM ledger"); }

  GuardUnderTest& guard() { return *guard_; }

  std::unique_ptr<GuardUnderTest> guard_;
  std::atomic<int> runs_{0};
};

TEST_P(SqlApiConformanceTest, FirstRunExecutesThenReplaysByteIdenticalResult) {
  const std::string result = "{\"refund_id\" : \"F-1\",\n \"amount\":1.50,\"a\":[ 2,1 ]}";
  absl::StatusOr<Result> first = guard().Run(Req("R-1"), Booking("O-1", result));
  ASSERT_OK(first);
  EXPECT_EQ(first->outcome, Outcome::kExecuted);
  EXPECT_EQ(first->value, result);
  EXPECT_EQ(first->token, 1);
  absl::StatusOr<Result> again = guard().Run(Req("R-1"), Booking("O-2", "{}"));
  ASSERT_OK(again);
  EXPECT_EQ(again->outcome, Outcome::kReplayed);
  EXPECT_EQ(again->value, result);
  EXPECT_EQ(runs_.load(), 1);
  EXPECT_EQ(LedgerRows(), 1);
  absl::StatusOr<std::optional<Record>> record = store_->Get("default", "R-1");
  ASSERT_OK(record);
  ASSERT_TRUE(record->has_value());
  EXPECT_EQ((*record)->state, RecordState::kSucceeded);
  EXPECT_EQ((*record)->result, result);
  EXPECT_EQ((*record)->token, 1);
  EXPECT_EQ((*record)->lease_until, absl::InfinitePast());
  EXPECT_EQ((*record)->expires_at, absl::InfiniteFuture());
}

TEST_P(SqlApiConformanceTest, BizTypeThenFingerprintThenState) {
  ASSERT_OK(guard().Run(Req("K", "refund", "fp1"), Booking("O-1", "1")));
  absl::StatusOr<Result> reused = guard().Run(Req("K", "payment", "fp2"), Booking("O-2", "2"));
  ASSERT_OK(reused);
  EXPECT_EQ(reused->outcome, Outcome::kKeyReused);
  EXPECT_EQ(reused->value, "");
  absl::StatusOr<Result> mismatch = guard().Run(Req("K", "refund", "fp2"), Booking("O-3", "3"));
  ASSERT_OK(mismatch);
  EXPECT_EQ(mismatch->outcome, Outcome::kFingerprintMismatch);
  EXPECT_EQ(mismatch->value, "");
  // Compared only when both carry one.
  absl::StatusOr<Result> none = guard().Run(Req("K", "refund", ""), Booking("O-4", "4"));
  ASSERT_OK(none);
  EXPECT_EQ(none->outcome, Outcome::kReplayed);
  EXPECT_EQ(none->value, "1");
  EXPECT_EQ(runs_.load(), 1);
}

TEST_P(SqlApiConformanceTest, RetryableErrorLeavesNoRecordAndNoRows) {
  absl::StatusOr<Result> r =
      guard().Run(Req("K"), Booking("O-1", "1", absl::UnavailableError("downstream busy")));
  EXPECT_THAT(r.status(), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(LedgerRows(), 0);
  EXPECT_EQ(Count("SELECT COUNT(*) FROM idem_records"), 0);
  absl::StatusOr<Result> retry = guard().Run(Req("K"), Booking("O-1", "2"));
  ASSERT_OK(retry);
  EXPECT_EQ(retry->outcome, Outcome::kExecuted);
  EXPECT_EQ(retry->token, 1);
  EXPECT_EQ(LedgerRows(), 1);
}

TEST_P(SqlApiConformanceTest, FinalErrorIsCachedWithoutTheBusinessRows) {
  absl::StatusOr<Result> r =
      guard().Run(Req("K"), Booking("O-1", "1", absl::FailedPreconditionError("card declined")));
  EXPECT_THAT(r.status(), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(LedgerRows(), 0);
  absl::StatusOr<Result> again = guard().Run(Req("K"), Booking("O-2", "2"));
  ASSERT_OK(again);
  EXPECT_EQ(again->outcome, Outcome::kCachedFailure);
  EXPECT_THAT(again->value, HasSubstr("card declined"));
  EXPECT_THAT(again->value, HasSubstr("FAILED_PRECONDITION"));
  EXPECT_EQ(runs_.load(), 1);
}

TEST_P(SqlApiConformanceTest, BadKeysBizTypesAndTenantsAreRefusedBeforeAnythingIsWritten) {
  const std::vector<Request> bad = {
      Req(""),
      Req(std::string(256, 'k')),
      Req("K", ""),
      Req("K", std::string(256, 'b')),
      Request{.tenant = "", .biz_type = "refund", .key = "K"},
      Request{.tenant = std::string(256, 't'), .biz_type = "refund", .key = "K"}};
  for (const Request& req : bad) {
    absl::StatusOr<Result> r = guard().Run(req, Booking("O-1", "1"));
    EXPECT_THAT(r.status(), StatusIs(absl::StatusCode::kInvalidArgument))
        << req.key.size() << "/" << req.biz_type.size() << "/" << req.tenant.size();
  }
  EXPECT_EQ(runs_.load(), 0);
  EXPECT_EQ(Count("SELECT COUNT(*) FROM idem_records"), 0);
  // The longest of each is fine.
  ASSERT_OK(guard().Run(Request{.tenant = std::string(255, 't'),
                                .biz_type = std::string(255, 'b'),
                                .key = std::string(255, 'k')},
                        Booking("O-2", "2")));
}

TEST_P(SqlApiConformanceTest, TenantsHaveSeparateKeySpaces) {
  ASSERT_OK(guard().Run(Request{.tenant = "a", .biz_type = "refund", .key = "K"},
                        Booking("O-1", "\"a\"")));
  absl::StatusOr<Result> b = guard().Run(Request{.tenant = "b", .biz_type = "refund", .key = "K"},
                                         Booking("O-2", "\"b\""));
  ASSERT_OK(b);
  EXPECT_EQ(b->outcome, Outcome::kExecuted);
  EXPECT_EQ(b->value, "\"b\"");
}

TEST_P(SqlApiConformanceTest, LeaseClaimCompleteReplay) {
  absl::StatusOr<Result> c = guard().Claim(Req("L", "refund", "fp"), absl::Seconds(30));
  ASSERT_OK(c);
  EXPECT_EQ(c->outcome, Outcome::kAcquired);
  EXPECT_EQ(c->token, 1);
  EXPECT_FALSE(c->takeover);
  EXPECT_GT(c->lease_until, absl::Now() + absl::Seconds(20));
  absl::StatusOr<Result> busy = guard().Claim(Req("L", "refund", "fp"), absl::Seconds(30));
  ASSERT_OK(busy);
  EXPECT_EQ(busy->outcome, Outcome::kInProgress);
  EXPECT_EQ(busy->token, 1);
  absl::StatusOr<Result> run = guard().Run(Req("L", "refund", "fp"), Booking("O-1", "1"));
  ASSERT_OK(run);
  EXPECT_EQ(run->outcome, Outcome::kInProgress);
  ASSERT_OK(guard().Complete(Req("L"), 1, R"({"ok": true})"));
  ASSERT_OK(guard().Complete(Req("L"), 1, R"({"ok": true})"));  // the same call again
  EXPECT_THAT(guard().Complete(Req("L"), 1, R"({"ok": false})"),
              StatusIs(absl::StatusCode::kAlreadyExists));
  absl::StatusOr<Result> replay = guard().Claim(Req("L", "refund", "fp"), absl::Seconds(30));
  ASSERT_OK(replay);
  EXPECT_EQ(replay->outcome, Outcome::kReplayed);
  EXPECT_EQ(replay->value, R"({"ok": true})");
}

TEST_P(SqlApiConformanceTest, ExpiredLeaseIsTakenOverAndTheStaleTokenLoses) {
  ASSERT_OK(guard().Claim(Req("L", "refund", "fp"), absl::Seconds(1)));
  absl::SleepFor(absl::Milliseconds(1300));
  EXPECT_EQ(guard().Claim(Req("L", "refund", "other"), absl::Seconds(30))->outcome,
            Outcome::kFingerprintMismatch);  // compared on a takeover too
  absl::StatusOr<Result> taken = guard().Claim(Req("L", "refund", "fp"), absl::Seconds(30));
  ASSERT_OK(taken);
  EXPECT_EQ(taken->outcome, Outcome::kAcquired);
  EXPECT_EQ(taken->token, 2);
  EXPECT_TRUE(taken->takeover);
  EXPECT_EQ(taken->previous_token, 1);
  EXPECT_THAT(guard().Complete(Req("L"), 1, "\"stale\""), StatusIs(absl::StatusCode::kAborted));
  ASSERT_OK(guard().Complete(Req("L"), 2, "\"fresh\""));
  EXPECT_EQ(guard().Claim(Req("L"), absl::Seconds(30))->value, "\"fresh\"");
}

TEST_P(SqlApiConformanceTest, RetryableFailReleasesAndTokensKeepGrowing) {
  ASSERT_OK(guard().Claim(Req("L"), absl::Seconds(30)));
  ASSERT_OK(guard().Fail(Req("L"), 1, /*retryable=*/true, ""));
  ASSERT_OK(guard().Fail(Req("L"), 1, /*retryable=*/true, ""));  // again: fine
  absl::StatusOr<Result> next = guard().Claim(Req("L"), absl::Seconds(30));
  ASSERT_OK(next);
  EXPECT_EQ(next->outcome, Outcome::kAcquired);
  EXPECT_EQ(next->token, 2);
  EXPECT_FALSE(next->takeover);
  ASSERT_OK(guard().Fail(Req("L"), 2, /*retryable=*/false, R"({"code":"DECLINED"})"));
  absl::StatusOr<Result> cached = guard().Claim(Req("L"), absl::Seconds(30));
  ASSERT_OK(cached);
  EXPECT_EQ(cached->outcome, Outcome::kCachedFailure);
  EXPECT_EQ(cached->value, R"({"code":"DECLINED"})");
}

TEST_P(SqlApiConformanceTest, FinishingAnUnknownKeyOrAnotherBizType) {
  EXPECT_THAT(guard().Complete(Req("none"), 1, "1"), StatusIs(absl::StatusCode::kNotFound));
  ASSERT_OK(guard().Claim(Req("L", "refund"), absl::Seconds(30)));
  EXPECT_THAT(guard().Complete(Req("L", "payment"), 1, "1"),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(guard().Fail(Req("L", "payment"), 1, false, "{}"),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

// Two transactions on one key: the second waits on the first's row and answers
// after it ends, or in_progress when it holds the key past the lock timeout.
TEST_P(SqlApiConformanceTest, TwoTransactionsOnOneKey) {
  struct Case {
    absl::Status first_error;  // how the first transaction ends
    absl::Duration hold;       // how long it holds the key
    Outcome second;            // what the second then answers
  };
  const Case cases[] = {
      {absl::OkStatus(), absl::Milliseconds(400), Outcome::kReplayed},
      {absl::UnavailableError("rolled back"), absl::Milliseconds(400), Outcome::kExecuted},
      // Past both lock timeouts (the URL's 1 s, the SQL API's 2 s).
      {absl::OkStatus(), absl::Milliseconds(3500), Outcome::kInProgress},
  };
  int n = 0;
  for (const Case& c : cases) {
    const std::string key = absl::StrCat("K-", n++);
    absl::Notification claimed;
    absl::StatusOr<Result> first = absl::UnknownError("not run");
    std::thread holder([&] {
      first = guard().Run(Req(key), [&](Transaction& tx) -> absl::StatusOr<std::string> {
        IDEM_RETURN_IF_ERROR(
            tx.Exec("INSERT INTO ledger (order_no, amount) VALUES (?, 1)", {Value(key + "-a")})
                .status());
        claimed.Notify();
        absl::SleepFor(c.hold);
        if (!c.first_error.ok()) return c.first_error;
        return std::string("\"first\"");
      });
    });
    claimed.WaitForNotification();
    absl::StatusOr<Result> second = guard().Run(Req(key), Booking(key + "-b", "\"second\""));
    holder.join();
    SCOPED_TRACE(key);
    ASSERT_OK(second);
    EXPECT_EQ(second->outcome, c.second) << key << ": " << OutcomeName(second->outcome);
    if (c.second == Outcome::kReplayed) {
      EXPECT_EQ(second->value, "\"first\"");
    }
    if (c.first_error.ok()) {
      ASSERT_OK(first);
      EXPECT_EQ(first->outcome, Outcome::kExecuted);
    }
  }
  // One business row per key: the first's, except where it rolled back.
  EXPECT_EQ(LedgerRows(), 3);
}

TEST_P(SqlApiConformanceTest, EightThreadsOneKeyOneRun) {
  std::vector<std::thread> threads;
  std::atomic<int> executed{0}, replayed{0}, busy{0};
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      absl::StatusOr<Result> r = guard().Run(Req("K"), Booking(absl::StrCat("O-", i), "\"x\""));
      if (!r.ok()) {
        ADD_FAILURE() << r.status();
        return;
      }
      if (r->outcome == Outcome::kExecuted) ++executed;
      if (r->outcome == Outcome::kReplayed) ++replayed;
      if (r->outcome == Outcome::kInProgress) ++busy;
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(executed.load(), 1);
  EXPECT_EQ(executed + replayed + busy, 8);
  EXPECT_EQ(runs_.load(), 1);
  EXPECT_EQ(LedgerRows(), 1);
}

// The crash case of a claim in the caller's transaction: the session dies before
// the commit (a killed process, a failover). Nothing of it stays; the key is free.
TEST_P(SqlApiConformanceTest, ASessionKilledAfterTheClaimLeavesTheKeyFree) {
  absl::StatusOr<Result> r =
      guard().Run(Req("K"), [&](Transaction& tx) -> absl::StatusOr<std::string> {
        ++runs_;
        IDEM_RETURN_IF_ERROR(
            tx.Exec("INSERT INTO ledger (order_no, amount) VALUES ('O-1', 1)").status());
        EXPECT_GT(backend_.kill_sessions(url_, /*settle_to=*/1000), 0);
        return std::string("\"lost\"");
      });
  EXPECT_FALSE(r.ok());
  absl::StatusOr<Result> again = guard().Run(Req("K"), Booking("O-1", "\"kept\""));
  ASSERT_OK(again);
  EXPECT_EQ(again->outcome, Outcome::kExecuted);
  EXPECT_EQ(again->token, 1);
  EXPECT_EQ(runs_.load(), 2);
  EXPECT_EQ(LedgerRows(), 1);
  EXPECT_EQ((*store_->Get("default", "K"))->result, "\"kept\"");
}

INSTANTIATE_TEST_SUITE_P(Servers, SqlApiConformanceTest,
                         ::testing::Combine(::testing::ValuesIn(ApiBackends()),
                                            ::testing::Values("guard", "sql_api")),
                         [](const auto& info) {
                           return std::get<0>(info.param).name + "_" + std::get<1>(info.param);
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(SqlApiConformanceTest);

// The SQL API alone: what only it can be asked (its arguments, its settings).
class SqlApiTest : public ApiFixture, public ::testing::TestWithParam<testing::Backend> {
 protected:
  void SetUp() override { Open(GetParam()); }
  bool postgres() const { return GetParam().name == "postgres"; }

  absl::StatusOr<Result> InTransaction(std::string_view routine, const std::vector<Value>& args) {
    IDEM_ASSIGN_OR_RETURN(std::unique_ptr<StoreTransaction> tx, store_->Begin());
    absl::StatusOr<Result> r = sql_->Call(*tx, routine, args);
    if (r.ok()) IDEM_RETURN_IF_ERROR(tx->Commit());
    return r;
  }
};

TEST_P(SqlApiTest, BadArgumentsAreNamedAndNothingIsWritten) {
  const std::string fp_limit = postgres() ? "1024" : "255";
  struct Case {
    std::string routine;
    std::vector<Value> args;
    std::string says;
  };
  const Value none;
  const std::vector<Case> cases = {
      {"claim", {Value("refund"), Value(""), none, Value("default"), none}, "idem: key is empty"},
      {"claim",
       {Value("refund"), Value(std::string(256, 'k')), none, Value("default"), none},
       "idem: key is 256 bytes, over the limit of 255"},
      {"claim", {Value("refund"), none, none, Value("default"), none}, "idem: key is NULL"},
      {"claim", {Value(""), Value("K"), none, Value("default"), none}, "idem: biz_type is empty"},
      {"claim", {Value("refund"), Value("K"), none, Value(""), none}, "idem: tenant is empty"},
      {"claim",
       {Value("refund"), Value("K"), none, Value(std::string(300, 't')), none},
       "idem: tenant is 300 bytes"},
      {"claim",
       {Value("refund"), Value("K"), Value(std::string(1025, 'f')), Value("default"), none},
       "idem: fingerprint is 1025 bytes, over the limit of " + fp_limit},
      {"lease_claim",
       {Value("refund"), Value("K"), none, Value("default"), none,
        postgres() ? Value("-5 seconds") : Value(-5)},
       "idem: lease"},
      {"claim",
       {Value("refund"), Value("K"), none, Value("default"),
        postgres() ? Value("0 seconds") : Value(0)},
       "idem: retention"},
      {"lease_complete",
       {Value("refund"), Value("K"), Value(1), Value("not json"), Value("default")},
       "idem: result is not valid JSON"},
      {"lease_complete",
       {Value("refund"), Value("K"), Value(1), none, Value("default")},
       "idem: result is NULL"},
      {"lease_fail",
       {Value("refund"), Value("K"), Value(1), postgres() ? Value("false") : Value(0),
        Value("{oops"), Value("default")},
       "idem: error is not valid JSON"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<Result> r = InTransaction(c.routine, c.args);
    EXPECT_THAT(r.status(), StatusIs(absl::StatusCode::kInvalidArgument)) << c.says;
    EXPECT_THAT(r.status().message(), HasSubstr(c.says));
  }
  if (!postgres()) {  // PostgreSQL text cannot hold a NUL byte at all
    absl::StatusOr<Result> r = InTransaction(
        "claim",
        {Value("refund"), Value(Blob{std::string("a\0b", 3)}), none, Value("default"), none});
    EXPECT_THAT(r.status().message(), HasSubstr("idem: key contains a NUL byte"));
  }
  EXPECT_EQ(Count("SELECT COUNT(*) FROM idem_records"), 0);
}

// A lock wait past the function's own timeout answers in_progress, leaves the
// caller's transaction usable and the caller's session settings as they were.
TEST_P(SqlApiTest, ALockWaitAnswersInProgressAndKeepsTheCallersSettings) {
  std::unique_ptr<StoreTransaction> holder = *store_->Begin();
  ASSERT_EQ(sql_->Call(*holder, "claim", sql_->ClaimArgs(Req("K"), std::nullopt))->outcome,
            Outcome::kAcquired);
  const std::string setting =
      postgres() ? "SELECT current_setting('lock_timeout')" : "SELECT @@innodb_lock_wait_timeout";
  std::unique_ptr<StoreTransaction> waiter = *store_->Begin();
  absl::StatusOr<Rows> before = waiter->Query(setting);
  ASSERT_OK(before);
  const absl::Time start = absl::Now();
  absl::StatusOr<Result> r = sql_->Call(*waiter, "claim", sql_->ClaimArgs(Req("K"), std::nullopt));
  ASSERT_OK(r);
  EXPECT_EQ(r->outcome, Outcome::kInProgress);
  EXPECT_GE(absl::Now() - start,
            absl::Milliseconds(1900));  // the function's 2 s, not the URL's 1 s
  absl::StatusOr<Rows> after = waiter->Query(setting);
  ASSERT_OK(after);  // the transaction goes on
  EXPECT_EQ(BytesOf(after->rows[0][0]), BytesOf(before->rows[0][0]));
  EXPECT_EQ(after->rows[0][0].is_int() ? after->rows[0][0].as_int() : 0,
            before->rows[0][0].is_int() ? before->rows[0][0].as_int() : 0);
  ASSERT_OK(waiter->Commit());
  ASSERT_OK(holder->Commit());  // claimed, never completed: the lease holds the key
  EXPECT_EQ(sql_->Claim(Req("K"), absl::Seconds(30))->outcome, Outcome::kInProgress);
}

// complete/fail finish only the claim their transaction holds.
TEST_P(SqlApiTest, CompleteNeedsTheClaimOfItsOwnTransaction) {
  ASSERT_OK(sql_->Claim(Req("K"), absl::Seconds(30)));  // a lease holder's claim
  std::unique_ptr<StoreTransaction> tx = *store_->Begin();
  absl::StatusOr<Result> r =
      sql_->Call(*tx, "complete", {Value("refund"), Value("K"), Value("1"), Value("default")});
  EXPECT_THAT(r.status(), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(r.status().message(), HasSubstr("holds no claim of this key"));
  tx->Rollback();
  EXPECT_EQ((*store_->Get("default", "K"))->state, RecordState::kProcessing);
}

// In its transaction, complete answers the same again, and refuses other content.
TEST_P(SqlApiTest, CompleteRepeatedInItsTransaction) {
  std::unique_ptr<StoreTransaction> tx = *store_->Begin();
  ASSERT_EQ(sql_->Call(*tx, "claim", sql_->ClaimArgs(Req("K"), std::nullopt))->outcome,
            Outcome::kAcquired);
  const std::vector<Value> args = {Value("refund"), Value("K"), Value("[1]"), Value("default")};
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<Result> done = sql_->Call(*tx, "complete", args);
    ASSERT_OK(done);
    EXPECT_EQ(done->outcome, Outcome::kExecuted);
    EXPECT_EQ(done->value, "[1]");
  }
  absl::StatusOr<Result> other =
      sql_->Call(*tx, "complete", {Value("refund"), Value("K"), Value("[2]"), Value("default")});
  EXPECT_THAT(other.status(), StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_THAT(other.status().message(), HasSubstr("idem: already_finished:"));
  tx->Rollback();
  EXPECT_EQ(Count("SELECT COUNT(*) FROM idem_records"), 0);
}

// PostgreSQL: a result bound as text (an untyped or varchar parameter: what JDBC's
// setString sends) or as json is stored byte for byte; both forms of complete exist.
TEST_P(SqlApiTest, AResultBoundAsTextVarcharOrJsonIsStoredByteForByte) {
  if (!postgres()) GTEST_SKIP() << "MySQL procedures take LONGTEXT only";
  const std::string result = R"({"b" : 1,  "a": [1.50]})";
  int n = 0;
  for (const char* cast : {"", "::varchar", "::json"}) {
    const std::string key = absl::StrCat("K-", ++n);
    std::unique_ptr<StoreTransaction> tx = *store_->Begin();
    ASSERT_EQ(sql_->Call(*tx, "claim", sql_->ClaimArgs(Req(key), std::nullopt))->outcome,
              Outcome::kAcquired);
    absl::StatusOr<Rows> done = tx->Query(
        absl::StrCat("SELECT outcome, result::text FROM idem.complete_v1(?, ?, ?", cast, ")"),
        {Value("refund"), Value(key), Value(result)});
    ASSERT_OK(done);
    ASSERT_EQ(done->rows.size(), 1u);
    EXPECT_EQ(BytesOf(done->rows[0][0]), "executed") << cast;
    EXPECT_EQ(BytesOf(done->rows[0][1]), result) << cast;
    ASSERT_OK(tx->Commit());
    EXPECT_EQ((*store_->Get("default", key))->result, result) << cast;
  }
  std::unique_ptr<StoreTransaction> tx = *store_->Begin();
  absl::StatusOr<Rows> bad = tx->Query("SELECT outcome FROM idem.complete_v1(?, ?, ?::varchar)",
                                       {Value("refund"), Value("K-1"), Value("{oops")});
  EXPECT_THAT(bad.status().message(), HasSubstr("idem: result is not valid JSON"));
  tx->Rollback();
}

INSTANTIATE_TEST_SUITE_P(Servers, SqlApiTest, ::testing::ValuesIn(ApiBackends()),
                         [](const auto& info) { return info.param.name; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(SqlApiTest);

// The C++ store and the SQL API on one database: one record per key, the outcomes
// of the contract whichever claims first.
class SqlApiWithGuardTest : public ApiFixture, public ::testing::TestWithParam<testing::Backend> {
 protected:
  void SetUp() override {
    Open(GetParam());
    if (!HasFatalFailure()) guard_ = std::make_unique<Guard>(*store_);
  }
  Handler Returning(std::string result) {
    return [result](Transaction&) -> absl::StatusOr<std::string> { return result; };
  }
  std::unique_ptr<Guard> guard_;
};

TEST_P(SqlApiWithGuardTest, EitherSideReplaysTheOthersResultByteForByte) {
  const std::string by_sql = R"({"by" :  "sql", "n": [1,2]})";
  absl::StatusOr<Result> first = sql_->Run(Req("K-1", "refund", "fp"), Returning(by_sql));
  ASSERT_OK(first);
  EXPECT_EQ(first->outcome, Outcome::kExecuted);
  absl::StatusOr<Result> cpp = guard_->Run(Req("K-1", "refund", "fp"), Returning("{}"));
  ASSERT_OK(cpp);
  EXPECT_EQ(cpp->outcome, Outcome::kReplayed);
  EXPECT_EQ(cpp->value, by_sql);
  EXPECT_EQ(guard_->Run(Req("K-1", "refund", "other"), Returning("{}"))->outcome,
            Outcome::kFingerprintMismatch);
  EXPECT_EQ(guard_->Run(Req("K-1", "payment"), Returning("{}"))->outcome, Outcome::kKeyReused);

  const std::string by_cpp = R"({"by":"c++" })";
  ASSERT_OK(guard_->Run(Req("K-2", "refund", "fp"), Returning(by_cpp)));
  absl::StatusOr<Result> sql = sql_->Run(Req("K-2", "refund", "fp"), Returning("{}"));
  ASSERT_OK(sql);
  EXPECT_EQ(sql->outcome, Outcome::kReplayed);
  EXPECT_EQ(sql->value, by_cpp);
  EXPECT_EQ(sql_->Run(Req("K-2", "payment"), Returning("{}"))->outcome, Outcome::kKeyReused);

  // The records are the same whichever side wrote them.
  absl::StatusOr<Record> a = guard_->Get(Req("K-1"));
  absl::StatusOr<Record> b = guard_->Get(Req("K-2"));
  ASSERT_OK(a);
  ASSERT_OK(b);
  EXPECT_EQ(a->state, RecordState::kSucceeded);
  EXPECT_EQ(a->fingerprint, "fp");
  EXPECT_EQ(a->token, b->token);
  EXPECT_EQ(a->lease_until, b->lease_until);
  EXPECT_EQ(a->expires_at, b->expires_at);
  EXPECT_EQ(a->purged_at, b->purged_at);
  EXPECT_LT(absl::Now() - a->created_at, absl::Minutes(1));
  EXPECT_GE(a->updated_at, a->created_at);
  EXPECT_EQ(Count("SELECT COUNT(*) FROM idem_records"), 2);
}

TEST_P(SqlApiWithGuardTest, LeasesAndTokensAreShared) {
  absl::StatusOr<Result> held = guard_->Claim(Req("L"), absl::Seconds(30));
  ASSERT_OK(held);
  absl::StatusOr<Result> busy = sql_->Claim(Req("L"), absl::Seconds(30));
  ASSERT_OK(busy);
  EXPECT_EQ(busy->outcome, Outcome::kInProgress);
  EXPECT_EQ(busy->token, held->token);
  EXPECT_LT(absl::AbsDuration(busy->lease_until - held->lease_until), absl::Milliseconds(1));
  EXPECT_THAT(sql_->Complete(Req("L"), held->token + 1, "1"), StatusIs(absl::StatusCode::kAborted));
  ASSERT_OK(sql_->Complete(Req("L"), held->token, R"({"done" : 1})"));
  EXPECT_EQ(guard_->Run(Req("L"), Returning("{}"))->value, R"({"done" : 1})");
  // The other way round: a lease the SQL API took, completed by the C++ guard.
  absl::StatusOr<Result> sql_held = sql_->Claim(Req("M"), absl::Seconds(30));
  ASSERT_OK(sql_held);
  EXPECT_EQ(guard_->Claim(Req("M"))->outcome, Outcome::kInProgress);
  ASSERT_OK(guard_->Complete(Req("M"), sql_held->token, "\"m\""));
  EXPECT_EQ(sql_->Claim(Req("M"), absl::Seconds(30))->value, "\"m\"");
}

// A claim held open in an SQL transaction makes the C++ guard wait on the row, then
// replay what the transaction committed.
TEST_P(SqlApiWithGuardTest, TheGuardWaitsOnAnOpenSqlClaim) {
  std::unique_ptr<StoreTransaction> tx = *store_->Begin();
  ASSERT_EQ(sql_->Call(*tx, "claim", sql_->ClaimArgs(Req("K"), std::nullopt))->outcome,
            Outcome::kAcquired);
  absl::StatusOr<Result> cpp = absl::UnknownError("not run");
  std::thread t([&] { cpp = guard_->Run(Req("K"), Returning("{}")); });
  absl::SleepFor(absl::Milliseconds(300));
  ASSERT_OK(
      sql_->Call(*tx, "complete", {Value("refund"), Value("K"), Value("[1]"), Value("default")}));
  ASSERT_OK(tx->Commit());
  t.join();
  ASSERT_OK(cpp);
  EXPECT_EQ(cpp->outcome, Outcome::kReplayed);
  EXPECT_EQ(cpp->value, "[1]");
}

// Retention as the server keeps it: expires_at from the claim, a tombstone after
// the purge answers expired on both sides.
TEST_P(SqlApiWithGuardTest, RetentionAndTombstones) {
  std::unique_ptr<StoreTransaction> tx = *store_->Begin();
  absl::StatusOr<Result> c = sql_->Call(
      *tx, "claim", sql_->ClaimArgs(Req("K", "refund", "fp"), std::nullopt, absl::Hours(24)));
  ASSERT_OK(c);
  ASSERT_OK(
      sql_->Call(*tx, "complete", {Value("refund"), Value("K"), Value("1"), Value("default")}));
  ASSERT_OK(tx->Commit());
  absl::StatusOr<Record> record = guard_->Get(Req("K"));
  ASSERT_OK(record);
  EXPECT_EQ(record->expires_at, c->expires_at);
  EXPECT_LT(absl::AbsDuration(record->expires_at - (record->created_at + absl::Hours(24))),
            absl::Milliseconds(1));
  // The purge's own step (RecordTransaction::Retire), as `idem purge` takes it.
  {
    std::unique_ptr<StoreTransaction> ptx = *store_->Begin();
    absl::StatusOr<std::optional<Record>> loaded = Records(*ptx).Load("default", "K");
    ASSERT_OK(loaded);
    ASSERT_TRUE(loaded->has_value());
    absl::StatusOr<bool> retired =
        Records(*ptx).Retire(**loaded, absl::Now(), absl::Now() + absl::Hours(24));
    ASSERT_OK(retired);
    ASSERT_TRUE(*retired);
    ASSERT_OK(ptx->Commit());
  }
  absl::StatusOr<Result> late = sql_->Run(Req("K", "refund", "fp"), Returning("2"));
  ASSERT_OK(late);
  EXPECT_EQ(late->outcome, Outcome::kExpired);
  EXPECT_EQ(guard_->Run(Req("K", "refund", "fp"), Returning("2"))->outcome, Outcome::kExpired);
  EXPECT_EQ(sql_->Run(Req("K", "refund", "other"), Returning("2"))->outcome,
            Outcome::kFingerprintMismatch);
  EXPECT_EQ(sql_->Run(Req("K", "payment"), Returning("2"))->outcome, Outcome::kKeyReused);
  EXPECT_THAT(sql_->Complete(Req("K"), c->token, "1"), StatusIs(absl::StatusCode::kNotFound));
}

// PostgreSQL: finishing through the SQL API wakes the servers that wait on the key,
// as the store's own finish does (the payload the store's listener reads).
TEST_P(SqlApiWithGuardTest, FinishingNotifiesTheStoresListeners) {
  if (GetParam().name != "postgres") GTEST_SKIP() << "LISTEN/NOTIFY is PostgreSQL's";
  absl::Mutex mu;
  std::vector<std::pair<std::string, std::string>> heard;
  std::shared_ptr<void> subscription =
      Backend(*store_).SubscribeFinished([&](std::string_view tenant, std::string_view key) {
        absl::MutexLock lock(&mu);
        heard.emplace_back(std::string(tenant), std::string(key));
      });
  ASSERT_NE(subscription, nullptr);
  // The listener connects on a thread of its own: keys are finished until it
  // hears one. Their base64 holds "+", "/" and padding ("Pj4+Pz8/SzA…").
  const std::string tenant = "t\xc3\xa9";
  std::vector<std::string> sent;
  EXPECT_TRUE(testing::WaitUntil([&] {
    const std::string key = ">>>???K" + std::to_string(sent.size());
    absl::StatusOr<Result> r =
        sql_->Run(Request{.tenant = tenant, .biz_type = "refund", .key = key}, Returning("1"));
    EXPECT_TRUE(r.ok()) << r.status();
    sent.push_back(key);
    absl::MutexLock lock(&mu);
    for (const auto& [t, k] : heard) {
      if (t == tenant && std::find(sent.begin(), sent.end(), k) != sent.end()) return true;
    }
    return false;
  }));
}

INSTANTIATE_TEST_SUITE_P(Servers, SqlApiWithGuardTest, ::testing::ValuesIn(ApiBackends()),
                         [](const auto& info) { return info.param.name; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(SqlApiWithGuardTest);

}  // namespace
}  // namespace idem
