// The backend side of the store interface (include/idem/store.h): what a store
// implements and what idem's own layers (the Guard, the server, the tools) ask of
// it beyond a user's calls. Internal: not installed.
//
// Every Store is a StoreBackend and every transaction of one a RecordTransaction
// (their public bases can be made by nothing else), so Backend() and Records()
// downcast safely.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "idem/record.h"
#include "idem/store.h"
#include "idem/value.h"

namespace idem {

// The status payload the SQL backends attach to the kInvalidArgument of a statement
// that broke a unique or primary key (SQLite, PostgreSQL 23505, MySQL 1062).
inline constexpr std::string_view kUniqueViolationPayload = "type.idem.dev/unique-violation";

// `status` with kUniqueViolationPayload attached.
absl::Status MarkUniqueViolation(absl::Status status);

// The status payload a backend attaches to the kUnavailable of InsertOrLoad/Load
// when the key's row stayed locked by another open transaction past the lock
// timeout: another claim of the same key is in progress (not yet committed). The
// Guard answers Outcome::kInProgress for it instead of an error.
inline constexpr std::string_view kClaimContendedPayload = "type.idem.dev/claim-contended";

// Returns a kUnavailable status with `message` and kClaimContendedPayload.
absl::Status ClaimContendedError(std::string_view message);

// True for a status made by ClaimContendedError (or carrying its payload).
bool IsClaimContended(const absl::Status& status);

// The status payload that marks an error as the store's fault, not the request's
//: a missing or wrong schema, permission denied, disk full, a read-only,
// deleted or replaced database file, a lost connection. Such an error is always
// kUnavailable: fail closed and retry later (HTTP 503), never answer it as a defect
// of the input (400), never cache it as the request's failure, never compensate a
// step because of it.
inline constexpr std::string_view kStoreFaultPayload = "type.idem.dev/store-fault";

// Returns a kUnavailable status with `message` and kStoreFaultPayload.
absl::Status StoreFaultError(std::string_view message);

// `status` as the store's fault: kUnavailable with the same message and
// kStoreFaultPayload. OK stays OK; kAborted (a deadlock or serialization failure:
// retry the whole transaction) and a ClaimContendedError stay as they are.
absl::Status AsStoreFault(const absl::Status& status);
// The same for a value or its error.
template <typename T>
absl::StatusOr<T> AsStoreFault(absl::StatusOr<T> value) {
  if (!value.ok()) return AsStoreFault(value.status());
  return value;
}

// The backend side of a transaction: record operations for the Guard.
class RecordTransaction : public StoreTransaction {
 public:
  // Inserts `record` unless a record for (record.tenant, record.key) exists; never
  // SELECT-then-INSERT. Returns std::nullopt when it inserted, else the existing
  // record (read and locked in this transaction; a tombstone too, Record::purged).
  // When the key is held by another open transaction past the lock timeout, returns a
  // ClaimContendedError.
  virtual absl::StatusOr<std::optional<Record>> InsertOrLoad(const Record& record) = 0;

  // InsertOrLoad, then `next` in this transaction when the insert happened: a
  // backend that can (PostgreSQL) sends both in one round trip and may run `next`
  // whatever the claim found (the caller rolls back when the key is not its to
  // run). `*next_result` is set to next's changed-row count or error when `next`
  // ran, and left unset when it did not. Errors as InsertOrLoad.
  virtual absl::StatusOr<std::optional<Record>> InsertOrLoadThen(
      const Record& record, const Statement& next,
      std::optional<absl::StatusOr<int64_t>>* next_result) {
    absl::StatusOr<std::optional<Record>> loaded = InsertOrLoad(record);
    if (loaded.ok() && !loaded->has_value()) *next_result = Exec(next.sql, next.params);
    return loaded;
  }

  // InsertOrLoad for each of `records`, in order, with the effect of calling it
  // for each in turn in this transaction (a record whose key an earlier one of the
  // same call inserted loads that one). Returns one answer per record, in order.
  // A backend that can (PostgreSQL) sends them in a few round trips instead of one
  // each: a consumer claims a whole poll batch at once. On an error (as
  // InsertOrLoad's; a ClaimContendedError when any key is held by another open
  // transaction) some of them may have run: the caller rolls the transaction back.
  // The default calls InsertOrLoad for each (an in-process store). Blocks.
  virtual absl::StatusOr<std::vector<std::optional<Record>>> InsertOrLoadMany(
      absl::Span<const Record> records);

