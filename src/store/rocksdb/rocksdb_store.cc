#include "store/rocksdb/rocksdb_store.h"

#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "store/absl_compat.h"
#include "idem/status.h"
#include "idem/ttl.h"
#include "rocksdb/utilities/transaction.h"
#include "rocksdb/utilities/transaction_db.h"
#include "rocksdb/utilities/write_batch_with_index.h"
#include "store/record_codec.h"
#include "store/record_query.h"
#include "store/rocksdb/batch_writer.h"
#include "store/rocksdb/rocksdb_db.h"
#include "store/store_url.h"

namespace idem {
namespace {

using rocksdbstore::FromRocks;
using rocksdbstore::RecordDbKey;
using rocksdbstore::SharedDb;

// How often a non-blocking transaction tries a key again whose lock stripe was busy
// (RocksdbTransaction::Locked), the first kBusyStripeSpins at once, the rest after
// yielding the core. Measured with `wrk -c64` of new keys on two cores
// (idem_http_pool_requests_total): without retries 0.40 % of the claims went to the
// worker pool, with 16 immediate retries still 0.40 % (the holder had been
// preempted), with the yields 0.08-0.11 %.
constexpr int kBusyStripeSpins = 4;
constexpr int kBusyStripeRetries = 16;

constexpr std::string_view kNoSql =
    "rocksdb:// has no SQL: Transaction::Exec/Query need a SQL store (sqlite://, postgres://, "
    "mysql://); use one for transactional mode, rocksdb:// for lease mode (idem serve)";

struct Options {
  std::string path;
  bool sync = true;
  int64_t lock_timeout_ms = 5000;
  std::optional<absl::Duration> ttl;
  bool tombstones = true;
  // writer=queue (the default): BatchWriter; writer=group: RocksDB's own write
  // grouping. bench/claims.sh measured the queue 1.6-1.9x faster through idem serve
  // (docs/benchmarks.md).
  bool queue_writer = true;
};

absl::StatusOr<Options> ParseUrl(std::string_view url) {
  IDEM_ASSIGN_OR_RETURN(store::StoreUrl u, store::ParsePathUrl(url, "rocksdb"));
  if (u.path.empty()) {
    return absl::InvalidArgumentError(
        "rocksdb URL has no directory; use rocksdb://./idem-db or rocksdb:///var/lib/idem/db");
  }
  IDEM_RETURN_IF_ERROR(u.OnlyParams({"sync", "lock_timeout_ms", "ttl", "tombstones", "writer"}));
  Options o;
  o.path = u.path;
  if (const std::string* v = u.Param("sync"); v != nullptr) {
    if (*v != "full" && *v != "off") {
      return absl::InvalidArgumentError(
          absl::StrCat("rocksdb URL parameter sync='", *v, "' must be full or off"));
    }
    o.sync = *v == "full";
  }
  if (const std::string* v = u.Param("writer"); v != nullptr) {
    if (*v != "group" && *v != "queue") {
      return absl::InvalidArgumentError(
          absl::StrCat("rocksdb URL parameter writer='", *v, "' must be group or queue"));
    }
    o.queue_writer = *v == "queue";
  }
  if (const std::string* v = u.Param("tombstones"); v != nullptr) {
    if (*v != "on" && *v != "off") {
      return absl::InvalidArgumentError(
          absl::StrCat("rocksdb URL parameter tombstones='", *v, "' must be on or off"));
    }
    o.tombstones = *v == "on";
  }
  IDEM_ASSIGN_OR_RETURN(o.lock_timeout_ms, u.IntParam("lock_timeout_ms", 5000, 0, 600000));
  if (const std::string* v = u.Param("ttl"); v != nullptr) {
    IDEM_ASSIGN_OR_RETURN(absl::Duration ttl, ParseTtlDuration(*v, "rocksdb URL parameter ttl"));
    if (ttl <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError("rocksdb URL parameter ttl must be more than 0s");
    }
    o.ttl = ttl;
  }
  return o;
}

absl::StatusOr<std::optional<Record>> Decoded(const rocksdb::Status& s, const std::string& value,
                                              std::string_view what) {
  if (s.IsNotFound()) return std::nullopt;
  IDEM_RETURN_IF_ERROR(FromRocks(s, what));
  IDEM_ASSIGN_OR_RETURN(Record r, store::DecodeRecord(value));
  return r;
}

// A pessimistic RocksDB transaction (read-write stores) or plain reads of the
// database (read-only stores: `txn_` is null and every write is refused).
class RocksdbTransaction final : public RecordTransaction {
 public:
  // `non_blocking`: `txn` was begun with lock_timeout 0 (BeginNonBlocking), so a
  // key another transaction holds is TryLock's kWouldBlock, not a wait.
  RocksdbTransaction(std::shared_ptr<SharedDb> db, std::unique_ptr<rocksdb::Transaction> txn,
                     const std::string& url, rocksdbstore::BatchWriter* writer,
                     bool non_blocking = false)
      : db_(std::move(db)),
        txn_(std::move(txn)),
        url_(url),
        writer_(writer),
        non_blocking_(non_blocking) {}
  ~RocksdbTransaction() override { Rollback(); }

