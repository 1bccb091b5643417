// The RocksDB database under a rocksdb:// store: how a directory is opened (once
// per process, shared by every Store opened on it), how RocksDB's statuses map to
// idem's codes, the key layout, and the compaction filter that drops records past
// their retention. Private to src/store/rocksdb.
//
// Key layout (one column family):
//   "m" "format"                       the format version of the records, decimal
//   "r" store::RecordKey(tenant, key)  a record, store::EncodeRecord (versioned)
// Only keys that start with "r" are records; the compaction filter looks at no other.
//
// Thread safety: a SharedDb is safe for concurrent use (RocksDB's handles are);
// OpenSharedDb may be called from any thread.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "idem/clock.h"
#include "rocksdb/compaction_filter.h"
#include "rocksdb/db.h"
#include "rocksdb/env.h"
#include "rocksdb/listener.h"
#include "store/file_identity.h"
#include "store/rocksdb/key_locks.h"

namespace idem::rocksdbstore {

// The record format this build writes (the "m" "format" key). 2: records carry
// expires_at and purged_at (store::kRecordFormatVersion 2); a directory of format 1
// is still read, and marked 2 by the first read-write open.
inline constexpr int kFormatVersion = 2;

// sched_setattr(2) on thread `thread` (a tid; 0: the calling thread), keeping its
// scheduling policy: nice value `nice` and a time slice of `slice_ns` asked for
// (Linux 6.12 and later grant it, earlier kernels ignore it). False where the
// kernel refuses the call. Flushes and compactions run with it (rocksdb_db.cc).
bool SetNiceAndSlice(pid_t thread, int nice, uint64_t slice_ns);

// The RocksDB key of the record of (tenant, key).
std::string RecordDbKey(std::string_view tenant, std::string_view key);
// The same, into `out` (replacing what it held; its buffer is reused).
void SetRecordDbKey(std::string& out, std::string_view tenant, std::string_view key);
// True when `db_key` is RecordDbKey(tenant, key), without making that.
bool IsRecordDbKeyOf(std::string_view db_key, std::string_view tenant, std::string_view key);

// The meta key holding the format version.
inline constexpr std::string_view kFormatKey = "mformat";

// True for the RocksDB key of a record.
inline bool IsRecordKey(std::string_view db_key) { return !db_key.empty() && db_key[0] == 'r'; }

// `s` as idem's code, by what the caller should do (STYLE.md): a lock wait past the
// lock timeout is a ClaimContendedError (another claim of the key is in progress); a
// deadlock is kAborted (retry the whole transaction); corruption is
// kFailedPrecondition (nothing a retry fixes: restore the directory); everything
// else (I/O errors, a full disk, a database in its background-error state) is a
// store fault (kUnavailable). `what` names the operation and the store.
absl::Status FromRocks(const rocksdb::Status& s, std::string_view what);

// Retention at compaction, by the same rule as idem purge: a finished
// record (SUCCEEDED, FAILED, released) whose expires_at has passed is replaced by its
// tombstone (result and error dropped, purged_at set, kept as long again as the
// record was), or dropped when `tombstones` is false; a tombstone whose own
// expires_at has passed is dropped. A record without an expires_at (kept for ever:
// format 1, or a biz_type without retention) goes `fallback_ttl` after its last
// update when that is set. A PROCESSING record is never touched, whatever its lease:
// a claim whose holder vanished stays for `idem stuck` and for a takeover that tells
// the next holder (takeover: true). Records it cannot read are kept. "Now" is
// `clock`'s, read on RocksDB's compaction threads.
class RetentionFilter final : public rocksdb::CompactionFilter {
 public:
  RetentionFilter(std::optional<absl::Duration> fallback_ttl, bool tombstones, const Clock* clock)
      : fallback_ttl_(fallback_ttl), tombstones_(tombstones), clock_(clock) {}
  bool Filter(int level, const rocksdb::Slice& key, const rocksdb::Slice& existing_value,
              std::string* new_value, bool* value_changed) const override;
  const char* Name() const override { return "idem.RetentionFilter"; }

