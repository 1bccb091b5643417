// `idem migrate` against the PostgreSQL and MariaDB/MySQL test servers
// (IDEM_TEST_POSTGRES_URL / IDEM_TEST_MYSQL_URL from scripts/services.sh; the tests
// fail, never skip, without them). Each test gets an empty schema/database of its
// own, so the first run creates and the second is a no-op.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <random>
#include <string>

#include "conformance/store_factory.h"
#include "idem/idem.h"
#include "store/postgres/pg_conn.h"
#include "store/postgres/pg_url.h"
#include "testing/idem_process.h"
#include "testing/temp_dir.h"

namespace idem::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A database of its own on IDEM_TEST_POSTGRES_URL's server (the SQL API is one per
// database; the schemas of PostgresUrl share one), with the default search_path.
std::string FreshPostgresDatabase() {
  const char* base = std::getenv("IDEM_TEST_POSTGRES_URL");
  if (base == nullptr || *base == '\0') {
    ADD_FAILURE() << "IDEM_TEST_POSTGRES_URL is not set";
    return "postgres://unset.invalid/none";
  }
  std::random_device rd;
  const std::string name = "d_" + std::to_string(getpid()) + "_" + std::to_string(rd());
  absl::StatusOr<postgres::Options> options = postgres::ParseUrl(base);
  if (!options.ok()) {
    ADD_FAILURE() << options.status();
    return base;
  }
  absl::StatusOr<std::unique_ptr<postgres::Connection>> conn =
      postgres::Connection::Open(options->connect);
  absl::Status s =
      conn.ok() ? (*conn)->ExecScript(("CREATE DATABASE " + name).c_str()) : conn.status();
  if (!s.ok()) ADD_FAILURE() << "CREATE DATABASE " << name << ": " << s;
  std::string url = base;
  const size_t slash = url.rfind('/'), query = url.find('?', slash);
  return url.substr(0, slash + 1) + name + (query == std::string::npos ? "" : url.substr(query));
}

void ExpectCreateThenNoOp(const std::string& url, const std::string& backend,
                          const std::string& scratch) {
  RunResult dry = RunIdem({"migrate", "--store", url, "--dry-run"}, scratch);
  ASSERT_EQ(dry.exit_code, 0) << dry.err;
  EXPECT_THAT(dry.out, HasSubstr("backend: " + backend + "\n"));
  EXPECT_THAT(dry.out, HasSubstr("schema version: 0 (none) -> 2\n"));
  EXPECT_THAT(dry.out, HasSubstr("tables: (none)\n"));
  EXPECT_THAT(dry.out, HasSubstr("action: would create"));

  RunResult first = RunIdem({"migrate", "--store", url}, scratch);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_THAT(first.out, HasSubstr("schema version: 0 (none) -> 2\n"));
  EXPECT_THAT(first.out, HasSubstr("tables: idem_journal_version, idem_object_locks, idem_operations, "
                                     "idem_records, idem_schema_version, idem_steps\n"));
  EXPECT_THAT(first.out, HasSubstr("action: created\n"));
  // The password never reaches the output.
  const size_t at = url.find('@'), colon = url.find(':', url.find("://") + 3);
  if (at != std::string::npos && colon < at) {
    EXPECT_THAT(first.out, Not(HasSubstr(url.substr(colon + 1, at - colon - 1))));
  }

  if (backend == "mysql") {
    EXPECT_THAT(dry.out, HasSubstr("procedures: (none)\n"));
    EXPECT_THAT(first.out, HasSubstr("procedures: idem_claim_v2, idem_finish_v1\n"));
  } else {
    EXPECT_THAT(first.out, Not(HasSubstr("procedures:")));
  }
  // The SQL API (docs/sql.md) comes with the schema; the dry run prints its statements.
  const std::string routines =
      backend == "mysql"
          ? "idem_sql_claim_v1, idem_sql_complete_v1, idem_sql_fail_v1, idem_sql_lease_claim_v1, "
            "idem_sql_lease_complete_v1, idem_sql_lease_fail_v1"
          : "claim_v1, complete_v1, fail_v1, lease_claim_v1, lease_complete_v1, lease_fail_v1";
  EXPECT_THAT(dry.out, HasSubstr("sql api: would install (v1: " + routines + ")\n"));
  EXPECT_THAT(dry.out, HasSubstr("-- the SQL API statements a real run sends:\n"));
  EXPECT_THAT(dry.out, HasSubstr(backend == "mysql" ? "CREATE PROCEDURE idem_sql_claim_v1("
                                                    : "CREATE OR REPLACE FUNCTION idem.claim_v1("));
  EXPECT_THAT(first.out, HasSubstr("sql api: installed (v1: " + routines + ")\n"));

  RunResult second = RunIdem({"migrate", "--store", url}, scratch);
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_THAT(second.out, HasSubstr("schema version: 2 -> 2\n"));
  EXPECT_THAT(second.out, HasSubstr("action: unchanged\n"));

  EXPECT_THAT(second.out, HasSubstr("sql api: unchanged (v1: " + routines + ")\n"));

  RunResult dry_again = RunIdem({"migrate", "--store", url, "--dry-run"}, scratch);
  ASSERT_EQ(dry_again.exit_code, 0) << dry_again.err;
  EXPECT_THAT(dry_again.out, HasSubstr("action: unchanged"));
  EXPECT_THAT(dry_again.out, Not(HasSubstr("-- the SQL API statements")));
}

