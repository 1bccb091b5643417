// rocksdb://-specific behaviour: URLs, durability across a reopen, one process per
// directory, the format version, and retention by the compaction filter. The
// contract every backend keeps is tests/conformance.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "core/guard_nonblocking.h"
#include "idem/cache.h"
#include "idem/idem.h"
#include "rocksdb/env.h"
#include "rocksdb/file_system.h"
#include "rocksdb/utilities/transaction_db.h"
#include "store/backend.h"
#include "store/record_codec.h"
#include "store/rocksdb/batch_writer.h"
#include "store/rocksdb/rocksdb_db.h"
#include "store/turn.h"
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
  EXPECT_OK(OpenStore(url + "?turn_write=inline"));
  EXPECT_OK(OpenStore(url + "?turn_write=stage"));
  EXPECT_OK(OpenStore(url + "?turn_write=auto"));
  absl::Status turn_write = OpenStore(url + "?turn_write=later").status();
  EXPECT_THAT(turn_write, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Message(turn_write), HasSubstr("turn_write='later' must be auto, stage or inline"));
}

TEST(RocksdbStoreTest, NoSqlAndNoSchemaSaySo) {
  testing::TempDir dir;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, OpenStore("rocksdb://" + dir.file("db")));
  EXPECT_FALSE(store->SupportsSql());
  EXPECT_EQ(Backend(*store).sql_dialect(), nullptr);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<StoreTransaction> tx, store->Begin());
  absl::Status exec = tx->Exec("SELECT 1").status();
  EXPECT_THAT(exec, StatusIs(absl::StatusCode::kUnimplemented));
  EXPECT_THAT(Message(exec), HasSubstr("has no SQL"));
  EXPECT_THAT(tx->Query("SELECT 1"), StatusIs(absl::StatusCode::kUnimplemented));
  absl::Status schema = Backend(*store).DescribeSchema().status();
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

// A file system with the faults the tests inject: while `full` is set appends fail
// with NoSpace, as a full disk's do (it reports room enough for RocksDB's recovery
// otherwise); while syncs are held (HoldSyncs), a sync waits until ReleaseSyncs, as
// a slow disk's does; KillAt SIGKILLs the process at the Nth write to a WAL file,
// or at its Nth WAL sync before or after the sync (the places of a commit's write
// path between the batch being decided and the reply).
class FaultyFs final : public rocksdb::FileSystemWrapper {
 public:
  enum class At { kNever, kWalWrite, kBeforeSync, kAfterSync };

  explicit FaultyFs(std::shared_ptr<rocksdb::FileSystem> base) : FileSystemWrapper(base) {}
  const char* Name() const override { return "FaultyFs"; }

  rocksdb::IOStatus NewWritableFile(const std::string& name, const rocksdb::FileOptions& options,
                                    std::unique_ptr<rocksdb::FSWritableFile>* file,
                                    rocksdb::IODebugContext* debug) override {
    rocksdb::IOStatus s = target()->NewWritableFile(name, options, file, debug);
    const bool wal = absl::EndsWith(name, ".log");
    const bool table = absl::EndsWith(name, ".sst");
    if (s.ok()) *file = std::make_unique<File>(std::move(*file), this, wal, table);
    return s;
  }
  rocksdb::IOStatus GetFreeSpace(const std::string&, const rocksdb::IOOptions&, uint64_t* free,
                                 rocksdb::IODebugContext*) override {
    *free = full ? 0 : uint64_t{1} << 40;
    return rocksdb::IOStatus::OK();
  }

  std::atomic<bool> full{false};
  // Write-outs asked of the kernel for a part of a table file (RangeSync).
  std::atomic<int> table_range_syncs{0};

  void HoldSyncs() {
    std::lock_guard<std::mutex> lock(mu_);
    hold_ = true;
  }
  void ReleaseSyncs() {
    std::lock_guard<std::mutex> lock(mu_);
    hold_ = false;
    released_.notify_all();
  }
  // How many syncs wait now.
  int held() {
    std::lock_guard<std::mutex> lock(mu_);
    return held_;
  }
  // Waits up to 3 s for a sync to be held; how many are.
  int WaitHeld() {
    std::unique_lock<std::mutex> lock(mu_);
    arrived_.wait_for(lock, std::chrono::seconds(3), [this] { return held_ > 0; });
    return held_;
  }

  void KillAt(At at, int hit) {
    kill_at_ = at;
    kill_hit_ = hit;
  }

 private:
  void MaybeHold() {
    std::unique_lock<std::mutex> lock(mu_);
    ++held_;
    arrived_.notify_all();
    released_.wait(lock, [this] { return !hold_; });
    --held_;
  }
  void Reached(At at) {
    if (at == kill_at_ && ++kill_count_ == kill_hit_) kill(getpid(), SIGKILL);
  }

  class File final : public rocksdb::FSWritableFileOwnerWrapper {
   public:
    File(std::unique_ptr<rocksdb::FSWritableFile> file, FaultyFs* fs, bool wal, bool table)
        : FSWritableFileOwnerWrapper(std::move(file)), fs_(fs), wal_(wal), table_(table) {}
    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                             rocksdb::IODebugContext* debug) override {
      if (std::optional<rocksdb::IOStatus> refused = BeforeAppend()) return *refused;
      return target()->Append(data, options, debug);
    }
    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                             const rocksdb::DataVerificationInfo& info,
                             rocksdb::IODebugContext* debug) override {
      if (std::optional<rocksdb::IOStatus> refused = BeforeAppend()) return *refused;
      return target()->Append(data, options, info, debug);
    }
    rocksdb::IOStatus Sync(const rocksdb::IOOptions& options,
                           rocksdb::IODebugContext* debug) override {
      return Synced([&] { return target()->Sync(options, debug); });
    }
    rocksdb::IOStatus Fsync(const rocksdb::IOOptions& options,
                            rocksdb::IODebugContext* debug) override {
      return Synced([&] { return target()->Fsync(options, debug); });
    }
    rocksdb::IOStatus RangeSync(uint64_t offset, uint64_t bytes, const rocksdb::IOOptions& options,
                                rocksdb::IODebugContext* debug) override {
      if (table_) fs_->table_range_syncs.fetch_add(1);
      return target()->RangeSync(offset, bytes, options, debug);
    }

   private:
    std::optional<rocksdb::IOStatus> BeforeAppend() {
      if (fs_->full) return rocksdb::IOStatus::NoSpace("injected: the disk is full");
      if (wal_) fs_->Reached(At::kWalWrite);
      return std::nullopt;
    }
    template <typename SyncFn>
    rocksdb::IOStatus Synced(SyncFn sync) {
      fs_->MaybeHold();
      if (wal_) fs_->Reached(At::kBeforeSync);
      rocksdb::IOStatus s = sync();
      if (wal_) fs_->Reached(At::kAfterSync);
      return s;
    }

    FaultyFs* const fs_;
    const bool wal_;
    const bool table_;
  };

  std::mutex mu_;
  std::condition_variable released_;
  std::condition_variable arrived_;  // a sync began to wait
  bool hold_ = false;
  int held_ = 0;
  At kill_at_ = At::kNever;
  int kill_hit_ = 0;
  std::atomic<int> kill_count_{0};
};

// A store on `path` whose database does its I/O through `fs`: the Env, the open of
// the directory the store shares (and with it the Env), the store; each ends
// before the one above it (the database closes before its Env goes).
struct StoreOverFs {
  std::unique_ptr<rocksdb::Env> env;
  std::shared_ptr<rocksdbstore::SharedDb> shared;
  std::unique_ptr<Store> store;