  absl::StatusOr<int64_t> Exec(std::string_view, absl::Span<const Value>) override {
    return absl::UnimplementedError(AV(kNoSql));
  }
  absl::StatusOr<Rows> Query(std::string_view, absl::Span<const Value>) override {
    return absl::UnimplementedError(AV(kNoSql));
  }

  absl::StatusOr<std::optional<Record>> InsertOrLoad(const Record& record) override {
    IDEM_RETURN_IF_ERROR(CheckWritable());
    const std::string key = RecordDbKey(record.tenant, record.key);
    IDEM_ASSIGN_OR_RETURN(std::optional<Record> existing, Locked(key));
    if (existing.has_value()) return existing;
    IDEM_RETURN_IF_ERROR(FromRocks(txn_->Put(key, store::EncodeRecord(record)), What("claim")));
    return std::nullopt;
  }

  // Locks the key with the read InsertOrLoad or Load would make, kept for it. On a
  // blocking transaction as well: the read waits there.
  absl::StatusOr<KeyLock> TryLock(std::string_view tenant, std::string_view key) override {
    IDEM_RETURN_IF_ERROR(CheckWritable());
    Tried tried{.key = RecordDbKey(tenant, key)};
    tried.status = ReadForUpdate(tried.key, &tried.value);
    if (non_blocking_ && tried.status.IsTimedOut()) return KeyLock::kWouldBlock;
    tried_ = std::move(tried);
    return KeyLock::kHeld;
  }

  absl::StatusOr<bool> Replace(const Record& record, int64_t expected_token,
                               RecordState expected_state) override {
    IDEM_RETURN_IF_ERROR(CheckWritable());
    const std::string key = RecordDbKey(record.tenant, record.key);
    IDEM_ASSIGN_OR_RETURN(std::optional<Record> existing, Locked(key));
    if (!existing.has_value() || existing->token != expected_token ||
        existing->state != expected_state) {
      return false;
    }
    Record next = record;
    // As the SQL stores' UPDATE keeps them.
    next.created_at = existing->created_at;
    next.expires_at = existing->expires_at;
    next.purged_at = existing->purged_at;
    IDEM_RETURN_IF_ERROR(FromRocks(txn_->Put(key, store::EncodeRecord(next)), What("update")));
    return true;
  }

  absl::StatusOr<bool> Retire(const Record& expected, absl::Time now,
                              std::optional<absl::Time> tombstone_until) override {
    IDEM_RETURN_IF_ERROR(CheckWritable());
    const std::string key = RecordDbKey(expected.tenant, expected.key);
    IDEM_ASSIGN_OR_RETURN(std::optional<Record> existing, Locked(key));
    if (!existing.has_value() || existing->token != expected.token ||
        existing->state != expected.state || existing->purged_at != expected.purged_at) {
      return false;
    }
    if (!tombstone_until.has_value()) {
      IDEM_RETURN_IF_ERROR(FromRocks(txn_->Delete(key), What("purge")));
      return true;
    }
    Record tombstone = *std::move(existing);
    tombstone.result.clear();
    tombstone.error.clear();
    tombstone.purged_at = now;
    tombstone.updated_at = now;
    tombstone.expires_at = *tombstone_until;
    IDEM_RETURN_IF_ERROR(
        FromRocks(txn_->Put(key, store::EncodeRecord(tombstone)), What("purge")));
    return true;
  }

  absl::StatusOr<std::optional<Record>> Load(std::string_view tenant,
                                             std::string_view key) override {
    IDEM_RETURN_IF_ERROR(CheckOpen());
    const std::string db_key = RecordDbKey(tenant, key);
    if (txn_ != nullptr) return Locked(db_key);
    if (db_ == nullptr) return std::nullopt;  // read-only, no database yet
    std::string value;
    return Decoded(db_->base()->Get(rocksdb::ReadOptions(), db_key, &value), value, What("read"));
  }