  // Overwrites the stored record of (record.tenant, record.key) with `record` if
  // the stored one still has `expected_token` and `expected_state`; its created_at,
  // expires_at and purged_at stay as stored. Returns whether it did (a conditional
  // update; 0 rows means another holder moved it).
  virtual absl::StatusOr<bool> Replace(const Record& record, int64_t expected_token,
                                       RecordState expected_state) = 0;

  // Exec for each of `statements`, in order, in this transaction. Returns each one's
  // changed-row count, in order. A backend that can (PostgreSQL) sends them in a
  // few round trips instead of one each: a consumer runs the first statements of a
  // whole poll batch's effects at once. On the first error (as Exec's) the rest do
  // not run and that error is returned: the caller rolls the transaction back. The
  // default calls Exec for each. Blocks.
  virtual absl::StatusOr<std::vector<int64_t>> ExecMany(absl::Span<const Statement> statements);

  // One write of ReplaceMany: Replace(record, expected_token, expected_state).
  struct Replacement {
    Record record;
    int64_t expected_token = 0;
    RecordState expected_state = RecordState::kProcessing;
  };

  // Replace for each of `replacements`, in order, in this transaction. Returns
  // for each whether it moved its record. A backend that can (PostgreSQL) sends
  // them in a few round trips instead of one each: a consumer writes a whole poll
  // batch's results at once. On an error (as Replace's) some of them may have run:
  // the caller rolls the transaction back. The default calls Replace for each.
  // Blocks.
  virtual absl::StatusOr<std::vector<bool>> ReplaceMany(absl::Span<const Replacement> replacements);

  // Reads the record of (tenant, key) in this transaction, or std::nullopt.
  virtual absl::StatusOr<std::optional<Record>> Load(std::string_view tenant,
                                                     std::string_view key) = 0;

  // The answer of TryLock.
  enum class KeyLock {
    kHeld,        // this transaction holds the key: its calls on it do not wait
    kWouldBlock,  // another open transaction holds it: run the work on the pool
  };

  // For a transaction of StoreBackend::BeginNonBlocking: locks the record of
  // (tenant, key) for this transaction without waiting, before InsertOrLoad or
  // Load of the same key. kWouldBlock, having done nothing, when another open
  // transaction holds the key at this instant: the caller does the same work again
  // on a transaction of Begin(), which waits. Errors: the store's, as Load. The
  // default answers kHeld (a transaction whose calls may wait anyway).
  virtual absl::StatusOr<KeyLock> TryLock(std::string_view tenant, std::string_view key) {
    (void)tenant;
    (void)key;
    return KeyLock::kHeld;
  }

  // A hint before the InsertOrLoad, Load or Replace of many keys, (tenant, key)
  // each, that this transaction holds (TryLock): the store may read their records
  // together now, so that those calls need no read of their own. Keys it does not
  // hold are ignored; a read that fails here is made again by the call. The
  // default does nothing.
  virtual void Prefetch(absl::Span<const std::pair<std::string_view, std::string_view>> keys) {
    (void)keys;
  }

  // What CommitAsync tells when the commit has ended: an object of the caller's
  // (the Guard's per-request call), so a commit allocates nothing to be answered.
  class CommitDone {
   public:
    // Called once with what Commit() would return. May destroy the transaction.
    virtual void Committed(absl::Status status) = 0;

   protected:
    ~CommitDone() = default;
  };

  // Commit() without blocking the calling thread, for a transaction of
  // StoreBackend::BeginNonBlocking: `done` is told once what Commit() would
  // return, once the commit is durable, on a thread of the store's (it must be
  // quick: other commits wait behind it), or on this thread before this returns
  // when the commit ended at once. This transaction and `done` must stay alive
  // until then, and `done` may destroy the transaction. The default calls Commit(),
  // then `done`.
  virtual void CommitAsync(CommitDone& done) { done.Committed(Commit()); }

  // Replace, then Commit only if it moved the record: the Guard's final write,
  // which a backend may do in one round trip (PostgreSQL pipelines the UPDATE with
  // the COMMIT). Returns true when committed; false when the record had moved on
  // (nothing of the transaction was committed). Either way, and on error, the
  // transaction has ended when this returns; on error nothing was committed,
  // except for kUnavailable "commit outcome unknown" as from Commit().
  virtual absl::StatusOr<bool> ReplaceAndCommit(const Record& record, int64_t expected_token,
                                                RecordState expected_state) {
    absl::StatusOr<bool> moved = Replace(record, expected_token, expected_state);
    if (!moved.ok() || !*moved) {
      Rollback();
      return moved;
    }
    absl::Status committed = Commit();
    if (!committed.ok()) return committed;
    return true;
  }