  // `params`: the store URL's query ("?turn_write=inline"), or empty.
  static absl::StatusOr<std::unique_ptr<StoreOverFs>> Open(
      const std::string& path, std::shared_ptr<rocksdb::FileSystem> fs,
      const std::string& params = "") {
    auto opened = std::make_unique<StoreOverFs>();
    opened->env = rocksdb::NewCompositeEnv(std::move(fs));
    absl::StatusOr<std::shared_ptr<rocksdbstore::SharedDb>> shared =
        rocksdbstore::OpenSharedDb({.path = path, .env = opened->env.get()}, false);
    if (!shared.ok()) return shared.status();
    opened->shared = *std::move(shared);
    absl::StatusOr<std::unique_ptr<Store>> store = OpenStore("rocksdb://" + path + params);
    if (!store.ok()) return store.status();
    opened->store = *std::move(store);
    return opened;
  }
};

// This process's threads named `name` (RocksDB names its pools' threads
// rocksdb:high and rocksdb:low), as their /proc/self/task/N directories.
std::vector<std::filesystem::path> ThreadsNamed(const std::string& name) {
  std::vector<std::filesystem::path> threads;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string got;
    std::getline(comm, got);
    if (got == name) threads.push_back(task.path());
  }
  return threads;
}

// The nice values of this process's threads named `name`.
std::vector<int> NiceOfThreads(const std::string& name) {
  std::vector<int> nice;
  for (const std::filesystem::path& task : ThreadsNamed(name)) {
    std::ifstream stat(task / "stat");
    std::string line;
    std::getline(stat, line);
    // After the ")" that ends the name: state (3rd field) ... nice (19th).
    std::istringstream fields(line.substr(line.rfind(')') + 2));
    std::string field;
    for (int i = 3; i <= 19 && fields >> field; ++i) {
      if (i == 19) nice.push_back(std::stoi(field));
    }
  }
  return nice;
}

// The time slice (ns) the scheduler gives the thread `task` (/proc/self/task/N), or
// -1 where /proc does not show it.
int64_t SliceOf(const std::filesystem::path& task) {
  std::ifstream sched(task / "sched");
  std::string line;
  while (std::getline(sched, line)) {
    if (line.rfind("se.slice", 0) == 0) return std::stoll(line.substr(line.find(':') + 1));
  }
  return -1;
}

// The slices of this process's threads named `name`.
std::vector<int64_t> SlicesOfThreads(const std::string& name) {
  std::vector<int64_t> slices;
  for (const std::filesystem::path& task : ThreadsNamed(name)) slices.push_back(SliceOf(task));
  return slices;
}

// Whether this kernel gives a thread the slice it asks for (Linux 6.12 and later):
// asked by a thread of its own.
bool KernelHonoursSlices(int64_t slice) {
  bool honoured = false;
  std::thread([&] {
    honoured = rocksdbstore::SetNiceAndSlice(0, getpriority(PRIO_PROCESS, 0),
                                             static_cast<uint64_t>(slice)) &&
               SliceOf("/proc/thread-self") == slice;
  }).join();
  return honoured;
}

// Flushes run at nice +10 and compactions at +19 from where their threads started:
// at +19 a flush got almost no CPU beside a busy loop, and RocksDB stopped every
// write until it ran. Both ask for a short time slice: a flush or compaction kept
// its core for 2.3-4.7 ms while a woken loop waited.
TEST(RocksdbStoreTest, FlushesRunAboveCompactionsAndBothBelowTheLoops) {
  testing::TempDir dir;
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<rocksdbstore::SharedDb> shared,
                       rocksdbstore::OpenSharedDb({.path = dir.file("db")}, false));
  rocksdb::DB& db = *shared->db;
  for (int round = 0; round < 2; ++round) {  // two table files, so one compaction
    ASSERT_TRUE(db.Put(rocksdb::WriteOptions(), "k" + std::to_string(round), "v").ok());
    ASSERT_TRUE(db.Flush(rocksdb::FlushOptions()).ok());
  }
  rocksdb::CompactRangeOptions compact;
  compact.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
  ASSERT_TRUE(db.CompactRange(compact, nullptr, nullptr).ok());
  const int own = getpriority(PRIO_PROCESS, 0);
  // Threads that have not run a job yet keep the nice value they started with.
  const struct {
    const char* pool;
    int nice;
  } expected[] = {{"rocksdb:high", std::min(19, own + 10)},   // flushes
                  {"rocksdb:low", std::min(19, own + 19)}};   // compactions
  for (const auto& [pool, nice] : expected) {
    EXPECT_THAT(NiceOfThreads(pool), ::testing::Contains(nice)) << pool;
    EXPECT_THAT(NiceOfThreads(pool), ::testing::Each(::testing::AnyOf(own, nice))) << pool;
  }
  // And a short time slice, so a woken loop or writer thread takes their core back
  // within 0.1 ms (on a kernel that grants a thread the slice it asks for).
  constexpr int64_t kSlice = 100'000;
  if (!KernelHonoursSlices(kSlice)) {
    std::cout << "this kernel does not grant the time slice a thread asks for: not checked\n";
    return;
  }
  for (const char* pool : {"rocksdb:high", "rocksdb:low"}) {
    EXPECT_THAT(SlicesOfThreads(pool), ::testing::Contains(kSlice)) << pool;
  }
}

// A flush or compaction has its table file written out as it grows, every 1 MiB,
// not all at once when the file ends, so that the WAL's fsyncs do not wait behind
// a compaction's hundreds of MB of write-back.
TEST(RocksdbStoreTest, TableFilesAreWrittenOutAsTheyGrow) {
  testing::TempDir dir;
  auto fs = std::make_shared<FaultyFs>(rocksdb::FileSystem::Default());
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<StoreOverFs> opened, StoreOverFs::Open(dir.file("db"), fs));
  rocksdb::DB& db = *opened->shared->db;
  // 4 MiB that compression cannot shrink, in one table file.
  std::mt19937 random(7);
  std::string value(1024, '\0');
  for (int i = 0; i < 4096; ++i) {
    for (char& c : value) c = static_cast<char>(random());
    ASSERT_TRUE(db.Put(rocksdb::WriteOptions(), absl::StrCat("k", i), value).ok());
  }
  ASSERT_TRUE(db.Flush(rocksdb::FlushOptions()).ok());
  // RocksDB leaves the last 1 MiB to the final sync: 4 MiB give two write-outs.
  EXPECT_GE(fs->table_range_syncs.load(), 2);
}

// A WAL write that failed on a full disk stops every write until a restart, also
// once the disk has room again: RocksDB 7.8 would resume by itself within seconds
// and append to the WAL whose write failed, where its assertion aborted idem serve
// (NoResumeAfterAFailedWalWrite). The ping says so; what was acknowledged before is
// there after the restart, and writes work again.
TEST(RocksdbStoreTest, AFailedWalWriteStopsWritesUntilARestart) {
  testing::TempDir dir;
  const std::string path = dir.file("db");
  {
    auto fs = std::make_shared<FaultyFs>(rocksdb::FileSystem::Default());
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<StoreOverFs> faulty, StoreOverFs::Open(path, fs));
    std::unique_ptr<Store>& store = faulty->store;
    const std::shared_ptr<rocksdbstore::SharedDb>& shared = faulty->shared;
    Guard guard(*store);
    ASSERT_OK(guard.Claim({.biz_type = "pay", .key = "before"}).status());
    ASSERT_OK(store->Ping());
    fs->full = true;
    EXPECT_THAT(guard.Claim({.biz_type = "pay", .key = "full"}),
                StatusIs(absl::StatusCode::kUnavailable));
    EXPECT_THAT(store->Ping(), StatusIs(absl::StatusCode::kUnavailable));
    fs->full = false;
    EXPECT_EQ(shared->no_resume->declined(), 1);
    // RocksDB's full-disk recovery polls every 5 s: past that, nothing resumed.
    std::this_thread::sleep_for(std::chrono::seconds(6));
    EXPECT_THAT(guard.Claim({.biz_type = "pay", .key = "room again"}),
                StatusIs(absl::StatusCode::kUnavailable));
    absl::Status ping = store->Ping();
    EXPECT_THAT(ping, StatusIs(absl::StatusCode::kUnavailable));
    EXPECT_THAT(Message(ping), HasSubstr("restart idem"));
  }
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, OpenStore("rocksdb://" + path));
  ASSERT_OK(store->Ping());
  Guard guard(*store);
  ASSERT_OK_AND_ASSIGN(Result before, guard.Claim({.biz_type = "pay", .key = "before"}));
  EXPECT_EQ(before.outcome, Outcome::kInProgress);
  ASSERT_OK_AND_ASSIGN(Result full, guard.Claim({.biz_type = "pay", .key = "full"}));
  EXPECT_EQ(full.outcome, Outcome::kAcquired);
  EXPECT_EQ(full.token, 1);
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