  absl::Status Commit() override {
    if (std::optional<absl::Status> ended = StartCommit()) return *ended;
    // With WriteOptions::sync the WAL is fsynced before this returns (grouped with
    // the commits of other threads). A failed WAL write or sync applies nothing and
    // puts the database in its error state: every later write fails too.
    if (writer_ == nullptr) return FromRocks(txn_->Commit(), What("commit"));
    // writer=queue: the batch goes out in the writer's next group while this
    // transaction still holds its keys' locks; the rollback after it only releases
    // them (the batch is written by then, or failed as a whole).
    absl::Status written = writer_->Write(*txn_->GetWriteBatch()->GetWriteBatch(), What("commit"));
    txn_->Rollback().PermitUncheckedError();
    return written;
  }

  // writer=queue: the writer thread calls back once the batch is durable, releases
  // the keys' locks, then answers `done`. Otherwise (writer=group, whose commit
  // blocks; or nothing to write) as Commit().
  void CommitAsync(std::function<void(absl::Status)> done) override {
    if (writer_ == nullptr) {
      done(Commit());
      return;
    }
    if (std::optional<absl::Status> ended = StartCommit()) {
      done(*ended);
      return;
    }
    writer_->WriteAsync(*txn_->GetWriteBatch()->GetWriteBatch(), What("commit"),
                        [this, done = std::move(done)](absl::Status written) {
                          txn_->Rollback().PermitUncheckedError();
                          done(std::move(written));  // may destroy *this: nothing after it
                        });
  }

  void Rollback() override {
    if (done_) return;
    done_ = true;
    // Rollback of a pessimistic transaction only drops its batch and locks.
    if (txn_ != nullptr) txn_->Rollback().PermitUncheckedError();
  }

 private:
  std::string What(std::string_view op) const {
    return absl::StrCat("rocksdb store ", url_, ": ", AV(op));
  }

  // The start of every commit: ends the transaction, and returns its status when
  // nothing is left to write (an error, or a read-only transaction's OK).
  std::optional<absl::Status> StartCommit() {
    if (absl::Status s = CheckOpen(); !s.ok()) return s;
    done_ = true;
    if (txn_ == nullptr) return absl::OkStatus();
    // Nothing is acknowledged into a directory that was deleted or replaced.
    if (absl::Status s = db_->identity.Check(); !s.ok()) {
      txn_->Rollback().PermitUncheckedError();
      return s;
    }
    return std::nullopt;
  }

  absl::Status CheckOpen() const {
    if (done_) return absl::FailedPreconditionError("transaction already ended");
    return absl::OkStatus();
  }

  absl::Status CheckWritable() const {
    IDEM_RETURN_IF_ERROR(CheckOpen());
    if (txn_ == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("rocksdb store ", url_, " was opened read-only"));
    }
    return absl::OkStatus();
  }

  // The record under `key`, read through the transaction (its own writes first)
  // with the key locked until the transaction ends. A non-blocking transaction's
  // read of a key another one holds is an error: TryLock comes first.
  absl::StatusOr<std::optional<Record>> Locked(const std::string& key) {
    if (tried_.has_value() && tried_->key == key) {
      // TryLock's read, still what the transaction holds: nothing was written since.
      Tried tried = *std::move(tried_);
      tried_.reset();
      return Decoded(tried.status, tried.value, What("read for update"));
    }
    tried_.reset();
    std::string value;
    rocksdb::Status s = ReadForUpdate(key, &value);
    if (non_blocking_ && s.IsTimedOut()) {
      return absl::UnavailableError(
          What("read for update: the key is held by another transaction"));
    }
    return Decoded(s, value, What("read for update"));
  }

  // GetForUpdate of `key`.
  rocksdb::Status ReadForUpdate(const std::string& key, std::string* value) {
    rocksdb::Status s = txn_->GetForUpdate(rocksdb::ReadOptions(), key, value);
    // With a lock timeout of 0 RocksDB only try-locks the mutex of the key's lock
    // stripe, which another thread holds while it locks or releases a key of the
    // same stripe (the writer thread releasing committed claims does, all the time
    // under load): kMutexTimeout, not the key held (kLockTimeout). Tried again; after
    // the first few tries this thread yields its core, since on a busy machine the
    // holder may be a thread that was preempted holding it. A stripe still busy
    // after kBusyStripeRetries goes to the pool as a held key.
    for (int retry = 0; retry < kBusyStripeRetries && non_blocking_ && s.IsTimedOut() &&
                        s.subcode() == rocksdb::Status::kMutexTimeout;
         ++retry) {
      if (retry >= kBusyStripeSpins) std::this_thread::yield();
      s = txn_->GetForUpdate(rocksdb::ReadOptions(), key, value);
    }
    return s;
  }

