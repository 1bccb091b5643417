// The contract of the SQL stores (sqlite://, postgres://, mysql://) under
// StoreTransaction: values and records come back byte for byte, one statement per
// call, statement errors mapped to what the caller should do, racing openers of a
// fresh database; and for the server backends, a wrong password, an unreachable
// server, a busy pool and a deadlock. What only one backend does (its URL
// parameters, its error codes in a payload, its round trips) stays in the
// backend's own test beside its code. Where the backends answer differently on
// purpose, the difference is a field of SqlContractBackend, with the reason.
//
// The server backends need IDEM_TEST_POSTGRES_URL and IDEM_TEST_MYSQL_URL
// (scripts/services.sh start DIR; source DIR/env.sh) and fail without them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "conformance/store_factory.h"
#include "idem/idem.h"
#include "store/backend.h"
#include "store/sql/schema.h"
#if IDEM_HAVE_POSTGRES
#include "store/postgres/pg_conn.h"
#endif
#if IDEM_HAVE_MYSQL
#include "store/mysql/mysql_conn.h"
#endif
#include "testing/records.h"
#include "testing/status_matchers.h"
#include "testing/temp_dir.h"
#include "testing/wait_until.h"

namespace idem {
namespace {

using ::idem::testing::ExecAndCommit;
using ::idem::testing::QueryScalar;
using ::idem::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::Not;

struct SqlContractBackend {
  std::string name;
  // The URL of a fresh, empty database whose files (if any) live under `dir`.
  std::function<std::string(const std::string& dir)> url;
  // The column type of a binary value up to a few MiB: the types of the three
  // databases share no name (BYTEA, LONGBLOB; BLOB in MySQL is 64 KiB at most).
  std::string blob_type;
  // What a statement of a transaction answers after an earlier one failed:
  // PostgreSQL aborts the whole transaction on any error (kAborted from then on,
  // the commit included); InnoDB and SQLite undo the failed statement only.
  absl::StatusCode after_a_failed_statement = absl::StatusCode::kOk;
  // How each database's message names a duplicate key, a syntax error and a
  // missing table (the server's error code, or SQLite's words for it).
  std::string duplicate_key_words, syntax_error_words, missing_table_words;