// A commit for the BatchWriter: puts `key` (a Merge too when `bad`, which AddTo
// refuses as a record transaction's writes never hold one), and calls `written`.
class TestCommit final : public rocksdbstore::BatchWriter::Commit {
 public:
  TestCommit() = default;
  TestCommit(std::string key, bool bad) : key_(std::move(key)), bad_(bad) {}
  rocksdb::Status AddTo(rocksdb::WriteBatch& group) const override {
    rocksdb::Status s = group.Put(key_, "v");
    if (s.ok() && bad_) s = rocksdb::Status::NotSupported("writes Put and Delete only, not Merge");
    return s;
  }
  void Written(const rocksdb::Status& status) override { written(status); }
  std::function<void(const rocksdb::Status&)> written = [](const rocksdb::Status&) {};

 private:
  std::string key_;
  bool bad_ = false;
};

// writer=queue's BatchWriter: the commits of 16 concurrent committers are all
// written (in groups: never more writes than commits), and a commit whose writes
// it cannot add fails alone while the rest of its group is written (a part of the
// refused one it had added already is not).
TEST(RocksdbStoreTest, TheQueueWriterWritesEveryBatchAndFailsABadOneAlone) {
  testing::TempDir dir;
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<rocksdbstore::SharedDb> db,
                       rocksdbstore::OpenSharedDb({.path = dir.file("db")}, false));
  {
    rocksdbstore::BatchWriter writer(db->db.get(), /*sync=*/true);
    std::vector<std::thread> threads;
    std::vector<absl::Status> results(16 * 10);
    for (int t = 0; t < 16; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < 10; ++i) {
          const int k = t * 10 + i;
          TestCommit commit("rk" + std::to_string(k), /*bad=*/k == 35);
          results[k] = writer.Write(commit, "commit");
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
        EXPECT_THAT(Message(results[k]), HasSubstr("Put and Delete only, not Merge"));
        EXPECT_TRUE(got.IsNotFound()) << "a refused commit is not written in part";
      } else {
        EXPECT_OK(results[k]);
        EXPECT_TRUE(got.ok()) << k;
      }
    }
  }
}

// Starts a non-blocking Guard call with `start` (given the call's `done`), expects
// it taken, and waits for the status `done` gets.
absl::Status Await(const std::function<bool(std::function<void(absl::Status)>)>& start) {
  absl::Notification called;
  absl::Status status = absl::UnknownError("not called");
  EXPECT_TRUE(start([&](absl::Status s) {
    status = std::move(s);
    called.Notify();
  }));
  EXPECT_TRUE(called.WaitForNotificationWithTimeout(absl::Seconds(30)));
  return status;
}

// WriteAsync: every callback comes once, from the writer thread, after its commit
// is written (readable), with the commit's own status; a refused commit fails
// alone; Write and WriteAsync share groups.
TEST(RocksdbStoreTest, TheQueueWritersAsyncWritesCallBackOnceAfterTheWrite) {
  testing::TempDir dir;
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<rocksdbstore::SharedDb> db,
                       rocksdbstore::OpenSharedDb({.path = dir.file("db")}, false));
  constexpr int kBatches = 200;
  std::vector<TestCommit> commits;
  std::vector<rocksdb::Status> results(kBatches, rocksdb::Status::Aborted("not called"));
  std::vector<int> calls(kBatches, 0);
  std::vector<bool> readable(kBatches, false);
  std::vector<std::thread::id> callers(kBatches);
  for (int k = 0; k < kBatches; ++k) commits.emplace_back("ak" + std::to_string(k), k == 7);
  {
    rocksdbstore::BatchWriter writer(db->db.get(), /*sync=*/true);
    for (int k = 0; k < kBatches; ++k) {
      commits[k].written = [&, k](const rocksdb::Status& s) {
        ++calls[k];
        results[k] = s;
        callers[k] = std::this_thread::get_id();
        std::string value;
        readable[k] = db->db->Get(rocksdb::ReadOptions(), "ak" + std::to_string(k), &value).ok();
      };
      writer.WriteAsync(&commits[k]);
    }
    TestCommit blocking("ak-blocking", false);
    EXPECT_OK(writer.Write(blocking, "commit"));
    EXPECT_EQ(writer.batches(), static_cast<uint64_t>(kBatches + 1));
  }  // the destructor writes what is queued, then stops
  for (int k = 0; k < kBatches; ++k) {
    SCOPED_TRACE(k);
    EXPECT_EQ(calls[k], 1);
    EXPECT_NE(callers[k], std::this_thread::get_id()) << "called back on the writer thread";
    if (k == 7) {
      EXPECT_TRUE(results[k].IsNotSupported()) << results[k].ToString();
      EXPECT_FALSE(readable[k]);
    } else {
      EXPECT_TRUE(results[k].ok()) << results[k].ToString();
      EXPECT_TRUE(readable[k]) << "the callback comes after the write";
    }
  }
}

