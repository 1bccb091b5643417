// The read-only commands (inspect, stuck, records list, keys analyze, the
// --dry-runs) never create or change anything in the store they are pointed at. On
// SQLite the file stays
// byte-identical, a read-only file works, and a database without idem's tables is
// "no idem schema here" (exit 1) with nothing added; on PostgreSQL and MariaDB no
// table appears (IDEM_TEST_POSTGRES_URL / IDEM_TEST_MYSQL_URL; fails without them).
// The tools that write (purge) refuse a database without idem's schema and create
// nothing either: only `idem migrate` makes one.
#include <sqlite3.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "conformance/store_factory.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "idem/idem.h"
#include "idem/steps.h"
#include "store/backend.h"
#include "testing/idem_process.h"
#include "testing/temp_dir.h"

namespace idem::testing {
namespace {

using ::testing::HasSubstr;

// The commands that only look, against `url`.
std::vector<std::vector<std::string>> LookingCommands(const std::string& url) {
  return {
      {"inspect", "--store", url, "--tenant", "t", "--biz-type", "refund", "--key", "K-1"},
      {"stuck", "--store", url},
      {"migrate", "--dry-run", "--store", url},
      {"records", "list", "--store", url},
      {"purge", "--dry-run", "--store", url},
      {"keys", "analyze", "--store", url},
  };
}

// A plain SQLite database with one table of someone else's (no idem schema).
void MakeForeignSqlite(const std::string& path) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "CREATE TABLE orders (id INTEGER PRIMARY KEY)", nullptr, nullptr,
                         nullptr),
            SQLITE_OK);
  sqlite3_close(db);
}

TEST(ReadOnly, SqliteIdemDatabaseStaysByteIdentical) {
  TempDir dir;
  const std::string path = dir.file("idem.db");
  const std::string url = "sqlite://" + path;
  {
    absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(url);
    ASSERT_TRUE(store.ok()) << store.status();
    StepRunner runner(**store);
    ASSERT_TRUE(runner.Migrate().ok());
    Guard guard(**store);
    ASSERT_TRUE(guard.Claim({.tenant = "t", .biz_type = "refund", .key = "K-1"}, absl::Seconds(30))
                    .ok());
  }
  const std::string before = ReadWholeFile(path);
  ASSERT_FALSE(before.empty());
  for (const std::vector<std::string>& args : LookingCommands(url)) {
    RunResult r = RunIdemIn(dir.path(), args);
    EXPECT_EQ(r.exit_code, 0) << args[0] << ": " << r.err;
    EXPECT_EQ(ReadWholeFile(path), before) << args[0] << " changed the database";
  }
  // A read-only file (a copy an operator inspects, a read-only mount) works too.
  // (Root, as CI runs, ignores the mode bits: there the byte comparison is what
  // shows that nothing was written; run as another user it is a read-only file.)
  ASSERT_EQ(chmod(path.c_str(), 0444), 0);
  RunResult r = RunIdemIn(dir.path(), LookingCommands(url)[0]);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("K-1"));
  r = RunIdemIn(dir.path(), LookingCommands(url)[1]);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ReadWholeFile(path), before);
}

TEST(ReadOnly, SqliteWithoutIdemTablesIsNoSchemaHereAndUntouched) {
  TempDir dir;
  const std::string path = dir.file("shop.db");
  MakeForeignSqlite(path);
  const std::string before = ReadWholeFile(path);
  const std::string url = "sqlite://" + path;
  for (int i = 0; i < 2; ++i) {  // inspect, stuck
    RunResult r = RunIdemIn(dir.path(), LookingCommands(url)[i]);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_THAT(r.err, HasSubstr("no idem schema here"));
    EXPECT_EQ(ReadWholeFile(path), before);
  }
  // A missing file is not created.
  RunResult r = RunIdemIn(dir.path(), LookingCommands("sqlite://" + dir.file("typo.db"))[0]);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("typo.db does not exist"));
  struct stat st;
  EXPECT_NE(stat(dir.file("typo.db").c_str(), &st), 0) << "inspect created the file";
}

TEST(ReadOnly, DryRunOnAnUnwritablePlaceSaysTheRealRunWouldFail) {
  TempDir dir;
  RunResult r = RunIdemIn(dir.path(), {"migrate", "--dry-run", "--store",
                                  "sqlite:///proc/no-such-dir/idem.db"});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_THAT(r.err, HasSubstr("the real run would fail"));
}

