// rocksdb://-specific behaviour: URLs, durability across a reopen, one process per
// directory, the format version, and retention by the compaction filter. The
// contract every backend keeps is tests/conformance.
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "idem/idem.h"
#include "store/record_codec.h"
#include "store/rocksdb/batch_writer.h"
#include "store/rocksdb/rocksdb_db.h"
#include "testing/fake_clock.h"
#include "testing/status_matchers.h"
#include "testing/temp_dir.h"

namespace idem {
namespace {

using ::idem::testing::StatusIs;
using ::testing::HasSubstr;

std::string Message(const absl::Status& s) { return std::string(s.message()); }

TEST(RocksdbStoreTest, UrlErrorsNameWhatIsWrong) {
  testing::TempDir dir;
  const std::string url = "rocksdb://" + dir.file("db");
  absl::Status no_path = OpenStore("rocksdb://").status();
  EXPECT_THAT(no_path, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Message(no_path), HasSubstr("no directory"));
  absl::Status param = OpenStore(url + "?fsync=1").status();
  EXPECT_THAT(param, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Message(param), HasSubstr("unknown rocksdb URL parameter 'fsync'"));
  EXPECT_THAT(OpenStore(url + "?sync=normal"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(OpenStore(url + "?lock_timeout_ms=-1"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(OpenStore(url + "?ttl=soon"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(OpenStore(url + "?ttl=0s"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_OK(OpenStore(url + "?sync=off&lock_timeout_ms=100&ttl=90d"));
  absl::Status writer = OpenStore(url + "?writer=single").status();
  EXPECT_THAT(writer, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Message(writer), HasSubstr("writer='single' must be group or queue"));
}

TEST(RocksdbStoreTest, NoSqlAndNoSchemaSaySo) {
  testing::TempDir dir;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, OpenStore("rocksdb://" + dir.file("db")));
  EXPECT_FALSE(store->SupportsSql());
  EXPECT_EQ(store->sql_dialect(), nullptr);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<StoreTransaction> tx, store->Begin());
  absl::Status exec = tx->Exec("SELECT 1").status();
  EXPECT_THAT(exec, StatusIs(absl::StatusCode::kUnimplemented));
  EXPECT_THAT(Message(exec), HasSubstr("has no SQL"));
  EXPECT_THAT(tx->Query("SELECT 1"), StatusIs(absl::StatusCode::kUnimplemented));
  absl::Status schema = store->DescribeSchema().status();
  EXPECT_THAT(schema, StatusIs(absl::StatusCode::kUnimplemented));
  EXPECT_THAT(Message(schema), HasSubstr("format version 2"));
}

// Every acknowledged claim, complete and fail is there after the store is closed
// and opened again (each commit was synced to the WAL before it returned).
// A directory deleted or replaced under the running store: RocksDB would go on
// writing into unlinked files, and after a restart a completed key would be
// acquired again. The store stops acknowledging instead (503, /readyz 503).
TEST(RocksdbStoreTest, ADeletedOrReplacedDirectoryIsAStoreFault) {
  for (bool replace : {false, true}) {
    SCOPED_TRACE(replace ? "replaced" : "deleted");
    testing::TempDir dir;
    const std::string path = dir.file("db");
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, OpenStore("rocksdb://" + path));
    Guard guard(*store);
    ASSERT_OK(guard.Claim({.biz_type = "pay", .key = "before"}).status());
    std::filesystem::rename(path, dir.file("db.moved"));
    if (replace) std::filesystem::create_directory(path);
    absl::StatusOr<Result> after = guard.Claim({.biz_type = "pay", .key = "after"});
    EXPECT_THAT(after, StatusIs(absl::StatusCode::kUnavailable));
    EXPECT_THAT(Message(after.status()),
                HasSubstr(replace ? "was replaced by another one" : "was deleted"));
    EXPECT_THAT(store->Ping(), StatusIs(absl::StatusCode::kUnavailable));
  }
}

TEST(RocksdbStoreTest, AcknowledgedWritesSurviveAReopen) {
  for (const char* writer : {"group", "queue"}) {
    SCOPED_TRACE(writer);
    testing::TempDir dir;
    const std::string url = "rocksdb://" + dir.file("db") + "?writer=" + writer;
    const Request done{.biz_type = "refund", .key = "done"};
    const Request failed{.biz_type = "refund", .key = "failed"};
    const Request released{.biz_type = "refund", .key = "released"};
    const Request held{.biz_type = "refund", .key = "held"};
    {
      ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, OpenStore(url));
      Guard guard(*store);
      for (const Request& r : {done, failed, released, held}) {
        ASSERT_OK_AND_ASSIGN(Result claim, guard.Claim(r, absl::Seconds(30)));
        ASSERT_EQ(claim.outcome, Outcome::kAcquired);
      }
      ASSERT_OK(guard.Complete(done, 1, "{\"ok\":1}"));
      ASSERT_OK(guard.Fail(failed, 1, false, "no"));
      ASSERT_OK(guard.Fail(released, 1, true, "later"));
    }
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, OpenStore(url));
    Guard guard(*store);
    ASSERT_OK_AND_ASSIGN(Result replay, guard.Claim(done));
    EXPECT_EQ(replay.outcome, Outcome::kReplayed);
    EXPECT_EQ(replay.value, "{\"ok\":1}");
    ASSERT_OK_AND_ASSIGN(Result cached, guard.Claim(failed));
    EXPECT_EQ(cached.outcome, Outcome::kCachedFailure);
    ASSERT_OK_AND_ASSIGN(Result again, guard.Claim(released));
    EXPECT_EQ(again.outcome, Outcome::kAcquired);
    EXPECT_EQ(again.token, 2);  // tokens keep growing across the release and the reopen
    ASSERT_OK_AND_ASSIGN(Result busy, guard.Claim(held));
    EXPECT_EQ(busy.outcome, Outcome::kInProgress);
  }
}

// writer=queue's BatchWriter: the batches of 16 concurrent committers are all
// written (in groups: never more writes than batches), and a batch it cannot
// write (a Merge) fails alone while the rest of its group is written.
TEST(RocksdbStoreTest, TheQueueWriterWritesEveryBatchAndFailsABadOneAlone) {
  testing::TempDir dir;
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<rocksdbstore::SharedDb> db,
                       rocksdbstore::OpenSharedDb({.path = dir.file("db")}, false));
  {
    rocksdbstore::BatchWriter writer(db->db->GetBaseDB(), /*sync=*/true);
    std::vector<std::thread> threads;
    std::vector<absl::Status> results(16 * 10);
    for (int t = 0; t < 16; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < 10; ++i) {
          rocksdb::WriteBatch batch;
          ASSERT_TRUE(batch.Put("rk" + std::to_string(t * 10 + i), "v").ok());
          if (t == 3 && i == 5) {
            ASSERT_TRUE(batch.Merge("rk35", "x").ok());
          }
          results[t * 10 + i] = writer.Write(batch, "commit");
        }
      });
    }
    for (auto& th : threads) th.join();
    EXPECT_EQ(writer.batches(), 160u);
    EXPECT_LE(writer.groups(), writer.batches());
    for (int k = 0; k < 160; ++k) {
      std::string value;
      const rocksdb::Status got =
          db->db->Get(rocksdb::ReadOptions(), "rk" + std::to_string(k), &value);
      if (k == 35) {
        EXPECT_EQ(results[k].code(), absl::StatusCode::kInternal) << results[k];
        EXPECT_THAT(Message(results[k]), HasSubstr("Put and Delete only, not: Merge"));
        EXPECT_TRUE(got.IsNotFound()) << "a refused batch is not written in part";
      } else {
        EXPECT_OK(results[k]);
        EXPECT_TRUE(got.ok()) << k;
      }
    }
  }
}

// RocksDB's LOCK file admits one process per directory; a second gets a clear
// kUnavailable instead of a RocksDB message.
TEST(RocksdbStoreTest, SecondProcessGetsAClearUnavailable) {
  testing::TempDir dir;
  const std::string url = "rocksdb://" + dir.file("db");
  int go[2];
  ASSERT_EQ(pipe(go), 0);
  // Forked before this process opens RocksDB (no background threads to lose).
  const pid_t pid = fork();
  if (pid == 0) {
    char c;
    if (read(go[0], &c, 1) != 1) _exit(10);
    absl::Status s = OpenStore(url).status();
    if (s.code() != absl::StatusCode::kUnavailable) _exit(11);
    if (!IsStoreFault(s)) _exit(12);
    if (Message(s).find("another process has this database open") == std::string::npos) _exit(13);
    _exit(0);
  }
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, OpenStore(url));
  ASSERT_EQ(write(go[1], "g", 1), 1);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: no go, 11: code, 12: not a store fault, 13: message";
  close(go[0]);
  close(go[1]);
  // In this process a second open shares the database.
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> second, OpenStore(url));
  Guard a(*store), b(*second);
  ASSERT_OK(a.Claim({.biz_type = "refund", .key = "K"}, absl::Seconds(30)));
  ASSERT_OK_AND_ASSIGN(Result seen, b.Claim({.biz_type = "refund", .key = "K"}));
  EXPECT_EQ(seen.outcome, Outcome::kInProgress);
  // ... with the same ttl only.
  absl::Status other_ttl = OpenStore(url + "?ttl=30d").status();
  EXPECT_THAT(other_ttl, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Message(other_ttl), HasSubstr("already open in this process"));
}