// BeginNonBlocking (writer=queue only): a key another open transaction holds is
// TryLock's kWouldBlock at once, not a wait of lock_timeout_ms; CommitAsync calls back
// once the claim is durable, after which the key's lock is free; Guard's
// ClaimNonBlocking and CompleteNonBlocking answer as Claim and Complete do.
TEST(RocksdbStoreTest, NonBlockingTransactionsNeverWaitAndCommitThroughTheWriter) {
  testing::TempDir dir;
  {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> group,
                         OpenStore("rocksdb://" + dir.file("g") + "?writer=group"));
    EXPECT_FALSE(Backend(*group).non_blocking());
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<RecordTransaction> none,
                         Backend(*group).BeginNonBlocking());
    EXPECT_EQ(none, nullptr) << "writer=group commits block: no non-blocking transactions";
  }
  const std::string url = "rocksdb://" + dir.file("db") + "?lock_timeout_ms=60000";
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, OpenStore(url));
  ASSERT_TRUE(Backend(*store).non_blocking());
  Guard guard(*store);
  const Request held{.tenant = "t", .biz_type = "refund", .key = "held"};

  ASSERT_OK_AND_ASSIGN(std::unique_ptr<StoreTransaction> holder, store->Begin());
  ASSERT_OK_AND_ASSIGN(std::optional<Record> none,
                       Records(*holder).Load(held.tenant, held.key));  // locks the key
  EXPECT_FALSE(none.has_value());
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<RecordTransaction> tx, Backend(*store).BeginNonBlocking());
  ASSERT_NE(tx, nullptr);
  const absl::Time start = absl::Now();
  absl::StatusOr<RecordTransaction::KeyLock> blocked = tx->TryLock(held.tenant, held.key);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5)) << "waited for the lock";
  ASSERT_OK(blocked);
  EXPECT_EQ(*blocked, RecordTransaction::KeyLock::kWouldBlock);
  // A read without TryLock does not wait either: an error, not a wait.
  EXPECT_THAT(tx->Load(held.tenant, held.key), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_FALSE(IsClaimContended(blocked.status()));
  tx->Rollback();
  bool called = false;
  EXPECT_FALSE(ClaimNonBlocking(guard, held, absl::Seconds(30), [&](absl::StatusOr<Result>) {
    called = true;
  })) << "a held key is left to the blocking call";
  EXPECT_FALSE(called);
  holder->Rollback();

  // Acquired through the writer: `done` runs on its thread once the claim is durable.
  absl::Notification claimed;
  absl::StatusOr<Result> claim = absl::UnknownError("not called");
  std::thread::id claim_thread;
  ASSERT_TRUE(ClaimNonBlocking(guard, held, absl::Seconds(30), [&](absl::StatusOr<Result> r) {
    claim = std::move(r);
    claim_thread = std::this_thread::get_id();
    claimed.Notify();
  }));
  ASSERT_TRUE(claimed.WaitForNotificationWithTimeout(absl::Seconds(30)));
  ASSERT_OK(claim.status());
  EXPECT_EQ(claim->outcome, Outcome::kAcquired);
  EXPECT_EQ(claim->token, 1);
  EXPECT_NE(claim_thread, std::this_thread::get_id());
  ASSERT_OK_AND_ASSIGN(std::optional<Record> stored, store->Get(held.tenant, held.key));
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ(stored->state, RecordState::kProcessing);
  // The lock was released with the write: a blocking claim answers at once.
  ASSERT_OK_AND_ASSIGN(Result busy, guard.Claim(held));
  EXPECT_EQ(busy.outcome, Outcome::kInProgress);

  // A claim that writes nothing is answered on this thread before the return.
  bool answered = false;
  ASSERT_TRUE(ClaimNonBlocking(guard, held, absl::Seconds(30), [&](absl::StatusOr<Result> r) {
    ASSERT_OK(r.status());
    EXPECT_EQ(r->outcome, Outcome::kInProgress);
    answered = true;
  }));
  EXPECT_TRUE(answered);

  // A stale token is lease_lost at once; the holder's complete goes through the writer.
  const absl::Status stale =
      Await([&](auto done) { return CompleteNonBlocking(guard, held, 9, "{}", done); });
  EXPECT_EQ(stale.code(), absl::StatusCode::kAborted) << stale;
  EXPECT_THAT(Message(stale), HasSubstr("lease_lost"));
  EXPECT_OK(
      Await([&](auto done) { return CompleteNonBlocking(guard, held, 1, R"({"ok":1})", done); }));
  ASSERT_OK_AND_ASSIGN(Result replay, guard.Claim(held));
  EXPECT_EQ(replay.outcome, Outcome::kReplayed);
  EXPECT_EQ(replay.value, R"({"ok":1})");
  // The same complete again: OK without a write.
  EXPECT_OK(
      Await([&](auto done) { return CompleteNonBlocking(guard, held, 1, R"({"ok":1})", done); }));

  // A retryable fail releases the key through the writer.
  const Request other{.tenant = "t", .biz_type = "refund", .key = "other"};
  ASSERT_OK_AND_ASSIGN(Result taken, guard.Claim(other));
  EXPECT_OK(Await([&](auto done) {
    return FailNonBlocking(guard, other, taken.token, /*retryable=*/true, R"({"e":1})", done);
  }));
  ASSERT_OK_AND_ASSIGN(Result retaken, guard.Claim(other));
  EXPECT_EQ(retaken.outcome, Outcome::kAcquired);
  EXPECT_EQ(retaken.token, 2);

  // An invalid request is left to the blocking call, which words it.
  EXPECT_FALSE(ClaimNonBlocking(guard, Request{.tenant = "t", .biz_type = "refund", .key = ""},
                                absl::Seconds(1), [](absl::StatusOr<Result>) {}));
}

// A NonBlockingCall, as a server keeps one a request: it waits for its answer.
class AwaitedCall final : public NonBlockingCall {
 public:
  void Done(absl::StatusOr<Result> answer) override {
    absl::MutexLock lock(&mu_);
    answer_ = std::move(answer);
  }
  absl::StatusOr<Result> Wait() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](std::optional<absl::StatusOr<Result>>* a) { return a->has_value(); }, &answer_));
    return **answer_;
  }

 private:
  absl::Mutex mu_;
  std::optional<absl::StatusOr<Result>> answer_;
};

// A call's ended transaction serves the thread's next call of the same store
// (StoreBackend::RenewNonBlocking), with the buffers it has: claims, answers
// without a write and finishes through renewed transactions, of three stores (one
// behind the cache tier) in turn, each store getting its own records only.
TEST(RocksdbStoreTest, RenewedNonBlockingTransactionsWriteOnlyTheirOwnCall) {
  testing::TempDir dir;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> a, OpenStore("rocksdb://" + dir.file("a")));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> b, OpenStore("rocksdb://" + dir.file("b")));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> inner, OpenStore("rocksdb://" + dir.file("c")));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> cached, NewCachingStore(std::move(inner)));
  Store* stores[] = {a.get(), b.get(), cached.get()};
  for (int round = 0; round < 3; ++round) {
    for (int s = 0; s < 3; ++s) {
      Guard guard(*stores[s]);
      const Request request{.tenant = "t",
                            .biz_type = "refund",
                            .key = "key-" + std::to_string(s) + "-" + std::to_string(round) +
                                   "-long-enough-to-allocate"};
      {
        AwaitedCall claim;
        ASSERT_TRUE(ClaimNonBlocking(guard, request, absl::Seconds(30), claim));
        ASSERT_OK_AND_ASSIGN(Result acquired, claim.Wait());
        EXPECT_EQ(acquired.outcome, Outcome::kAcquired);
        EXPECT_EQ(acquired.token, 1);
      }
      {
        AwaitedCall again;  // answered without a write, its transaction rolled back
        ASSERT_TRUE(ClaimNonBlocking(guard, request, absl::Seconds(30), again));
        ASSERT_OK_AND_ASSIGN(Result busy, again.Wait());
        EXPECT_EQ(busy.outcome, Outcome::kInProgress);
      }
      {
        AwaitedCall complete;
        ASSERT_TRUE(CompleteNonBlocking(guard, request, 1, R"({"round":)" +
                                                               std::to_string(round) + "}",
                                        complete));
        ASSERT_OK(complete.Wait().status());
      }
      ASSERT_OK_AND_ASSIGN(Result replay, guard.Claim(request));
      EXPECT_EQ(replay.outcome, Outcome::kReplayed);
      EXPECT_EQ(replay.value, R"({"round":)" + std::to_string(round) + "}");
    }
  }
  for (int s = 0; s < 3; ++s) {
    ASSERT_OK_AND_ASSIGN(std::vector<Record> records,
                         stores[s]->ListRecords(RecordQuery{.tenant = "t", .limit = 100}));
    ASSERT_EQ(records.size(), 3u) << "store " << s;
    for (const Record& r : records) {
      EXPECT_THAT(r.key, ::testing::StartsWith("key-" + std::to_string(s) + "-"));
      EXPECT_EQ(r.state, RecordState::kSucceeded);
      EXPECT_EQ(r.token, 1);
    }
  }
}