  const std::shared_ptr<SharedDb> db_;
  const std::unique_ptr<rocksdb::Transaction> txn_;
  const std::string& url_;                   // the store's, which outlives this
  rocksdbstore::BatchWriter* const writer_;  // the store's (writer=queue) or null
  const bool non_blocking_;
  bool done_ = false;
  // TryLock's read of the key it locked, for the next Locked() of that key.
  struct Tried {
    std::string key;
    rocksdb::Status status;
    std::string value;
  };
  std::optional<Tried> tried_;
};

class RocksdbStore final : public StoreBackend {
 public:
  RocksdbStore(std::string url, const Options& options, std::shared_ptr<SharedDb> db,
               bool read_only)
      : url_(std::move(url)), db_(std::move(db)), read_only_(read_only) {
    write_options_.sync = options.sync;
    txn_options_.lock_timeout = options.lock_timeout_ms;
    txn_options_.deadlock_detect = true;
    // 0: a lock another transaction holds fails at once (Status::TimedOut).
    non_blocking_options_.lock_timeout = 0;
    if (options.queue_writer && !read_only_ && db_ != nullptr) {
      // The base DB: TransactionDB::Write would lock the keys again, which this
      // transaction holds until the batch is written.
      writer_ = std::make_unique<rocksdbstore::BatchWriter>(db_->db->GetBaseDB(), options.sync);
    }
  }

  absl::StatusOr<std::unique_ptr<StoreTransaction>> Begin() override {
    IDEM_RETURN_IF_ERROR(CheckIdentity());
    std::unique_ptr<rocksdb::Transaction> txn;
    if (!read_only_) txn.reset(db_->db->BeginTransaction(write_options_, txn_options_));
    return std::make_unique<RocksdbTransaction>(db_, std::move(txn), url_, writer_.get());
  }

  // The queue writer's transactions: their reads never wait for a lock (a held key
  // is TryLock's kWouldBlock; a lock stripe busy for a moment is tried again, Locked)
  // and CommitAsync hands the batch to the writer thread.
  // A read may still reach RocksDB's files through the page cache, as a new key's
  // point read does when its bloom filters cannot rule it out.
  absl::StatusOr<std::unique_ptr<RecordTransaction>> BeginNonBlocking() override {
    if (!non_blocking()) return nullptr;
    IDEM_RETURN_IF_ERROR(CheckIdentity());
    std::unique_ptr<rocksdb::Transaction> txn(
        db_->db->BeginTransaction(write_options_, non_blocking_options_));
    return std::make_unique<RocksdbTransaction>(db_, std::move(txn), url_, writer_.get(),
                                                /*non_blocking=*/true);
  }

  bool non_blocking() const override { return writer_ != nullptr; }

  absl::StatusOr<std::optional<Record>> Get(std::string_view tenant,
                                            std::string_view key) override {
    if (db_ == nullptr) return std::nullopt;
    IDEM_RETURN_IF_ERROR(CheckIdentity());
    std::string value;
    return Decoded(db_->base()->Get(rocksdb::ReadOptions(), RecordDbKey(tenant, key), &value),
                   value, absl::StrCat("rocksdb store ", url_, ": read"));
  }

  // In key order ("r" + RecordKey: tenants by length, then bytes; each tenant's
  // keys by bytes), the cheap head of each record checked before the whole of it
  // is decoded.
  absl::StatusOr<std::vector<Record>> ListRecords(const RecordQuery& query) override {
    IDEM_RETURN_IF_ERROR(store::CheckRecordQuery(query));
    std::vector<Record> out;
    if (db_ == nullptr) return out;
    IDEM_RETURN_IF_ERROR(CheckIdentity());
    const std::string prefix =
        query.tenant.has_value() ? RecordDbKey(*query.tenant, "") : std::string("r");
    const std::string after = query.after.has_value()
                                  ? RecordDbKey(query.after->first, query.after->second)
                                  : std::string();
    std::unique_ptr<rocksdb::Iterator> it(db_->base()->NewIterator(rocksdb::ReadOptions()));
    for (it->Seek(after.empty() || after < prefix ? prefix : after);
         it->Valid() && it->key().starts_with(prefix) && static_cast<int>(out.size()) < query.limit;
         it->Next()) {
      const std::string_view db_key(it->key().data(), it->key().size());
      if (db_key == after) continue;
      const std::string_view bytes(it->value().data(), it->value().size());
      IDEM_ASSIGN_OR_RETURN(store::RecordHead head, store::DecodeRecordHead(bytes));
      if (!store::HeadMatches(query, head)) continue;
      IDEM_ASSIGN_OR_RETURN(Record r, store::DecodeRecord(bytes));
      if (!store::Matches(query, r)) continue;
      r.result.clear();
      r.error.clear();
      out.push_back(std::move(r));
    }
    IDEM_RETURN_IF_ERROR(FromRocks(it->status(), absl::StrCat("rocksdb store ", url_, ": list")));
    return out;
  }

