#include "store/rocksdb/rocksdb_db.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <system_error>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "idem/status.h"
#include "idem/store.h"
#include "idem/ttl.h"
#include "rocksdb/env.h"
#include "rocksdb/file_system.h"
#include "rocksdb/filter_policy.h"
#include "rocksdb/options.h"
#include "rocksdb/table.h"
#include "store/absl_compat.h"
#include "store/backend.h"
#include "store/record_codec.h"
#include "store/write_stage.h"

namespace idem::rocksdbstore {
namespace {

namespace fs = std::filesystem;

// The directories this process has open read-write. An entry whose SharedDb is
// being closed stays (expired) until the close is done, so that an open of the
// same directory waits for it instead of meeting RocksDB's LOCK held by this very
// process. Leaked on purpose: a store closed during static destruction still finds it.
struct Registry {
  absl::Mutex mu;
  absl::CondVar closed;
  std::map<std::string, std::weak_ptr<SharedDb>> open ABSL_GUARDED_BY(mu);
};

Registry& TheRegistry() {
  static Registry* registry = new Registry();
  return *registry;
}

std::string Canonical(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(path, ec), ec);
  return ec ? path : p.lexically_normal().string();
}

bool IsLockHeld(const rocksdb::Status& s) {
  // RocksDB's message for a LOCK file another process holds: "While lock file:
  // DIR/LOCK: Resource temporarily unavailable".
  return s.IsIOError() && absl::StrContains(s.ToString(), "lock file");
}

// A WAL file that reports its syncs as write stages (rocksdb.wal.before_sync, after
// the batch reached the file; rocksdb.wal.after_sync).
class StageReportingWal final : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  using FSWritableFileOwnerWrapper::FSWritableFileOwnerWrapper;
  rocksdb::IOStatus Sync(const rocksdb::IOOptions& options, rocksdb::IODebugContext* dbg) override {
    return Reported([&] { return target()->Sync(options, dbg); });
  }
  rocksdb::IOStatus Fsync(const rocksdb::IOOptions& options,
                          rocksdb::IODebugContext* dbg) override {
    return Reported([&] { return target()->Fsync(options, dbg); });
  }

 private:
  template <typename SyncCall>
  static rocksdb::IOStatus Reported(SyncCall sync) {
    store::AtWriteStage("rocksdb.wal.before_sync");
    rocksdb::IOStatus s = sync();
    store::AtWriteStage("rocksdb.wal.after_sync");
    return s;
  }
};

// Flushes and compactions share the cores with the server's network loops, so they
// run below the loops' CPU priority: each job's thread is lowered before its first
// job (Linux keeps a nice value per thread), from the nice value it started with.
// Compactions by 19, to the lowest: one that falls behind slows the writes down
// (RocksDB's level-0 slowdown), and one running beside a busy loop at +10 took slices
// of its core (64-connection p99s of 13 ms against 3 in bench/claims.sh). Flushes by
// 10, about a tenth of a busy core: at +19 a loop that kept its core busy left a
// flush ~1.5 % of it, no more than a new key's flushes need at full rate (0.2 µs of
// a ~12 µs claim), so the memtables filled and RocksDB stopped every write until the
// flush ran (p99s of 220 ms).
// Both also ask for the shortest time slice the scheduler grants (0.1 ms; Linux
// 6.12 and later honour it, earlier kernels ignore it): a nice value sets a thread's
// share of the core, not how long it keeps it, and a flush or compaction kept CPU 0
// for 2.3–4.7 ms while a woken loop waited (`perf sched timehist`), so the writer
// thread, woken for a turn's claims, waited 5–25 ms in the benchmark's half-peak run.
// RocksDB schedules both through its DB's Env, which this wraps.
class BackgroundPriorityEnv final : public rocksdb::EnvWrapper {
 public:
  static constexpr int kFlushNiceIncrement = 10;       // added to the thread's own,
  static constexpr int kCompactionNiceIncrement = 19;  // up to 19
  static constexpr uint64_t kSliceNanoseconds = 100'000;