// The first value of `sql` on `url`, read in a transaction of its own.
std::string Scalar(const std::string& url, const std::string& sql) {
  absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(url);
  if (!store.ok()) return "cannot open: " + store.status().ToString();
  absl::StatusOr<std::unique_ptr<StoreTransaction>> tx = (*store)->Begin();
  if (!tx.ok()) return tx.status().ToString();
  absl::StatusOr<Rows> rows = (*tx)->Query(sql);
  if (!rows.ok()) return rows.status().ToString();
  if (rows->rows.empty()) return "(no row)";
  const Value& v = rows->rows[0][0];
  return v.is_int()    ? std::to_string(v.as_int())
         : v.is_null() ? "NULL"
         : v.is_text() ? v.as_text()
                       : v.as_blob();
}

// A database with idem's current schema, records and no SQL API (an older idem's):
// migrate adds the API and every record stays, answered by the API; --drop-sql-api
// removes the API and nothing else; a changed routine is put back.
void ExpectApiAddedDroppedAndRepaired(const std::string& url, const std::string& backend,
                                      const std::string& scratch) {
  {
    absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(url);  // creates the schema
    ASSERT_TRUE(store.ok()) << store.status();
    Guard guard(**store);
    absl::StatusOr<Result> r = guard.Run({.biz_type = "refund", .key = "R-1"},
                                         [](Transaction&) -> absl::StatusOr<std::string> {
                                           return std::string(R"({"kept" : true})");
                                         });
    ASSERT_TRUE(r.ok()) << r.status();
  }
  const bool mysql = backend == "mysql";
  // The record written before the API existed, answered by it (its first column).
  const std::string replay = mysql
                                 ? "CALL idem_sql_claim_v1('refund', 'R-1', NULL, 'default', NULL)"
                                 : "SELECT outcome FROM idem.claim_v1('refund', 'R-1', NULL)";
  RunResult dry = RunIdem({"migrate", "--store", url, "--dry-run"}, scratch);
  ASSERT_EQ(dry.exit_code, 0) << dry.err;
  EXPECT_THAT(dry.out, HasSubstr("schema version: 2 -> 2\n"));
  EXPECT_THAT(dry.out, HasSubstr("sql api: would install"));
  EXPECT_THAT(dry.out, HasSubstr("action: would upgrade (dry run: nothing changed)\n"));
  RunResult run = RunIdem({"migrate", "--store", url}, scratch);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("sql api: installed"));
  EXPECT_THAT(run.out, HasSubstr("action: upgraded\n"));
  EXPECT_EQ(Scalar(url, "SELECT COUNT(*) FROM idem_records"), "1");
  EXPECT_EQ(Scalar(url, replay), "replayed");

  // A routine changed by hand (or left by another build) is outdated: put back.
  {
    absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(url);
    ASSERT_TRUE(store.ok()) << store.status();
    std::unique_ptr<StoreTransaction> tx = *(*store)->Begin();
    ASSERT_TRUE(tx->Exec(mysql
                             ? "DROP PROCEDURE idem_sql_fail_v1"
                             : "COMMENT ON FUNCTION idem.fail_v1(text, text, boolean, json, text) "
                               "IS 'changed'")
                    .ok());
    ASSERT_TRUE(tx->Commit().ok());
  }
  RunResult dry_fix = RunIdem({"migrate", "--store", url, "--dry-run"}, scratch);
  EXPECT_THAT(dry_fix.out, HasSubstr("sql api: would upgrade"));
  RunResult fix = RunIdem({"migrate", "--store", url}, scratch);
  ASSERT_EQ(fix.exit_code, 0) << fix.err;
  EXPECT_THAT(fix.out, HasSubstr("sql api: upgraded"));
  EXPECT_THAT(fix.out, HasSubstr("action: upgraded\n"));

  RunResult dry_drop = RunIdem({"migrate", "--store", url, "--drop-sql-api", "--dry-run"}, scratch);
  ASSERT_EQ(dry_drop.exit_code, 0) << dry_drop.err;
  EXPECT_THAT(dry_drop.out, HasSubstr("sql api: would drop\n"));
  EXPECT_THAT(dry_drop.out, HasSubstr(mysql ? "DROP PROCEDURE IF EXISTS idem_sql_claim_v1"
                                            : "DROP FUNCTION IF EXISTS idem.claim_v1("));
  RunResult drop = RunIdem({"migrate", "--store", url, "--drop-sql-api"}, scratch);
  ASSERT_EQ(drop.exit_code, 0) << drop.err;
  EXPECT_THAT(drop.out, HasSubstr("sql api: dropped (the records stay)\n"));
  EXPECT_EQ(Scalar(url, mysql ? "SELECT COUNT(*) FROM information_schema.routines WHERE "
                                "routine_schema = DATABASE() AND routine_name LIKE 'idem_sql%'"
                              : "SELECT COUNT(*) FROM pg_namespace WHERE nspname = 'idem'"),
            "0");
  EXPECT_EQ(Scalar(url, "SELECT COUNT(*) FROM idem_records"), "1");
  RunResult again = RunIdem({"migrate", "--store", url, "--drop-sql-api"}, scratch);
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_THAT(again.out, HasSubstr("sql api: (none)\n"));
  EXPECT_THAT(again.out, HasSubstr("action: unchanged\n"));
}

