// MySQL/MariaDB-specific behaviour of the mysql:// store: URLs, a missing database,
// the key column's length, what a lock wait timeout leaves of a transaction,
// contended claims, stale connections, procedures, round trips and its column types.
// The contract every backend keeps (a newer schema refused, a lock held past the
// timeout failing closed, the pool recovering after KILL, a final write that does
// not move committing nothing) is tests/conformance/store_contract_test.cc; the one
// of the SQL stores (values and records byte for byte, statement errors, a wrong
// password, a busy pool, a deadlock) is tests/conformance/sql_contract_test.cc. Needs
// IDEM_TEST_MYSQL_URL (see CMakeLists.txt) and fails without it: a skipped
// integration test looks like a passing one.
#include "store/mysql/mysql_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "idem/idem.h"
#include "store/absl_compat.h"
#include "store/backend.h"
#include "store/mysql/mysql_conn.h"
#include "store/mysql/mysql_error.h"
#include "store/mysql/mysql_url.h"
#include "testing/mysql_test_db.h"
#include "testing/records.h"
#include "testing/status_matchers.h"
#include "testing/temp_dir.h"

namespace idem {
namespace {

using ::idem::mysql::MysqlOptions;
using ::idem::mysql::ParseMysqlUrl;
using ::idem::mysql::testing::BaseUrl;
using ::idem::mysql::testing::FreshDatabaseUrl;
using ::idem::mysql::testing::WithDatabase;
using ::idem::mysql::testing::WithParams;
using ::idem::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::Not;

std::string Message(const absl::Status& s) { return std::string(s.message()); }

// ---- URL parsing: no server needed ----

TEST(MysqlUrlTest, ParsesEveryPart) {
  absl::StatusOr<MysqlOptions> o = ParseMysqlUrl(
      "mysql://app%40eu:p%40ss%3Aw%2Frd%25@db.example:3307/idem%2Dprod?pool=3&pool_wait_ms=10&"
      "lock_wait_timeout_s=4&connect_timeout_s=7&io_timeout_s=9&ssl=verify&ssl_ca=%2Fca.pem&"
      "procedures=off");
  ASSERT_OK(o);
  EXPECT_EQ(o->user, "app@eu");
  EXPECT_EQ(o->password, "p@ss:w/rd%");
  EXPECT_TRUE(o->has_password);
  EXPECT_EQ(o->host, "db.example");
  EXPECT_EQ(o->port, 3307);
  EXPECT_EQ(o->database, "idem-prod");
  EXPECT_EQ(o->pool, 3);
  EXPECT_EQ(o->pool_wait_ms, 10);
  EXPECT_EQ(o->lock_wait_timeout_s, 4);
  EXPECT_EQ(o->connect_timeout_s, 7);
  EXPECT_EQ(o->io_timeout_s, 9);
  EXPECT_EQ(o->ssl, mysql::SslMode::kVerify);
  EXPECT_EQ(o->ssl_ca, "/ca.pem");
  EXPECT_FALSE(o->procedures);
  EXPECT_TRUE(ParseMysqlUrl("mysql://u@h/d")->procedures);
  EXPECT_THAT(o->redacted_url, Not(HasSubstr("p%40ss")));
  EXPECT_THAT(o->redacted_url,
              HasSubstr("mysql://app%40eu@db.example:3307/idem%2Dprod?pool=3"));
}

TEST(MysqlUrlTest, DefaultsAndVariants) {
  absl::StatusOr<MysqlOptions> o = ParseMysqlUrl("mysql://root@localhost/idem");
  ASSERT_OK(o);
  EXPECT_EQ(o->port, 3306);
  EXPECT_FALSE(o->has_password);
  EXPECT_EQ(o->pool, 8);
  EXPECT_EQ(o->lock_wait_timeout_s, 2);
  EXPECT_EQ(o->redacted_url, "mysql://root@localhost/idem");
  absl::StatusOr<MysqlOptions> v6 = ParseMysqlUrl("mysql://u:@[::1]:3310/d");
  ASSERT_OK(v6);
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 3310);
  EXPECT_TRUE(v6->has_password);
  EXPECT_EQ(v6->password, "");
  absl::StatusOr<MysqlOptions> sock = ParseMysqlUrl("mysql://u:p@/d?socket=%2Frun%2Fmysqld.sock");
  ASSERT_OK(sock);
  EXPECT_EQ(sock->socket, "/run/mysqld.sock");
  // An unencoded '@' in the password is tolerated: the last '@' ends the user info.
  absl::StatusOr<MysqlOptions> at = ParseMysqlUrl("mysql://u:p@ss@h/d");
  ASSERT_OK(at);
  EXPECT_EQ(at->password, "p@ss");
  EXPECT_EQ(at->host, "h");
}

TEST(MysqlUrlTest, ErrorsNameWhatIsWrongAndNeverThePassword) {
  struct Case {
    const char* url;
    const char* says;
  } cases[] = {
      {"postgres://u@h/d", "not a mysql:// URL"},
      {"mysql://h/d", "names no user"},
      {"mysql://@h/d", "empty user"},
      {"mysql://u@h", "names no database"},
      {"mysql://u@h/", "names no database"},
      {"mysql://u@/d", "names no host"},
      {"mysql://u@h:0/d", "port '0'"},
      {"mysql://u@h:65536/d", "port '65536'"},
      {"mysql://u@h:33x/d", "not a port 1..65535"},
      {"mysql://u@h:/d", "empty port"},
      {"mysql://u@::1/d", "write IPv6 as [::1]"},
      {"mysql://u@[::1/d", "unclosed '['"},
      {"mysql://u:secr%zzet@h/d", "bad percent-escape in the password"},
      {"mysql://u:secret#x@h/d", "'#'"},
      {"mysql://u@h/d?pool=0", "pool='0'"},
      {"mysql://u@h/d?pool=257", "1..256"},
      {"mysql://u@h/d?pool=8&pool=9", "given twice"},
      {"mysql://u@h/d?lock_wait_timeout_s=-1", "lock_wait_timeout_s='-1'"},
      {"mysql://u@h/d?lock_wait_timeout_s=40", "io_timeout_s (3) must be greater"},
      {"mysql://u@h/d?ssl=maybe", "disabled, required or verify"},
      {"mysql://u@h/d?procedures=yes", "procedures='yes' must be on or off"},
      {"mysql://u@h/d?ssl_ca=%2Fca", "needs ssl=required or verify"},
      {"mysql://u@h/d?fsync=1", "unknown mysql URL parameter 'fsync'"},
  };
  for (const Case& c : cases) {
    absl::Status s = ParseMysqlUrl(c.url).status();
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument)) << c.url;
    EXPECT_THAT(Message(s), HasSubstr(c.says)) << c.url;
    EXPECT_THAT(Message(s), Not(HasSubstr("secr"))) << c.url;
  }
  EXPECT_THAT(OpenMysqlStore("mysql://u@h/d?pool=x"), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(MysqlUrlTest, TestDatabaseUrlHelpers) {
  EXPECT_EQ(WithDatabase("mysql://u:p@h:1/a?pool=2", "b"), "mysql://u:p@h:1/b?pool=2");
  EXPECT_EQ(WithDatabase("mysql://u:p@h:1/a", "b"), "mysql://u:p@h:1/b");
  EXPECT_EQ(WithParams("mysql://u@h/a", "pool=1"), "mysql://u@h/a?pool=1");
  EXPECT_EQ(WithParams("mysql://u@h/a?x=1", "pool=1"), "mysql://u@h/a?x=1&pool=1");
}

// ---- against the server ----

TEST(MysqlServerTest, IdemTestMysqlUrlIsSet) {
  ASSERT_FALSE(BaseUrl().empty())
      << "IDEM_TEST_MYSQL_URL is not set; point it at a MySQL 8 / MariaDB 10.11 server, e.g. "
         "mysql://idem:secret@127.0.0.1:3306/idem_test (the user needs CREATE/DROP DATABASE)";
}

class MysqlStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = BaseUrl();
    ASSERT_FALSE(base_.empty()) << "IDEM_TEST_MYSQL_URL is not set";
    absl::StatusOr<std::string> url = FreshDatabaseUrl(base_, dir_.path());
    ASSERT_OK(url);
    url_ = *url;
    absl::StatusOr<std::unique_ptr<Store>> store = OpenMysqlStore(url_);
    ASSERT_OK(store);
    store_ = *std::move(store);
  }

  std::unique_ptr<Store> Open(std::string_view params) {
    absl::StatusOr<std::unique_ptr<Store>> s = OpenMysqlStore(WithParams(url_, params));
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *std::move(s) : nullptr;
  }

  void Sql(std::string_view sql) {
    absl::StatusOr<std::unique_ptr<StoreTransaction>> tx = store_->Begin();
    ASSERT_OK(tx);
    ASSERT_OK((*tx)->Exec(sql));
    ASSERT_OK((*tx)->Commit());
  }

  static int64_t ConnectionId(StoreTransaction& tx) {
    absl::StatusOr<Rows> rows = tx.Query("SELECT CONNECTION_ID()");
    EXPECT_TRUE(rows.ok()) << rows.status();
    return rows.ok() ? rows->rows[0][0].as_int() : -1;
  }

  // Kills a session from a separate store, as an operator or a failover would.
  void Kill(int64_t id) {
    absl::StatusOr<std::unique_ptr<Store>> admin = OpenMysqlStore(WithParams(url_, "pool=1"));
    ASSERT_OK(admin);
    absl::StatusOr<std::unique_ptr<StoreTransaction>> tx = (*admin)->Begin();
    ASSERT_OK(tx);
    ASSERT_OK((*tx)->Exec(absl::StrCat("KILL ", id)));
    ASSERT_OK((*tx)->Commit());
  }

  static Record Fresh(std::string key, std::string biz_type = "refund") {
    return testing::ClaimRecord(std::move(key), 1, std::move(biz_type));
  }

  testing::TempDir dir_;
  std::string base_, url_;
  std::unique_ptr<Store> store_;
};