  explicit BackgroundPriorityEnv(rocksdb::Env* target) : EnvWrapper(target) {}
  const char* Name() const override { return "IdemBackgroundPriorityEnv"; }
  void Schedule(void (*function)(void*), void* arg, Priority pri, void* tag,
                void (*unschedule)(void*)) override {
    const int increment = pri == Priority::HIGH ? kFlushNiceIncrement : kCompactionNiceIncrement;
    target()->Schedule(&Run, new Job{function, arg, unschedule, increment}, pri, tag,
                       &Unscheduled);
  }

 private:
  struct Job {
    void (*function)(void*);
    void* arg;
    void (*unschedule)(void*);
    int increment;
  };
  static void Run(void* p) {
    const std::unique_ptr<Job> job(static_cast<Job*>(p));
    // A pool runs one kind of job: set once per thread.
    thread_local bool lowered = false;
    if (!lowered) {
      const pid_t thread = gettid();
      errno = 0;
      const int start = getpriority(PRIO_PROCESS, thread);
      if (errno == 0) {
        const int nice = std::min(19, start + job->increment);
        if (!SetNiceAndSlice(thread, nice, kSliceNanoseconds)) {
          setpriority(PRIO_PROCESS, thread, nice);
        }
      }
      lowered = true;
    }
    job->function(job->arg);
  }
  // A job removed before it ran (the DB closing): its own clean-up, if any.
  static void Unscheduled(void* p) {
    const std::unique_ptr<Job> job(static_cast<Job*>(p));
    if (job->unschedule != nullptr) job->unschedule(job->arg);
  }
};

class StageReportingFileSystem final : public rocksdb::FileSystemWrapper {
 public:
  explicit StageReportingFileSystem(const std::shared_ptr<rocksdb::FileSystem>& target)
      : FileSystemWrapper(target) {}
  const char* Name() const override { return "IdemStageReportingFileSystem"; }
  rocksdb::IOStatus NewWritableFile(const std::string& name, const rocksdb::FileOptions& options,
                                    std::unique_ptr<rocksdb::FSWritableFile>* result,
                                    rocksdb::IODebugContext* dbg) override {
    rocksdb::IOStatus s = target()->NewWritableFile(name, options, result, dbg);
    if (s.ok() && absl::EndsWith(name, ".log")) {
      *result = std::make_unique<StageReportingWal>(std::move(*result));
    }
    return s;
  }
};