// No idem table appears on a server database that had none.
void ServerStaysEmpty(const std::string& url, const std::string& list_tables) {
  TempDir dir;
  for (int i = 0; i < 2; ++i) {  // inspect, stuck
    RunResult r = RunIdemIn(dir.path(), LookingCommands(url)[i]);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_THAT(r.err, HasSubstr("no idem schema here"));
  }
  // Looked at through a store of the test's own that creates nothing either.
  absl::StatusOr<std::unique_ptr<Store>> ro = OpenStore(url, StoreOptions{.read_only = true});
  EXPECT_EQ(ro.status().code(), absl::StatusCode::kFailedPrecondition) << ro.status();
  absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(url);  // now it is made
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<std::unique_ptr<StoreTransaction>> tx = (*store)->Begin();
  ASSERT_TRUE(tx.ok());
  absl::StatusOr<Rows> rows = (*tx)->Query(list_tables);
  ASSERT_TRUE(rows.ok()) << rows.status();
  // Only what this open made: the record tables, not the step journal the
  // commands would have made.
  for (const std::vector<Value>& row : rows->rows) {
    EXPECT_NE(row[0], Value("idem_operations"));
    EXPECT_NE(row[0], Value("idem_steps"));
  }
}

TEST(ReadOnly, PostgresWithoutIdemTablesIsNoSchemaHereAndUntouched) {
  TempDir dir;
  ServerStaysEmpty(PostgresUrl(dir.path()),
                   "SELECT table_name::text FROM information_schema.tables WHERE table_schema = "
                   "current_schema()");
}

TEST(ReadOnly, MysqlWithoutIdemTablesIsNoSchemaHereAndUntouched) {
  TempDir dir;
  ServerStaysEmpty(MysqlTestUrl(dir.path()),
                   "SELECT table_name FROM information_schema.tables WHERE table_schema = "
                   "DATABASE()");
}

// What `url`'s database holds, seen without creating anything: its tables and (on
// MariaDB) idem's procedures.
std::string Holdings(const std::string& url) {
  absl::StatusOr<std::unique_ptr<Store>> look =
      OpenStore(url, StoreOptions{.read_only = true, .require_schema = false});
  if (!look.ok()) return "cannot look: " + look.status().ToString();
  absl::StatusOr<SchemaInfo> info = ::idem::Backend(**look).DescribeSchema();
  if (!info.ok()) return "cannot describe: " + info.status().ToString();
  std::string out = "tables:";
  for (const std::string& t : info->tables) out += " " + t;
  out += "; procedures:";
  for (const std::string& p : info->procedures.value_or(std::vector<std::string>{})) {
    out += " " + p;
  }
  return out + "; version " + std::to_string(info->version);
}

// Runs `sql` through a store on `base` (a database that has idem's schema), as an
// administrator would by hand.
void RunAsAdmin(const std::string& base, const std::string& sql) {
  absl::StatusOr<std::unique_ptr<Store>> admin = OpenStore(base);
  ASSERT_TRUE(admin.ok()) << admin.status();
  absl::StatusOr<std::unique_ptr<StoreTransaction>> tx = (*admin)->Begin();
  ASSERT_TRUE(tx.ok()) << tx.status();
  absl::Status s = (*tx)->Exec(sql).status();
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_TRUE((*tx)->Commit().ok());
}

// `idem purge` (which writes) on a database without idem's schema: exit 1, a
// reason that names the store and `idem migrate`, and nothing created — neither on
// an empty database nor on one whose own table happens to be called idem_records.
// `foreign_table` makes that table.
void PurgeCreatesNothing(const std::string& url, const std::string& password,
                         const std::function<void()>& foreign_table) {
  TempDir dir;
  for (int round = 0; round < 2; ++round) {
    if (round == 1) foreign_table();
    const std::string before = Holdings(url);
    ASSERT_THAT(before, ::testing::StartsWith("tables:")) << before;
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"purge", "--store", url},
          std::vector<std::string>{"stuck", "--store", url, "--resolve", "x", "--note", "ok"}}) {
      RunResult r = RunIdemIn(dir.path(), args);
      EXPECT_EQ(r.exit_code, 1) << args[0] << ": " << r.out << r.err;
      EXPECT_THAT(r.err, HasSubstr("no idem schema here")) << args[0];
      EXPECT_THAT(r.err, HasSubstr("idem migrate")) << args[0];
      EXPECT_THAT(r.err, ::testing::Not(HasSubstr(password))) << args[0];
      EXPECT_EQ(Holdings(url), before) << args[0] << " changed the database (round " << round
                                       << ")";
    }
  }
}

