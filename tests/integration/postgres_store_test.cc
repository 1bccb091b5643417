// PostgreSQL-specific behaviour against a real server: URLs, SQLSTATE mapping,
// deferred BEGIN and pipelining (round trips), binding. The contract every backend
// keeps (a newer schema refused, a claim held past lock_timeout failing closed, the
// pool recovering after its sessions are terminated, a final write that does not
// move committing nothing) is tests/conformance/store_contract_test.cc; the one of
// the SQL stores (values and records byte for byte, one statement per call, a wrong
// password, a busy pool, a deadlock) is tests/conformance/sql_contract_test.cc.
//
// Needs IDEM_TEST_POSTGRES_URL (scripts/services.sh start DIR; source DIR/env.sh);
// every test that needs the server FAILS without it, on purpose: a skipped
// integration test looks green in CI. Each test works in a schema of its own.
#include "store/postgres/postgres_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/guard_batch.h"
#include "idem/guard.h"
#include "idem/store.h"
#include "store/absl_compat.h"
#include "store/backend.h"
#include "store/postgres/pg_conn.h"
#include "store/postgres/pg_url.h"
#include "store/store_url.h"
#include "testing/records.h"
#include "testing/status_matchers.h"
#include "testing/wait_until.h"

namespace idem {
namespace {

using ::idem::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::Not;

std::string Message(const absl::Status& s) { return std::string(s.message()); }

std::string SqlState(const absl::Status& s) {
  auto p = s.GetPayload(std::string(postgres::kSqlStatePayload));
  return p.has_value() ? std::string(*p) : "";
}

std::string WithParam(const std::string& url, const std::string& param) {
  return url + (url.find('?') == std::string::npos ? "?" : "&") + param;
}

std::string RandomName(const std::string& prefix) {
  static std::atomic<int> counter{0};
  std::random_device rd;
  return prefix + std::to_string(rd() % 1000000) + "_" + std::to_string(counter.fetch_add(1));
}

Record MakeRecord(std::string key, int64_t token = 1) {
  return testing::ClaimRecord(std::move(key), token);
}

// ---- no server needed ----

TEST(PostgresUrlTest, ErrorsNameWhatIsWrong) {
  auto code_of = [](const char* url) { return OpenPostgresStore(url).status(); };
  EXPECT_THAT(code_of("mysql://u@h/db"), StatusIs(absl::StatusCode::kInvalidArgument));
  absl::Status pool = code_of("postgres://u@h/db?pool=0");
  EXPECT_THAT(pool, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Message(pool), HasSubstr("pool='0' must be an integer in 1..1024"));
  EXPECT_THAT(code_of("postgres://u@h/db?pool=many"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(code_of("postgres://u@h/db?lock_timeout_ms=-1"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(code_of("postgres://u@h/db?pool_timeout_ms=1s"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(code_of("postgres://u@h/db?connect_timeout=soon"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  absl::Status unknown = code_of("postgresql://u:secret@h/db?fsync=1");
  EXPECT_THAT(unknown, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Message(unknown), HasSubstr("fsync"));
  EXPECT_THAT(Message(unknown), Not(HasSubstr("secret")));
  EXPECT_THAT(code_of("postgres://u@[::1/db"), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(PostgresUrlTest, ParsesIdemParametersAndPassesTheRestToLibpq) {
  absl::StatusOr<postgres::Options> o = postgres::ParseUrl(
      "postgres://u:pw@h:5433/db?pool=3&sslmode=disable&lock_timeout_ms=0&pool_timeout_ms=10");
  ASSERT_OK(o);
  EXPECT_EQ(o->pool, 3);
  EXPECT_EQ(o->lock_timeout_ms, 0);
  EXPECT_EQ(o->pool_timeout_ms, 10);
  EXPECT_EQ(o->connect.display,
            "postgres://u@h:5433/db?pool=3&sslmode=disable&lock_timeout_ms=0"
            "&pool_timeout_ms=10");
  ASSERT_FALSE(o->connect.values.empty());
  EXPECT_EQ(o->connect.keywords.back(), "dbname");
  EXPECT_EQ(o->connect.values.back(), "postgres://u:pw@h:5433/db?sslmode=disable");
  // One store call's bound and a new connection's, by default.
  EXPECT_EQ(o->connect.io_timeout_ms, 3000);
  EXPECT_EQ(o->connect.connect_timeout_ms, 1500);
  absl::StatusOr<postgres::Options> given =
      postgres::ParseUrl("postgres://u@h/db?connect_timeout=4&io_timeout_ms=6000");
  ASSERT_OK(given);
  EXPECT_EQ(given->connect.io_timeout_ms, 6000);
  EXPECT_EQ(given->connect.connect_timeout_ms, 4000);
}

// A primary and its standby in one URL (libpq multi-host, docs/operations.md §7a):
// libpq gets the host list and target_session_attrs as written.
TEST(PostgresUrlTest, PassesAMultiHostUrlToLibpq) {
  absl::StatusOr<postgres::Options> o = postgres::ParseUrl(
      "postgres://u:pw@10.0.0.1:5432,10.0.0.2:5433/db?target_session_attrs=read-write&pool=4");
  ASSERT_OK(o);
  EXPECT_EQ(o->pool, 4);
  EXPECT_EQ(o->connect.display,
            "postgres://u@10.0.0.1:5432,10.0.0.2:5433/db?target_session_attrs=read-write&pool=4");
  EXPECT_EQ(o->connect.values.back(),
            "postgres://u:pw@10.0.0.1:5432,10.0.0.2:5433/db?target_session_attrs=read-write");
}

// libpq reads the userinfo up to its first '@', idem (and its redaction) up to the
// last: a raw '@' in the password made libpq try the host "ss-SECRET1@h", and its
// error quoted that half of the password.
TEST(PostgresUrlTest, APasswordWithAnAtSignReachesLibpqWhole) {
  absl::StatusOr<postgres::Options> o =
      postgres::ParseUrl("postgres://idem:pa@ss-SECRET1@127.0.0.1:1/db?pool=2");
  ASSERT_OK(o);
  EXPECT_EQ(o->connect.display, "postgres://idem@127.0.0.1:1/db?pool=2");
  EXPECT_EQ(o->connect.values.back(), "postgres://idem:pa%40ss-SECRET1@127.0.0.1:1/db");
  absl::Status s = OpenPostgresStore("postgres://idem:pa@ss-SECRET1@127.0.0.1:1/db").status();
  EXPECT_THAT(Message(s), HasSubstr("127.0.0.1"));
  EXPECT_THAT(Message(s), Not(HasSubstr("SECRET1")));
  absl::Status raw_slash = postgres::ParseUrl("postgres://idem:pa/ss-SECRET1@127.0.0.1:1/db").status();
  EXPECT_THAT(raw_slash, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Message(raw_slash), HasSubstr("percent-encoded"));
  EXPECT_THAT(Message(raw_slash), Not(HasSubstr("SECRET1")));
}

TEST(PostgresUrlTest, RedactsPasswords) {
  EXPECT_EQ(store::RedactUrl("postgres://u:p%40ss@h/db"), "postgres://u@h/db");
  EXPECT_EQ(store::RedactUrl("postgresql://u@h/db?password=x&pool=2"),
            "postgresql://u@h/db?pool=2");
  EXPECT_EQ(store::RedactUrl("postgres://h"), "postgres://h");
  EXPECT_EQ(store::RedactUrl("postgres:///db?host=/run/x"), "postgres:///db?host=/run/x");
}

TEST(PostgresPlaceholderTest, RewritesOutsideQuotesAndComments) {
  int n = 0;
  absl::StatusOr<std::string> s = postgres::RewritePlaceholders(
      "SELECT ?, '?''?', E'\\'?', \"a?\"\"b\", $$?$$, $t$ ? $t$, x -- ?\n, /* ? /* ? */ ? */ ?",
      &n);
  ASSERT_OK(s);
  EXPECT_EQ(*s,
            "SELECT $1, '?''?', E'\\'?', \"a?\"\"b\", $$?$$, $t$ ? $t$, x -- ?\n, /* ? /* ? */ ? "
            "*/ $2");
  EXPECT_EQ(n, 2);
  ASSERT_OK(postgres::RewritePlaceholders("SELECT $1 + $3", &n));
  EXPECT_EQ(n, 3);
  EXPECT_THAT(postgres::RewritePlaceholders("SELECT ?, $1", &n),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(PostgresSqlStateTest, MapsToWhatTheCallerShouldDo) {
  using C = absl::StatusCode;
  const std::pair<const char*, C> cases[] = {
      {"23505", C::kInvalidArgument},  {"23503", C::kInvalidArgument},
      {"42601", C::kInvalidArgument},  {"42P01", C::kUnavailable},
      {"22P02", C::kInvalidArgument},  {"40001", C::kAborted},
      {"40P01", C::kAborted},          {"55P03", C::kUnavailable},
      {"57014", C::kUnavailable},      {"57P01", C::kUnavailable},
      {"08006", C::kUnavailable},      {"53300", C::kUnavailable},
      {"25P02", C::kAborted},          {"28P01", C::kPermissionDenied},
      {"42501", C::kUnavailable},      {"XX001", C::kDataLoss},
      {"XX000", C::kInternal},         {"42703", C::kUnavailable},
      {"3D000", C::kUnavailable},      {"25006", C::kUnavailable},
      {"53100", C::kUnavailable},
  };
  for (const auto& [state, code] : cases) {
    absl::Status s = postgres::StatusFromSqlState(state, "m");
    EXPECT_EQ(s.code(), code) << state;
    EXPECT_EQ(SqlState(s), state);
  }
  // A missing table or column, no privilege, a wrong database, a standby, a full
  // disk, a lost server: the store's fault, whatever the statement.
  for (const char* state : {"42P01", "42703", "42501", "3D000", "3F000", "25006", "53100",
                            "08006", "57P01", "58030"}) {
    EXPECT_TRUE(IsStoreFault(postgres::StatusFromSqlState(state, "m"))) << state;
  }
  for (const char* state : {"23505", "42601", "22P02", "40001", "55P03", "57014", "28P01"}) {
    EXPECT_FALSE(IsStoreFault(postgres::StatusFromSqlState(state, "m"))) << state;
  }
}

// ---- against the server ----

class PostgresStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* url = std::getenv("IDEM_TEST_POSTGRES_URL");
    ASSERT_TRUE(url != nullptr && *url != '\0')
        << "IDEM_TEST_POSTGRES_URL is not set; run `scripts/services.sh start build/services` "
           "and `source build/services/env.sh` first (this test fails rather than skips)";
    base_url_ = url;
    absl::StatusOr<std::unique_ptr<Store>> admin = OpenPostgresStore(base_url_);
    ASSERT_TRUE(admin.ok()) << admin.status();
    admin_ = *std::move(admin);
    schema_ = RandomName("t_");
    ASSERT_OK(AdminExec("CREATE SCHEMA " + schema_));
    url_ = WithParam(base_url_, "options=-csearch_path%3D" + schema_);
  }

  // A store on this test's schema with a table ledger (order_no TEXT PRIMARY KEY),
  // or nullptr (the failure recorded).
  std::unique_ptr<Store> OpenWithLedger() {
    std::unique_ptr<Store> store = Open();
    if (store == nullptr) return nullptr;
    absl::StatusOr<std::unique_ptr<StoreTransaction>> tx = store->Begin();
    EXPECT_TRUE(tx.ok()) << tx.status();
    if (!tx.ok()) return nullptr;
    EXPECT_OK((*tx)->Exec("CREATE TABLE ledger (order_no TEXT PRIMARY KEY)"));
    EXPECT_OK((*tx)->Commit());
    return store;
  }

  void TearDown() override {
    if (admin_ != nullptr && !schema_.empty()) {
      EXPECT_OK(AdminExec("DROP SCHEMA " + schema_ + " CASCADE"));
    }
  }

  absl::Status AdminExec(const std::string& sql) {
    IDEM_ASSIGN_OR_RETURN(std::unique_ptr<StoreTransaction> tx, admin_->Begin());
    IDEM_RETURN_IF_ERROR(tx->Exec(sql).status());
    return tx->Commit();
  }

  // Terminates every backend of `app` (application_name) and waits until they are
  // gone. Returns how many were terminated.
  int64_t TerminateApp(const std::string& app) {
    int64_t killed = -1;
    {
      std::unique_ptr<StoreTransaction> tx = *admin_->Begin();
      absl::StatusOr<Rows> rows = tx->Query(
          "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = ?",
          {Value(app)});
      EXPECT_OK(rows);
      if (rows.ok()) killed = static_cast<int64_t>(rows->rows.size());
      EXPECT_OK(tx->Commit());
    }
    EXPECT_TRUE(testing::WaitUntil([&] { return Sessions(app) == 0; }))
        << "sessions of " << app << " outlived pg_terminate_backend";
    return killed;
  }

  // How many sessions of `app` (application_name) there are; with `waiting`, only
  // those waiting for a lock.
  int64_t Sessions(const std::string& app, bool waiting = false) {
    std::unique_ptr<StoreTransaction> tx = *admin_->Begin();
    absl::StatusOr<Rows> rows =
        tx->Query(std::string("SELECT count(*) FROM pg_stat_activity WHERE application_name = ?") +
                      (waiting ? " AND wait_event_type = 'Lock'" : ""),
                  {Value(app)});
    return rows.ok() ? rows->rows[0][0].as_int() : -1;
  }

  int64_t CountRows(Store& store, const std::string& sql) {
    std::unique_ptr<StoreTransaction> tx = *store.Begin();
    absl::StatusOr<Rows> rows = tx->Query(sql);
    EXPECT_OK(rows);
    return rows.ok() ? rows->rows[0][0].as_int() : -1;
  }

  std::unique_ptr<Store> Open(const std::string& params = "") {
    absl::StatusOr<std::unique_ptr<Store>> s =
        OpenPostgresStore(params.empty() ? url_ : WithParam(url_, params));
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *std::move(s) : nullptr;
  }

  std::string base_url_, url_, schema_;
  std::unique_ptr<Store> admin_;
};

TEST_F(PostgresStoreTest, ValuesBindAndComeBackTyped) {
  std::unique_ptr<Store> store = Open();
  ASSERT_NE(store, nullptr);
  {
    std::unique_ptr<StoreTransaction> tx = *store->Begin();
    ASSERT_OK(tx->Exec(
        "CREATE TABLE v (i BIGINT, s SMALLINT, d DOUBLE PRECISION, n NUMERIC, t TEXT, b BYTEA, "
        "f BOOLEAN, z TEXT)"));
    // Integers are bigint: a boolean column takes text ('true') or an expression, not 1.
    EXPECT_THAT(tx->Exec("INSERT INTO v (f) VALUES (?)", {Value(true)}),
                StatusIs(absl::StatusCode::kInvalidArgument));
  }
  std::unique_ptr<StoreTransaction> tx = *store->Begin();
  ASSERT_OK(tx->Exec(
      "CREATE TABLE v (i BIGINT, s SMALLINT, d DOUBLE PRECISION, n NUMERIC, t TEXT, b BYTEA, "
      "f BOOLEAN, z TEXT)"));
  const std::string bytes("\0\1\2\xff\\x", 6);
  absl::StatusOr<int64_t> n =
      tx->Exec("INSERT INTO v VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
               {Value(-(1LL << 62)), Value(7), Value(0.1), Value(2.5), Value("h\xc3\xa9 '?'"),
                Value(Blob{bytes}), Value("true"), Value(nullptr)});
  ASSERT_OK(n);
  EXPECT_EQ(*n, 1);
  ASSERT_OK(tx->Exec("INSERT INTO v (f) VALUES (? <> 0)", {Value(true)}));
  // Text meets an integer column as a literal would (the server infers its type).
  absl::StatusOr<Rows> rows = tx->Query(
      "SELECT i, s, d, n, t, b, f, z, '?' AS q FROM v WHERE s = ? AND t LIKE '%?%'", {Value("7")});
  ASSERT_OK(rows);
  ASSERT_EQ(rows->rows.size(), 1u);
  const std::vector<Value>& row = rows->rows[0];
  EXPECT_EQ(rows->columns[0], "i");
  EXPECT_EQ(row[0], Value(-(1LL << 62)));
  EXPECT_EQ(row[1], Value(7));
  EXPECT_EQ(row[2], Value(0.1));
  EXPECT_EQ(row[3], Value("2.5"));  // NUMERIC stays exact, as text
  EXPECT_EQ(row[4], Value("h\xc3\xa9 '?'"));
  EXPECT_EQ(row[5], Value(Blob{bytes}));
  EXPECT_EQ(row[6], Value(1));
  EXPECT_TRUE(row[7].is_null());
  EXPECT_EQ(row[8], Value("?"));
  EXPECT_EQ(*tx->Exec("UPDATE v SET i = i + 1"), 2);
  EXPECT_THAT(tx->Exec("INSERT INTO v (t) VALUES (?)", {Value(std::string("a\0b", 3))}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  ASSERT_OK(tx->Commit());
}

TEST_F(PostgresStoreTest, SqlStatesFromTheServer) {
  std::unique_ptr<Store> store = Open();
  ASSERT_NE(store, nullptr);
  {
    std::unique_ptr<StoreTransaction> tx = *store->Begin();
    ASSERT_OK(tx->Exec("CREATE TABLE u (k TEXT PRIMARY KEY)"));
    ASSERT_OK(tx->Commit());
  }
  std::unique_ptr<StoreTransaction> tx = *store->Begin();
  ASSERT_OK(tx->Exec("INSERT INTO u VALUES ('a')"));
  absl::Status dup = tx->Exec("INSERT INTO u VALUES ('a')").status();
  EXPECT_THAT(dup, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(SqlState(dup), "23505");
  EXPECT_THAT(Message(dup), HasSubstr("SQLSTATE 23505"));
  // The failed statement doomed the transaction: later statements and the commit say so.
  EXPECT_THAT(tx->Exec("SELECT 1"), StatusIs(absl::StatusCode::kAborted));
  EXPECT_THAT(tx->Commit(), StatusIs(absl::StatusCode::kAborted));

  tx = *store->Begin();
  absl::Status syntax = tx->Exec("SELEC 1").status();
  EXPECT_THAT(syntax, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(SqlState(syntax), "42601");
  tx->Rollback();
  tx = *store->Begin();  // two statements in one call: the server refuses them so
  EXPECT_EQ(SqlState(tx->Exec("CREATE TABLE a (x INT); DROP TABLE idem_records").status()),
            "42601");
  tx->Rollback();

  tx = *store->Begin();
  EXPECT_EQ(SqlState(tx->Exec("SELECT * FROM nope").status()), "42P01");
  tx->Rollback();

  tx = *store->Begin();
  ASSERT_OK(tx->Exec("SET LOCAL statement_timeout = 100"));
  absl::Status slow = tx->Exec("SELECT pg_sleep(5)").status();
  EXPECT_THAT(slow, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(SqlState(slow), "57014");
  tx->Rollback();

  // The caller's SQL may not end idem's transaction.
  tx = *store->Begin();
  EXPECT_THAT(tx->Exec("COMMIT"), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(tx->Commit(), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_OK(store->Ping());  // the connection went back to the pool in a clean state

  // A claim held by another open transaction past lock_timeout: 55P03, marked as a
  // claim in progress (what the Guard answers then, on every backend, is the
  // conformance suite's ClaimHeldPastTheLockTimeoutFailsClosed).
  std::unique_ptr<Store> impatient = Open("lock_timeout_ms=100");
  ASSERT_NE(impatient, nullptr);
  std::unique_ptr<StoreTransaction> held = *store->Begin();
  ASSERT_OK(Records(*held).InsertOrLoad(MakeRecord("K")));
  std::unique_ptr<StoreTransaction> waiter = *impatient->Begin();
  absl::Status locked = Records(*waiter).InsertOrLoad(MakeRecord("K")).status();
  EXPECT_THAT(locked, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(SqlState(locked), "55P03");
  EXPECT_TRUE(IsClaimContended(locked));
  EXPECT_THAT(Message(locked), HasSubstr("claim in progress"));
  waiter->Rollback();
  held->Rollback();
}

// The READ COMMITTED corner: the conflicting row is committed by a transaction we
// queued behind, after our statement's snapshot. The claim must still return it
// (locked), not nothing and not an error.
TEST_F(PostgresStoreTest, ClaimQueuedBehindACommittingInsertLoadsAndLocksIt) {
  const std::string app = RandomName("idem_pgqueue_");
  // A lock timeout far beyond the wait below, which ends as soon as the claim queues.
  std::unique_ptr<Store> store = Open("lock_timeout_ms=60000&application_name=" + app);
  ASSERT_NE(store, nullptr);
  std::unique_ptr<StoreTransaction> first = *store->Begin();
  ASSERT_OK(Records(*first).InsertOrLoad(MakeRecord("K")));
  absl::StatusOr<std::optional<Record>> seen;
  std::unique_ptr<StoreTransaction> second = *store->Begin();
  std::thread t([&] { seen = Records(*second).InsertOrLoad(MakeRecord("K", 9)); });
  // The corner needs the claim queued behind `first` before it commits.
  EXPECT_TRUE(testing::WaitUntil([&] { return Sessions(app, /*waiting=*/true) == 1; }))
      << "the second claim never waited for the first";
  ASSERT_OK(first->Commit());
  t.join();
  ASSERT_OK(seen);
  ASSERT_TRUE(seen->has_value());
  EXPECT_EQ((*seen)->token, 1);
  // `second` holds the row lock now: a third claim waits and times out.
  std::unique_ptr<Store> impatient = Open("lock_timeout_ms=100");
  std::unique_ptr<StoreTransaction> third = *impatient->Begin();
  EXPECT_THAT(Records(*third).InsertOrLoad(MakeRecord("K")),
              StatusIs(absl::StatusCode::kUnavailable));
  third->Rollback();
  ASSERT_OK(second->Commit());
}

// Begin() sends nothing: its BEGIN goes out with the first statement. A connection
// that died before then fails that statement as Begin() used to fail (kUnavailable,
// nothing committed), unless it was a pooled one, which is replaced transparently.
TEST_F(PostgresStoreTest, DeferredBeginFailsOnTheFirstStatement) {
  const std::string app = RandomName("idem_pgdefer_");
  std::unique_ptr<Store> store = Open("pool=2&application_name=" + app);
  ASSERT_NE(store, nullptr);
  std::unique_ptr<StoreTransaction> pooled = *store->Begin();  // the connection Open made
  std::unique_ptr<StoreTransaction> fresh = *store->Begin();   // connected for this Begin
  ASSERT_EQ(TerminateApp(app), 2);

  const uint64_t before = postgres::RoundTrips();
  absl::Status lost = fresh->Exec("CREATE TABLE d (x INT)").status();
  EXPECT_EQ(postgres::RoundTrips() - before, 1u);
  EXPECT_THAT(lost, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(SqlState(lost), "57P01");  // as the BEGIN itself answered it before
  EXPECT_THAT(fresh->Exec("SELECT 1"), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(fresh->Commit(), StatusIs(absl::StatusCode::kUnavailable));
  fresh.reset();

  ASSERT_OK(pooled->Exec("CREATE TABLE d (x INT)"));  // on a fresh connection
  ASSERT_OK(pooled->Exec("INSERT INTO d VALUES (1)"));
  ASSERT_OK(pooled->Commit());
  EXPECT_EQ(CountRows(*store, "SELECT count(*) FROM d"), 1);

  // Nothing sent at all: Commit and Rollback have nothing to do and need no
  // round trip, and the connection goes back to the pool idle.
  const uint64_t idle_before = postgres::RoundTrips();
  ASSERT_OK((*store->Begin())->Commit());
  (*store->Begin())->Rollback();
  EXPECT_EQ(postgres::RoundTrips() - idle_before, 0u);
  // A caller's mistake caught before sending keeps the BEGIN deferred.
  std::unique_ptr<StoreTransaction> tx = *store->Begin();
  EXPECT_THAT(tx->Exec("INSERT INTO d VALUES (?)"), StatusIs(absl::StatusCode::kInvalidArgument));
  ASSERT_OK(tx->Exec("INSERT INTO d VALUES (2)"));
  ASSERT_OK(tx->Commit());
  EXPECT_EQ(CountRows(*store, "SELECT count(*) FROM d"), 2);
}

TEST_F(PostgresStoreTest, GuardRunTakesThreeRoundTrips) {
  std::unique_ptr<Store> store = OpenWithLedger();
  ASSERT_NE(store, nullptr);
  Guard guard(*store);
  for (int i = 0; i < 2; ++i) {  // the first run also prepares its statements
    const std::string key = "K" + std::to_string(i);
    const uint64_t before = postgres::RoundTrips();
    absl::StatusOr<Result> r = guard.Run(
        {.biz_type = "refund", .key = key}, [&](Transaction& tx) -> absl::StatusOr<std::string> {
          IDEM_RETURN_IF_ERROR(
              tx.Exec("INSERT INTO ledger (order_no) VALUES (?)", {Value(key)}).status());
          return "ok";
        });
    // (BEGIN, SET LOCAL, claim), the handler's INSERT, (result UPDATE, COMMIT).
    EXPECT_EQ(postgres::RoundTrips() - before, 3u) << "run " << i;
    ASSERT_OK(r);
    EXPECT_EQ(r->outcome, Outcome::kExecuted);
  }
  // The bare transaction: (BEGIN, SET LOCAL, INSERT), COMMIT.
  const uint64_t before = postgres::RoundTrips();
  std::unique_ptr<StoreTransaction> tx = *store->Begin();
  ASSERT_OK(tx->Exec("INSERT INTO ledger (order_no) VALUES (?)", {Value("bare")}));
  ASSERT_OK(tx->Commit());
  EXPECT_EQ(postgres::RoundTrips() - before, 2u);
  EXPECT_EQ(CountRows(*store, "SELECT count(*) FROM ledger"), 3);
}

// A consumer's batch (RunBatchIn, core/guard_batch.h): the claims of all its keys go in one
// round trip (with the BEGIN), the results in another, so a batch of n messages
// whose handler is one INSERT costs n + 3 round trips instead of 3n.
TEST_F(PostgresStoreTest, GuardBatchSendsItsClaimsAndResultsTogether) {
  std::unique_ptr<Store> store = OpenWithLedger();
  ASSERT_NE(store, nullptr);
  Guard guard(*store);
  for (int round = 0; round < 2; ++round) {  // the first round also prepares
    std::vector<Request> batch;
    for (int i = 0; i < 50; ++i) {
      batch.push_back({.biz_type = "event", .key = absl::StrCat("R", round, "-", i)});
    }
    const uint64_t before = postgres::RoundTrips();
    std::unique_ptr<StoreTransaction> tx = *store->Begin();
    absl::StatusOr<std::vector<Result>> r =
        RunBatchIn(guard, *tx, batch, [&](size_t i, Transaction& t) -> absl::StatusOr<std::string> {
          IDEM_RETURN_IF_ERROR(
              t.Exec("INSERT INTO ledger (order_no) VALUES (?)", {Value(batch[i].key)}).status());
          return "ok";
        });
    ASSERT_OK(r);
    ASSERT_OK(tx->Commit());
    // (BEGIN, SET LOCAL, 50 claims), 50 INSERTs, (50 UPDATEs + NOTIFYs), COMMIT.
    EXPECT_EQ(postgres::RoundTrips() - before, 53u) << "round " << round;
    for (const Result& one : *r) EXPECT_EQ(one.outcome, Outcome::kExecuted);
  }
  EXPECT_EQ(CountRows(*store, "SELECT count(*) FROM ledger"), 100);
}

// The COMMIT pipelined behind the result UPDATE (the contract, that a write that
// does not move the record commits nothing, is the conformance suite's
// ReplaceAndCommitThatDoesNotMoveCommitsNothing): one round trip, and after a
// failed statement, which PostgreSQL has aborted the transaction for, the final
// write is refused as kAborted and commits nothing.
// Finishing a claim through one store NOTIFYs every other process's subscription
// (two stores here: two pools, as two `idem serve` processes would have), at
// commit only: a finishing write that rolls back announces nothing. Keys are bytes.
TEST_F(PostgresStoreTest, FinishedKeysAreAnnouncedToOtherProcessesAtCommit) {
  std::unique_ptr<Store> writer = Open();
  std::unique_ptr<Store> waiter = Open();
  ASSERT_NE(writer, nullptr);
  ASSERT_NE(waiter, nullptr);
  absl::Mutex mu;
  std::set<std::string> heard;  // "tenant|key"; other tests' keys may come too
  std::shared_ptr<void> subscription =
      Backend(*waiter).SubscribeFinished([&](std::string_view tenant, std::string_view key) {
        absl::MutexLock lock(&mu);
        heard.insert(absl::StrCat(AV(tenant), "|", AV(key)));
      });
  ASSERT_NE(subscription, nullptr);
  auto heard_of = [&](const std::string& key) {
    absl::MutexLock lock(&mu);
    return heard.count("default|" + key) > 0;
  };
  auto finish = [&](const std::string& key, bool commit) {
    Record claim = MakeRecord(key);
    std::unique_ptr<StoreTransaction> tx = *writer->Begin();
    ASSERT_OK(Records(*tx).InsertOrLoad(claim));
    ASSERT_OK(tx->Commit());
    Record done = claim;
    done.state = RecordState::kSucceeded;
    done.result = "r";
    done.lease_until = absl::InfinitePast();
    tx = *writer->Begin();
    if (commit) {
      ASSERT_OK(Records(*tx).ReplaceAndCommit(done, claim.token, RecordState::kProcessing));
    } else {
      ASSERT_OK(Records(*tx).Replace(done, claim.token, RecordState::kProcessing));
      tx->Rollback();
    }
  };
  // The listener connects on its own thread: finish keys until one is heard.
  const std::string prefix = RandomName("n");
  int warmup = 0;
  ASSERT_TRUE(testing::WaitUntil([&] {
    const std::string key = prefix + "-warm-" + std::to_string(warmup++);
    finish(key, true);
    return testing::WaitUntil([&] { return heard_of(key); }, std::chrono::milliseconds(200));
  })) << "no notification arrived";

  const std::string rolled_back = prefix + "-rolled-back";
  const std::string bytes = prefix + std::string("-a.b\0\xff|c", 8);
  finish(rolled_back, false);
  {  // Replace then Commit (the lease-mode fail path) announces too
    Record claim = MakeRecord(bytes);
    std::unique_ptr<StoreTransaction> tx = *writer->Begin();
    ASSERT_OK(Records(*tx).InsertOrLoad(claim));
    ASSERT_OK(tx->Commit());
    Record failed = claim;
    failed.state = RecordState::kFailed;
    failed.error = "e";
    failed.lease_until = absl::InfinitePast();
    tx = *writer->Begin();
    ASSERT_OK(Records(*tx).Replace(failed, claim.token, RecordState::kProcessing));
    ASSERT_OK(tx->Commit());
  }
  EXPECT_TRUE(testing::WaitUntil([&] { return heard_of(bytes); }));
  EXPECT_FALSE(heard_of(rolled_back));  // notified in commit order: it would be in by now

  // notify=off: nothing is sent, and there is nothing to subscribe to.
  std::unique_ptr<Store> quiet = Open("notify=off");
  ASSERT_NE(quiet, nullptr);
  EXPECT_EQ(Backend(*quiet).SubscribeFinished([](std::string_view, std::string_view) {}), nullptr);
  EXPECT_THAT(OpenPostgresStore(WithParam(url_, "notify=maybe")).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  subscription.reset();  // joins the listener before the captured state goes
}

// The final write of a transaction PostgreSQL has aborted (an earlier statement
// failed) is kAborted, and nothing of it is committed. Its round trips are the SQL
// contract's (tests/conformance/sql_contract_test.cc).
TEST_F(PostgresStoreTest, ReplaceAndCommitRollsBackAnAbortedTransaction) {
  std::unique_ptr<Store> store = Open();
  ASSERT_NE(store, nullptr);
  {
    std::unique_ptr<StoreTransaction> tx = *store->Begin();
    ASSERT_OK(tx->Exec("CREATE TABLE h (x INT)"));
    ASSERT_OK(tx->Commit());
  }
  Record claim = MakeRecord("K");
  Record done = claim;
  done.state = RecordState::kSucceeded;
  done.result = "r";
  done.lease_until = absl::InfinitePast();
  {
    std::unique_ptr<StoreTransaction> tx = *store->Begin();
    ASSERT_OK(Records(*tx).InsertOrLoad(claim));
    ASSERT_OK(tx->Exec("INSERT INTO h VALUES (1)"));
    EXPECT_FALSE(tx->Exec("INSERT INTO h VALUES ('x')").ok());
    EXPECT_THAT(Records(*tx).ReplaceAndCommit(done, 1, RecordState::kProcessing),
                StatusIs(absl::StatusCode::kAborted));
  }
  EXPECT_EQ(CountRows(*store, "SELECT count(*) FROM h"), 0);
  EXPECT_EQ(*store->Get("default", "K"), std::nullopt);
}

TEST_F(PostgresStoreTest, ReplaceAndCommitOnALostConnectionIsOutcomeUnknown) {
  const std::string app = RandomName("idem_pgrac_");
  std::unique_ptr<Store> store = Open("application_name=" + app);
  ASSERT_NE(store, nullptr);
  Record claim = MakeRecord("K");
  Record done = claim;
  done.state = RecordState::kSucceeded;
  std::unique_ptr<StoreTransaction> tx = *store->Begin();
  ASSERT_OK(Records(*tx).InsertOrLoad(claim));
  ASSERT_EQ(TerminateApp(app), 1);
  absl::StatusOr<bool> moved = Records(*tx).ReplaceAndCommit(done, 1, RecordState::kProcessing);
  EXPECT_THAT(moved, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(Message(moved.status()), HasSubstr("commit outcome unknown"));
  EXPECT_THAT(tx->Commit(), Not(StatusIs(absl::StatusCode::kOk)));
  tx.reset();
  EXPECT_EQ(*store->Get("default", "K"), std::nullopt);  // here: it had not
}

}  // namespace
}  // namespace idem