// Reads or (on a fresh database) writes the format version; refuses a newer one
// and a database that holds keys of something other than idem.
absl::Status CheckFormat(rocksdb::DB& db, bool read_only, const std::string& dir) {
  std::string value;
  rocksdb::Status s = db.Get(rocksdb::ReadOptions(), std::string(kFormatKey), &value);
  const std::string where = absl::StrCat("rocksdb directory '", dir, "'");
  if (s.IsNotFound()) {
    std::unique_ptr<rocksdb::Iterator> it(db.NewIterator(rocksdb::ReadOptions()));
    it->SeekToFirst();
    IDEM_RETURN_IF_ERROR(FromRocks(it->status(), absl::StrCat("reading ", where)));
    if (it->Valid()) {
      return absl::FailedPreconditionError(
          absl::StrCat(where, " holds a RocksDB database that is not an idem store"));
    }
    if (read_only) return absl::OkStatus();  // empty: nothing to read, nothing written
    rocksdb::WriteOptions sync;
    sync.sync = true;
    return FromRocks(db.Put(sync, std::string(kFormatKey), std::to_string(kFormatVersion)),
                     absl::StrCat("initializing ", where));
  }
  IDEM_RETURN_IF_ERROR(FromRocks(s, absl::StrCat("reading ", where)));
  int version = 0;
  auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), version);
  if (ec != std::errc() || ptr != value.data() + value.size() || version < 1) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, " has an unreadable idem format version: the data is damaged"));
  }
  if (version > kFormatVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, " holds idem record format ", version, ", newer than this build's ",
                     kFormatVersion, "; upgrade idem"));
  }
  if (version < kFormatVersion && !read_only) {
    // Older records stay readable as they are (store::DecodeRecord reads format 1);
    // the mark keeps an older idem, which could not read the new ones, out.
    rocksdb::WriteOptions sync;
    sync.sync = true;
    return FromRocks(db.Put(sync, std::string(kFormatKey), std::to_string(kFormatVersion)),
                     absl::StrCat("upgrading ", where));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SharedDb>> OpenNew(const OpenOptions& o, const std::string& dir,
                                                  bool require_database) {
  auto shared = std::make_unique<SharedDb>();
  shared->dir = dir;
  shared->ttl = o.ttl;
  shared->tombstones = o.tombstones;
  const std::string where = absl::StrCat("rocksdb directory '", dir, "'");
  std::error_code ec;
  const bool exists = fs::exists(dir, ec);
  const bool has_db = fs::exists(fs::path(dir) / "CURRENT", ec);
  if (exists && !fs::is_directory(dir, ec)) {
    return absl::FailedPreconditionError(absl::StrCat(where, " is a file, not a directory"));
  }
  // A directory of other files is not taken over: RocksDB would create a database
  // among them.
  if (exists && !has_db && !fs::is_empty(dir, ec)) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, " exists and is not a RocksDB database (it has other files)"));
  }
  if (!o.read_only && !o.create && !has_db) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no idem schema here: ", where, " holds no database; `idem migrate` creates it"));
  }
  if (o.read_only && !has_db) {
    if (!require_database) return std::unique_ptr<SharedDb>();
    return absl::FailedPreconditionError(
        absl::StrCat("no idem store here: ", where, " holds no database"));
  }

  rocksdb::Options options;
  if (o.env != nullptr) {
    options.env = o.env;
  } else if (store::WriteStageHookSet() && !o.read_only) {
    shared->stage_env = rocksdb::NewCompositeEnv(
        std::make_shared<StageReportingFileSystem>(rocksdb::FileSystem::Default()));
    options.env = shared->stage_env.get();
  }
  shared->background_env = std::make_unique<BackgroundPriorityEnv>(
      options.env != nullptr ? options.env : rocksdb::Env::Default());
  options.env = shared->background_env.get();
  options.create_if_missing = true;
  options.info_log_level = rocksdb::InfoLogLevel::WARN_LEVEL;
  options.keep_log_file_num = 4;
  // Most claims are of new keys, so most lookups miss: whole-key Bloom filters in
  // the memtable and in every table file answer a miss without searching them.
  rocksdb::BlockBasedTableOptions table;
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  options.memtable_whole_key_filtering = true;
  options.memtable_prefix_bloom_size_ratio = 0.02;
  // Memory bounded in bytes: RocksDB's defaults let memtables grow to 2 x 64 MiB
  // (a server that stored 600 results of 1 MB sat at 240 MB resident). One budget
  // for all memtables, 16 MiB each, flushed when the budget is reached; a claim's
  // record is ~200 bytes, so a memtable still holds ~80,000 of them.
  options.write_buffer_size = 16 << 20;
  options.db_write_buffer_size = 32 << 20;
  // Always: records carry their own expires_at.
  shared->filter = std::make_unique<RetentionFilter>(o.ttl, o.tombstones, o.clock);
  options.compaction_filter = shared->filter.get();
  // Files nothing else rewrites are compacted (and filtered) at least daily, so
  // retention also happens on a store that takes few writes.
  options.periodic_compaction_seconds = 24 * 3600;
  // A crash may tear the WAL's tail past its last sync (nothing there was answered):
  // recovery keeps every record before the first torn or corrupt one and opens.
  options.wal_recovery_mode = rocksdb::WALRecoveryMode::kPointInTimeRecovery;
  // Flushes and compactions have their files written out every 1 MiB (RocksDB asks
  // the kernel for it as it goes) instead of in one burst when a file ends, which
  // the WAL's fsyncs would wait behind: a compaction writes hundreds of MB.
  options.bytes_per_sync = 1 << 20;
  if (o.read_only) {
    rocksdb::DB* db = nullptr;
    IDEM_RETURN_IF_ERROR(FromRocks(rocksdb::DB::OpenForReadOnly(options, dir, &db),
                                   absl::StrCat("opening ", where, " read-only")));
    shared->read_only_db.reset(db);
  } else {
    std::error_code mk;
    fs::create_directories(dir, mk);  // RocksDB makes only the last component
    shared->no_resume = std::make_shared<NoResumeAfterAFailedWalWrite>();
    options.listeners.push_back(shared->no_resume);
    // A plain DB: this process is the directory's only writer (LOCK), so the keys
    // its transactions hold are locked in memory (key_locks.h). A directory an older
    // idem wrote through a TransactionDB opens as it is: its commits were plain
    // batches in the WAL and the table files.
    rocksdb::DB* db = nullptr;
    const rocksdb::Status s = rocksdb::DB::Open(options, dir, &db);
    if (IsLockHeld(s)) {
      return StoreFaultError(absl::StrCat(
          "another process has this database open: ", where,
          " is locked (one process per rocksdb:// directory; stop it or use another directory)"));
    }
    IDEM_RETURN_IF_ERROR(FromRocks(s, absl::StrCat("opening ", where)));
    shared->db.reset(db);
    IDEM_ASSIGN_OR_RETURN(shared->identity, store::FileIdentity::Of(dir, "rocksdb directory"));
  }
  IDEM_RETURN_IF_ERROR(CheckFormat(*shared->base(), o.read_only, dir));
  return shared;
}

}  // namespace