TEST(MigratePostgres, AddsDropsAndRepairsTheSqlApiKeepingRecords) {
  TempDir dir;
  // Its own database, with its tables in schema s (not public: the idem user's
  // "$user" schema would otherwise be refused, see below).
  const std::string db = FreshPostgresDatabase();
  {
    absl::StatusOr<std::unique_ptr<Store>> admin = OpenStore(db);
    ASSERT_TRUE(admin.ok()) << admin.status();
    ASSERT_TRUE(testing::ExecAndCommit(**admin, "CREATE SCHEMA s").ok());
  }
  ExpectApiAddedDroppedAndRepaired(WithParams(db, "options=-csearch_path%3Ds"), "postgres",
                                   dir.path());
}

TEST(MigrateMysql, AddsDropsAndRepairsTheSqlApiKeepingRecords) {
  TempDir dir;
  ExpectApiAddedDroppedAndRepaired(MysqlTestUrl(dir.path()), "mysql", dir.path());
}

// A user named idem whose search_path is the default ("$user", public) would find
// schema idem first once migrate made it, and the store would start again without
// its records: migrate leaves the SQL API out, says how to pin the search_path, and
// makes no schema idem; the store itself migrates as before.
TEST(MigratePostgres, RefusesASchemaIdemThatWouldMoveTheStore) {
  TempDir dir;
  const std::string db = FreshPostgresDatabase();
  ASSERT_THAT(db, HasSubstr("://idem:")) << "the test user is not idem";
  RunResult r = RunIdem({"migrate", "--store", db}, dir.path());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("sql api: (none: "));
  EXPECT_THAT(r.out, HasSubstr("creating schema idem would move this store from schema public to "
                               "schema idem"));
  EXPECT_THAT(r.out, HasSubstr("options=-csearch_path%3Dpublic"));
  EXPECT_THAT(r.out, HasSubstr("action: created\n"));
  EXPECT_EQ(Scalar(db, "SELECT COUNT(*) FROM pg_namespace WHERE nspname = 'idem'"), "0");
  EXPECT_EQ(Scalar(WithParams(db, "options=-csearch_path%3Dpublic"),
                   "SELECT COUNT(*) FROM public.idem_records"),
            "0");
  // Pinned, the same database takes it.
  RunResult pinned =
      RunIdem({"migrate", "--store", WithParams(db, "options=-csearch_path%3Dpublic")}, dir.path());
  EXPECT_EQ(pinned.exit_code, 0) << pinned.err;
  EXPECT_THAT(pinned.out, HasSubstr("sql api: installed"));
}

