#include "store/rocksdb/rocksdb_store.h"

#include <memory>
#include <optional>
#include <string>
#include <functional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "store/absl_compat.h"
#include "idem/status.h"
#include "idem/ttl.h"
#include "store/record_codec.h"
#include "store/record_query.h"
#include "store/rocksdb/batch_writer.h"
#include "store/rocksdb/rocksdb_db.h"
#include "store/store_url.h"
#include "store/turn.h"

namespace idem {
namespace {

using rocksdbstore::FromRocks;
using rocksdbstore::RecordDbKey;
using rocksdbstore::SharedDb;

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
  // turn_write=auto (the default): a lean loop's thread writes its turn's commits
  // itself while writes are quick and no other write is in progress, else as stage;
  // stage: the turn hands its commits to the writer thread; inline: the loop's thread
  // always writes them and waits for the sync.
  rocksdbstore::BatchWriter::TurnWrite turn_write = rocksdbstore::BatchWriter::TurnWrite::kAuto;
};

absl::StatusOr<Options> ParseUrl(std::string_view url) {
  IDEM_ASSIGN_OR_RETURN(store::StoreUrl u, store::ParsePathUrl(url, "rocksdb"));
  if (u.path.empty()) {
    return absl::InvalidArgumentError(
        "rocksdb URL has no directory; use rocksdb://./idem-db or rocksdb:///var/lib/idem/db");
  }
  IDEM_RETURN_IF_ERROR(u.OnlyParams(
      {"sync", "lock_timeout_ms", "ttl", "tombstones", "writer", "turn_write"}));
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
  if (const std::string* v = u.Param("turn_write"); v != nullptr) {
    if (*v != "auto" && *v != "stage" && *v != "inline") {
      return absl::InvalidArgumentError(absl::StrCat(
          "rocksdb URL parameter turn_write='", *v, "' must be auto, stage or inline"));
    }
    if (*v == "inline") o.turn_write = rocksdbstore::BatchWriter::TurnWrite::kInline;
    if (*v == "stage") o.turn_write = rocksdbstore::BatchWriter::TurnWrite::kStage;
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

absl::StatusOr<std::optional<Record>> Decoded(const rocksdb::Status& s, std::string_view value,
                                              std::string_view url, std::string_view op) {
  if (s.IsNotFound()) return std::nullopt;
  if (!s.ok()) return FromRocks(s, absl::StrCat("rocksdb store ", AV(url), ": ", AV(op)));
  IDEM_ASSIGN_OR_RETURN(Record r, store::DecodeRecord(value));
  return r;
}

// What a store's transactions share with it; the store outlives them.
struct StoreShared {
  std::string url;
  SharedDb* db = nullptr;                      // null: read-only, no database there yet
  bool writable = false;                       // false: a read-only open
  rocksdbstore::BatchWriter* writer = nullptr;  // writer=queue (null: writer=group)
  rocksdb::WriteOptions write_options;         // writer=group's
  rocksdb::ReadOptions read_options;
  absl::Duration lock_timeout;
};

// A transaction of a rocksdb:// store. Read-write: every record it reads or writes
// is locked first in the directory's KeyLocks (waiting up to lock_timeout_ms; a
// non-blocking transaction never waits), read from the database (or from its own
// writes), and its writes go to the database in one batch at the commit, after
// which (once they are durable) its keys are released. Since a key stays locked
// until its writes are durable and every read of it takes the lock first, nothing
// reads a record before it is durable: a duplicate claim that meets a claim being
// written waits for that write, then reads it. Read-only (a read-only open): plain
// reads, and every write refused.
class RocksdbTransaction final : public RecordTransaction,
                                 private rocksdbstore::BatchWriter::Commit {
 public:
  // `non_blocking`: a key another transaction holds is TryLock's kWouldBlock (and an
  // error for a read without TryLock), never a wait (BeginNonBlocking).
  RocksdbTransaction(const StoreShared& store, bool non_blocking)
      : store_(store), non_blocking_(non_blocking) {}
  ~RocksdbTransaction() override { Rollback(); }

  absl::StatusOr<int64_t> Exec(std::string_view, absl::Span<const Value>) override {
    return absl::UnimplementedError(AV(kNoSql));
  }
  absl::StatusOr<Rows> Query(std::string_view, absl::Span<const Value>) override {
    return absl::UnimplementedError(AV(kNoSql));
  }

  absl::StatusOr<std::optional<Record>> InsertOrLoad(const Record& record) override {
    IDEM_RETURN_IF_ERROR(CheckWritable());
    IDEM_ASSIGN_OR_RETURN(const std::string* key, Hold(record.tenant, record.key, nullptr));
    IDEM_ASSIGN_OR_RETURN(std::optional<Record> existing, Read(key));
    if (existing.has_value()) return existing;
    Put(key, &record);
    return std::nullopt;
  }

  // The held keys' durable records in one MultiGet, for Read. Only a transaction
  // holding many keys (with an index) prefetches.
  void Prefetch(absl::Span<const std::pair<std::string_view, std::string_view>> keys) override {
    if (!CheckWritable().ok() || index_.empty()) return;
    std::vector<rocksdb::Slice> slices;
    std::vector<Indexed*> targets;
    slices.reserve(keys.size());
    targets.reserve(keys.size());
    for (const auto& [tenant, key] : keys) {
      rocksdbstore::SetRecordDbKey(scratch_, tenant, key);
      auto it = index_.find(scratch_);
      if (it == index_.end() || it->second.write != kNoWrite ||
          it->second.fetched != kNotFetched) {
        continue;
      }
      it->second.fetched = kAbsent;  // until the answer: a key named twice is read once
      slices.emplace_back(*it->second.key);
      targets.push_back(&it->second);
    }
    if (slices.empty()) return;
    std::vector<rocksdb::PinnableSlice> values(slices.size());
    std::vector<rocksdb::Status> statuses(slices.size());
    rocksdb::DB* db = store_.db->db.get();
    db->MultiGet(store_.read_options, db->DefaultColumnFamily(), slices.size(), slices.data(),
                 values.data(), statuses.data());
    for (size_t i = 0; i < slices.size(); ++i) {
      if (statuses[i].ok()) {
        targets[i]->fetched = fetched_.size();
        fetched_.emplace_back(values[i].data(), values[i].size());
      } else if (!statuses[i].IsNotFound()) {
        targets[i]->fetched = kNotFetched;  // Read reads it again and words the error
      }
    }
  }

  // Locks the key for the reads and writes that follow. On a blocking transaction
  // it waits there (up to lock_timeout_ms).
  absl::StatusOr<KeyLock> TryLock(std::string_view tenant, std::string_view key) override {
    IDEM_RETURN_IF_ERROR(CheckWritable());
    bool busy = false;
    absl::StatusOr<const std::string*> held = Hold(tenant, key, &busy);
    if (busy) return KeyLock::kWouldBlock;
    IDEM_RETURN_IF_ERROR(held.status());
    return KeyLock::kHeld;
  }

  absl::StatusOr<bool> Replace(const Record& record, int64_t expected_token,
                               RecordState expected_state) override {
    IDEM_RETURN_IF_ERROR(CheckWritable());
    IDEM_ASSIGN_OR_RETURN(const std::string* key, Hold(record.tenant, record.key, nullptr));
    IDEM_ASSIGN_OR_RETURN(std::optional<Record> existing, Read(key));
    if (!existing.has_value() || existing->token != expected_token ||
        existing->state != expected_state) {
      return false;
    }
    Record next = record;
    // As the SQL stores' UPDATE keeps them.
    next.created_at = existing->created_at;
    next.expires_at = existing->expires_at;
    next.purged_at = existing->purged_at;
    Put(key, &next);
    return true;
  }

  absl::StatusOr<bool> Retire(const Record& expected, absl::Time now,
                              std::optional<absl::Time> tombstone_until) override {
    IDEM_RETURN_IF_ERROR(CheckWritable());
    IDEM_ASSIGN_OR_RETURN(const std::string* key, Hold(expected.tenant, expected.key, nullptr));
    IDEM_ASSIGN_OR_RETURN(std::optional<Record> existing, Read(key));
    if (!existing.has_value() || existing->token != expected.token ||
        existing->state != expected.state || existing->purged_at != expected.purged_at) {
      return false;
    }
    if (!tombstone_until.has_value()) {
      Put(key, nullptr);
      return true;
    }
    Record tombstone = *std::move(existing);
    tombstone.result.clear();
    tombstone.error.clear();
    tombstone.purged_at = now;
    tombstone.updated_at = now;
    tombstone.expires_at = *tombstone_until;
    Put(key, &tombstone);
    return true;
  }

  absl::StatusOr<std::optional<Record>> Load(std::string_view tenant,
                                             std::string_view key) override {
    IDEM_RETURN_IF_ERROR(CheckOpen());
    if (store_.writable) {
      IDEM_ASSIGN_OR_RETURN(const std::string* held, Hold(tenant, key, nullptr));
      return Read(held);
    }
    if (store_.db == nullptr) return std::nullopt;  // read-only, no database yet
    rocksdbstore::SetRecordDbKey(scratch_, tenant, key);
    rocksdb::Status s = store_.db->base()->Get(store_.read_options, scratch_, &value_);
    return Decoded(s, value_, store_.url, "read");
  }

  absl::Status Commit() override {
    if (std::optional<absl::Status> ended = StartCommit()) return *ended;
    absl::Status written;
    if (store_.writer != nullptr) {
      // writer=queue: the batch goes out in the writer's next group.
      written = store_.writer->Write(*this, What("commit"));
    } else {
      // With WriteOptions::sync the WAL is fsynced before this returns (grouped
      // with the commits of other threads). A failed WAL write or sync applies
      // nothing and puts the database in its error state: every later write fails.
      rocksdb::WriteBatch batch;
      rocksdb::Status s = AddTo(batch);
      if (s.ok()) s = store_.db->db->Write(store_.write_options, &batch);
      written = rocksdbstore::WriteOutcome(s, What("commit"));
    }
    Release();  // durable (or failed as a whole): the keys are free
    return written;
  }

  // writer=queue: the writer thread calls Written once the batch is durable, which
  // releases the keys, then answers `done`. Otherwise (writer=group, whose commit
  // blocks; or nothing to write) as Commit().
  void CommitAsync(CommitDone& done) override {
    if (store_.writer == nullptr) {
      done.Committed(Commit());
      return;
    }
    if (std::optional<absl::Status> ended = StartCommit()) {
      done.Committed(*ended);
      return;
    }
    committed_ = &done;
    store_.writer->WriteAsync(this);
  }

  void Rollback() override {
    if (done_) return;
    done_ = true;
    Release();
  }

  // RocksdbStore::RenewNonBlocking: this ended non-blocking transaction of
  // `store`'s begins again, with the buffers it has. False when it is another
  // store's (or not ended).
  bool Renew(const StoreShared& store) {
    if (&store != &store_ || !non_blocking_ || !done_ || owner_ != 0) return false;
    done_ = false;
    committed_ = nullptr;
    return true;
  }

 private:
  // One write of the commit: a record's new bytes, or its deletion.
  struct Write {
    const std::string* key = nullptr;  // a key this transaction holds
    bool erase = false;                // true: delete
    std::string value;                 // else: the record's bytes
  };
  // The first write's buffer is kept from one commit to the next up to this size.
  static constexpr size_t kKeptValueBytes = 4 << 10;

  // BatchWriter::Commit
  rocksdb::Status AddTo(rocksdb::WriteBatch& group) const override {
    for (const Write& w : writes_) {
      rocksdb::Status s = w.erase ? group.Delete(*w.key) : group.Put(*w.key, w.value);
      if (!s.ok()) return s;
    }
    return rocksdb::Status::OK();
  }

  void Written(const rocksdb::Status& status) override {
    Release();
    // May destroy *this: nothing after it.
    committed_->Committed(status.ok() ? absl::OkStatus()
                                      : rocksdbstore::WriteOutcome(status, What("commit")));
  }

  std::string What(std::string_view op) const {
    return absl::StrCat("rocksdb store ", AV(store_.url), ": ", AV(op));
  }

  // The start of every commit: ends the transaction, and returns its status when
  // nothing is left to write (an error, or a transaction that wrote nothing: its
  // keys are released at once).
  std::optional<absl::Status> StartCommit() {
    if (absl::Status s = CheckOpen(); !s.ok()) return s;
    done_ = true;
    if (writes_.empty()) {
      Release();
      return absl::OkStatus();
    }
    // Nothing is acknowledged into a directory that was deleted or replaced (the
    // writer checks it before each of its durable writes).
    if (store_.writer == nullptr) {
      if (absl::Status s = store_.db->identity.Check(); !s.ok()) {
        Release();
        return s;
      }
    }
    return std::nullopt;
  }

  absl::Status CheckOpen() const {
    if (done_) return absl::FailedPreconditionError("transaction already ended");
    return absl::OkStatus();
  }

  absl::Status CheckWritable() const {
    IDEM_RETURN_IF_ERROR(CheckOpen());
    if (!store_.writable) {
      return absl::FailedPreconditionError(
          absl::StrCat("rocksdb store ", AV(store_.url), " was opened read-only"));
    }
    return absl::OkStatus();
  }

  // The held key equal to `db_key`, or null.
  const std::string* Held(const std::string& db_key) const {
    if (holds_first_ && first_ == db_key) return &first_;
    if (!index_.empty()) {
      auto it = index_.find(db_key);
      return it == index_.end() ? nullptr : it->second.key;
    }
    for (const std::unique_ptr<std::string>& k : more_) {
      if (*k == db_key) return k.get();
    }
    return nullptr;
  }

  // A transaction holding many keys (a batch) finds them and their writes by this
  // index instead of a walk of them all.
  static constexpr size_t kIndexFrom = 8;
  static constexpr size_t kNoWrite = static_cast<size_t>(-1);
  static constexpr size_t kNotFetched = static_cast<size_t>(-1);
  static constexpr size_t kAbsent = static_cast<size_t>(-2);
  struct Indexed {
    const std::string* key;
    size_t write = kNoWrite;        // its Write in writes_
    size_t fetched = kNotFetched;   // its stored value in fetched_ (Prefetch), or kAbsent
  };

  // Adds the held `key` to the index, building it once the transaction holds
  // kIndexFrom keys.
  void Index(const std::string* key) {
    if (index_.empty()) {
      if (more_.size() + 1 < kIndexFrom) return;
      index_.emplace(first_, Indexed{.key = &first_});
      for (const std::unique_ptr<std::string>& k : more_) index_.emplace(*k, Indexed{.key = k.get()});
      for (size_t i = 0; i < writes_.size(); ++i) index_.at(*writes_[i].key).write = i;
      return;
    }
    index_.emplace(*key, Indexed{.key = key});
  }

  // The commit's write of `key` (held), or null.
  Write* WriteOf(const std::string* key) {
    if (!index_.empty()) {
      const size_t i = index_.at(*key).write;
      return i == kNoWrite ? nullptr : &writes_[i];
    }
    for (Write& w : writes_) {
      if (w.key == key) return &w;
    }
    return nullptr;
  }

  // Locks the record key of (tenant, key) for this transaction unless it holds it
  // already, and returns this transaction's copy of it (in place until Release).
  // A blocking transaction waits up to lock_timeout_ms (then a
  // ClaimContendedError), or gets kAborted where waiting could deadlock. A
  // non-blocking one sets `*busy` (when given, else it is an error) if the key is
  // held by another transaction at this instant.
  absl::StatusOr<const std::string*> Hold(std::string_view tenant, std::string_view key,
                                          bool* busy) {
    // Most transactions touch one key, TryLock's and then InsertOrLoad's or Load's.
    if (holds_first_ && rocksdbstore::IsRecordDbKeyOf(first_, tenant, key)) return &first_;
    rocksdbstore::SetRecordDbKey(scratch_, tenant, key);
    if (const std::string* held = Held(scratch_)) return held;
    rocksdbstore::KeyLocks& locks = store_.db->locks;
    if (owner_ == 0) owner_ = locks.NewOwner();
    const bool holds_others = holds_first_;
    std::string* slot = holds_first_ ? more_.emplace_back(std::make_unique<std::string>()).get()
                                     : &first_;
    slot->swap(scratch_);
    const rocksdbstore::KeyLocks::Got got =
        non_blocking_ ? locks.TryLock(*slot, owner_)
                      : locks.Lock(*slot, owner_, absl::Now() + store_.lock_timeout, holds_others);
    if (got == rocksdbstore::KeyLocks::Got::kLocked) {
      if (slot == &first_) {
        holds_first_ = true;
      } else {
        Index(slot);
      }
      return slot;
    }
    slot->swap(scratch_);
    if (slot != &first_) more_.pop_back();
    switch (got) {
      case rocksdbstore::KeyLocks::Got::kBusy:
        if (busy != nullptr) {
          *busy = true;
          return nullptr;
        }
        return absl::UnavailableError(
            What("read for update: the key is held by another transaction"));
      case rocksdbstore::KeyLocks::Got::kDie:
        return absl::AbortedError(
            What("read for update: waiting for the key could deadlock with the transaction "
                 "that holds it; retry the transaction"));
      default:
        return ClaimContendedError(absl::StrCat(
            What("read for update"), ": the key stayed held by another open transaction for "
            "lock_timeout_ms (",
            absl::ToInt64Milliseconds(store_.lock_timeout), " ms)"));
    }
  }

  // The record under `key` (held): this transaction's own write of it, else the
  // database's durable one.
  absl::StatusOr<std::optional<Record>> Read(const std::string* key) {
    if (const Write* w = WriteOf(key)) {
      if (w->erase) return std::nullopt;
      IDEM_ASSIGN_OR_RETURN(Record r, store::DecodeRecord(w->value));
      return r;
    }
    if (!index_.empty()) {
      const size_t fetched = index_.at(*key).fetched;
      if (fetched == kAbsent) return std::nullopt;
      if (fetched != kNotFetched) {
        return Decoded(rocksdb::Status::OK(), fetched_[fetched], store_.url, "read for update");
      }
    }
    rocksdb::Status s = store_.db->db->Get(store_.read_options, *key, &value_);
    return Decoded(s, value_, store_.url, "read for update");
  }

  // Sets the commit's write of `key` (held) to `record` (null: its deletion),
  // replacing an earlier one. The first write's bytes go into the buffer the last
  // commit of this transaction left (RocksdbStore::RenewNonBlocking).
  void Put(const std::string* key, const Record* record) {
    Write* write = WriteOf(key);
    if (write == nullptr) {
      if (!index_.empty()) index_.at(*key).write = writes_.size();
      write = &writes_.emplace_back();
      write->key = key;
      if (writes_.size() == 1) write->value.swap(value_buffer_);
    }
    write->erase = record == nullptr;
    if (record != nullptr) store::EncodeRecordInto(write->value, *record);
  }

  // Releases every key this transaction holds and drops its writes (the first's
  // buffer kept for the next commit, unless a large record grew it).
  void Release() {
    if (!writes_.empty() && writes_.front().value.capacity() <= kKeptValueBytes) {
      value_buffer_.swap(writes_.front().value);
    }
    writes_.clear();
    if (owner_ == 0) return;
    rocksdbstore::KeyLocks& locks = store_.db->locks;
    if (holds_first_) locks.Unlock(first_, owner_);
    for (const std::unique_ptr<std::string>& k : more_) locks.Unlock(*k, owner_);
    holds_first_ = false;
    index_.clear();
    fetched_.clear();
    more_.clear();
    owner_ = 0;
  }

  const StoreShared& store_;
  const bool non_blocking_;
  bool done_ = false;
  uint64_t owner_ = 0;  // in the KeyLocks, from the first key held
  // The keys held: the first (most transactions hold one) and the rest, each in
  // place until released (the KeyLocks keeps views of them).
  std::string first_;
  bool holds_first_ = false;
  std::vector<std::unique_ptr<std::string>> more_;
  absl::flat_hash_map<std::string_view, Indexed> index_;  // empty below kIndexFrom keys
  std::vector<std::string> fetched_;                       // Prefetch's values
  absl::InlinedVector<Write, 1> writes_;
  std::string scratch_;  // a key being looked up
  std::string value_;    // the last value read
  std::string value_buffer_;  // the first write's, kept between commits (Put)
  CommitDone* committed_ = nullptr;  // CommitAsync's `done`
};

class RocksdbStore final : public StoreBackend {
 public:
  RocksdbStore(std::string url, const Options& options, std::shared_ptr<SharedDb> db,
               bool read_only)
      : db_(std::move(db)), read_only_(read_only) {
    shared_.url = std::move(url);
    shared_.db = db_.get();
    shared_.writable = !read_only_ && db_ != nullptr;
    shared_.write_options.sync = options.sync;
    shared_.lock_timeout = absl::Milliseconds(options.lock_timeout_ms);
    if (options.queue_writer && shared_.writable) {
      writer_ = std::make_unique<rocksdbstore::BatchWriter>(db_->db.get(), options.sync,
                                                            options.turn_write, &db_->identity);
      shared_.writer = writer_.get();
    }
  }

  absl::StatusOr<std::unique_ptr<StoreTransaction>> Begin() override {
    IDEM_RETURN_IF_ERROR(CheckIdentity());
    return std::make_unique<RocksdbTransaction>(shared_, /*non_blocking=*/false);
  }

  // The queue writer's transactions: they never wait for a key (a held key is
  // TryLock's kWouldBlock) and CommitAsync hands the batch to the writer thread.
  // A read may still reach RocksDB's files through the page cache, as a new key's
  // point read does when its bloom filters cannot rule it out.
  absl::StatusOr<std::unique_ptr<RecordTransaction>> BeginNonBlocking() override {
    if (!non_blocking()) return nullptr;
    IDEM_RETURN_IF_ERROR(CheckIdentity());
    return std::make_unique<RocksdbTransaction>(shared_, /*non_blocking=*/true);
  }

  // An ended transaction of this store's begins again (RocksdbTransaction::Renew).
  absl::StatusOr<std::unique_ptr<RecordTransaction>> RenewNonBlocking(
      std::unique_ptr<RecordTransaction> ended) override {
    if (!non_blocking()) return nullptr;
    auto* renewed = dynamic_cast<RocksdbTransaction*>(ended.get());
    if (renewed == nullptr || !renewed->Renew(shared_)) return BeginNonBlocking();
    IDEM_RETURN_IF_ERROR(CheckIdentity());
    return ended;
  }

  bool non_blocking() const override { return writer_ != nullptr; }

  std::string RenderMetrics() const override {
    return writer_ != nullptr ? writer_->RenderMetrics() : std::string();
  }

  absl::StatusOr<std::optional<Record>> Get(std::string_view tenant,
                                            std::string_view key) override {
    if (db_ == nullptr) return std::nullopt;
    IDEM_RETURN_IF_ERROR(CheckIdentity());
    std::string value;
    const rocksdb::Status s = db_->base()->Get(shared_.read_options, RecordDbKey(tenant, key), &value);
    return Decoded(s, value, shared_.url, "read");
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
    IDEM_RETURN_IF_ERROR(FromRocks(it->status(), absl::StrCat("rocksdb store ", shared_.url, ": list")));
    return out;
  }

  // No LookupDecided: the Guard's read before its transaction saves a SQL store a
  // locking transaction, but here it is the same point read the transaction makes
  // (after taking the key's lock), so for a new key it was paid twice. Decided keys
  // are answered from the cache decorator's L1 before either.

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
            "rocksdb store ", shared_.url, ": writes are refused after a failed one (", s.ToString(),
            "): fix the cause (a full disk: make room), then restart idem"));
      }
    }
    return AsStoreFault(FromRocks(s, absl::StrCat("rocksdb store ", shared_.url, ": ping")));
  }

  bool SupportsSql() const override { return false; }

  absl::StatusOr<SchemaInfo> DescribeSchema() override {
    return absl::UnimplementedError(absl::StrCat(
        "rocksdb:// has no SQL schema to migrate: its records are key/value pairs in format "
        "version ", rocksdbstore::kFormatVersion,
        ", written when the store is opened (nothing to do)"));
  }

  bool read_only() const override { return read_only_; }
  std::string_view url() const override { return shared_.url; }

 private:
  // Nothing is read from a directory that was deleted or replaced either (as
  // sqlite:// checks its file before every transaction): what RocksDB still holds
  // in memory and in open files of it vanishes at the next start. Checked again
  // before a commit (StartCommit).
  // On an event loop's turn the directory is checked once per turn (the requests a
  // turn reads arrived together), else at every call.
  absl::Status CheckIdentity() const {
    if (db_ == nullptr) return absl::OkStatus();
    store::Turn* const turn = store::Turn::Current();
    thread_local const SharedDb* checked_db = nullptr;
    thread_local uint64_t checked_turn = 0;
    if (turn != nullptr && checked_db == db_.get() && checked_turn == turn->number()) {
      return absl::OkStatus();
    }
    IDEM_RETURN_IF_ERROR(db_->identity.Check());
    if (turn != nullptr) {
      checked_db = db_.get();
      checked_turn = turn->number();
    }
    return absl::OkStatus();
  }

  const std::shared_ptr<SharedDb> db_;  // null: read-only, no database there yet
  const bool read_only_;
  StoreShared shared_;
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
