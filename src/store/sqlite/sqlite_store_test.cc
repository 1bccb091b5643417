// SQLite-specific behaviour: URLs, start-up failures, the one writer per store.
// The contract every backend keeps (a newer schema refused, a lock held past the
// timeout failing closed) is tests/conformance/store_contract_test.cc; the one of
// the SQL stores (one statement per call, values byte for byte, statement errors,
// racing openers) is tests/conformance/sql_contract_test.cc.
#include <cstdio>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "idem/idem.h"
#include "testing/status_matchers.h"
#include "testing/temp_dir.h"

namespace idem {
namespace {

using ::idem::testing::StatusIs;
using ::testing::HasSubstr;

std::string Message(const absl::Status& s) { return std::string(s.message()); }

TEST(SqliteStoreTest, UrlErrorsNameWhatIsWrong) {
  absl::Status no_path = OpenStore("sqlite://").status();
  EXPECT_THAT(no_path, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Message(no_path), HasSubstr("no path"));
  absl::Status param = OpenStore("sqlite://:memory:?fsync=1").status();
  EXPECT_THAT(param, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Message(param), HasSubstr("unknown sqlite URL parameter 'fsync'"));
  absl::Status sync = OpenStore("sqlite://:memory:?synchronous=sometimes").status();
  EXPECT_THAT(sync, StatusIs(absl::StatusCode::kInvalidArgument));
  absl::Status timeout = OpenStore("sqlite://:memory:?busy_timeout_ms=-4").status();
  EXPECT_THAT(timeout, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(OpenStore("nosuch://x"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(OpenStore("idem.db"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_OK(OpenStore("sqlite://:memory:?synchronous=normal&busy_timeout_ms=100&readers=2"));
}

// The file deleted or replaced under a running store: it stops
// acknowledging, with a store fault, instead of writing into an unlinked inode that
// vanishes (after a restart a completed key would be acquired again: a duplicate).
TEST(SqliteStoreTest, DeletedOrReplacedFileStopsAcknowledging) {
  for (const bool replace : {false, true}) {
    testing::TempDir dir;
    const std::string path = dir.file("idem.db");
    absl::StatusOr<std::unique_ptr<Store>> store = OpenStore("sqlite://" + path);
    ASSERT_OK(store);
    Guard guard(**store);
    const Request req{.biz_type = "refund", .key = "K-1"};
    ASSERT_OK(guard.Claim(req, absl::Seconds(30)));
    for (const char* suffix : {"", "-wal", "-shm"}) std::remove((path + suffix).c_str());
    if (replace) {
      // Another idem database takes the name (a restore copied over it).
      ASSERT_OK(OpenStore("sqlite://" + path));
    }
    for (const absl::Status& s :
         {guard.Complete(req, 1, "{}"), guard.Claim(req, absl::Seconds(30)).status(),
          guard.Get(req).status(), (*store)->Ping()}) {
      EXPECT_THAT(s, StatusIs(absl::StatusCode::kUnavailable));
      EXPECT_TRUE(IsStoreFault(s)) << s;
      EXPECT_THAT(Message(s), HasSubstr(replace ? "was replaced" : "was deleted"));
    }
    // Nothing was written under the name by the old store.
    absl::StatusOr<std::unique_ptr<Store>> fresh = OpenStore("sqlite://" + path);
    ASSERT_OK(fresh);
    absl::StatusOr<std::optional<Record>> got = (*fresh)->Get("", "K-1");
    ASSERT_OK(got);
    EXPECT_FALSE(got->has_value());
  }
}

TEST(SqliteStoreTest, UnwritablePathIsUnavailable) {
  absl::Status s = OpenStore("sqlite:///proc/no/such/dir/idem.db").status();
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(Message(s), HasSubstr("/proc/no/such/dir/idem.db"));
}

TEST(SqliteStoreTest, CorruptFileIsRefusedWithAClearError) {
  testing::TempDir dir;
  {
    std::ofstream f(dir.file("junk.db"), std::ios::binary);
    for (int i = 0; i < 4096; ++i) f.put(static_cast<char>((i * 131) & 0xff));
  }
  absl::Status s = OpenStore("sqlite://" + dir.file("junk.db")).status();
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(Message(s), HasSubstr("not a database"));
}

TEST(SqliteStoreTest, ReopenKeepsRecords) {
  testing::TempDir dir;
  const std::string url = "sqlite://" + dir.file("idem.db");
  {
    absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(url);
    ASSERT_OK(store);
    Guard guard(**store);
    ASSERT_OK(guard.Run({.biz_type = "b", .key = "k"},
                        [](Transaction&) -> absl::StatusOr<std::string> { return "v"; }));
  }
  absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(url);
  ASSERT_OK(store);
  Guard guard(**store);
  absl::StatusOr<Result> r = guard.Run(
      {.biz_type = "b", .key = "k"}, [](Transaction&) -> absl::StatusOr<std::string> { return "w"; });
  ASSERT_OK(r);
  EXPECT_EQ(r->outcome, Outcome::kReplayed);
  EXPECT_EQ(r->value, "v");
}

// One writer per store: while a transaction of the store is open, the store's own
// next Begin() waits for it up to busy_timeout_ms, then fails closed (kUnavailable),
// rather than opening a second write transaction on the file. (Another store's
// claim meeting the lock is the conformance suite's ClaimHeldPastTheLockTimeout.)
TEST(SqliteStoreTest, SecondTransactionOfOneStoreWaitsForTheFirst) {
  testing::TempDir dir;
  const std::string url = "sqlite://" + dir.file("idem.db") + "?busy_timeout_ms=100";
  absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(url);
  ASSERT_OK(store);
  absl::StatusOr<std::unique_ptr<StoreTransaction>> held = (*store)->Begin();
  ASSERT_OK(held);
  absl::StatusOr<std::unique_ptr<StoreTransaction>> second = (*store)->Begin();
  EXPECT_THAT(second, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(Message(second.status()), HasSubstr("write lock not free"));
  (*held)->Rollback();
  Guard guard(**store);
  EXPECT_OK(guard.Run({.biz_type = "b", .key = "k"},
                      [&](Transaction&) -> absl::StatusOr<std::string> { return "v"; }));
}

}  // namespace
}  // namespace idem