  // No LookupDecided: the Guard's read before its transaction saves a SQL store a
  // locking transaction, but here it is the same point read the transaction makes
  // (GetForUpdate), so for a new key it was paid twice. Decided keys are answered
  // from the cache decorator's L1 before either.

  // Ready while the database takes writes. After a failed write (a full disk, EIO,
  // a file size limit) RocksDB keeps the error and refuses every write, while reads
  // still answer: so the ping writes the format key's own value again, without the
  // WAL (nothing to make durable), which fails exactly while writes are refused.
  // (rocksdb.background-errors does not count a failed WAL write, and never goes
  // down again.) After a failed flush or compaction RocksDB resumes by itself; after
  // a failed WAL write idem must be restarted (NoResumeAfterAFailedWalWrite).
  absl::Status Ping() override {
    IDEM_RETURN_IF_ERROR(CheckIdentity());
    if (db_ == nullptr) return absl::OkStatus();
    const std::string key(rocksdbstore::kFormatKey);
    std::string value;
    rocksdb::Status s = db_->base()->Get(rocksdb::ReadOptions(), key, &value);
    if (s.IsNotFound()) return absl::OkStatus();
    if (s.ok() && !read_only_ && db_->db != nullptr) {
      rocksdb::WriteOptions probe;
      probe.disableWAL = true;
      s = db_->base()->Put(probe, key, value);
      if (!s.ok()) {
        return StoreFaultError(absl::StrCat(
            "rocksdb store ", url_, ": writes are refused after a failed one (", s.ToString(),
            "): fix the cause (a full disk: make room), then restart idem"));
      }
    }
    return AsStoreFault(FromRocks(s, absl::StrCat("rocksdb store ", url_, ": ping")));
  }

  bool SupportsSql() const override { return false; }

  absl::StatusOr<SchemaInfo> DescribeSchema() override {
    return absl::UnimplementedError(absl::StrCat(
        "rocksdb:// has no SQL schema to migrate: its records are key/value pairs in format "
        "version ", rocksdbstore::kFormatVersion,
        ", written when the store is opened (nothing to do)"));
  }

  bool read_only() const override { return read_only_; }
  std::string_view url() const override { return url_; }

 private:
  // Nothing is read from a directory that was deleted or replaced either (as
  // sqlite:// checks its file before every transaction): what RocksDB still holds
  // in memory and in open files of it vanishes at the next start. Checked again
  // before a commit (StartCommit).
  absl::Status CheckIdentity() const {
    return db_ == nullptr ? absl::OkStatus() : db_->identity.Check();
  }

  const std::string url_;
  const std::shared_ptr<SharedDb> db_;  // null: read-only, no database there yet
  const bool read_only_;
  rocksdb::WriteOptions write_options_;
  rocksdb::TransactionOptions txn_options_;
  rocksdb::TransactionOptions non_blocking_options_;
  std::unique_ptr<rocksdbstore::BatchWriter> writer_;  // writer=queue; ends before db_
};

}  // namespace

absl::StatusOr<std::unique_ptr<Store>> OpenRocksdbStore(std::string_view url,
                                                        sql::SchemaMode mode, const Clock* clock) {
  IDEM_ASSIGN_OR_RETURN(Options options, ParseUrl(url));
  IDEM_ASSIGN_OR_RETURN(std::shared_ptr<SharedDb> db,
                        rocksdbstore::OpenSharedDb({.path = options.path,
                                                    .read_only = mode.read_only,
                                                    .create = mode.create,
                                                    .ttl = options.ttl,
                                                    .tombstones = options.tombstones,
                                                    .clock = clock},
                                                   mode.require_schema));
  return std::make_unique<RocksdbStore>(store::RedactUrl(url), options, std::move(db),
                                        mode.read_only);
}

}  // namespace idem