bool SetNiceAndSlice(pid_t thread, int nice, uint64_t slice_ns) {
  struct {  // struct sched_attr, which glibc 2.36 does not declare
    uint32_t size;
    uint32_t sched_policy;
    uint64_t sched_flags;
    int32_t sched_nice;
    uint32_t sched_priority;
    uint64_t sched_runtime;
    uint64_t sched_deadline;
    uint64_t sched_period;
  } attr{};
  constexpr uint64_t kSchedFlagKeepPolicy = 0x08;  // SCHED_FLAG_KEEP_POLICY
  attr.size = sizeof attr;
  attr.sched_flags = kSchedFlagKeepPolicy;
  attr.sched_nice = nice;
  attr.sched_runtime = slice_ns;
  return syscall(SYS_sched_setattr, thread, &attr, 0) == 0;
}

std::string RecordDbKey(std::string_view tenant, std::string_view key) {
  std::string out;
  SetRecordDbKey(out, tenant, key);
  return out;
}

namespace {

// The decimal length of the tenant in a record's key.
std::string_view TenantSize(std::string_view tenant, char (&digits)[24]) {
  auto [end, ec] = std::to_chars(digits, digits + sizeof(digits), tenant.size());
  (void)ec;  // 24 digits hold any size_t
  return std::string_view(digits, end - digits);
}

}  // namespace

void SetRecordDbKey(std::string& out, std::string_view tenant, std::string_view key) {
  out.assign(1, 'r');  // "r" + store::RecordKey(tenant, key)
  store::AppendRecordKey(out, tenant, key);
}

bool IsRecordDbKeyOf(std::string_view db_key, std::string_view tenant, std::string_view key) {
  char digits[24];
  const std::string_view size = TenantSize(tenant, digits);
  const size_t head = 2 + size.size();
  return db_key.size() == head + tenant.size() + key.size() && db_key[0] == 'r' &&
         db_key.substr(1, size.size()) == size && db_key[head - 1] == ':' &&
         db_key.substr(head, tenant.size()) == tenant && db_key.substr(head + tenant.size()) == key;
}

absl::Status FromRocks(const rocksdb::Status& s, std::string_view what) {
  if (s.ok()) return absl::OkStatus();
  const std::string detail = absl::StrCat(AV(what), ": ", s.ToString());
  if (s.IsTimedOut() || s.IsLockLimit()) {
    return ClaimContendedError(
        absl::StrCat(detail, " (the key is held by another open transaction)"));
  }
  if (s.IsDeadlock() || s.IsBusy() || s.IsTryAgain()) {
    return absl::AbortedError(absl::StrCat(detail, "; retry the transaction"));
  }
  if (s.IsCorruption()) {
    return absl::FailedPreconditionError(
        absl::StrCat(detail, " (the database is damaged: restore it from a backup)"));
  }
  if (s.IsInvalidArgument() || s.IsNotSupported()) {
    return absl::FailedPreconditionError(detail);
  }
  return StoreFaultError(detail);
}