TEST(RocksdbStoreTest, ForeignOrNewerDataIsRefused) {
  testing::TempDir dir;
  // A directory of other files is not taken over.
  std::filesystem::create_directories(dir.file("other"));
  std::ofstream(dir.file("other/notes.txt")) << "mine";
  absl::Status foreign = OpenStore("rocksdb://" + dir.file("other")).status();
  EXPECT_THAT(foreign, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(Message(foreign), HasSubstr("not a RocksDB database"));

  const std::string url = "rocksdb://" + dir.file("db");
  {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, OpenStore(url));
    ASSERT_OK_AND_ASSIGN(std::shared_ptr<rocksdbstore::SharedDb> db,
                         rocksdbstore::OpenSharedDb({.path = dir.file("db")}, true));
    // A record a newer idem wrote: refused by name, never guessed.
    std::string bytes = store::EncodeRecord(Record{.tenant = "default", .key = "K"});
    bytes[0] = 3;
    rocksdb::WriteOptions sync;
    sync.sync = true;
    ASSERT_TRUE(db->db->Put(sync, rocksdbstore::RecordDbKey("default", "K"), bytes).ok());
    absl::Status newer_record = store->Get("default", "K").status();
    EXPECT_THAT(newer_record, StatusIs(absl::StatusCode::kFailedPrecondition));
    EXPECT_THAT(Message(newer_record), HasSubstr("format version 3"));
    // A database a newer idem wrote.
    ASSERT_TRUE(db->db->Put(sync, std::string(rocksdbstore::kFormatKey), "3").ok());
  }
  absl::Status newer = OpenStore(url).status();
  EXPECT_THAT(newer, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(Message(newer), HasSubstr("newer"));
}

// A read-only open (idem inspect) creates nothing and takes no lock.
TEST(RocksdbStoreTest, ReadOnlyOpenCreatesNothing) {
  testing::TempDir dir;
  const std::string url = "rocksdb://" + dir.file("db");
  absl::Status missing = OpenStore(url, {.read_only = true}).status();
  EXPECT_THAT(missing, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(Message(missing), HasSubstr("no idem store here"));
  EXPECT_FALSE(std::filesystem::exists(dir.file("db")));

  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> writer, OpenStore(url));
  Guard guard(*writer);
  ASSERT_OK(guard.Claim({.biz_type = "refund", .key = "K"}, absl::Seconds(30)));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> reader, OpenStore(url, {.read_only = true}));
  EXPECT_TRUE(reader->read_only());
  ASSERT_OK_AND_ASSIGN(std::optional<Record> seen, reader->Get("default", "K"));
  ASSERT_TRUE(seen.has_value());
  EXPECT_EQ(seen->state, RecordState::kProcessing);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<StoreTransaction> tx, reader->Begin());
  EXPECT_THAT(tx->InsertOrLoad(Record{.tenant = "default", .key = "L"}),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

// Retention (SPEC §8) at compaction, for records without an expires_at of their own
// (ttl=, the fallback): finished records whose last update is older than ttl become
// tombstones; younger ones and PROCESSING records (whatever their lease) are kept.
TEST(RocksdbStoreTest, CompactionRetiresFinishedRecordsPastTheFallbackTtl) {
  testing::TempDir dir;
  testing::FakeClock clock;
  const std::string url = "rocksdb://" + dir.file("db") + "?ttl=1d";
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, OpenStore(url, {.clock = &clock}));
  Guard guard(*store, GuardOptions{.clock = &clock});  // no retention: no expires_at
  auto req = [](const char* key) { return Request{.biz_type = "refund", .key = key}; };
  for (const char* key : {"done", "failed", "released", "stuck"}) {
    ASSERT_OK(guard.Claim(req(key), absl::Seconds(30)));
  }
  ASSERT_OK(guard.Complete(req("done"), 1, "r"));
  ASSERT_OK(guard.Fail(req("failed"), 1, false, "e"));
  ASSERT_OK(guard.Fail(req("released"), 1, true, "e"));

  ASSERT_OK_AND_ASSIGN(std::shared_ptr<rocksdbstore::SharedDb> db,
                       rocksdbstore::OpenSharedDb({.path = dir.file("db"), .ttl = absl::Hours(24)},
                                                  true));
  auto compact = [&] {
    rocksdb::CompactRangeOptions all;
    all.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
    return db->db->CompactRange(all, nullptr, nullptr);
  };
  auto stored = [&](const char* key) {
    absl::StatusOr<std::optional<Record>> r = store->Get("default", key);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : std::nullopt;
  };

  // Inside the window: nothing changes.
  clock.Advance(absl::Hours(23));
  ASSERT_TRUE(compact().ok());
  for (const char* key : {"done", "failed", "released", "stuck"}) {
    ASSERT_TRUE(stored(key).has_value()) << key;
    EXPECT_FALSE(stored(key)->purged()) << key;
  }

  clock.Advance(absl::Hours(2));
  ASSERT_OK(guard.Claim(req("fresh"), absl::Seconds(30)));
  ASSERT_OK(guard.Complete(req("fresh"), 1, "r"));
  ASSERT_TRUE(compact().ok());
  for (const char* key : {"done", "failed", "released"}) {
    std::optional<Record> t = stored(key);
    ASSERT_TRUE(t.has_value()) << key;
    EXPECT_TRUE(t->purged()) << key;
    EXPECT_EQ(t->result, "") << key;
    EXPECT_EQ(t->purged_at, clock.Now()) << key;
    EXPECT_EQ(t->expires_at, clock.Now() + absl::Hours(24)) << key;  // as long again
  }
  ASSERT_OK_AND_ASSIGN(Result late, guard.Claim(req("done")));
  EXPECT_EQ(late.outcome, Outcome::kExpired);
  EXPECT_FALSE(stored("stuck")->purged());  // PROCESSING: kept for `idem stuck` and a takeover
  EXPECT_FALSE(stored("fresh")->purged());

  // The tombstones go at their own time.
  clock.Advance(absl::Hours(25));
  ASSERT_TRUE(compact().ok());
  EXPECT_FALSE(stored("done").has_value());
  EXPECT_FALSE(stored("released").has_value());
  // The format key is not a record: the store still opens.
  store.reset();
  db.reset();
  EXPECT_OK(OpenStore(url, {.clock = &clock}));
}

