// `idem migrate` against the PostgreSQL and MariaDB/MySQL test servers
// (IDEM_TEST_POSTGRES_URL / IDEM_TEST_MYSQL_URL from scripts/services.sh; the tests
// fail, never skip, without them). Each test gets an empty schema/database of its
// own, so the first run creates and the second is a no-op.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "conformance/store_factory.h"
#include "http/idem_process.h"
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
  EXPECT_THAT(dry.out, HasSubstr("schema version: 0 (none) -> 1\n"));
  EXPECT_THAT(dry.out, HasSubstr("tables: (none)\n"));
  EXPECT_THAT(dry.out, HasSubstr("action: would create"));

  RunResult first = RunIdem({"migrate", "--store", url}, scratch);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_THAT(first.out, HasSubstr("schema version: 0 (none) -> 1\n"));
  EXPECT_THAT(first.out, HasSubstr("tables: idem_journal_version, idem_object_locks, idem_operations, "
                                     "idem_records, idem_schema_version, idem_steps\n"));
  EXPECT_THAT(first.out, HasSubstr("action: created\n"));
  // The password never reaches the output.
  const size_t at = url.find('@'), colon = url.find(':', url.find("://") + 3);
  if (at != std::string::npos && colon < at) {
    EXPECT_THAT(first.out, Not(HasSubstr(url.substr(colon + 1, at - colon - 1))));
  }

  RunResult second = RunIdem({"migrate", "--store", url}, scratch);
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_THAT(second.out, HasSubstr("schema version: 1 -> 1\n"));
  EXPECT_THAT(second.out, HasSubstr("action: unchanged\n"));

  RunResult dry_again = RunIdem({"migrate", "--store", url, "--dry-run"}, scratch);
  ASSERT_EQ(dry_again.exit_code, 0) << dry_again.err;
  EXPECT_THAT(dry_again.out, HasSubstr("action: unchanged"));
}

TEST(MigratePostgres, CreatesThenIsANoOp) {
  TempDir dir;
  ExpectCreateThenNoOp(PostgresUrl(dir.path()), "postgres", dir.path());
}

TEST(MigrateMysql, CreatesThenIsANoOp) {
  TempDir dir;
  ExpectCreateThenNoOp(MysqlTestUrl(dir.path()), "mysql", dir.path());
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