TEST(MigrateSqlite, HasNoSqlApiToDrop) {
  TempDir dir;
  RunResult r = RunIdem(
      {"migrate", "--store", "sqlite://" + dir.path() + "/idem.db", "--drop-sql-api"}, dir.path());
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.err, HasSubstr("has no SQL API (only PostgreSQL and MySQL/MariaDB have one)"));
}

TEST(MigratePostgres, CreatesThenIsANoOp) {
  TempDir dir;
  ExpectCreateThenNoOp(WithParams(FreshPostgresDatabase(), "options=-csearch_path%3Dpublic"),
                       "postgres", dir.path());
}

// --dry-run says "would create" only when the real run could: a user that may not
// create tables in the store's schema is told so (exit 1), and nothing is made.
TEST(MigratePostgres, DryRunChecksTheCreatePrivilege) {
  TempDir dir;
  const std::string url = PostgresUrl(dir.path());  // an empty schema of its own
  std::string schema;
  std::getline(std::ifstream(dir.path() + "/postgres_schema"), schema);
  ASSERT_FALSE(schema.empty());
  {
    absl::StatusOr<std::unique_ptr<Store>> admin = OpenStore(std::getenv("IDEM_TEST_POSTGRES_URL"));
    ASSERT_TRUE(admin.ok()) << admin.status();
    std::unique_ptr<StoreTransaction> tx = *(*admin)->Begin();
    ASSERT_TRUE(tx->Exec("REVOKE CREATE ON SCHEMA " + schema + " FROM CURRENT_USER").ok());
    ASSERT_TRUE(tx->Commit().ok());
  }
  RunResult dry = RunIdem({"migrate", "--store", url, "--dry-run"}, dir.path());
  EXPECT_EQ(dry.exit_code, 1) << dry.out;
  EXPECT_THAT(dry.err, HasSubstr("the real run would fail"));
  EXPECT_THAT(dry.err, HasSubstr("may not create tables in schema " + schema));
  RunResult real = RunIdem({"migrate", "--store", url}, dir.path());
  EXPECT_EQ(real.exit_code, 1) << real.out;
  RunResult again = RunIdem({"migrate", "--store", url, "--dry-run"}, dir.path());
  EXPECT_THAT(again.err, HasSubstr("the real run would fail")) << "the failed run made tables";
}

TEST(MigrateMysql, CreatesThenIsANoOp) {
  TempDir dir;
  ExpectCreateThenNoOp(MysqlTestUrl(dir.path()), "mysql", dir.path());
}