 private:
  const std::optional<absl::Duration> fallback_ttl_;
  const bool tombstones_;
  const Clock* const clock_;
};

// After a failed write to the WAL (a full disk, EIO, a failed sync) RocksDB stops
// taking writes; once a full disk has room again it resumes by itself, and 7.8
// (Debian 12's) then appends to the WAL file whose write failed, past the torn
// record: its debug assertions abort the process there (seen under idem serve), and
// without them a later restart stops replaying at the torn record and loses what
// was acknowledged after it (RocksDB's own fix came later: "Don't write to WAL after
// previous WAL write error"). So this listener declines the automatic recovery from
// an error of a write: the store answers 503 and /readyz is 503 until idem is
// restarted, which opens a new WAL. Errors of flushes and compactions (no WAL
// written) still recover by themselves.
class NoResumeAfterAFailedWalWrite final : public rocksdb::EventListener {
 public:
  void OnErrorRecoveryBegin(rocksdb::BackgroundErrorReason reason, rocksdb::Status error,
                            bool* auto_recovery) override;
  // How many automatic recoveries were declined.
  int declined() const { return declined_.load(); }

 private:
  std::atomic<int> declined_{0};
};

// One opened directory. Read-write opens of the same directory in one process
// share it (RocksDB's LOCK file admits one opener per directory); its last holder
// closes it.
struct SharedDb {
  std::string dir;                        // as canonical as the path allows
  std::optional<absl::Duration> ttl;      // the filter's fallback retention (ttl=)
  bool tombstones = true;                 // the filter leaves tombstones (tombstones=)
  std::unique_ptr<RetentionFilter> filter;  // outlives `db` (declared first)
  // With a write stage hook (store/write_stage.h): the Env whose WAL files report
  // their syncs; outlives `db`.
  std::unique_ptr<rocksdb::Env> stage_env;
  // The Env that runs flushes and compactions below the loops' CPU priority, over
  // stage_env or the given or default one; outlives `db`.
  std::unique_ptr<rocksdb::Env> background_env;
  std::unique_ptr<rocksdb::DB> db;                  // read-write opens
  std::unique_ptr<rocksdb::DB> read_only_db;        // read-only opens (no LOCK)
  // The directory opened read-write, checked before every commit and ping: RocksDB
  // would go on writing into a deleted directory's unlinked files.
  store::FileIdentity identity;
  // Read-write opens: RocksDB's listener (above), shared with its options.
  std::shared_ptr<NoResumeAfterAFailedWalWrite> no_resume;
  // The keys the transactions of every Store on this directory hold.
  KeyLocks locks;

  rocksdb::DB* base() const { return db != nullptr ? db.get() : read_only_db.get(); }
};

struct OpenOptions {
  std::string path;
  bool read_only = false;
  bool create = true;  // false: a directory without a database is refused, not made
  std::optional<absl::Duration> ttl;
  bool tombstones = true;
  const Clock* clock = Clock::Real();
  // The Env RocksDB does its I/O through (not owned; it must outlive the SharedDb);
  // null: the default. Tests inject file system faults with it.
  rocksdb::Env* env = nullptr;
};

// Opens `options.path` (creating it when missing, unless read-only) or returns the
// SharedDb this process already has open there. Checks the record format version.
// Errors: kUnavailable when the directory cannot be opened or another process has it
// open ("another process has this database open"); kFailedPrecondition for a
// directory that is not an idem rocksdb store, a newer format, corruption, or, for a
// read-only open, a directory without a database; kInvalidArgument for an open in a
// process that has the directory open with another ttl or tombstones. A read-only open returns
// nullptr inside the StatusOr when there is no database and `require_database` is
// false. Blocks (I/O, WAL replay).
absl::StatusOr<std::shared_ptr<SharedDb>> OpenSharedDb(const OpenOptions& options,
                                                       bool require_database);

}  // namespace idem::rocksdbstore