  // Retention (include/idem/retention.h, docs/retention.md): if the stored record of
  // (expected.tenant, expected.key) still has expected's token, state and
  // purged_at, then with `tombstone_until` turns it into its tombstone (result and
  // error dropped; purged_at and updated_at = `now`; expires_at = *tombstone_until),
  // and without it deletes the record (a live one, or a tombstone whose time is up).
  // Returns whether it did; false when the record moved on or is gone. Runs in this
  // transaction (the caller read `expected` in it, with Load, so it is locked).
  // kUnimplemented on a store without retention (the default).
  virtual absl::StatusOr<bool> Retire(const Record& expected, absl::Time now,
                                      std::optional<absl::Time> tombstone_until) {
    (void)expected;
    (void)now;
    (void)tombstone_until;
    return absl::UnimplementedError("this store cannot purge records");
  }
};

// What differs between the SQL databases behind the stores, for the SQL that
// idem's own layers run inside a store's transactions (the step journal).
// A SQL store supplies one (StoreBackend::sql_dialect()); code above the store asks it
// instead of guessing the database from a URL. Immutable; lives as long as the
// program.
class SqlDialect {
 public:
  virtual ~SqlDialect() = default;

  // "sqlite", "postgres" or "mysql" (MySQL and MariaDB).
  virtual std::string_view name() const = 0;

  // `insert` (INSERT INTO t (…) VALUES (…)) made to keep a row that is already
  // there under the same `key` column: the statement then counts 0 rows. Never
  // INSERT IGNORE, which would also count an over-long value as "already there".
  virtual std::string KeepExisting(std::string_view insert, std::string_view key) const = 0;

  // The suffix of a read that locks the rows it returns until the transaction
  // ends; "" where a write transaction holds the whole database (SQLite).
  virtual std::string_view ForUpdate() const = 0;

  // As ForUpdate, skipping rows other transactions hold (work queues).
  virtual std::string_view ForUpdateSkipLocked() const = 0;

  // True when INSERT … ON CONFLICT (k) DO UPDATE SET … RETURNING … works; false
  // where only ON DUPLICATE KEY UPDATE exists (MySQL).
  virtual bool UpsertReturning() const = 0;

  // The statements that make the step journal's tables where they are missing,
  // to run in order in one transaction (the first may take a lock that serializes
  // processes creating them together).
  virtual const std::vector<std::string>& JournalSchema() const = 0;
};

// What a database holds of idem's schema (StoreBackend::DescribeSchema; `idem migrate`).
struct SchemaInfo {
  int64_t version = 0;              // 0: no idem schema there
  int64_t build_version = 0;        // the version this build creates and reads
  std::vector<std::string> tables;  // idem's tables (idem_*), sorted
  // MySQL/MariaDB only: idem's stored procedures there (idem_claim_v1, …).
  std::optional<std::vector<std::string>> procedures;
  // OK when the store's user may create what is missing; else why not (what a
  // real `migrate` would fail on).
  absl::Status writable;
};

// The backend side of a Store: what the Guard, the server and the tools ask of a
// store beyond the user's calls. Every store is one.
class StoreBackend : public Store {
 public:
  // A transaction as Begin()'s whose calls never wait on another thread, a lock or
  // the disk's sync, for a server's network threads: a key another open
  // transaction holds answers RecordTransaction::TryLock's kWouldBlock at once, and
  // CommitAsync hands the commit to the store's writer. nullptr when this store
  // cannot (the default: its calls block on a database); non_blocking() says so
  // beforehand.
  virtual absl::StatusOr<std::unique_ptr<RecordTransaction>> BeginNonBlocking() { return nullptr; }

  // BeginNonBlocking(), made of `ended` (a transaction that has ended, of any
  // store, or null) when it is one of this store's: what it allocated (its
  // objects, its buffers) serves again, so a server's claim allocates nothing for
  // its transaction. The default lets `ended` go and begins another.
  virtual absl::StatusOr<std::unique_ptr<RecordTransaction>> RenewNonBlocking(
      std::unique_ptr<RecordTransaction> ended) {
    ended.reset();
    return BeginNonBlocking();
  }