// A database whose schema predates the procedures (or whose procedures were
// dropped) gets them from migrate, reported as an upgrade.
TEST(MigrateMysql, AddsMissingProcedures) {
  TempDir dir;
  const std::string url = MysqlTestUrl(dir.path());
  ASSERT_EQ(RunIdem({"migrate", "--store", url}, dir.path()).exit_code, 0);
  {
    absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(url);
    ASSERT_TRUE(store.ok()) << store.status();
    absl::StatusOr<std::unique_ptr<StoreTransaction>> tx = (*store)->Begin();
    ASSERT_TRUE(tx.ok()) << tx.status();
    ASSERT_TRUE((*tx)->Exec("DROP PROCEDURE idem_finish_v1").ok());
    ASSERT_TRUE((*tx)->Commit().ok());
  }
  RunResult dry = RunIdem({"migrate", "--store", url, "--dry-run"}, dir.path());
  ASSERT_EQ(dry.exit_code, 0) << dry.err;
  EXPECT_THAT(dry.out, HasSubstr("procedures: idem_claim_v2\n"));
  EXPECT_THAT(dry.out, HasSubstr("action: would upgrade"));
  RunResult fixed = RunIdem({"migrate", "--store", url}, dir.path());
  ASSERT_EQ(fixed.exit_code, 0) << fixed.err;
  EXPECT_THAT(fixed.out, HasSubstr("procedures: idem_claim_v2, idem_finish_v1\n"));
  EXPECT_THAT(fixed.out, HasSubstr("action: upgraded\n"));
}

// A user without CREATE ROUTINE (scripts/services.sh makes idem_noroutine, same
// password as idem): migrate and the store work without the procedures, and say so.
TEST(MigrateMysql, UserWithoutCreateRoutineWorksWithoutProcedures) {
  TempDir dir;
  const std::string url = MysqlTestUrl(dir.path());  // the database, made by `idem`
  const size_t user = url.find("://idem:");
  ASSERT_NE(user, std::string::npos) << "the test URL's user is not idem";
  const std::string restricted = url.substr(0, user) + "://idem_noroutine:" + url.substr(user + 8);
  // Its CREATE privilege (granted on *.*) is what --dry-run checks.
  RunResult dry = RunIdem({"migrate", "--store", restricted, "--dry-run"}, dir.path());
  ASSERT_EQ(dry.exit_code, 0) << dry.err;
  EXPECT_THAT(dry.out, HasSubstr("action: would create"));
  RunResult r = RunIdem({"migrate", "--store", restricted}, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("procedures: (none: this user may not CREATE ROUTINE"));
  EXPECT_THAT(r.out, HasSubstr("sql api: (none: this user may not create functions or procedures"));
  EXPECT_THAT(r.out, HasSubstr("action: created\n"));

  absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(restricted);
  ASSERT_TRUE(store.ok()) << store.status();
  Guard guard(**store);
  int runs = 0;
  auto handler = [&](Transaction&) -> absl::StatusOr<std::string> {
    ++runs;
    return std::string("ok");
  };
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<Result> res = guard.Run({.biz_type = "refund", .key = "K"}, handler);
    ASSERT_TRUE(res.ok()) << res.status();
    EXPECT_EQ(res->outcome, i == 0 ? Outcome::kExecuted : Outcome::kReplayed);
  }
  EXPECT_EQ(runs, 1);
}

TEST(MigrateMysql, MissingDatabaseIsAnOperationalFailure) {
  TempDir dir;
  const std::string base = mysql::testing::BaseUrl();
  ASSERT_FALSE(base.empty()) << "IDEM_TEST_MYSQL_URL is not set";
  RunResult r = RunIdem(
      {"migrate", "--store", mysql::testing::WithDatabase(base, "idem_no_such_db_x")}, dir.path());
  EXPECT_EQ(r.exit_code, 1) << r.err;
}

}  // namespace
}  // namespace idem::testing
