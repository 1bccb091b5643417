// The backends every conformance test runs against. Each factory returns a fresh,
// empty store; `dir` is a scratch directory that lives as long as the test.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/time/time.h"
#include "idem/cache.h"
#include "idem/idem.h"
#include "testing/mysql_test_db.h"
#include "testing/wait_until.h"

namespace idem::testing {

// The lock timeout Backend::short_lock_timeout sets: short, so a test that waits it
// out is quick, and whole seconds, MySQL's unit.
inline constexpr absl::Duration kShortLockTimeout = absl::Seconds(1);

struct Backend {
  std::string name;  // a GoogleTest-friendly name
  // Returns the URL of a fresh store whose files live under `dir`.
  std::function<std::string(const std::string& dir)> url;
  // URL parameters that make bulk tests fast on this backend ("" for none).
  std::string fast_params;
  // Wraps the opened store (a decorator such as the cache tier); null: none.
  std::function<absl::StatusOr<std::unique_ptr<Store>>(std::unique_ptr<Store>)> wrap;
  // URL parameters that make a transaction waiting for another's lock give up
  // after kShortLockTimeout. "" for a backend where two stores never share data
  // (memory://: every open is a new, empty store), so no lock can be contended.
  std::string short_lock_timeout;
  // True when one writer locks the whole database (SQLite): a second transaction is
  // refused at Begin() whatever key it means to claim, so the Guard cannot tell a
  // claim in progress from any other writer and answers kUnavailable. The server
  // backends lock the key's row and tell it (Outcome::kInProgress).
  bool locks_whole_database = false;
  // Ends every server session of the stores opened with `url` (a URL this backend's
  // `url` made), as an operator's KILL or a failover would, and returns once they
  // are gone. Returns how many sessions it ended, or -1 after reporting a test
  // failure. Null for a backend without a server (memory://, SQLite).
  //
  // A client's close does not wait for the server: a session the store already
  // closed (the one that set up the schema) can still be listed for a while on a
  // loaded machine. So it first waits (up to WaitUntil's deadline) for at most
  // `settle_to` sessions to be left, then ends those there are.
  std::function<int64_t(const std::string& url, int64_t settle_to)> kill_sessions;
  // False for a backend this build leaves out (IDEM_WITH_<NAME>=OFF, testing/CMakeLists.txt
  // defines IDEM_HAVE_<NAME>): the lists below drop it.
  bool built = true;
};

// `backends` without those this build leaves out.
inline std::vector<Backend> BuiltOnly(std::vector<Backend> backends) {
  std::erase_if(backends, [](const Backend& b) { return !b.built; });
  return backends;
}

// Opens `url` (made by backend.url) and applies backend.wrap, if any.
inline absl::StatusOr<std::unique_ptr<Store>> OpenBackendStore(const Backend& backend,
                                                               const std::string& url) {
  absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(url);
  if (!store.ok() || !backend.wrap) return store;
  return backend.wrap(*std::move(store));
}

// The cache decorator (include/idem/cache.h) with an in-process L1 only: it must change no
// outcome of the suite. The Redis tier is covered by tests/integration/cache_test.
inline absl::StatusOr<std::unique_ptr<Store>> WrapWithCache(std::unique_ptr<Store> store) {
  return NewCachingStore(std::move(store), CacheOptions{});
}

// Runs `sql` in a transaction of its own on `store` and commits.
inline absl::Status ExecAndCommit(Store& store, const std::string& sql) {
  IDEM_ASSIGN_OR_RETURN(std::unique_ptr<StoreTransaction> tx, store.Begin());
  IDEM_RETURN_IF_ERROR(tx->Exec(sql).status());
  return tx->Commit();
}

// The first value of the first row of `sql`, read in a transaction of its own
// (rolled back); -1 after reporting a test failure.
inline int64_t QueryScalar(Store& store, const std::string& sql) {
  absl::StatusOr<std::unique_ptr<StoreTransaction>> tx = store.Begin();
  EXPECT_TRUE(tx.ok()) << tx.status();
  if (!tx.ok()) return -1;
  absl::StatusOr<Rows> rows = (*tx)->Query(sql);
  EXPECT_TRUE(rows.ok()) << rows.status();
  (*tx)->Rollback();
  return rows.ok() && !rows->rows.empty() ? rows->rows[0][0].as_int() : -1;
}

// Test names show the backend, not the struct's bytes.
inline void PrintTo(const Backend& backend, std::ostream* os) { *os << backend.name; }

// `url` with `params` ("a=1&b=2") appended.
inline std::string WithParams(const std::string& url, const std::string& params) {
  if (params.empty()) return url;
  return url + (url.find('?') == std::string::npos ? "?" : "&") + params;
}

// The value of the query parameter `name` in `url`, or "" when it has none.
inline std::string UrlParam(const std::string& url, const std::string& name) {
  const size_t q = url.find('?');
  if (q == std::string::npos) return "";
  for (size_t at = q + 1; at < url.size();) {
    size_t end = url.find('&', at);
    if (end == std::string::npos) end = url.size();
    const std::string item = url.substr(at, end - at);
    if (item.rfind(name + "=", 0) == 0) return item.substr(name.size() + 1);
    at = end + 1;
  }
  return "";
}

// PostgreSQL from IDEM_TEST_POSTGRES_URL (scripts/services.sh start DIR; source
// DIR/env.sh). Every test directory gets a schema of its own on the shared test
// database, selected with libpq's options=-csearch_path, so each test starts empty.
// The schema's name is kept in the directory: every store a test opens (also in a
// forked child) lands in the same schema. Schemas are not dropped; the test server
// is thrown away by scripts/services.sh. The sessions carry the schema's name as
// their application_name, so KillPostgresSessions finds this test's and no other's.
inline std::string PostgresUrl(const std::string& dir) {
  const char* base = std::getenv("IDEM_TEST_POSTGRES_URL");
  if (base == nullptr || *base == '\0') {
    ADD_FAILURE() << "IDEM_TEST_POSTGRES_URL is not set: run `scripts/services.sh start "
                     "build/services` and `source build/services/env.sh` first";
    return "postgres://IDEM_TEST_POSTGRES_URL-is-not-set.invalid:1/none?connect_timeout=1";
  }
  const std::string marker = dir + "/postgres_schema";
  std::string schema;
  {
    std::ifstream in(marker);
    std::getline(in, schema);
  }
  if (schema.empty()) {
    std::random_device rd;
    schema = "t_" + std::to_string(getpid()) + "_" + std::to_string(rd());
    absl::StatusOr<std::unique_ptr<Store>> admin = OpenStore(base);
    absl::Status s = admin.status();
    if (s.ok()) {
      absl::StatusOr<std::unique_ptr<StoreTransaction>> tx = (*admin)->Begin();
      s = tx.status();
      if (s.ok()) s = (*tx)->Exec("CREATE SCHEMA " + schema).status();
      if (s.ok()) s = (*tx)->Commit();
    }
    if (!s.ok()) {
      ADD_FAILURE() << "cannot create schema " << schema << " on IDEM_TEST_POSTGRES_URL: " << s;
      return base;
    }
    std::ofstream(marker) << schema << "\n";
  }
  return WithParams(base, "options=-csearch_path%3D" + schema + "&application_name=" + schema);
}

// Backend::kill_sessions for PostgreSQL: pg_terminate_backend on every session whose
// application_name is the one PostgresUrl put in `url`.
inline int64_t KillPostgresSessions(const std::string& url, int64_t settle_to) {
  const std::string app = UrlParam(url, "application_name");
  const char* base = std::getenv("IDEM_TEST_POSTGRES_URL");
  if (app.empty() || base == nullptr) {
    ADD_FAILURE() << "not a URL of PostgresUrl, or IDEM_TEST_POSTGRES_URL is not set";
    return -1;
  }
  absl::StatusOr<std::unique_ptr<Store>> admin = OpenStore(base);
  if (!admin.ok()) {
    ADD_FAILURE() << "cannot open IDEM_TEST_POSTGRES_URL: " << admin.status();
    return -1;
  }
  auto query = [&](const std::string& sql) -> absl::StatusOr<Rows> {
    IDEM_ASSIGN_OR_RETURN(std::unique_ptr<StoreTransaction> tx, (*admin)->Begin());
    IDEM_ASSIGN_OR_RETURN(Rows rows, tx->Query(sql, {Value(app)}));
    IDEM_RETURN_IF_ERROR(tx->Commit());
    return rows;
  };
  absl::StatusOr<Rows> left;
  auto count = [&] {
    left = query("SELECT count(*) FROM pg_stat_activity WHERE application_name = ?");
    return left.ok() ? left->rows[0][0].as_int() : int64_t{-1};
  };
  WaitUntil([&] { return count() <= settle_to; });  // else the count below tells
  absl::StatusOr<Rows> killed =
      query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = ?");
  if (!killed.ok()) {
    ADD_FAILURE() << "pg_terminate_backend: " << killed.status();
    return -1;
  }
  if (!WaitUntil([&] { return count() == 0; })) {
    ADD_FAILURE() << "the sessions of " << app << " outlived pg_terminate_backend: "
                  << (left.ok() ? std::to_string(left->rows[0][0].as_int()) + " left"
                                : left.status().ToString());
    return -1;
  }
  return static_cast<int64_t>(killed->rows.size());
}

// MariaDB/MySQL from IDEM_TEST_MYSQL_URL: a database of its own per test (named
// after `dir`, so every call of one test gets the same one). Without that variable
// the test fails: a backend silently left out would look like a passing one.
inline std::string MysqlTestUrl(const std::string& dir) {
  const std::string base = mysql::testing::BaseUrl();
  if (base.empty()) {
    ADD_FAILURE() << "IDEM_TEST_MYSQL_URL is not set: run `scripts/services.sh start "
                     "build/services` and `source build/services/env.sh` first";
    return "mysql://unset";
  }
  absl::StatusOr<std::string> url = mysql::testing::FreshDatabaseUrl(base, dir);
  if (!url.ok()) {
    ADD_FAILURE() << "cannot create the test database: " << url.status();
    return "mysql://unset";
  }
  return *url;
}

// Backend::kill_sessions for MariaDB/MySQL: KILL every other session on the test's
// own database (MysqlTestUrl gives each test one), from a store of its own there.
inline int64_t KillMysqlSessions(const std::string& url, int64_t settle_to) {
  absl::StatusOr<std::unique_ptr<Store>> admin = OpenStore(WithParams(url, "pool=1"));
  if (!admin.ok()) {
    ADD_FAILURE() << "cannot open the test database: " << admin.status();
    return -1;
  }
  // pool=1: every transaction below runs on the same connection, CONNECTION_ID().
  auto others = [&]() -> absl::StatusOr<std::vector<int64_t>> {
    IDEM_ASSIGN_OR_RETURN(std::unique_ptr<StoreTransaction> tx, (*admin)->Begin());
    IDEM_ASSIGN_OR_RETURN(Rows rows, tx->Query("SELECT CAST(ID AS SIGNED) FROM "
                                               "information_schema.PROCESSLIST WHERE DB = "
                                               "DATABASE() AND ID <> CONNECTION_ID()"));
    IDEM_RETURN_IF_ERROR(tx->Commit());
    std::vector<int64_t> ids;
    for (const std::vector<Value>& row : rows.rows) ids.push_back(row[0].as_int());
    return ids;
  };
  absl::StatusOr<std::vector<int64_t>> ids;
  WaitUntil([&] {  // else the count returned tells
    ids = others();
    return ids.ok() && static_cast<int64_t>(ids->size()) <= settle_to;
  });
  if (!ids.ok()) {
    ADD_FAILURE() << "cannot list the sessions: " << ids.status();
    return -1;
  }
  for (int64_t id : *ids) {
    absl::StatusOr<std::unique_ptr<StoreTransaction>> tx = (*admin)->Begin();
    absl::Status s = tx.status();
    if (s.ok()) s = (*tx)->Exec("KILL " + std::to_string(id)).status();
    if (s.ok()) s = (*tx)->Commit();
    if (!s.ok()) {
      ADD_FAILURE() << "KILL " << id << ": " << s;
      return -1;
    }
  }
  absl::StatusOr<std::vector<int64_t>> left;
  if (!WaitUntil([&] {
        left = others();
        return left.ok() && left->empty();
      })) {
    ADD_FAILURE() << "sessions outlived KILL: "
                  << (left.ok() ? std::to_string(left->size()) + " left"
                                : left.status().ToString());
    return -1;
  }
  return static_cast<int64_t>(ids->size());
}

// The backends with SQL (Transaction::Exec/Query): business rows live there.
inline std::vector<Backend> SqlBackends() {
  auto sqlite = [](const std::string& dir) { return "sqlite://" + dir + "/idem.db"; };
  const std::string sqlite_lock =
      "busy_timeout_ms=" + std::to_string(absl::ToInt64Milliseconds(kShortLockTimeout));
  const std::string postgres_lock =
      "lock_timeout_ms=" + std::to_string(absl::ToInt64Milliseconds(kShortLockTimeout));
  const std::string mysql_lock =
      "lock_wait_timeout_s=" + std::to_string(absl::ToInt64Seconds(kShortLockTimeout));
  return BuiltOnly({
      {.name = "sqlite",
       .url = sqlite,
       .fast_params = "synchronous=normal",
       .short_lock_timeout = sqlite_lock,
       .locks_whole_database = true},
      {.name = "postgres",
       .url = PostgresUrl,
       .short_lock_timeout = postgres_lock,
       .kill_sessions = KillPostgresSessions,
       .built = IDEM_HAVE_POSTGRES},
      {.name = "mysql",
       .url = MysqlTestUrl,
       .short_lock_timeout = mysql_lock,
       .kill_sessions = KillMysqlSessions,
       .built = IDEM_HAVE_MYSQL},
      // Without idem's stored procedures: the classic statements (a user without
      // CREATE ROUTINE, TiDB, sharded Vitess).
      {.name = "mysql_classic",
       .url =
           [](const std::string& dir) { return WithParams(MysqlTestUrl(dir), "procedures=off"); },
       .short_lock_timeout = mysql_lock,
       .kill_sessions = KillMysqlSessions,
       .built = IDEM_HAVE_MYSQL},
      {.name = "sqlite_cached",
       .url = sqlite,
       .fast_params = "synchronous=normal",
       .wrap = WrapWithCache,
       .short_lock_timeout = sqlite_lock,
       .locks_whole_database = true},
  });
}

// The persistent backends without SQL (lease mode only; the handler's business rows
// need a SQL store): their records survive a restart of the process.
inline std::vector<Backend> KeyValueBackends() {
  return BuiltOnly({
      {.name = "rocksdb",
       .url = [](const std::string& dir) { return "rocksdb://" + dir + "/rocksdb"; },
       .fast_params = "sync=off",
       .short_lock_timeout =
           "lock_timeout_ms=" + std::to_string(absl::ToInt64Milliseconds(kShortLockTimeout)),
       .built = IDEM_HAVE_ROCKSDB},
      // Commits grouped by RocksDB's write grouping instead of idem's single writer
      // (the default, writer=queue).
      {.name = "rocksdb_group",
       .url =
           [](const std::string& dir) {
             return WithParams("rocksdb://" + dir + "/rocksdb", "writer=group");
           },
       .fast_params = "sync=off",
       .short_lock_timeout =
           "lock_timeout_ms=" + std::to_string(absl::ToInt64Milliseconds(kShortLockTimeout)),
       .built = IDEM_HAVE_ROCKSDB},
  });
}

// Every backend: the reference memory:// store, the SQL ones and the key/value ones.
inline std::vector<Backend> AllBackends() {
  auto memory = [](const std::string&) { return std::string("memory://"); };
  std::vector<Backend> all = {{.name = "memory", .url = memory}};
  for (Backend& b : SqlBackends()) all.push_back(std::move(b));
  for (Backend& b : KeyValueBackends()) all.push_back(std::move(b));
  all.push_back({.name = "memory_cached", .url = memory, .wrap = WrapWithCache});
  return all;
}

// The backends whose records survive the process (the crash suite): SQL and key/value.
inline std::vector<Backend> PersistentBackends() {
  std::vector<Backend> all = SqlBackends();
  for (Backend& b : KeyValueBackends()) all.push_back(std::move(b));
  return all;
}

}  // namespace idem::testing