  // True when BeginNonBlocking() gives transactions (rocksdb:// with its default
  // writer=queue).
  virtual bool non_blocking() const { return false; }

  // The store's own series in the Prometheus text format, for a server's /metrics
  // (rocksdb://: idem_store_write_batch_records); empty when it has none (the default).
  virtual std::string RenderMetrics() const { return {}; }

  // The duplicate fast path: returns the record of (tenant, key) only
  // when the store already knows its final state (SUCCEEDED or FAILED), which no
  // later claim can change; std::nullopt when it does not know (the default: ask
  // the database in a transaction). Never answers a PROCESSING record, a lease or a
  // released key, so a caller may decide from the answer without a transaction. A
  // cache decorator answers from its tiers (include/idem/cache.h). Errors are
  // advisory: a caller treats them as std::nullopt. Must not block for long.
  virtual absl::StatusOr<std::optional<Record>> LookupDecided(std::string_view tenant,
                                                              std::string_view key) {
    (void)tenant;
    (void)key;
    return std::nullopt;
  }

  // As LookupDecided, from what the store holds in this process's memory only: no
  // I/O, no waiting on anything but a short in-memory lock, so a server may call it
  // on a network thread (a cache decorator's L1). std::nullopt when it does not know.
  virtual std::optional<Record> PeekDecided(std::string_view tenant, std::string_view key) {
    (void)tenant;
    (void)key;
    return std::nullopt;
  }

  // Called with (tenant, key) whenever a claim of this store's database is completed,
  // failed or released by any process, where the database can say so (postgres://:
  // LISTEN/NOTIFY, sent in the finishing transaction, delivered at its commit; off
  // with notify=off). A server wakes the claims that wait on the key (wait_ms) at
  // once instead of at their next poll. Best effort: a notification can be missed
  // (a lost listening connection), so waiters still poll. `finished` runs on a
  // thread of the store's, one call at a time, and must be quick. Returns a handle
  // whose destruction ends the subscription (before the store is destroyed), or
  // nullptr when the store has no such notifications (the default).
  virtual std::shared_ptr<void> SubscribeFinished(
      std::function<void(std::string_view tenant, std::string_view key)> finished) {
    (void)finished;
    return nullptr;
  }

  // The records matching `query`, at most query.limit, without their result and
  // error (a page for people and for purge, not a replay), read outside any
  // transaction. Ordered by tenant, then key (in an order each store fixes; pages
  // of one store never skip or repeat a record that stays there: pass the last
  // one's (tenant, key) as query.after). kInvalidArgument for a limit outside
  // 1 … 10000; kUnimplemented on a store that cannot list (the default). Blocks.
  absl::StatusOr<std::vector<Record>> ListRecords(const RecordQuery& query) override {
    (void)query;
    return absl::UnimplementedError("this store cannot list its records");
  }

  // The SQL dialect of this store's transactions, or nullptr when it runs no SQL
  // (memory://).
  virtual const SqlDialect* sql_dialect() const { return nullptr; }

  bool SupportsSql() const override { return sql_dialect() != nullptr; }

  // What the store's database holds of idem's schema, read without changing
  // anything. kUnimplemented for a store without a schema (memory://).
  virtual absl::StatusOr<SchemaInfo> DescribeSchema() {
    return absl::UnimplementedError("this store has no schema (it lives inside one process)");
  }

  // True for a store opened with StoreOptions::read_only: nothing may create or
  // change its tables (the step runner checks its journal instead of creating it).
  virtual bool read_only() const { return false; }
};

// The backend side of `store`, of `tx` (any Store, any transaction of Store::Begin).
inline StoreBackend& Backend(Store& store) { return static_cast<StoreBackend&>(store); }
inline const StoreBackend& Backend(const Store& store) {
  return static_cast<const StoreBackend&>(store);
}
inline RecordTransaction& Records(StoreTransaction& tx) {
  return static_cast<RecordTransaction&>(tx);
}

// store.Begin(), as the transaction's backend side.
inline absl::StatusOr<std::unique_ptr<RecordTransaction>> BeginRecords(Store& store) {
  absl::StatusOr<std::unique_ptr<StoreTransaction>> tx = store.Begin();
  if (!tx.ok()) return tx.status();
  return std::unique_ptr<RecordTransaction>(&Records(*tx->release()));
}

}  // namespace idem