  // ---- the server backends only ----
  // What the refusal of a wrong password says (the server's error code).
  std::string wrong_password_words;
  // The URL parameter that bounds connecting to 2 s (libpq's connect_timeout;
  // idem's own name, with its unit, for MySQL).
  std::string connect_timeout_2s;
  // A pool of one connection that a second Begin() waits 200 ms for, and what the
  // refusal after the wait says.
  std::string one_connection_200ms, busy_pool_words;
  // What the deadlock victim's message says (the server's error code).
  std::string deadlock_words;
  // Parameters under which a lock wait lasts until the test closes the cycle: a
  // lock timeout ending the first wait before the test has seen it (a loaded
  // machine) makes no deadlock at all. PostgreSQL also looks for a deadlock only
  // after deadlock_timeout (1 s). MySQL's io_timeout_s must exceed the lock wait.
  std::string patient_params;
  // SQL counting the sessions of this test's database waiting for a row lock (or,
  // where the server does not tell, inside a statement: in the test that asks, the
  // only statement left running is one waiting for a row).
  std::string lock_waiters_sql;
  // The driver's count of round trips to the server, and how many the final write
  // of a guarded transaction (ReplaceAndCommit) takes when it moves the record and
  // when it does not: PostgreSQL pipelines the UPDATE with the COMMIT (or the
  // ROLLBACK) in one; MySQL's idem_finish_v1 commits in its CALL when the record
  // moves, and otherwise leaves the transaction open for a ROLLBACK of its own.
  std::function<uint64_t()> round_trips;
  uint64_t final_write_round_trips = 0, unmoved_final_write_round_trips = 0;
};

void PrintTo(const SqlContractBackend& backend, std::ostream* os) { *os << backend.name; }

SqlContractBackend SqliteContract() {
  return {.name = "sqlite",
          .url = [](const std::string& dir) { return "sqlite://" + dir + "/idem.db"; },
          .blob_type = "BLOB",
          .duplicate_key_words = "UNIQUE constraint failed",
          .syntax_error_words = "syntax error",
          .missing_table_words = "no such table"};
}

SqlContractBackend PostgresContract() {
  return {.name = "postgres",
          .url = testing::PostgresUrl,
          .blob_type = "BYTEA",
          .after_a_failed_statement = absl::StatusCode::kAborted,
          .duplicate_key_words = "SQLSTATE 23505",
          .syntax_error_words = "SQLSTATE 42601",
          .missing_table_words = "SQLSTATE 42P01",
          .wrong_password_words = "password authentication failed",
          .connect_timeout_2s = "connect_timeout=2",
          .one_connection_200ms = "pool=1&pool_timeout_ms=200",
          .busy_pool_words = "pool",
          .deadlock_words = "SQLSTATE 40P01",
          .patient_params = "lock_timeout_ms=60000",
          // testing::PostgresUrl names every session of a test after its schema.
          .lock_waiters_sql =
              "SELECT count(*) FROM pg_stat_activity WHERE application_name = "
              "current_setting('application_name') AND wait_event_type = 'Lock'",
#if IDEM_HAVE_POSTGRES
          .round_trips = postgres::RoundTrips,
#endif
          .final_write_round_trips = 1,
          .unmoved_final_write_round_trips = 1};
}

SqlContractBackend MysqlContract() {
  return {.name = "mysql",
          .url = testing::MysqlTestUrl,
          .blob_type = "LONGBLOB",
          .duplicate_key_words = "1062",
          .syntax_error_words = "1064",
          .missing_table_words = "1146",
          .wrong_password_words = "1045",
          .connect_timeout_2s = "connect_timeout_s=2",
          .one_connection_200ms = "pool=1&pool_wait_ms=200",
          .busy_pool_words = "busy",
          .deadlock_words = "1213",
          .patient_params = "lock_wait_timeout_s=60&io_timeout_s=90",
          // Every other session of the test's database inside a statement (MariaDB's
          // INNODB_TRX was seen to list a waiting UPDATE as RUNNING).
          .lock_waiters_sql =
              "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE "
              "DB = DATABASE() AND COMMAND <> 'Sleep' AND ID <> CONNECTION_ID()",
#if IDEM_HAVE_MYSQL
          .round_trips = mysql::RoundTrips,
#endif
          .final_write_round_trips = 1,
          .unmoved_final_write_round_trips = 2};
}

std::string Message(const absl::Status& s) { return std::string(s.message()); }

class SqlContractTest : public ::testing::TestWithParam<SqlContractBackend> {
 protected:
  void SetUp() override { url_ = GetParam().url(dir_.path()); }

  // A store on this test's database, with `params` added to its URL, or nullptr
  // (the failure recorded).
  std::unique_ptr<Store> Open(const std::string& params = "") {
    absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(testing::WithParams(url_, params));
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }

  // The user and password of this test's URL ("" for a URL without them).
  std::pair<std::string, std::string> UserAndPassword() const {
    const size_t start = url_.find("://") + 3;
    const size_t at = url_.rfind('@');
    if (at == std::string::npos) return {"", ""};
    const std::string userinfo = url_.substr(start, at - start);
    const size_t colon = userinfo.find(':');
    if (colon == std::string::npos) return {userinfo, ""};
    return {userinfo.substr(0, colon), userinfo.substr(colon + 1)};
  }

