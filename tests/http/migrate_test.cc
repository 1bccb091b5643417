// Black-box tests of `idem migrate` (SPEC §12) on SQLite: the real binary, exit
// statuses, and that a second run changes nothing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <string>

#include "http/idem_process.h"
#include "testing/temp_dir.h"

namespace idem::testing {
namespace {

using ::testing::HasSubstr;

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

TEST(MigrateSqlite, CreatesThenIsANoOp) {
  TempDir dir;
  const std::string url = "sqlite://" + dir.file("idem.db");
  RunResult first = RunIdem({"migrate", "--store", url}, dir.path());
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_THAT(first.out, HasSubstr("backend: sqlite\n"));
  EXPECT_THAT(first.out, HasSubstr("schema version: 0 (none) -> 1\n"));
  EXPECT_THAT(first.out, HasSubstr("tables: idem_journal_version, idem_object_locks, idem_operations, "
                                     "idem_records, idem_schema_version, idem_steps\n"));
  EXPECT_THAT(first.out, HasSubstr("action: created\n"));
  EXPECT_EQ(first.err, "");

  RunResult second = RunIdem({"migrate", "--store", url}, dir.path());
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_THAT(second.out, HasSubstr("schema version: 1 -> 1\n"));
  EXPECT_THAT(second.out, HasSubstr("action: unchanged\n"));
}

TEST(MigrateSqlite, DryRunChangesNothing) {
  TempDir dir;
  const std::string url = "sqlite://" + dir.file("idem.db");
  RunResult r = RunIdem({"migrate", "--store", url, "--dry-run"}, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("schema version: 0 (none) -> 1\n"));
  EXPECT_THAT(r.out, HasSubstr("tables: (none)\n"));
  EXPECT_THAT(r.out, HasSubstr("action: would create (dry run: nothing changed)\n"));
  EXPECT_FALSE(Exists(dir.file("idem.db")));
}

TEST(MigrateSqlite, ConfigFileSetsTheStore) {
  TempDir dir;
  const std::string config = dir.file("idem.toml");
  {
    std::ofstream(config) << "[migrate]\nstore = \"sqlite://" << dir.file("c.db") << "\"\n";
  }
  RunResult r = RunIdem({"--config", config, "migrate"}, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("action: created\n"));
  EXPECT_TRUE(Exists(dir.file("c.db")));
}

TEST(MigrateUsage, BadStoresAreUsageErrors) {
  TempDir dir;
  for (const char* url : {"memory://", "nope://x", "sqlite://:memory:", "no-scheme",
                          "postgres://h/db?pool=0", "mysql://u@h/db?bogus=1"}) {
    RunResult r = RunIdem({"migrate", "--store", url}, dir.path());
    EXPECT_EQ(r.exit_code, 2) << url << ": " << r.err;
    EXPECT_THAT(r.err, ::testing::StartsWith("idem: migrate: ")) << url;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  RunResult r = RunIdem({"migrate", "--bogus"}, dir.path());
  EXPECT_EQ(r.exit_code, 2);
}

TEST(MigrateUsage, UnreachableServerIsAnOperationalFailure) {
  TempDir dir;
  // Port 1 on loopback: nothing listens, the connection is refused at once.
  RunResult r = RunIdem({"migrate", "--store", "postgres://u@127.0.0.1:1/db?connect_timeout=2"},
                        dir.path());
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("idem: migrate: "));
}

TEST(MigrateUsage, NotADatabaseIsAnOperationalFailure) {
  TempDir dir;
  { std::ofstream(dir.file("junk.db")) << std::string(4096, 'x'); }
  RunResult r = RunIdem({"migrate", "--store", "sqlite://" + dir.file("junk.db")}, dir.path());
  EXPECT_EQ(r.exit_code, 1) << r.err;
}

TEST(MigrateUsage, HelpExitsZero) {
  TempDir dir;
  RunResult r = RunIdem({"migrate", "--help"}, dir.path());
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("--dry-run"));
}

}  // namespace
}  // namespace idem::testing