void NoResumeAfterAFailedWalWrite::OnErrorRecoveryBegin(rocksdb::BackgroundErrorReason reason,
                                                        rocksdb::Status error,
                                                        bool* auto_recovery) {
  error.PermitUncheckedError();
  // kWriteCallback: the error of a write (its WAL append or sync), not of a flush.
  if (reason == rocksdb::BackgroundErrorReason::kWriteCallback && auto_recovery != nullptr &&
      *auto_recovery) {
    *auto_recovery = false;
    declined_.fetch_add(1);
  }
}

bool RetentionFilter::Filter(int, const rocksdb::Slice& key, const rocksdb::Slice& value,
                             std::string* new_value, bool* value_changed) const {
  if (!IsRecordKey(std::string_view(key.data(), key.size()))) return false;
  const std::string_view bytes(value.data(), value.size());
  absl::StatusOr<store::RecordHead> head = store::DecodeRecordHead(bytes);
  if (!head.ok()) return false;
  const absl::Time now = clock_->Now();
  if (head->purged()) return head->expires_at <= now;  // a tombstone past its time
  if (head->state == RecordState::kProcessing) return false;
  absl::Time expires = head->expires_at;
  absl::Duration kept = expires - head->created_at;  // how long the record was kept
  if (expires == absl::InfiniteFuture()) {
    if (!fallback_ttl_.has_value()) return false;
    expires = head->updated_at + *fallback_ttl_;
    kept = *fallback_ttl_;
  }
  if (expires > now) return false;
  if (!tombstones_) return true;
  absl::StatusOr<Record> r = store::DecodeRecord(bytes);
  if (!r.ok()) return false;
  r->result.clear();
  r->error.clear();
  r->purged_at = now;
  r->updated_at = now;
  r->expires_at = now + (kept > absl::ZeroDuration() ? kept : absl::Hours(24));
  *new_value = store::EncodeRecord(*r);
  *value_changed = true;
  return false;
}

absl::StatusOr<std::shared_ptr<SharedDb>> OpenSharedDb(const OpenOptions& options,
                                                       bool require_database) {
  const std::string dir = Canonical(options.path);
  if (options.read_only) {
    IDEM_ASSIGN_OR_RETURN(std::unique_ptr<SharedDb> db, OpenNew(options, dir, require_database));
    return std::shared_ptr<SharedDb>(std::move(db));
  }
  Registry& r = TheRegistry();
  // Declared before the lock: if it turns out to hold the last reference, the close
  // (which takes the lock) runs after the lock is released.
  std::shared_ptr<SharedDb> found;
  absl::MutexLock lock(&r.mu);
  for (;;) {
    auto it = r.open.find(dir);
    if (it == r.open.end()) break;
    if (std::shared_ptr<SharedDb> db = found = it->second.lock()) {
      if (db->ttl != options.ttl || db->tombstones != options.tombstones) {
        return absl::InvalidArgumentError(absl::StrCat(
            "rocksdb directory '", dir, "' is already open in this process with ",
            db->ttl.has_value() ? "ttl=" + FormatTtlDuration(*db->ttl) : std::string("no ttl"),
            db->tombstones ? "" : " and tombstones=off",
            "; open it with the same ttl and tombstones"));
      }
      return db;
    }
    r.closed.Wait(&r.mu);  // its last holder is closing it
  }
  IDEM_ASSIGN_OR_RETURN(std::unique_ptr<SharedDb> opened, OpenNew(options, dir, true));
  std::shared_ptr<SharedDb> db(opened.release(), [](SharedDb* p) {
    const std::string dir = p->dir;
    // A failed close loses nothing: every acknowledged commit was synced.
    if (p->db != nullptr) p->db->Close().PermitUncheckedError();
    delete p;
    Registry& r = TheRegistry();
    absl::MutexLock lock(&r.mu);
    if (auto it = r.open.find(dir); it != r.open.end() && it->second.expired()) r.open.erase(it);
    r.closed.SignalAll();
  });
  r.open[dir] = db;
  return db;
}

}  // namespace idem::rocksdbstore