// The record key is "r" + store::RecordKey, built in place; IsRecordDbKeyOf
// tells it apart from the keys of pairs that share its bytes.
TEST(RocksdbStoreTest, RecordDbKeysAreRecordKeysAndMatchOnlyTheirOwnPair) {
  const std::vector<std::pair<std::string, std::string>> pairs = {
      {"", "k"}, {"ab", "c"}, {"a", "bc"}, {"", "1:ab"}, {"1", "ab"}, {"t", ""},
      {std::string("a\0", 2), "b"}, {"a", std::string("\0b", 2)}, {std::string(12, 't'), "k"}};
  for (const auto& [tenant, key] : pairs) {
    const std::string db_key = rocksdbstore::RecordDbKey(tenant, key);
    EXPECT_EQ(db_key, "r" + store::RecordKey(tenant, key));
    for (const auto& [other_tenant, other_key] : pairs) {
      EXPECT_EQ(rocksdbstore::IsRecordDbKeyOf(db_key, other_tenant, other_key),
                tenant == other_tenant && key == other_key)
          << db_key << " against (" << other_tenant << ", " << other_key << ")";
    }
  }
  EXPECT_FALSE(rocksdbstore::IsRecordDbKeyOf("", "", ""));
  EXPECT_FALSE(rocksdbstore::IsRecordDbKeyOf("mformat", "", "ormat"));
}

// Nothing is read before it is durable: while a claim's write waits for its sync,
// the record is not in the store, a non-blocking duplicate is left to the
// blocking call (kWouldBlock), and the blocking duplicate waits for that sync and
// then answers from the durable record (kInProgress, never a second kAcquired).
// The answers of a turn's non-blocking claims, as they come, from whichever thread.
class TurnAnswersForTest {
 public:
  // The callback of claim `i`.
  std::function<void(absl::StatusOr<Result>)> For(int i) {
    return [this, i](absl::StatusOr<Result> got) {
      absl::MutexLock lock(&mu_);
      order_.push_back(i);
      on_claimer_ = on_claimer_ || std::this_thread::get_id() == claimer_;
      statuses_.push_back(got.status());
      if (got.ok()) outcomes_.push_back(got->outcome);
    };
  }
  // Waits up to 30 s for `n` answers; their order.
  std::vector<int> Wait(size_t n) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return order_.size() >= n; };
    mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(30));
    return order_;
  }
  size_t count() {
    absl::MutexLock lock(&mu_);
    return order_.size();
  }
  bool on_claimer() {
    absl::MutexLock lock(&mu_);
    return on_claimer_;
  }
  std::vector<absl::Status> statuses() {
    absl::MutexLock lock(&mu_);
    return statuses_;
  }
  std::vector<Outcome> outcomes() {
    absl::MutexLock lock(&mu_);
    return outcomes_;
  }

 private:
  const std::thread::id claimer_ = std::this_thread::get_id();
  absl::Mutex mu_;
  std::vector<int> order_ ABSL_GUARDED_BY(mu_);
  bool on_claimer_ ABSL_GUARDED_BY(mu_) = false;  // an answer came on the claiming thread
  std::vector<absl::Status> statuses_ ABSL_GUARDED_BY(mu_);
  std::vector<Outcome> outcomes_ ABSL_GUARDED_BY(mu_);
};

// On a thread with a current event-loop turn (the lean engine's loops) the
// non-blocking claims of the turn are gathered until its end: before it none is
// written, answered or visible, and a duplicate of a key pending in the turn is
// left to the blocking call. The turn's end hands them to the writer thread
// (turn_write=stage, the default), which writes them with one durable write
// (nothing else was queued) and then answers them there, in order; with
// turn_write=inline the turn's thread writes them and answers them before the
// turn's end returns. A failed write fails every claim of the turn.
TEST(RocksdbStoreTest, ATurnsClaimsAreWrittenWithOneDurableWriteAtItsEnd) {
  for (const std::string turn_write : {"stage", "inline"}) {
    SCOPED_TRACE(turn_write);
    const bool staged = turn_write == "stage";
    testing::TempDir dir;
    const std::string path = dir.file("db");
    auto fs = std::make_shared<FaultyFs>(rocksdb::FileSystem::Default());
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<StoreOverFs> faulty,
                         StoreOverFs::Open(path, fs, "?turn_write=" + turn_write));
    Store& store = *faulty->store;
    ASSERT_TRUE(Backend(store).non_blocking());
    Guard guard(store);
    constexpr int kClaims = 5;
    TurnAnswersForTest answers;
    store::Turn turn;
    {
      const store::Turn::Scope current(turn);
      for (int i = 0; i < kClaims; ++i) {
        const Request r{.tenant = "t", .biz_type = "pay", .key = "k" + std::to_string(i)};
        ASSERT_TRUE(ClaimNonBlocking(guard, r, absl::Seconds(30), answers.For(i)));
      }
      EXPECT_EQ(answers.count(), 0u) << "answered before the turn's end";
      ASSERT_OK_AND_ASSIGN(std::optional<Record> early, store.Get("t", "k0"));
      EXPECT_FALSE(early.has_value()) << "visible before the turn's end";
      bool called = false;
      EXPECT_FALSE(ClaimNonBlocking(guard, {.tenant = "t", .biz_type = "pay", .key = "k0"},
                                    absl::Seconds(30),
                                    [&](absl::StatusOr<Result>) { called = true; }))
          << "a duplicate of a key pending in the turn is left to the blocking call";
      EXPECT_FALSE(called);
      EXPECT_THAT(Backend(store).RenderMetrics(),
                  HasSubstr("idem_store_write_batch_records_count 0\n"));
      EXPECT_TRUE(turn.RunDeferred());
      EXPECT_TRUE(turn.empty());
      if (!staged) {
        EXPECT_EQ(answers.count(), size_t{kClaims}) << "inline: answered at the turn's end";
      }
    }
    EXPECT_EQ(answers.Wait(kClaims), (std::vector<int>{0, 1, 2, 3, 4}));
    EXPECT_EQ(answers.on_claimer(), !staged) << "answered on the writer thread when staged";
    EXPECT_EQ(answers.outcomes(), std::vector<Outcome>(kClaims, Outcome::kAcquired));
    for (int i = 0; i < kClaims; ++i) {
      ASSERT_OK_AND_ASSIGN(std::optional<Record> stored, store.Get("t", "k" + std::to_string(i)));
      EXPECT_TRUE(stored.has_value()) << i;
    }
    const std::string metrics = Backend(store).RenderMetrics();
    EXPECT_THAT(metrics, HasSubstr("idem_store_write_batch_records_bucket{le=\"4\"} 0\n"));
    EXPECT_THAT(metrics, HasSubstr("idem_store_write_batch_records_bucket{le=\"8\"} 1\n"));
    EXPECT_THAT(metrics, HasSubstr("idem_store_write_batch_records_sum 5\n"));
    EXPECT_THAT(metrics, HasSubstr("idem_store_write_batch_records_count 1\n"));

    // The turn's write fails: every claim of the turn hears of it, none is written.
    TurnAnswersForTest failed;
    {
      const store::Turn::Scope current(turn);
      for (int i = 0; i < 3; ++i) {
        const Request r{.tenant = "t", .biz_type = "pay", .key = "f" + std::to_string(i)};
        ASSERT_TRUE(ClaimNonBlocking(guard, r, absl::Seconds(30), failed.For(i)));
      }
      fs->full = true;
      EXPECT_TRUE(turn.RunDeferred());
    }
    EXPECT_EQ(failed.Wait(3), (std::vector<int>{0, 1, 2}));
    fs->full = false;
    for (const absl::Status& s : failed.statuses()) {
      EXPECT_THAT(s, StatusIs(absl::StatusCode::kUnavailable));
    }
    EXPECT_THAT(Backend(store).RenderMetrics(),
                HasSubstr("idem_store_write_batch_records_count 2\n"));
    EXPECT_EQ(faulty->shared->locks.size(), 0u) << "a key stayed locked";
  }
}

