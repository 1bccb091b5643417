// `idem migrate` against the PostgreSQL and MariaDB/MySQL test servers
// (IDEM_TEST_POSTGRES_URL / IDEM_TEST_MYSQL_URL from scripts/services.sh; the tests
// fail, never skip, without them). Each test gets an empty schema/database of its
// own, so the first run creates and the second is a no-op.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>

#include "conformance/store_factory.h"
#include "idem/idem.h"
#include "testing/idem_process.h"
#include "testing/temp_dir.h"

namespace idem::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

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

  RunResult second = RunIdem({"migrate", "--store", url}, scratch);
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_THAT(second.out, HasSubstr("schema version: 2 -> 2\n"));
  EXPECT_THAT(second.out, HasSubstr("action: unchanged\n"));

  RunResult dry_again = RunIdem({"migrate", "--store", url, "--dry-run"}, scratch);
  ASSERT_EQ(dry_again.exit_code, 0) << dry_again.err;
  EXPECT_THAT(dry_again.out, HasSubstr("action: unchanged"));
}

TEST(MigratePostgres, CreatesThenIsANoOp) {
  TempDir dir;
  ExpectCreateThenNoOp(PostgresUrl(dir.path()), "postgres", dir.path());
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
