// SPEC §12: the read-only commands (inspect, stuck, records list, keys analyze, the
// --dry-runs) never create or change anything in the store they are pointed at. On
// SQLite the file stays
// byte-identical, a read-only file works, and a database without idem's tables is
// "no idem schema here" (exit 1) with nothing added; on PostgreSQL and MariaDB no
// table appears (IDEM_TEST_POSTGRES_URL / IDEM_TEST_MYSQL_URL; fails without them).
#include <sqlite3.h>
#include <sys/stat.h>

#include <memory>
#include <string>
#include <vector>

#include "conformance/store_factory.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "idem/idem.h"
#include "idem/steps.h"
#include "testing/idem_cli.h"
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
  const std::string before = ReadFile(path);
  ASSERT_FALSE(before.empty());
  for (const std::vector<std::string>& args : LookingCommands(url)) {
    Exec r = RunIdemIn(dir.path(), args);
    EXPECT_EQ(r.status, 0) << args[0] << ": " << r.err;
    EXPECT_EQ(ReadFile(path), before) << args[0] << " changed the database";
  }
  // A read-only file (a copy an operator inspects, a read-only mount) works too.
  // (Root, as CI runs, ignores the mode bits: there the byte comparison is what
  // shows that nothing was written; run as another user it is a read-only file.)
  ASSERT_EQ(chmod(path.c_str(), 0444), 0);
  Exec r = RunIdemIn(dir.path(), LookingCommands(url)[0]);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("K-1"));
  r = RunIdemIn(dir.path(), LookingCommands(url)[1]);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(ReadFile(path), before);
}

TEST(ReadOnly, SqliteWithoutIdemTablesIsNoSchemaHereAndUntouched) {
  TempDir dir;
  const std::string path = dir.file("shop.db");
  MakeForeignSqlite(path);
  const std::string before = ReadFile(path);
  const std::string url = "sqlite://" + path;
  for (int i = 0; i < 2; ++i) {  // inspect, stuck
    Exec r = RunIdemIn(dir.path(), LookingCommands(url)[i]);
    EXPECT_EQ(r.status, 1) << r.err;
    EXPECT_THAT(r.err, HasSubstr("no idem schema here"));
    EXPECT_EQ(ReadFile(path), before);
  }
  // A missing file is not created.
  Exec r = RunIdemIn(dir.path(), LookingCommands("sqlite://" + dir.file("typo.db"))[0]);
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("no idem schema here"));
  struct stat st;
  EXPECT_NE(stat(dir.file("typo.db").c_str(), &st), 0) << "inspect created the file";
}

TEST(ReadOnly, DryRunOnAnUnwritablePlaceSaysTheRealRunWouldFail) {
  TempDir dir;
  Exec r = RunIdemIn(dir.path(), {"migrate", "--dry-run", "--store",
                                  "sqlite:///proc/no-such-dir/idem.db"});
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_THAT(r.err, HasSubstr("the real run would fail"));
}

// No idem table appears on a server database that had none.
void ServerStaysEmpty(const std::string& url, const std::string& list_tables) {
  TempDir dir;
  for (int i = 0; i < 2; ++i) {  // inspect, stuck
    Exec r = RunIdemIn(dir.path(), LookingCommands(url)[i]);
    EXPECT_EQ(r.status, 1) << r.err;
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

}  // namespace
}  // namespace idem::testing