// turn_write=stage: a turn's end does not wait for the sync of its claims, so the
// loop reads and decides its next turn meanwhile; the claims stay locked and
// unanswered until their sync, and the next turn's claims, queued meanwhile, go in
// the writer's next durable write. The answers come in the order of the claims.
TEST(RocksdbStoreTest, ATurnsEndDoesNotWaitForItsSync) {
  testing::TempDir dir;
  const std::string path = dir.file("db");
  auto fs = std::make_shared<FaultyFs>(rocksdb::FileSystem::Default());
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<StoreOverFs> slow,
                       StoreOverFs::Open(path, fs, "?turn_write=stage"));
  Store& store = *slow->store;
  Guard guard(store);
  fs->HoldSyncs();
  // Releases the syncs when told, or after 2 s (a turn's end that waited for its
  // sync would otherwise wait forever): `timed_out` says which.
  absl::Notification release;
  std::atomic<bool> timed_out{false};
  std::thread releaser([&] {
    timed_out = !release.WaitForNotificationWithTimeout(absl::Seconds(2));
    fs->ReleaseSyncs();
  });
  TurnAnswersForTest answers;
  store::Turn turn;
  {
    const store::Turn::Scope current(turn);
    const auto claim_turn = [&](int from, int to) {
      for (int i = from; i < to; ++i) {
        const Request r{.tenant = "t", .biz_type = "pay", .key = "k" + std::to_string(i)};
        EXPECT_TRUE(ClaimNonBlocking(guard, r, absl::Seconds(30), answers.For(i)));
      }
      EXPECT_TRUE(turn.RunDeferred());
    };
    claim_turn(0, 5);
    EXPECT_FALSE(timed_out) << "the turn's end waited for its sync";
    EXPECT_EQ(fs->WaitHeld(), 1) << "the first turn's write waits for its sync";
    claim_turn(5, 8);  // the next turn, while the first one's sync runs
    EXPECT_FALSE(timed_out) << "the next turn's end waited for a sync";
    EXPECT_EQ(answers.count(), 0u) << "answered before the sync";
    EXPECT_EQ(slow->shared->locks.size(), 8u) << "a key was released before its sync";
  }
  absl::SleepFor(absl::Milliseconds(60));  // a sync of at least 60 ms
  release.Notify();
  releaser.join();
  EXPECT_EQ(answers.Wait(8), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(answers.outcomes(), std::vector<Outcome>(8, Outcome::kAcquired));
  EXPECT_FALSE(answers.on_claimer());
  EXPECT_EQ(slow->shared->locks.size(), 0u) << "a key stayed locked";
  // Two durable writes: the first turn's 5 records, then the second's 3.
  const std::string metrics = Backend(store).RenderMetrics();
  EXPECT_THAT(metrics, HasSubstr("idem_store_write_batch_records_bucket{le=\"2\"} 0\n"));
  EXPECT_THAT(metrics, HasSubstr("idem_store_write_batch_records_bucket{le=\"4\"} 1\n"));
  EXPECT_THAT(metrics, HasSubstr("idem_store_write_batch_records_bucket{le=\"8\"} 2\n"));
  EXPECT_THAT(metrics, HasSubstr("idem_store_write_batch_records_sum 8\n"));
  // The stages' times: the first write took its held sync (over 50 ms); the second
  // turn's group waited behind it in the writer's queue as long.
  const auto series = [&](const std::string& name) -> double {
    const size_t at = metrics.find("\n" + name + " ");
    if (at == std::string::npos) return -1;
    return std::stod(metrics.substr(at + name.size() + 2));
  };
  EXPECT_EQ(series("idem_store_write_seconds_count"), 2);
  EXPECT_LE(series("idem_store_write_seconds_bucket{le=\"0.05\"}"), 1);
  EXPECT_GE(series("idem_store_write_seconds_sum"), 0.06);
  EXPECT_EQ(series("idem_store_write_queue_seconds_count"), 2);
  EXPECT_LE(series("idem_store_write_queue_seconds_bucket{le=\"0.05\"}"), 1);
  EXPECT_EQ(series("idem_store_write_queue_seconds_bucket{le=\"+Inf\"}"), 2);
}

// turn_write=auto: while the durable writes are quick and no other group is queued
// or being written, a turn's end writes its claims on the turn's thread and answers them
// before it returns (as inline); once a write was slow (a sync held 60 ms), the
// turn's end hands its claims to the writer thread and returns without waiting for
// their sync (as stage); and once writes are quick again, it writes inline again.
TEST(RocksdbStoreTest, ATurnWritesInlineWhileWritesAreQuickAndHandsOverWhenSlow) {
  testing::TempDir dir;
  const std::string path = dir.file("db");
  auto fs = std::make_shared<FaultyFs>(rocksdb::FileSystem::Default());
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<StoreOverFs> opened,
                       StoreOverFs::Open(path, fs, "?turn_write=auto"));
  Store& store = *opened->store;
  Guard guard(store);
  store::Turn turn;
  int next_key = 0;
  // Claims `n` new keys in one turn; whether they were answered by the turn's end.
  const auto claim_turn = [&](TurnAnswersForTest& answers, int n) {
    const store::Turn::Scope current(turn);
    for (int i = 0; i < n; ++i) {
      const Request r{.tenant = "t", .biz_type = "pay", .key = "k" + std::to_string(next_key++)};
      EXPECT_TRUE(ClaimNonBlocking(guard, r, absl::Seconds(30), answers.For(i)));
    }
    EXPECT_TRUE(turn.RunDeferred());
    return answers.count() == static_cast<size_t>(n);
  };

  TurnAnswersForTest quick;
  EXPECT_TRUE(claim_turn(quick, 3)) << "quick writes: the turn's end writes inline";
  EXPECT_TRUE(quick.on_claimer());

  // One slow durable write, by a blocking claim (the writer thread's).
  fs->HoldSyncs();
  std::thread slow([&] {
    EXPECT_OK(guard.Claim({.tenant = "t", .biz_type = "pay", .key = "slow"}).status());
  });
  ASSERT_EQ(fs->WaitHeld(), 1);
  absl::SleepFor(absl::Milliseconds(60));
  fs->ReleaseSyncs();
  slow.join();

  fs->HoldSyncs();
  TurnAnswersForTest handed;
  EXPECT_FALSE(claim_turn(handed, 3)) << "after a slow write: handed over, not waited for";
  EXPECT_EQ(fs->WaitHeld(), 1) << "the writer thread waits for the sync";
  fs->ReleaseSyncs();
  EXPECT_EQ(handed.Wait(3), (std::vector<int>{0, 1, 2}));
  EXPECT_FALSE(handed.on_claimer()) << "answered on the writer thread";

  // Quick writes bring the average down again (1/8 of each): inline once more.
  bool inline_again = false;
  for (int round = 0; round < 200 && !inline_again; ++round) {
    TurnAnswersForTest answers;
    inline_again = claim_turn(answers, 1) && answers.on_claimer();
    answers.Wait(1);
  }
  EXPECT_TRUE(inline_again);
  EXPECT_EQ(opened->shared->locks.size(), 0u) << "a key stayed locked";
}