TEST(ReadOnly, SqlitePurgeWithoutIdemSchemaCreatesNothing) {
  TempDir dir;
  // An empty file (made by hand, or by a tool that failed), and a database of
  // someone else's with a table named idem_records.
  const std::string empty = dir.file("empty.db");
  { std::ofstream touch(empty); }
  const std::string foreign = dir.file("shop.db");
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(foreign.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "CREATE TABLE idem_records (id INTEGER PRIMARY KEY)", nullptr,
                         nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  for (const std::string& path : {empty, foreign}) {
    const std::string before = ReadWholeFile(path);
    RunResult r = RunIdemIn(dir.path(), {"purge", "--store", "sqlite://" + path});
    EXPECT_EQ(r.exit_code, 1) << path << ": " << r.out << r.err;
    EXPECT_THAT(r.err, HasSubstr("no idem schema here")) << path;
    EXPECT_THAT(r.err, HasSubstr("idem migrate")) << path;
    EXPECT_EQ(ReadWholeFile(path), before) << "purge changed " << path;
  }
  // The default store, rocksdb://./idem-db, is not made by purge either.
  RunResult r = RunIdemIn(dir.path(), {"purge"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  struct stat st;
  EXPECT_NE(stat(dir.file("idem-db").c_str(), &st), 0) << "purge created the default store";
}

TEST(ReadOnly, PostgresPurgeWithoutIdemSchemaCreatesNothing) {
  TempDir dir;
  const std::string url = PostgresUrl(dir.path());
  const std::string schema = UrlParam(url, "application_name");
  PurgeCreatesNothing(url, "unused-password-marker", [&] {
    RunAsAdmin(std::getenv("IDEM_TEST_POSTGRES_URL"),
               "CREATE TABLE " + schema + ".idem_records (id integer PRIMARY KEY)");
  });
}

TEST(ReadOnly, MysqlPurgeWithoutIdemSchemaCreatesNothing) {
  TempDir dir;
  const std::string url = MysqlTestUrl(dir.path());
  std::string database = url.substr(url.rfind('/') + 1);
  database = database.substr(0, database.find('?'));
  const std::string password = url.substr(url.find(':', 8) + 1, url.find('@') - url.find(':', 8) - 1);
  PurgeCreatesNothing(url, password, [&] {
    RunAsAdmin(mysql::testing::BaseUrl(),
               "CREATE TABLE `" + database + "`.idem_records (id INT PRIMARY KEY)");
  });
}

// inspect without --tenant finds a key in every tenant of a server store too: the
// tenants are found in the store's own order (its collation), skipping every key of
// one tenant, the longest (all 0xFF bytes) included, and nothing is changed.
void InspectFindsTheKeyInEveryTenant(const std::string& url) {
  {
    absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(url);
    ASSERT_TRUE(store.ok()) << store.status();
    Guard guard(**store);
    for (const std::string tenant : {"acme", "B", "b", "beta", "zeta"}) {
      for (const std::string& key : {std::string("A-0"), std::string("K-1"),
                                     std::string(255, '\xff')}) {
        if (tenant == "zeta" && key == "K-1") continue;
        ASSERT_TRUE(guard
                        .Run({.tenant = tenant, .biz_type = "refund", .key = key},
                             [](Transaction&) -> absl::StatusOr<std::string> {
                               return std::string("{}");
                             })
                        .ok());
      }
    }
  }
  TempDir dir;
  RunResult r = RunIdemIn(dir.path(), {"inspect", "--store", url, "--key", "K-1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const std::string tenant : {"acme", "B", "b", "beta"}) {
    EXPECT_THAT(r.out, HasSubstr("\ntenant       " + tenant + "\n")) << tenant;
  }
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("zeta")));
  r = RunIdemIn(dir.path(), {"inspect", "--store", url, "--key", "K-2"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("no record for K-2 in any tenant (tenants in this store: "));
  EXPECT_THAT(r.err, HasSubstr("zeta"));
}

TEST(ReadOnly, PostgresInspectLooksInEveryTenant) {
  TempDir dir;
  InspectFindsTheKeyInEveryTenant(PostgresUrl(dir.path()));
}

TEST(ReadOnly, MysqlInspectLooksInEveryTenant) {
  TempDir dir;
  InspectFindsTheKeyInEveryTenant(MysqlTestUrl(dir.path()));
}

}  // namespace
}  // namespace idem::testing
