// Black-box tests of `idem migrate` on SQLite: the real binary, exit
// statuses, and that a second run changes nothing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "idem/idem.h"
#include "testing/idem_process.h"
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
  EXPECT_THAT(first.out, HasSubstr("schema version: 0 (none) -> 2\n"));
  EXPECT_THAT(first.out, HasSubstr("tables: idem_journal_version, idem_object_locks, idem_operations, "
                                     "idem_records, idem_schema_version, idem_steps\n"));
  EXPECT_THAT(first.out, HasSubstr("action: created\n"));
  EXPECT_EQ(first.err, "");

  RunResult second = RunIdem({"migrate", "--store", url}, dir.path());
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_THAT(second.out, HasSubstr("schema version: 2 -> 2\n"));
  EXPECT_THAT(second.out, HasSubstr("action: unchanged\n"));
}

TEST(MigrateSqlite, DryRunChangesNothing) {
  TempDir dir;
  const std::string url = "sqlite://" + dir.file("idem.db");
  RunResult r = RunIdem({"migrate", "--store", url, "--dry-run"}, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("schema version: 0 (none) -> 2\n"));
  EXPECT_THAT(r.out, HasSubstr("tables: (none)\n"));
  EXPECT_THAT(r.out, HasSubstr("action: would create (dry run: nothing changed)\n"));
  EXPECT_FALSE(Exists(dir.file("idem.db")));
}

// A store of schema version 1 (before retention's expires_at and purged_at) is
// upgraded in place, its records kept; --dry-run says so first and changes nothing.
TEST(MigrateSqlite, UpgradesASchemaVersionOneStore) {
  TempDir dir;
  const std::string url = "sqlite://" + dir.file("idem.db");
  {
    absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(url);
    ASSERT_TRUE(store.ok()) << store.status();
    Guard guard(**store);
    const Request r{.biz_type = "refund", .key = "K-1"};
    ASSERT_TRUE(guard.Claim(r).ok());
    ASSERT_TRUE(guard.Complete(r, 1, "1").ok());
    std::unique_ptr<StoreTransaction> tx = *(*store)->Begin();
    for (const char* sql : {"ALTER TABLE idem_records DROP COLUMN purged_at",
                            "ALTER TABLE idem_records DROP COLUMN expires_at",
                            "UPDATE idem_schema_version SET version = 1"}) {
      ASSERT_TRUE(tx->Exec(sql).ok()) << sql;
    }
    ASSERT_TRUE(tx->Commit().ok());
  }
  RunResult dry = RunIdem({"migrate", "--store", url, "--dry-run"}, dir.path());
  ASSERT_EQ(dry.exit_code, 0) << dry.err;
  EXPECT_THAT(dry.out, HasSubstr("schema version: 1 -> 2\n"));
  EXPECT_THAT(dry.out, HasSubstr("action: would upgrade (dry run: nothing changed)\n"));
  // Read-only tools refuse the old schema until then, and say what to do.
  RunResult inspect = RunIdem(
      {"inspect", "--store", url, "--biz-type", "refund", "--key", "K-1"}, dir.path());
  EXPECT_EQ(inspect.exit_code, 1);
  EXPECT_THAT(inspect.err, HasSubstr("run `idem migrate`"));

  RunResult run = RunIdem({"migrate", "--store", url}, dir.path());
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("schema version: 1 -> 2\n"));
  EXPECT_THAT(run.out, HasSubstr("action: upgraded\n"));
  RunResult after = RunIdem(
      {"inspect", "--store", url, "--biz-type", "refund", "--key", "K-1"}, dir.path());
  ASSERT_EQ(after.exit_code, 0) << after.err;
  EXPECT_THAT(after.out, HasSubstr("expires_at   never"));
  RunResult again = RunIdem({"migrate", "--store", url}, dir.path());
  EXPECT_THAT(again.out, HasSubstr("action: unchanged\n"));
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

// A rocksdb:// directory a running `idem serve` holds is not copied from: the copy
// would miss what the server writes meanwhile. Once the server stops, it is.
TEST(MigrateRocksdb, RefusesASourceARunningServerHolds) {
  TempDir dir;
  const std::string from = "rocksdb://" + dir.file("held");
  const std::string to = "sqlite://" + dir.file("copy.db");
  ServeProcess serve(dir.file("serve.err"));
  ASSERT_THAT(serve.Start({"--listen", "127.0.0.1:0", "--store", from, "--tenant", "t:tok"}),
              ::testing::StartsWith("listening on "))
      << serve.stderr_text();
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"migrate", "--from", from, "--to", to},
        std::vector<std::string>{"migrate", "--from", from, "--to", to, "--dry-run"}}) {
    RunResult r = RunIdem(args, dir.path());
    EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
    EXPECT_THAT(r.err, HasSubstr("rocksdb directory '" + dir.file("held") +
                                 "' is held by another process"));
    EXPECT_FALSE(Exists(dir.file("copy.db"))) << "the destination was made";
  }
  EXPECT_EQ(serve.Stop(), 0);
  RunResult r = RunIdem({"migrate", "--from", from, "--to", to}, dir.path());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("records: 0"));
}

TEST(MigrateUsage, HelpExitsZero) {
  TempDir dir;
  RunResult r = RunIdem({"migrate", "--help"}, dir.path());
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("--dry-run"));
}

}  // namespace
}  // namespace idem::testing