// turn_write=auto writes one group at a time: a loop whose turn ends while another
// loop's turn writes inline hands its group to the writer thread, which waits for
// that write. Two loops inside DB::Write at once would make a RocksDB write group of
// their batches (one loop's thread reading the other's) and keep the second loop
// waiting for the first one's sync.
TEST(RocksdbStoreTest, AnAutoTurnHandsOverWhileAnotherTurnWritesInline) {
  testing::TempDir dir;
  auto fs = std::make_shared<FaultyFs>(rocksdb::FileSystem::Default());
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<StoreOverFs> opened,
                       StoreOverFs::Open(dir.file("db"), fs, "?turn_write=auto"));
  Guard guard(*opened->store);
  // A loop's turn claiming `key`; `ended` once the turn's end returned; then its answer.
  const auto loop = [&](const std::string& key, absl::Notification* ended, bool* on_loop,
                        std::vector<int>* order) {
    TurnAnswersForTest answers;
    store::Turn turn;
    {
      const store::Turn::Scope current(turn);
      EXPECT_TRUE(ClaimNonBlocking(guard, {.tenant = "t", .biz_type = "pay", .key = key},
                                   absl::Seconds(30), answers.For(0)));
    }
    EXPECT_TRUE(turn.RunDeferred());
    ended->Notify();
    *order = answers.Wait(1);
    *on_loop = answers.on_claimer();
  };
  fs->HoldSyncs();
  absl::Notification first_ended, second_ended;
  bool first_on_loop = false, second_on_loop = true;
  std::vector<int> first_order, second_order;
  std::thread first(loop, "a", &first_ended, &first_on_loop, &first_order);
  ASSERT_EQ(fs->WaitHeld(), 1) << "the first turn writes inline and waits for its sync";
  std::thread second(loop, "b", &second_ended, &second_on_loop, &second_order);
  EXPECT_TRUE(second_ended.WaitForNotificationWithTimeout(absl::Seconds(5)))
      << "the second turn's end waited for the first turn's sync";
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(fs->held(), 1) << "a second write started while the first was in progress";
  EXPECT_FALSE(first_ended.HasBeenNotified());
  fs->ReleaseSyncs();
  first.join();
  second.join();
  EXPECT_EQ(first_order, std::vector<int>{0});
  EXPECT_EQ(second_order, std::vector<int>{0});
  EXPECT_TRUE(first_on_loop) << "written inline";
  EXPECT_FALSE(second_on_loop) << "handed over: answered on the writer thread";
  EXPECT_EQ(opened->shared->locks.size(), 0u) << "a key stayed locked";
}

TEST(RocksdbStoreTest, ADuplicateOfAClaimBeingWrittenWaitsForItsSync) {
  testing::TempDir dir;
  const std::string path = dir.file("db");
  auto fs = std::make_shared<FaultyFs>(rocksdb::FileSystem::Default());
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<StoreOverFs> slow, StoreOverFs::Open(path, fs));
  {
    Store* store = slow->store.get();
    const std::shared_ptr<rocksdbstore::SharedDb>& shared = slow->shared;
    Guard guard(*store);
    const Request r{.tenant = "t", .biz_type = "pay", .key = "k"};
    fs->HoldSyncs();
    absl::Notification claimed;
    absl::StatusOr<Result> first = absl::UnknownError("not called");
    ASSERT_TRUE(ClaimNonBlocking(guard, r, absl::Seconds(30), [&](absl::StatusOr<Result> got) {
      first = std::move(got);
      claimed.Notify();
    }));
    ASSERT_EQ(fs->WaitHeld(), 1) << "the claim's write waits for its sync";
    EXPECT_FALSE(claimed.HasBeenNotified());
    ASSERT_OK_AND_ASSIGN(std::optional<Record> unsynced, store->Get(r.tenant, r.key));
    EXPECT_FALSE(unsynced.has_value()) << "a record was readable before its sync";
    EXPECT_FALSE(ClaimNonBlocking(guard, r, absl::Seconds(30), [](absl::StatusOr<Result>) {}))
        << "a duplicate met the pending claim without waiting";
    absl::StatusOr<Result> duplicate = absl::UnknownError("not answered");
    absl::Notification answered;
    std::thread blocking([&] {
      duplicate = guard.Claim(r);
      answered.Notify();
    });
    EXPECT_FALSE(answered.WaitForNotificationWithTimeout(absl::Milliseconds(200)))
        << "the duplicate answered before the first claim was durable";
    fs->ReleaseSyncs();
    blocking.join();
    ASSERT_TRUE(claimed.WaitForNotificationWithTimeout(absl::Seconds(30)));
    ASSERT_OK(first.status());
    EXPECT_EQ(first->outcome, Outcome::kAcquired);
    ASSERT_OK(duplicate.status());
    EXPECT_EQ(duplicate->outcome, Outcome::kInProgress);
    EXPECT_EQ(shared->locks.size(), 0u) << "a key stayed locked";
  }
}

// The per-key locks: a transaction waits up to lock_timeout_ms for a key another
// holds (then kInProgress's ClaimContendedError), and two transactions that each
// hold a key the other wants (purge locks several) do not deadlock: the second to
// wait is told to retry at once (kAborted) while the first gets its key.
TEST(RocksdbStoreTest, KeyLocksTimeOutAndNeverDeadlock) {
  testing::TempDir dir;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store,
                       OpenStore("rocksdb://" + dir.file("db") + "?lock_timeout_ms=300"));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<RecordTransaction> a, BeginRecords(*store));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<RecordTransaction> b, BeginRecords(*store));
  ASSERT_OK(a->Load("t", "x").status());
  ASSERT_OK(b->Load("t", "y").status());
  const absl::Time start = absl::Now();
  absl::StatusOr<std::optional<Record>> timed_out = b->Load("t", "x");
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(290));
  EXPECT_TRUE(IsClaimContended(timed_out.status())) << timed_out.status();

  absl::StatusOr<std::optional<Record>> a_got_y = absl::UnknownError("not read");
  std::thread waiter([&] { a_got_y = a->Load("t", "y"); });  // waits for b
  absl::SleepFor(absl::Milliseconds(50));
  const absl::Time cycle = absl::Now();
  absl::StatusOr<std::optional<Record>> b_got_x = b->Load("t", "x");
  EXPECT_LT(absl::Now() - cycle, absl::Milliseconds(200)) << "waited inside a cycle";
  EXPECT_THAT(b_got_x, StatusIs(absl::StatusCode::kAborted));
  b->Rollback();
  waiter.join();
  EXPECT_OK(a_got_y.status());
  a->Rollback();
}

// A directory written by an idem whose rocksdb:// store was a TransactionDB opens
// and reads as it is: those commits were plain batches (no prepare markers).
TEST(RocksdbStoreTest, ADirectoryATransactionDbWroteOpens) {
  testing::TempDir dir;
  const std::string path = dir.file("db");
  Record done{.tenant = "t", .biz_type = "pay", .key = "done"};
  done.state = RecordState::kSucceeded;
  done.token = 1;
  done.result = R"({"ok":1})";
  done.created_at = done.updated_at = absl::Now();
  {
    rocksdb::Options options;
    options.create_if_missing = true;
    rocksdb::TransactionDB* raw = nullptr;
    ASSERT_TRUE(
        rocksdb::TransactionDB::Open(options, rocksdb::TransactionDBOptions(), path, &raw).ok());
    std::unique_ptr<rocksdb::TransactionDB> db(raw);
    rocksdb::WriteOptions sync;
    sync.sync = true;
    std::unique_ptr<rocksdb::Transaction> txn(db->BeginTransaction(sync));
    ASSERT_TRUE(txn->Put(std::string(rocksdbstore::kFormatKey),
                         std::to_string(rocksdbstore::kFormatVersion)).ok());
    ASSERT_TRUE(txn->Put(rocksdbstore::RecordDbKey("t", "done"), store::EncodeRecord(done)).ok());
    ASSERT_TRUE(txn->Commit().ok());
    txn.reset();
    // Left in the WAL, not flushed: the reopen replays the transaction's batch.
    ASSERT_TRUE(db->Close().ok());
  }
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, OpenStore("rocksdb://" + path));
  Guard guard(*store);
  ASSERT_OK_AND_ASSIGN(Result replay, guard.Claim({.tenant = "t", .biz_type = "pay", .key = "done"}));
  EXPECT_EQ(replay.outcome, Outcome::kReplayed);
  EXPECT_EQ(replay.value, R"({"ok":1})");
  ASSERT_OK_AND_ASSIGN(Result fresh, guard.Claim({.tenant = "t", .biz_type = "pay", .key = "new"}));
  EXPECT_EQ(fresh.outcome, Outcome::kAcquired);
}