// A database that does not exist is not a retryable outage: MySQL answers 1049
// (PostgreSQL's 3D000 is a store fault the Guard retries, in its own test).
TEST_F(MysqlStoreTest, MissingDatabaseIsFailedPrecondition) {
  absl::Status no_db = OpenMysqlStore(WithDatabase(url_, "idem_no_such_db_9f3")).status();
  EXPECT_THAT(no_db, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(Message(no_db), HasSubstr("1049"));
}

// The key column is VARCHAR(255) of bytes: a longer key is the caller's mistake,
// not cut short into another key.
TEST_F(MysqlStoreTest, AKeyLongerThanItsColumnIsInvalid) {
  std::unique_ptr<StoreTransaction> tx = *store_->Begin();
  EXPECT_THAT(Records(*tx).InsertOrLoad(Fresh(std::string(256, 'k'))),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_FALSE(Records(*tx).InsertOrLoad(Fresh(std::string(255, 'k')))->has_value());
  ASSERT_OK(tx->Commit());
}

// A lock wait timeout (1205) is kUnavailable, and it ends the transaction: the
// server may have rolled the waiter back (innodb_rollback_on_timeout), so the store
// refuses every later statement and the commit rather than go on outside it. That
// the wait fails closed at all, and when, is the conformance suite's
// ClaimHeldPastTheLockTimeoutFailsClosed and RowLockedPastTheLockTimeoutIsUnavailable.
TEST_F(MysqlStoreTest, LockWaitTimeoutIsUnavailableAndEndsTheTransaction) {
  std::unique_ptr<Store> quick = Open("lock_wait_timeout_s=1");
  ASSERT_NE(quick, nullptr);
  Sql("CREATE TABLE t (id INT PRIMARY KEY, v INT NOT NULL)");
  Sql("INSERT INTO t VALUES (1, 0)");

  // A claim waiting on another transaction's uncommitted claim of the same key.
  std::unique_ptr<StoreTransaction> holder = *quick->Begin();
  ASSERT_FALSE(Records(*holder).InsertOrLoad(Fresh("K"))->has_value());
  std::unique_ptr<StoreTransaction> waiter = *quick->Begin();
  absl::Status s = Records(*waiter).InsertOrLoad(Fresh("K")).status();
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(Message(s), HasSubstr("1205"));
  EXPECT_TRUE(IsClaimContended(s));
  // The server may have rolled the waiter back; it refuses to go on outside it.
  EXPECT_THAT(waiter->Exec("UPDATE t SET v = 9 WHERE id = 1"),
              StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(waiter->Commit(), StatusIs(absl::StatusCode::kUnavailable));
  ASSERT_OK(holder->Commit());

  // The caller's own rows.
  std::unique_ptr<StoreTransaction> a = *quick->Begin();
  ASSERT_OK(a->Exec("UPDATE t SET v = 1 WHERE id = 1"));
  std::unique_ptr<StoreTransaction> b = *quick->Begin();
  absl::Status row = b->Exec("UPDATE t SET v = 2 WHERE id = 1").status();
  EXPECT_THAT(row, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(Message(row), HasSubstr("1205"));
  b->Rollback();
  ASSERT_OK(a->Commit());
}

// Claims queued behind a holder that rolls back are InnoDB's classic deadlock on
// a duplicate key. Whatever the interleaving, each key's effect lands at most once
// and everything else is a retryable error or a replay.
TEST_F(MysqlStoreTest, ContendedClaimsWithRollbacksRunEachEffectOnce) {
  std::unique_ptr<Store> store = Open("pool=12");
  ASSERT_NE(store, nullptr);
  Sql("CREATE TABLE ledger (order_no VARCHAR(64) NOT NULL)");  // no unique key on purpose
  Guard guard(*store);
  constexpr int kThreads = 12, kKeys = 15;
  std::atomic<int> attempts{0}, executed{0}, unexpected{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int k = 0; k < kKeys; ++k) {
        const std::string key = "C-" + std::to_string(k);
        absl::StatusOr<Result> r = guard.Run(
            {.biz_type = "order", .key = key}, [&](Transaction& tx) -> absl::StatusOr<std::string> {
              IDEM_RETURN_IF_ERROR(tx.Exec("INSERT INTO ledger VALUES (?)", {Value(key)}));
              std::this_thread::sleep_for(std::chrono::milliseconds(10));  // let claims queue
              if (attempts.fetch_add(1) % 2 == 0) return absl::UnavailableError("flaky");
              return key;
            });
        if (r.ok() && r->outcome == Outcome::kExecuted) {
          executed.fetch_add(1);
        } else if (r.ok() ? r->outcome != Outcome::kReplayed || r->value != key
                          : r.status().code() != absl::StatusCode::kUnavailable &&
                                r.status().code() != absl::StatusCode::kAborted) {
          unexpected.fetch_add(1);
          ADD_FAILURE() << (r.ok() ? std::string(OutcomeName(r->outcome)) : r.status().ToString());
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(unexpected.load(), 0);
  EXPECT_GT(executed.load(), 0);
  std::unique_ptr<StoreTransaction> tx = *store->Begin();
  absl::StatusOr<Rows> rows = tx->Query("SELECT COUNT(*), COUNT(DISTINCT order_no) FROM ledger");
  ASSERT_OK(rows);
  EXPECT_EQ(rows->rows[0][0].as_int(), executed.load());
  EXPECT_EQ(rows->rows[0][1].as_int(), executed.load());
  absl::StatusOr<Rows> records = tx->Query("SELECT COUNT(*) FROM idem_records WHERE state = 1");
  ASSERT_OK(records);
  EXPECT_EQ(records->rows[0][0].as_int(), executed.load());
}

// MySQL's own column types come back exact: VARBINARY keeps a lone NUL byte and
// the empty value apart from NULL, DECIMAL and an unsigned BIGINT beyond int64
// come back as text, DATETIME as its text. (The values every SQL store keeps are
// tests/conformance/sql_contract_test.cc.)
TEST_F(MysqlStoreTest, ServerTypesComeBackExact) {
  Sql("CREATE TABLE v (id INT PRIMARY KEY, vb VARBINARY(16), u BIGINT UNSIGNED, "
      "dec_col DECIMAL(10,2), ts DATETIME)");
  std::unique_ptr<StoreTransaction> tx = *store_->Begin();
  ASSERT_OK(tx->Exec("INSERT INTO v VALUES (?, ?, ?, ?, ?)",
                     {Value(1), Value(Blob{std::string("\0", 1)}), Value(42), Value("12.50"),
                      Value("2024-06-18 10:11:12")}));
  ASSERT_OK(tx->Exec("INSERT INTO v VALUES (?, ?, ?, ?, ?)",
                     {Value(2), Value(Blob{""}), Value(nullptr), Value(nullptr), Value(nullptr)}));
  ASSERT_OK(tx->Exec("UPDATE v SET u = 18446744073709551615 WHERE id = 2"));
  ASSERT_OK(tx->Commit());

  std::unique_ptr<StoreTransaction> rd = *store_->Begin();
  absl::StatusOr<Rows> rows = rd->Query("SELECT * FROM v ORDER BY id");
  ASSERT_OK(rows);
  ASSERT_EQ(rows->rows.size(), 2u);
  const std::vector<Value>& a = rows->rows[0];
  EXPECT_EQ(a[1], Value(Blob{std::string("\0", 1)}));
  EXPECT_EQ(a[2], Value(42));
  EXPECT_EQ(a[3], Value("12.50"));  // DECIMAL stays exact, as text
  EXPECT_EQ(a[4], Value("2024-06-18 10:11:12"));
  const std::vector<Value>& b = rows->rows[1];
  EXPECT_EQ(b[1], Value(Blob{""}));  // empty, not NULL
  EXPECT_EQ(b[2], Value("18446744073709551615"));  // beyond int64: exact, as text
  EXPECT_TRUE(b[3].is_null());
  ASSERT_OK(rd->Commit());
}

TEST_F(MysqlStoreTest, GuardedHandlerSharesTheTransaction) {
  Sql("CREATE TABLE ledger (order_no VARCHAR(64) PRIMARY KEY, amount BIGINT NOT NULL)");
  Guard guard(*store_);
  int runs = 0;
  auto handler = [&](Transaction& tx) -> absl::StatusOr<std::string> {
    ++runs;
    IDEM_RETURN_IF_ERROR(tx.Exec("INSERT INTO ledger VALUES (?, ?)", {Value("O-1"), Value(42)}));
    return std::string(R"({"ok":true})");
  };
  absl::StatusOr<Result> first = guard.Run({.biz_type = "refund", .key = "O-1"}, handler);
  ASSERT_OK(first);
  EXPECT_EQ(first->outcome, Outcome::kExecuted);
  absl::StatusOr<Result> again = guard.Run({.biz_type = "refund", .key = "O-1"}, handler);
  ASSERT_OK(again);
  EXPECT_EQ(again->outcome, Outcome::kReplayed);
  EXPECT_EQ(again->value, R"({"ok":true})");
  EXPECT_EQ(runs, 1);
  // A unique-key conflict in the handler is final: rolled back, failure cached.
  absl::StatusOr<Result> dup = guard.Run(
      {.biz_type = "refund", .key = "O-2"}, [&](Transaction& tx) -> absl::StatusOr<std::string> {
        IDEM_RETURN_IF_ERROR(tx.Exec("INSERT INTO ledger VALUES (?, ?)", {Value("O-1"), Value(1)}));
        return std::string("unreachable");
      });
  EXPECT_THAT(dup, StatusIs(absl::StatusCode::kInvalidArgument));
  absl::StatusOr<Result> cached = guard.Run({.biz_type = "refund", .key = "O-2"}, handler);
  ASSERT_OK(cached);
  EXPECT_EQ(cached->outcome, Outcome::kCachedFailure);
}

// START TRANSACTION rides with the claim and the result UPDATE with the COMMIT,
// so the guard adds statements to the business transaction but no round trip.
TEST_F(MysqlStoreTest, GuardedFirstArrivalTakesAsManyRoundTripsAsTheBareTransaction) {
  Sql("CREATE TABLE ledger (order_no VARCHAR(64) PRIMARY KEY, amount BIGINT NOT NULL)");
  Guard guard(*store_);
  auto bare = [&](const std::string& key) {
    std::unique_ptr<StoreTransaction> tx = *store_->Begin();
    ASSERT_OK(tx->Exec("INSERT INTO ledger VALUES (?, ?)", {Value(key), Value(1)}));
    ASSERT_OK(tx->Commit());
  };
  auto guarded = [&](const std::string& key) {
    absl::StatusOr<Result> r = guard.Run(
        {.biz_type = "refund", .key = key}, [&](Transaction& tx) -> absl::StatusOr<std::string> {
          IDEM_RETURN_IF_ERROR(tx.Exec("INSERT INTO ledger VALUES (?, ?)", {Value(key), Value(1)}));
          return std::string("ok");
        });
    ASSERT_OK(r);
    EXPECT_EQ(r->outcome, Outcome::kExecuted);
  };
  bare("warm-bare");  // prepares the INSERT on the pooled connection
  guarded("warm-guarded");
  for (int i = 0; i < 3; ++i) {
    uint64_t before = mysql::RoundTrips();
    bare(absl::StrCat("bare-", i));
    const uint64_t bare_trips = mysql::RoundTrips() - before;
    EXPECT_EQ(bare_trips, 3u);  // START TRANSACTION, INSERT, COMMIT
    before = mysql::RoundTrips();
    guarded(absl::StrCat("guarded-", i));
    EXPECT_EQ(mysql::RoundTrips() - before, bare_trips) << "run " << i;
  }
  // A transaction that runs nothing sends nothing.
  const uint64_t before = mysql::RoundTrips();
  std::unique_ptr<StoreTransaction> idle = *store_->Begin();
  ASSERT_OK(idle->Commit());
  std::unique_ptr<StoreTransaction> dropped = *store_->Begin();
  dropped->Rollback();
  EXPECT_EQ(mysql::RoundTrips() - before, 0u);
}

// The first round trip of a transaction (a claim batch or a START TRANSACTION)
// on pooled connections that went stale goes to a new connection.
TEST_F(MysqlStoreTest, FirstStatementOnStaleConnectionsMovesToANewOne) {
  std::unique_ptr<Store> store = Open("pool=2");
  ASSERT_NE(store, nullptr);
  Sql("CREATE TABLE t (id INT PRIMARY KEY)");
  Guard guard(*store);
  auto kill_idle = [&] {
    std::unique_ptr<StoreTransaction> a = *store->Begin();
    std::unique_ptr<StoreTransaction> b = *store->Begin();
    const std::vector<int64_t> ids = {ConnectionId(*a), ConnectionId(*b)};
    ASSERT_OK(a->Commit());
    ASSERT_OK(b->Commit());
    for (int64_t id : ids) Kill(id);
  };
  kill_idle();
  absl::StatusOr<Result> r = guard.Run({.biz_type = "refund", .key = "S-1"},
                                       [](Transaction& tx) -> absl::StatusOr<std::string> {
                                         IDEM_RETURN_IF_ERROR(tx.Exec("INSERT INTO t VALUES (1)"));
                                         return std::string("done");
                                       });
  ASSERT_OK(r);
  EXPECT_EQ(r->outcome, Outcome::kExecuted);
  kill_idle();
  std::unique_ptr<StoreTransaction> tx = *store->Begin();
  ASSERT_OK(tx->Exec("INSERT INTO t VALUES (2)"));
  ASSERT_OK(tx->Commit());
  tx = *store->Begin();
  absl::StatusOr<Rows> rows = tx->Query("SELECT count(*) FROM t");
  ASSERT_OK(rows);
  EXPECT_EQ(rows->rows[0][0].as_int(), 2);
}

// Without idem's procedures (dropped, or a user without CREATE ROUTINE) the store
// takes the classic statements, with the same outcomes; opening it again makes them.
TEST_F(MysqlStoreTest, WorksWithoutItsProceduresAndRecreatesThem) {
  Sql("CREATE TABLE t (id VARCHAR(16) PRIMARY KEY)");
  Guard guard(*store_);
  int runs = 0;
  auto run = [&](const std::string& key) {
    return guard.Run({.biz_type = "refund", .key = key},
                     [&](Transaction& tx) -> absl::StatusOr<std::string> {
                       ++runs;
                       IDEM_RETURN_IF_ERROR(tx.Exec("INSERT INTO t VALUES (?)", {Value(key)}));
                       return std::string("done ") + key;
                     });
  };
  ASSERT_OK(run("before"));
  Sql("DROP PROCEDURE idem_claim_v2");
  Sql("DROP PROCEDURE idem_finish_v1");
  for (const char* key : {"A", "A", "B"}) {
    absl::StatusOr<Result> r = run(key);
    ASSERT_OK(r);
    EXPECT_EQ(r->value, std::string("done ") + key);
  }
  EXPECT_EQ(runs, 3);  // "before", A once, B once
  // Classic statements: START TRANSACTION, claim INSERT, handler, UPDATE, COMMIT.
  uint64_t before = mysql::RoundTrips();
  ASSERT_OK(run("C"));
  EXPECT_EQ(mysql::RoundTrips() - before, 5u);

  std::unique_ptr<Store> reopened = Open("");
  ASSERT_NE(reopened, nullptr);
  Guard again(*reopened);
  auto run_again = [&](const std::string& key) {
    return again.Run({.biz_type = "refund", .key = key},
                     [&](Transaction& tx) -> absl::StatusOr<std::string> {
                       ++runs;
                       IDEM_RETURN_IF_ERROR(tx.Exec("INSERT INTO t VALUES (?)", {Value(key)}));
                       return std::string("done ") + key;
                     });
  };
  ASSERT_OK(run_again("warm"));  // prepares the CALLs
  before = mysql::RoundTrips();
  absl::StatusOr<Result> d = run_again("D");
  ASSERT_OK(d);
  EXPECT_EQ(d->outcome, Outcome::kExecuted);
  EXPECT_EQ(mysql::RoundTrips() - before, 3u);
  absl::StatusOr<Result> a = run_again("A");
  ASSERT_OK(a);
  EXPECT_EQ(a->outcome, Outcome::kReplayed);
  EXPECT_EQ(a->value, "done A");
}

}  // namespace
}  // namespace idem