// Records with an expires_at (a retention policy at claim) go then, without ttl=;
// with tombstones=off they are dropped outright.
TEST(RocksdbStoreTest, CompactionHonoursExpiresAt) {
  for (const bool tombstones : {true, false}) {
    testing::TempDir dir;
    testing::FakeClock clock;
    const std::string path = dir.file("db");
    const std::string url = "rocksdb://" + path + (tombstones ? "" : "?tombstones=off");
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, OpenStore(url, {.clock = &clock}));
    RetentionPolicy policy;
    ASSERT_OK(policy.Add("refund", {.redelivery_window = absl::Hours(24)}));
    Guard guard(*store, GuardOptions{.clock = &clock, .retention = policy});
    const Request done{.biz_type = "refund", .key = "done"};
    const Request kept{.biz_type = "payout", .key = "kept"};  // no retention, no ttl=
    for (const Request& r : {done, kept}) {
      ASSERT_OK(guard.Claim(r));
      ASSERT_OK(guard.Complete(r, 1, "r"));
    }
    ASSERT_OK_AND_ASSIGN(
        std::shared_ptr<rocksdbstore::SharedDb> db,
        rocksdbstore::OpenSharedDb({.path = path, .tombstones = tombstones}, true));
    rocksdb::CompactRangeOptions all;
    all.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
    clock.Advance(absl::Hours(25));
    ASSERT_TRUE(db->db->CompactRange(all, nullptr, nullptr).ok());
    ASSERT_OK_AND_ASSIGN(std::optional<Record> r, store->Get("default", "done"));
    if (tombstones) {
      ASSERT_TRUE(r.has_value());
      EXPECT_TRUE(r->purged());
    } else {
      EXPECT_FALSE(r.has_value());
    }
    ASSERT_OK_AND_ASSIGN(std::optional<Record> k, store->Get("default", "kept"));
    ASSERT_TRUE(k.has_value());
    EXPECT_FALSE(k->purged());
  }
}