// The cache decorator passes non-blocking transactions through with an L1 only (its
// fills are in memory), and fills the L1 when CommitAsync's write is durable; with
// a Redis tier it offers none, as a fill would be a round trip on the writer thread.
TEST(RocksdbStoreTest, TheL1PassesNonBlockingTransactionsThroughAndFillsAtTheCommit) {
  testing::TempDir dir;
  {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> inner, OpenStore("rocksdb://" + dir.file("r")));
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> redis,
                         NewCachingStore(std::move(inner), {.redis_url = "redis://127.0.0.1:1"}));
    EXPECT_FALSE(Backend(*redis).non_blocking());
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<StoreTransaction> none,
                         Backend(*redis).BeginNonBlocking());
    EXPECT_EQ(none, nullptr);
  }
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> inner, OpenStore("rocksdb://" + dir.file("db")));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, NewCachingStore(std::move(inner)));
  ASSERT_TRUE(Backend(*store).non_blocking());
  Guard guard(*store);
  const Request r{.tenant = "t", .biz_type = "refund", .key = "k"};
  ASSERT_OK_AND_ASSIGN(Result claim, guard.Claim(r));
  absl::Notification completed;
  ASSERT_TRUE(CompleteNonBlocking(guard, r, claim.token, R"({"ok":1})", [&](absl::Status s) {
    EXPECT_OK(s);
    completed.Notify();
  }));
  ASSERT_TRUE(completed.WaitForNotificationWithTimeout(absl::Seconds(30)));
  std::optional<Record> peeked = Backend(*store).PeekDecided(r.tenant, r.key);
  ASSERT_TRUE(peeked.has_value()) << "the L1 learnt the result at the commit";
  EXPECT_EQ(peeked->result, R"({"ok":1})");
}

// The SQL and memory stores block: they offer no non-blocking transactions, and
// the Guard's non-blocking calls leave everything to the blocking ones.
TEST(RocksdbStoreTest, BlockingStoresHaveNoNonBlockingTransactions) {
  testing::TempDir dir;
  for (const std::string& url :
       std::vector<std::string>{"memory://", "sqlite://" + dir.file("s.db")}) {
    SCOPED_TRACE(url);
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, OpenStore(url));
    EXPECT_FALSE(Backend(*store).non_blocking());
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<StoreTransaction> tx, Backend(*store).BeginNonBlocking());
    EXPECT_EQ(tx, nullptr);
    Guard guard(*store);
    EXPECT_FALSE(ClaimNonBlocking(guard, Request{.tenant = "t", .biz_type = "b", .key = "k"},
                                  absl::Seconds(1), [](absl::StatusOr<Result>) {}));
  }
}

// kill -9 on the write path of the non-blocking claims and completes (what `idem
// serve` runs): a child claims and completes keys through the writer thread and
// reports each complete once acknowledged; it is killed at a WAL write, before a
// WAL sync or after one (before the acknowledgement). After a reopen every
// acknowledged complete is there, SUCCEEDED with its result, and every other key
// is absent or still at its first token: nothing acknowledged was lost, nothing
// was claimed twice.
TEST(RocksdbStoreTest, AKillOnTheWritePathLosesNoAcknowledgedComplete) {
  constexpr int kKeysPerChild = 40;
  for (FaultyFs::At at :
       {FaultyFs::At::kWalWrite, FaultyFs::At::kBeforeSync, FaultyFs::At::kAfterSync}) {
    for (int hit : {2, 9, 24}) {
      SCOPED_TRACE(::testing::Message() << "at " << static_cast<int>(at) << ", hit " << hit);
      testing::TempDir dir;
      const std::string path = dir.file("db");
      {
        // Made before the child so that its first WAL write is a claim's.
        ASSERT_OK(OpenStore("rocksdb://" + path).status());
      }
      int acks[2];
      ASSERT_EQ(pipe(acks), 0);
      const pid_t pid = fork();
      if (pid == 0) {
        close(acks[0]);
        auto fs = std::make_shared<FaultyFs>(rocksdb::FileSystem::Default());
        fs->KillAt(at, hit);
        absl::StatusOr<std::unique_ptr<StoreOverFs>> killing = StoreOverFs::Open(path, fs);
        if (!killing.ok()) _exit(10);
        Guard guard(*(*killing)->store);
        for (int i = 0; i < kKeysPerChild; ++i) {
          const Request r{.tenant = "t", .biz_type = "pay", .key = "k" + std::to_string(i)};
          absl::Notification claimed;
          absl::StatusOr<Result> claim = absl::UnknownError("not called");
          if (!ClaimNonBlocking(guard, r, absl::Seconds(30), [&](absl::StatusOr<Result> c) {
                claim = std::move(c);
                claimed.Notify();
              })) {
            _exit(12);
          }
          claimed.WaitForNotification();
          if (!claim.ok() || claim->outcome != Outcome::kAcquired) _exit(13);
          absl::Notification completed;
          absl::Status done = absl::UnknownError("not called");
          if (!CompleteNonBlocking(guard, r, claim->token, "{\"k\":" + std::to_string(i) + "}",
                                   [&](absl::Status s) {
                                     done = std::move(s);
                                     completed.Notify();
                                   })) {
            _exit(14);
          }
          completed.WaitForNotification();
          if (!done.ok()) _exit(15);
          if (write(acks[1], &i, sizeof(i)) != sizeof(i)) _exit(16);
        }
        _exit(0);  // not killed: fewer writes than `hit`
      }
      close(acks[1]);
      std::vector<int> acknowledged;
      int i = 0;
      while (read(acks[0], &i, sizeof(i)) == sizeof(i)) acknowledged.push_back(i);
      close(acks[0]);
      int status = 0;
      ASSERT_EQ(waitpid(pid, &status, 0), pid);
      ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
          << "the child was not killed; exit status " << WEXITSTATUS(status);
      EXPECT_LT(acknowledged.size(), static_cast<size_t>(kKeysPerChild));

      ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, OpenStore("rocksdb://" + path));
      for (int k = 0; k < kKeysPerChild; ++k) {
        ASSERT_OK_AND_ASSIGN(std::optional<Record> r, store->Get("t", "k" + std::to_string(k)));
        const bool acked = k < static_cast<int>(acknowledged.size());
        if (acked) {
          ASSERT_EQ(acknowledged[k], k);
          ASSERT_TRUE(r.has_value()) << "acknowledged complete lost: k" << k;
          EXPECT_EQ(r->state, RecordState::kSucceeded);
          EXPECT_EQ(r->result, "{\"k\":" + std::to_string(k) + "}");
        }
        if (r.has_value()) {
          EXPECT_EQ(r->token, 1) << "k" << k;
        }
        if (k > static_cast<int>(acknowledged.size())) {
          EXPECT_FALSE(r.has_value()) << "a key after the kill was written: k" << k;
        }
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
  EXPECT_TRUE(Backend(*reader).read_only());
  ASSERT_OK_AND_ASSIGN(std::optional<Record> seen, reader->Get("default", "K"));
  ASSERT_TRUE(seen.has_value());
  EXPECT_EQ(seen->state, RecordState::kProcessing);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<StoreTransaction> tx, reader->Begin());
  EXPECT_THAT(Records(*tx).InsertOrLoad(Record{.tenant = "default", .key = "L"}),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

// Retention at compaction, for records without an expires_at of their own
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
