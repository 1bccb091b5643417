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

#include "store/file_identity.h"
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
#include "rocksdb/utilities/transaction_db.h"

namespace idem::rocksdbstore {

// The record format this build writes and reads (the "m" "format" key).
inline constexpr int kFormatVersion = 1;

// The RocksDB key of the record of (tenant, key).
std::string RecordDbKey(std::string_view tenant, std::string_view key);

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

// Drops finished records whose last update is more than `ttl` ago (SPEC §8), at
// compaction: SUCCEEDED, FAILED and released keys. A PROCESSING record is never
// dropped, whatever its lease: a claim whose holder vanished stays for `idem stuck`
// and for a takeover that tells the next holder (takeover: true). Records it cannot
// read are kept. "Now" is `clock`'s, read on RocksDB's compaction threads.
class RetentionFilter final : public rocksdb::CompactionFilter {
 public:
  RetentionFilter(absl::Duration ttl, const Clock* clock) : ttl_(ttl), clock_(clock) {}
  bool Filter(int level, const rocksdb::Slice& key, const rocksdb::Slice& existing_value,
              std::string* new_value, bool* value_changed) const override;
  const char* Name() const override { return "idem.RetentionFilter"; }

 private:
  const absl::Duration ttl_;
  const Clock* const clock_;
};

// One opened directory. Read-write opens of the same directory in one process
// share it (RocksDB's LOCK file admits one opener per directory); its last holder
// closes it.
struct SharedDb {
  std::string dir;                        // as canonical as the path allows
  std::optional<absl::Duration> ttl;      // the retention the filter enforces
  std::unique_ptr<RetentionFilter> filter;  // outlives `db` (declared first)
  std::unique_ptr<rocksdb::TransactionDB> db;       // read-write opens
  std::unique_ptr<rocksdb::DB> read_only_db;        // read-only opens (no LOCK)
  // The directory opened read-write, checked before every commit and ping: RocksDB
  // would go on writing into a deleted directory's unlinked files.
  store::FileIdentity identity;

  rocksdb::DB* base() const { return db != nullptr ? db.get() : read_only_db.get(); }
};

struct OpenOptions {
  std::string path;
  bool read_only = false;
  std::optional<absl::Duration> ttl;
  const Clock* clock = Clock::Real();
};

// Opens `options.path` (creating it when missing, unless read-only) or returns the
// SharedDb this process already has open there. Checks the record format version.
// Errors: kUnavailable when the directory cannot be opened or another process has it
// open ("another process has this database open"); kFailedPrecondition for a
// directory that is not an idem rocksdb store, a newer format, corruption, or, for a
// read-only open, a directory without a database; kInvalidArgument for an open in a
// process that has the directory open with another ttl. A read-only open returns
// nullptr inside the StatusOr when there is no database and `require_database` is
// false. Blocks (I/O, WAL replay).
absl::StatusOr<std::shared_ptr<SharedDb>> OpenSharedDb(const OpenOptions& options,
                                                       bool require_database);

}  // namespace idem::rocksdbstore