// A directory of format 1 (before expires_at) opens: its records read as kept for
// ever, and the first read-write open marks the directory format 2.
TEST(RocksdbStoreTest, FormatOneDirectoryIsReadAndUpgraded) {
  testing::TempDir dir;
  const std::string path = dir.file("db");
  {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, OpenStore("rocksdb://" + path));
    ASSERT_OK_AND_ASSIGN(std::shared_ptr<rocksdbstore::SharedDb> db,
                         rocksdbstore::OpenSharedDb({.path = path}, true));
    Record r{.tenant = "default", .biz_type = "refund", .key = "old",
             .state = RecordState::kSucceeded, .token = 1, .result = "r",
             .created_at = absl::FromUnixSeconds(1700000000),
             .updated_at = absl::FromUnixSeconds(1700000000)};
    const std::string v2 = store::EncodeRecord(r);
    const std::string v1 = std::string(1, '\x01') + v2.substr(1, 33) + v2.substr(50);
    rocksdb::WriteOptions sync;
    sync.sync = true;
    ASSERT_TRUE(db->db->Put(sync, rocksdbstore::RecordDbKey("default", "old"), v1).ok());
    ASSERT_TRUE(db->db->Put(sync, std::string(rocksdbstore::kFormatKey), "1").ok());
  }
  {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> reader,
                         OpenStore("rocksdb://" + path, {.read_only = true}));
    ASSERT_OK_AND_ASSIGN(std::optional<Record> old, reader->Get("default", "old"));
    ASSERT_TRUE(old.has_value());
    EXPECT_EQ(old->result, "r");
    EXPECT_EQ(old->expires_at, absl::InfiniteFuture());
  }
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, OpenStore("rocksdb://" + path));
  Guard guard(*store);
  ASSERT_OK_AND_ASSIGN(Result replay, guard.Claim({.biz_type = "refund", .key = "old"}));
  EXPECT_EQ(replay.outcome, Outcome::kReplayed);
  EXPECT_EQ(replay.value, "r");
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<rocksdbstore::SharedDb> db,
                       rocksdbstore::OpenSharedDb({.path = path}, true));
  std::string format;
  ASSERT_TRUE(db->db->Get(rocksdb::ReadOptions(), std::string(rocksdbstore::kFormatKey), &format)
                  .ok());
  EXPECT_EQ(format, "2");
}

}  // namespace
}  // namespace idem