  testing::TempDir dir_;
  std::string url_;
};

// The server backends: a password, a pool of connections, row locks.
class SqlServerContractTest : public SqlContractTest {};

// ---- every SQL backend ----

TEST_P(SqlContractTest, OpensEmptyWithSqlAndShowsNoPassword) {
  std::unique_ptr<Store> store = Open();
  ASSERT_NE(store, nullptr);
  EXPECT_OK(store->Ping());
  EXPECT_TRUE(store->SupportsSql());
  absl::StatusOr<std::optional<Record>> none = store->Get("default", "k");
  ASSERT_OK(none);
  EXPECT_FALSE(none->has_value());
  const auto [user, password] = UserAndPassword();
  const std::string shown(store->url());
  if (password.empty()) {
    EXPECT_EQ(shown, url_);  // nothing to hide: the URL as given
  } else {
    EXPECT_THAT(shown, Not(HasSubstr(password)));
    EXPECT_THAT(shown, HasSubstr(user + "@"));
  }
}

// Keys, results and errors are bytes: a NUL inside a key, and a prefix of it, are
// two keys; the stored record comes back equal, and a duplicate claim of its key
// leaves it untouched. Replace matches on the token and the state, also when it
// writes the values the row has (MySQL counts no changed row then).
TEST_P(SqlContractTest, RecordsRoundTripByteForByte) {
  std::unique_ptr<Store> store = Open();
  ASSERT_NE(store, nullptr);
  Record r = testing::ClaimRecord(std::string("a\0b\xff", 4));
  r.result = std::string("\0\x01{}\xfe", 5);
  r.lease_until = absl::InfinitePast();
  {
    std::unique_ptr<StoreTransaction> tx = *store->Begin();
    absl::StatusOr<std::optional<Record>> first = Records(*tx).InsertOrLoad(r);
    ASSERT_OK(first);
    EXPECT_FALSE(first->has_value());
    absl::StatusOr<std::optional<Record>> again =
        Records(*tx).InsertOrLoad(testing::ClaimRecord(r.key, 7, "payment"));
    ASSERT_OK(again);
    ASSERT_TRUE(again->has_value());
    EXPECT_EQ(**again, r);
    ASSERT_OK(tx->Commit());
  }
  absl::StatusOr<std::optional<Record>> got = store->Get("default", r.key);
  ASSERT_OK(got);
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ(**got, r);
  EXPECT_FALSE(store->Get("default", "a")->has_value());

  std::unique_ptr<StoreTransaction> tx = *store->Begin();
  absl::StatusOr<bool> same = Records(*tx).Replace(r, r.token, r.state);
  ASSERT_OK(same);
  EXPECT_TRUE(*same);
  Record next = r;
  next.state = RecordState::kSucceeded;
  next.token = 2;
  EXPECT_FALSE(*Records(*tx).Replace(next, /*expected_token=*/5, RecordState::kProcessing));
  EXPECT_TRUE(*Records(*tx).Replace(next, 1, RecordState::kProcessing));
  EXPECT_EQ(**Records(*tx).Load("default", r.key), next);
  ASSERT_OK(tx->Commit());
  got = store->Get("default", r.key);
  ASSERT_OK(got);
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ(**got, next);
}

// The caller's values: binary with NUL bytes (3 MiB of it too), an empty binary
// that stays empty and not NULL, UTF-8 text, doubles, NULL and the int64 extremes.
// A stored result of the same bytes replays whole through the Guard.
TEST_P(SqlContractTest, ValuesRoundTripByteForByte) {
  std::unique_ptr<Store> store = Open();
  ASSERT_NE(store, nullptr);
  ASSERT_OK(ExecAndCommit(*store, "CREATE TABLE v (id BIGINT PRIMARY KEY, b " +
                                      GetParam().blob_type +
                                      ", t TEXT, d DOUBLE PRECISION, n BIGINT NULL, i BIGINT)"));
  const std::string nul_bytes("\0a\0\xff\xfe\0", 6);
  std::string big(3 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7);
  const std::string utf8 = "\xC5\xBC\xC3\xB3\xC5\x82w \xE2\x82\xAC";
  {
    std::unique_ptr<StoreTransaction> tx = *store->Begin();
    ASSERT_OK(tx->Exec("INSERT INTO v VALUES (?, ?, ?, ?, ?, ?)",
                       {Value(1), Value(Blob{nul_bytes}), Value(utf8), Value(1.5), Value(nullptr),
                        Value(static_cast<long long>(INT64_MIN))}));
    ASSERT_OK(tx->Exec("INSERT INTO v VALUES (?, ?, ?, ?, ?, ?)",
                       {Value(2), Value(Blob{big}), Value(""), Value(-0.25), Value(7),
                        Value(static_cast<long long>(INT64_MAX))}));
    ASSERT_OK(
        tx->Exec("INSERT INTO v VALUES (?, ?, ?, ?, ?, ?)",
                 {Value(3), Value(Blob{""}), Value("x"), Value(0.0), Value(nullptr), Value(0)}));
    ASSERT_OK(tx->Commit());
  }
  std::unique_ptr<StoreTransaction> rd = *store->Begin();
  absl::StatusOr<Rows> rows = rd->Query("SELECT * FROM v WHERE id >= ? ORDER BY id", {Value(0)});
  ASSERT_OK(rows);
  ASSERT_EQ(rows->rows.size(), 3u);
  EXPECT_THAT(rows->columns, ::testing::ElementsAre("id", "b", "t", "d", "n", "i"));
  const std::vector<Value>& a = rows->rows[0];
  EXPECT_EQ(a[0], Value(1));
  EXPECT_EQ(a[1], Value(Blob{nul_bytes}));
  EXPECT_EQ(a[2], Value(utf8));
  EXPECT_EQ(a[3], Value(1.5));
  EXPECT_TRUE(a[4].is_null());
  EXPECT_EQ(a[5], Value(static_cast<long long>(INT64_MIN)));
  const std::vector<Value>& b = rows->rows[1];
  ASSERT_TRUE(b[1].is_blob());
  EXPECT_EQ(b[1].as_blob().size(), big.size());
  EXPECT_TRUE(b[1].as_blob() == big);
  EXPECT_EQ(b[2], Value(""));
  EXPECT_EQ(b[3], Value(-0.25));
  EXPECT_EQ(b[4], Value(7));
  EXPECT_EQ(b[5], Value(static_cast<long long>(INT64_MAX)));
  EXPECT_EQ(rows->rows[2][1], Value(Blob{""}));  // empty, not NULL
  ASSERT_OK(rd->Commit());

  Guard guard(*store);
  const Request req{.biz_type = "refund", .key = "B-1"};
  absl::StatusOr<Result> c = guard.Claim(req);
  ASSERT_OK(c);
  ASSERT_OK(guard.Complete(req, c->token, nul_bytes + big));
  absl::StatusOr<Result> replay = guard.Claim(req);
  ASSERT_OK(replay);
  EXPECT_EQ(replay->outcome, Outcome::kReplayed);
  EXPECT_TRUE(replay->value == nul_bytes + big);
}

// One statement per call (two would let a caller's value end idem's statement and
// start another), and as many values as placeholders: the caller's mistakes,
// kInvalidArgument. A finished transaction runs nothing more.
TEST_P(SqlContractTest, OneStatementPerCallAndParameterCount) {
  std::unique_ptr<Store> store = Open();
  ASSERT_NE(store, nullptr);
  {
    std::unique_ptr<StoreTransaction> tx = *store->Begin();
    EXPECT_THAT(tx->Exec("CREATE TABLE a (x INT); DROP TABLE idem_records"),
                StatusIs(absl::StatusCode::kInvalidArgument));
    tx->Rollback();
  }
  EXPECT_EQ(QueryScalar(*store, "SELECT count(*) FROM idem_records"), 0);
  std::unique_ptr<StoreTransaction> tx = *store->Begin();
  ASSERT_OK(tx->Exec("CREATE TABLE a (x INT)"));
  EXPECT_THAT(tx->Exec("INSERT INTO a VALUES (?)", {}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(tx->Exec("INSERT INTO a VALUES (?)", {Value(1), Value(2)}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(tx->Exec("  ;"), StatusIs(absl::StatusCode::kInvalidArgument));  // no statement
  ASSERT_OK(tx->Exec("INSERT INTO a VALUES (?)", {Value(3)}));
  ASSERT_OK(tx->Commit());
  EXPECT_THAT(tx->Exec("SELECT 1"), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(QueryScalar(*store, "SELECT count(*) FROM a"), 1);
}

// A duplicate key, a syntax error and a NULL in a NOT NULL column are the
// statement's fault (kInvalidArgument: a retry fails the same way); a missing table
// is the store's (kUnavailable, a store fault, whatever the statement). Each
// message names the database's error. Whether the transaction goes on after a
// failed statement is the backend's (after_a_failed_statement).
TEST_P(SqlContractTest, StatementErrorsSayWhatTheCallerShouldDo) {
  std::unique_ptr<Store> store = Open();
  ASSERT_NE(store, nullptr);
  ASSERT_OK(ExecAndCommit(
      *store, "CREATE TABLE ledger (order_no VARCHAR(64) PRIMARY KEY, amount BIGINT NOT NULL)"));
  ASSERT_OK(ExecAndCommit(*store, "INSERT INTO ledger VALUES ('O-1', 1)"));
  // Each error in a transaction of its own, rolled back.
  auto fails = [&](const std::string& sql, std::vector<Value> params = {}) {
    std::unique_ptr<StoreTransaction> tx = *store->Begin();
    absl::Status s = tx->Exec(sql, params).status();
    tx->Rollback();
    return s;
  };
  absl::Status dup = fails("INSERT INTO ledger VALUES (?, ?)", {Value("O-1"), Value(2)});
  EXPECT_THAT(dup, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Message(dup), HasSubstr(GetParam().duplicate_key_words));
  EXPECT_FALSE(IsStoreFault(dup)) << dup;
  absl::Status syntax = fails("INSERT INTO ledger VALUS (1)");
  EXPECT_THAT(syntax, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Message(syntax), HasSubstr(GetParam().syntax_error_words));
  absl::Status null = fails("INSERT INTO ledger VALUES (?, NULL)", {Value("O-2")});
  EXPECT_THAT(null, StatusIs(absl::StatusCode::kInvalidArgument));
  absl::Status table = fails("SELECT * FROM no_such_table");
  EXPECT_THAT(table, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_TRUE(IsStoreFault(table)) << table;
  EXPECT_THAT(Message(table), HasSubstr(GetParam().missing_table_words));

  std::unique_ptr<StoreTransaction> tx = *store->Begin();
  ASSERT_OK(tx->Exec("INSERT INTO ledger VALUES (?, ?)", {Value("O-3"), Value(3)}));
  EXPECT_FALSE(tx->Exec("INSERT INTO ledger VALUES (?, ?)", {Value("O-1"), Value(2)}).ok());
  const absl::StatusCode after = GetParam().after_a_failed_statement;
  EXPECT_THAT(tx->Exec("INSERT INTO ledger VALUES (?, ?)", {Value("O-4"), Value(4)}),
              StatusIs(after));
  EXPECT_THAT(tx->Commit(), StatusIs(after));
  EXPECT_EQ(QueryScalar(*store, "SELECT count(*) FROM ledger"),
            after == absl::StatusCode::kOk ? 3 : 1);
}

// Processes starting together on a fresh database each create idem's schema if it
// is not there: every one of them opens, and the schema is there once.
TEST_P(SqlContractTest, RacingOpenersOfAFreshDatabaseAllSucceed) {
  constexpr int kOpeners = 8;
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kOpeners; ++i) {
    threads.emplace_back([&] {
      absl::StatusOr<std::unique_ptr<Store>> s = OpenStore(url_);
      if (s.ok()) {
        ok.fetch_add(1);
      } else {
        ADD_FAILURE() << s.status();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(ok.load(), kOpeners);
  std::unique_ptr<Store> store = Open();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(QueryScalar(*store, "SELECT count(*) FROM idem_schema_version"), 1);
  EXPECT_EQ(QueryScalar(*store, "SELECT version FROM idem_schema_version"), sql::kSchemaVersion);
}

// ---- the server backends ----

TEST_P(SqlServerContractTest, WrongPasswordIsPermissionDenied) {
  const auto [user, password] = UserAndPassword();
  ASSERT_FALSE(password.empty()) << "the test server's URL has no password";
  const size_t start = url_.find("://") + 3, at = url_.rfind('@');
  const std::string bad = url_.substr(0, start) + user + ":definitely-wrong%21" + url_.substr(at);
  absl::Status s = OpenStore(bad).status();
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(Message(s), HasSubstr(GetParam().wrong_password_words));
  EXPECT_THAT(Message(s), Not(HasSubstr("definitely-wrong")));
}

// Nothing listens (on a port that was free a moment ago): kUnavailable, a retry may
// find the server up. The message names the address and never the password.
TEST_P(SqlServerContractTest, UnreachableServerIsUnavailable) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);
  close(fd);
  const std::string scheme = url_.substr(0, url_.find("://"));
  absl::Status s = OpenStore(scheme + "://u:p@127.0.0.1:" + std::to_string(port) + "/d?" +
                             GetParam().connect_timeout_2s)
                       .status();
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(Message(s), HasSubstr("127.0.0.1"));
  EXPECT_THAT(Message(s), Not(HasSubstr(":p@")));
}

// The pool is bounded: with every connection in a transaction, the next Begin()
// (and Get) waits the pool's time, then fails closed; a connection given back is
// taken at once.
TEST_P(SqlServerContractTest, BusyPoolFailsClosedAfterTheWait) {
  std::unique_ptr<Store> store = Open(GetParam().one_connection_200ms);
  ASSERT_NE(store, nullptr);
  std::unique_ptr<StoreTransaction> held = *store->Begin();
  const auto start = std::chrono::steady_clock::now();
  absl::Status busy = store->Begin().status();
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(190));
  EXPECT_THAT(busy, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(Message(busy), HasSubstr(GetParam().busy_pool_words));
  EXPECT_THAT(store->Get("default", "k"), StatusIs(absl::StatusCode::kUnavailable));
  held->Rollback();  // gives the connection back at once, not at destruction
  EXPECT_OK(store->Begin());
  EXPECT_OK(store->Ping());
}

// Two transactions each wait for the other's row: the server picks one victim,
// whose statement and commit are kAborted (a retry of the whole transaction may
// pass), and the other goes on and commits.
TEST_P(SqlServerContractTest, DeadlockIsAbortedForTheVictim) {
  std::unique_ptr<Store> store = Open(GetParam().patient_params);
  std::unique_ptr<Store> observer = Open();
  ASSERT_NE(store, nullptr);
  ASSERT_NE(observer, nullptr);
  ASSERT_OK(ExecAndCommit(*store, "CREATE TABLE d (id INT PRIMARY KEY, v INT NOT NULL)"));
  ASSERT_OK(ExecAndCommit(*store, "INSERT INTO d VALUES (1, 0), (2, 0)"));
  std::unique_ptr<StoreTransaction> a = *store->Begin();
  std::unique_ptr<StoreTransaction> b = *store->Begin();
  ASSERT_OK(a->Exec("UPDATE d SET v = 1 WHERE id = 1"));
  ASSERT_OK(b->Exec("UPDATE d SET v = 2 WHERE id = 2"));
  absl::Status from_a;
  std::thread t([&] { from_a = a->Exec("UPDATE d SET v = 1 WHERE id = 2").status(); });
  // a waits for b's row; b's next statement closes the cycle.
  EXPECT_TRUE(testing::WaitUntil([&] {
    return QueryScalar(*observer, GetParam().lock_waiters_sql) == 1;
  })) << "a never waited for b's row";
  absl::Status from_b = b->Exec("UPDATE d SET v = 2 WHERE id = 1").status();
  if (!from_b.ok()) b->Rollback();  // lets a go on
  t.join();
  ASSERT_NE(from_a.ok(), from_b.ok()) << "a: " << from_a << "; b: " << from_b;
  const absl::Status& victim = from_a.ok() ? from_b : from_a;
  EXPECT_THAT(victim, StatusIs(absl::StatusCode::kAborted));
  EXPECT_THAT(Message(victim), HasSubstr(GetParam().deadlock_words));
  if (from_b.ok()) {
    EXPECT_THAT(a->Commit(), StatusIs(absl::StatusCode::kAborted));
    ASSERT_OK(b->Commit());
    EXPECT_EQ(QueryScalar(*observer, "SELECT v FROM d WHERE id = 1"), 2);
  } else {
    ASSERT_OK(a->Commit());
    EXPECT_EQ(QueryScalar(*observer, "SELECT v FROM d WHERE id = 2"), 1);
  }
}

// A guarded transaction's final write (the result, then COMMIT) costs the server
// backends as few round trips as they can give; one that does not move the record
// (another holder's token) commits nothing: not the record, not the business rows.
TEST_P(SqlServerContractTest, FinalWriteRoundTripsAndAnUnmovedOneCommitsNothing) {
  std::unique_ptr<Store> store = Open();
  ASSERT_NE(store, nullptr);
  ASSERT_OK(ExecAndCommit(*store, "CREATE TABLE h (x INT)"));
  const Record claim = testing::ClaimRecord("K", 1, "refund");
  Record done = claim;
  done.state = RecordState::kSucceeded;
  done.result = "r";
  done.lease_until = absl::InfinitePast();
  {
    // Prepares the statements on the pooled connection, so the counts below are exact.
    Record warm = testing::ClaimRecord("warm", 1, "refund");
    std::unique_ptr<StoreTransaction> tx = *store->Begin();
    ASSERT_OK(Records(*tx).InsertOrLoad(warm));
    Record warm_done = warm;
    warm_done.state = RecordState::kSucceeded;
    ASSERT_OK(Records(*tx).ReplaceAndCommit(warm_done, 1, RecordState::kProcessing));
  }
  {
    std::unique_ptr<StoreTransaction> tx = *store->Begin();
    ASSERT_OK(Records(*tx).InsertOrLoad(claim));
    ASSERT_OK(tx->Exec("INSERT INTO h VALUES (1)"));
    const uint64_t before = GetParam().round_trips();
    absl::StatusOr<bool> moved =
        Records(*tx).ReplaceAndCommit(done, /*expected_token=*/7, RecordState::kProcessing);
    EXPECT_EQ(GetParam().round_trips() - before, GetParam().unmoved_final_write_round_trips);
    ASSERT_OK(moved);
    EXPECT_FALSE(*moved);
  }
  EXPECT_EQ(*store->Get("default", "K"), std::nullopt);
  EXPECT_EQ(QueryScalar(*store, "SELECT count(*) FROM h"), 0);
  {
    std::unique_ptr<StoreTransaction> tx = *store->Begin();
    ASSERT_OK(Records(*tx).InsertOrLoad(claim));
    ASSERT_OK(tx->Exec("INSERT INTO h VALUES (1)"));
    const uint64_t before = GetParam().round_trips();
    absl::StatusOr<bool> moved = Records(*tx).ReplaceAndCommit(done, 1, RecordState::kProcessing);
    EXPECT_EQ(GetParam().round_trips() - before, GetParam().final_write_round_trips);
    ASSERT_OK(moved);
    EXPECT_TRUE(*moved);
  }
  absl::StatusOr<std::optional<Record>> got = store->Get("default", "K");
  ASSERT_OK(got);
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->state, RecordState::kSucceeded);
  EXPECT_EQ(QueryScalar(*store, "SELECT count(*) FROM h"), 1);
}

// Each backend only when it is compiled in.
std::vector<SqlContractBackend> ServerContracts() {
  std::vector<SqlContractBackend> all;
#if IDEM_HAVE_POSTGRES
  all.push_back(PostgresContract());
#endif
#if IDEM_HAVE_MYSQL
  all.push_back(MysqlContract());
#endif
  return all;
}

std::vector<SqlContractBackend> SqlContracts() {
  std::vector<SqlContractBackend> all = {SqliteContract()};
  for (SqlContractBackend& b : ServerContracts()) all.push_back(std::move(b));
  return all;
}

INSTANTIATE_TEST_SUITE_P(SqlBackends, SqlContractTest, ::testing::ValuesIn(SqlContracts()),
                         [](const auto& info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(ServerBackends, SqlServerContractTest,
                         ::testing::ValuesIn(ServerContracts()),
                         [](const auto& info) { return info.param.name; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(SqlServerContractTest);

}  // namespace
}  // namespace idem
