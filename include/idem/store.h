// Store: where dedupe records live, and the local database transaction that a
// guarded handler shares with them.
//
// Get one with idem::OpenStore(url) (include/idem/idem.h). Backends: memory://
// (reference, no SQL), sqlite://PATH, rocksdb://DIR (key/value, no SQL),
// postgres://, mysql://.
//
// A handler sees only `Transaction` (its SQL runs in the same transaction as the
// dedupe record). `StoreTransaction` and `Store` are the backend interface the
// Guard drives; applications rarely call them directly.
//
// Thread safety: every Store is safe for concurrent use. A Transaction belongs to
// one thread at a time and must not outlive its Store.
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
#include "idem/value.h"

namespace idem {

// The caller's handle on the local transaction a guarded handler runs in.
class Transaction {
 public:
  virtual ~Transaction() = default;

  // Runs one SQL statement with `?` placeholders bound to `params`, in this
  // transaction. Returns the number of rows changed. Errors: kInvalidArgument for
  // bad SQL (a syntax error, wrong parameter count) or a constraint violation (final,
  // the caller's); kUnavailable for a lost or locked database and for the store's
  // faults (IsStoreFault: a missing table or column, no privilege, a read-only or
  // full database; retryable); kAborted for a deadlock or serialization failure
  // (retryable); kUnimplemented on a store without SQL (memory://). Blocks.
  // After a failed Exec or Query only Rollback is defined on every backend
  // (PostgreSQL refuses anything else until then, SQLite and MySQL would go on): a
  // caller that means to go on after an expected failure uses TryExec.
  virtual absl::StatusOr<int64_t> Exec(std::string_view sql, absl::Span<const Value> params = {}) = 0;

  // Exec under a savepoint: on an error the statement's effects are undone and the
  // transaction stays usable, on every backend. Returns Exec's result and errors.
  absl::StatusOr<int64_t> TryExec(std::string_view sql, absl::Span<const Value> params = {});

  // Runs a query, as Exec, and returns its rows.
  virtual absl::StatusOr<Rows> Query(std::string_view sql, absl::Span<const Value> params = {}) = 0;

  // Runs a query, as Query, handing its rows to `page` as they are read, at most
  // `page_rows` at a time (each page carries the columns; `page` is called at least
  // once, with no rows for an empty result), so memory stays bounded whatever the
  // result's size. Stops at the first error `page` returns and returns
  // it; `page` must not use this transaction. Errors as Query; kUnimplemented where
  // the store cannot stream a result (the default: every store but sqlite://), so a
  // caller pages with LIMIT or a cursor there instead.
  virtual absl::Status QueryPages(std::string_view sql, absl::Span<const Value> params,
                                  size_t page_rows, const std::function<absl::Status(Rows&)>& page);

  // State-machine transition:
  //   UPDATE <table> SET <status_column> = to WHERE <id_column> = id AND <status_column> = from
  // Returns true when the row moved, false when it did not (already moved: a
  // duplicate). Identifiers must be plain SQL names ([A-Za-z_][A-Za-z0-9_]*), else
  // kInvalidArgument.
  absl::StatusOr<bool> Transition(std::string_view table, std::string_view id_column,
                                  const Value& id, std::string_view status_column,
                                  const Value& from, const Value& to);

  // Optimistic-version update:
  //   UPDATE <table> SET <assignments>, <version_column> = <version_column> + 1
  //   WHERE <id_column> = id AND <version_column> = expected_version
  // `assignments` is a list of (column, value). Returns true when the row was
  // updated, false when its version moved on (a concurrent writer won).
  absl::StatusOr<bool> UpdateVersioned(
      std::string_view table, std::string_view id_column, const Value& id,
      std::string_view version_column, int64_t expected_version,
      absl::Span<const std::pair<std::string, Value>> assignments);

  // Dedupe journal, a consumer's third way (after Guard and the transition above) to
  // apply an event once:
  //   INSERT INTO <table> (<biz_id_column>, <event_type_column>) VALUES (biz_id, event_type)
  // in this transaction, where `table` has a unique key over the two columns.
  // Returns true when the row is new (the event was not processed yet: do its
  // effect here, in the same transaction), false when it was there (a duplicate:
  // skip it). Either way the transaction stays usable: the insert runs under a
  // savepoint, so a duplicate does not abort a PostgreSQL transaction. Identifiers
  // must be plain SQL names, else kInvalidArgument; other errors as Exec.
  absl::StatusOr<bool> RecordEvent(std::string_view table, std::string_view biz_id_column,
                                   const Value& biz_id, std::string_view event_type_column,
                                   const Value& event_type);
};

// The status payload the SQL backends attach to the kInvalidArgument of a statement
// that broke a unique or primary key (SQLite, PostgreSQL 23505, MySQL 1062).
inline constexpr std::string_view kUniqueViolationPayload = "type.idem.dev/unique-violation";

// True for a status carrying kUniqueViolationPayload.
bool IsUniqueViolation(const absl::Status& status);

// `status` with kUniqueViolationPayload attached.
absl::Status MarkUniqueViolation(absl::Status status);

// A SQL statement with `?` placeholders and its bound values, known before it
// runs (Guard::Run's first statement).
struct Statement {
  std::string sql;
  std::vector<Value> params;
};

// The status payload a backend attaches to the kUnavailable of InsertOrLoad/Load
// when the key's row stayed locked by another open transaction past the lock
// timeout: another claim of the same key is in progress (not yet committed). The
// Guard answers Outcome::kInProgress for it instead of an error.
inline constexpr std::string_view kClaimContendedPayload = "type.idem.dev/claim-contended";

// Returns a kUnavailable status with `message` and kClaimContendedPayload.
absl::Status ClaimContendedError(std::string_view message);

// True for a status made by ClaimContendedError (or carrying its payload).
bool IsClaimContended(const absl::Status& status);

// The status payload of a transaction from Store::BeginNonBlocking that would
// have had to wait (a key another open transaction holds): nothing was decided,
// and the caller does the same work again on a transaction of Begin(), which waits.
inline constexpr std::string_view kWouldBlockPayload = "type.idem.dev/would-block";

// Returns a kUnavailable status with `message` and kWouldBlockPayload.
absl::Status WouldBlockError(std::string_view message);

// True for a status made by WouldBlockError (or carrying its payload).
bool IsWouldBlock(const absl::Status& status);

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
// retry the whole transaction), a ClaimContendedError and a WouldBlockError stay
// as they are.
absl::Status AsStoreFault(const absl::Status& status);
// The same for a value or its error.
template <typename T>
absl::StatusOr<T> AsStoreFault(absl::StatusOr<T> value) {
  if (!value.ok()) return AsStoreFault(value.status());
  return value;
}

// True for a status that carries kStoreFaultPayload.
bool IsStoreFault(const absl::Status& status);

// The backend side of a transaction: record operations for the Guard.
class StoreTransaction : public Transaction {
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
  virtual absl::StatusOr<std::vector<bool>> ReplaceMany(
      absl::Span<const Replacement> replacements);

  // Reads the record of (tenant, key) in this transaction, or std::nullopt.
  virtual absl::StatusOr<std::optional<Record>> Load(std::string_view tenant,
                                                     std::string_view key) = 0;

  // Commits. On error nothing was committed (kUnavailable / kAborted: retry).
  virtual absl::Status Commit() = 0;

  // Commit() without blocking the calling thread, for a transaction of
  // Store::BeginNonBlocking: `done` is called once with what Commit() would
  // return, once the commit is durable, on a thread of the store's (it must be
  // quick: other commits wait behind it), or on this thread before this returns
  // when the commit ended at once. This transaction must stay alive until `done`
  // has been called, and `done` may destroy it. The default calls Commit(), then
  // `done`.
  virtual void CommitAsync(std::function<void(absl::Status)> done) { done(Commit()); }

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

  // Rolls back; also done by the destructor of an uncommitted transaction.
  virtual void Rollback() = 0;

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

// Which records Store::ListRecords returns: every condition that is set must hold.
struct RecordQuery {
  std::optional<std::string> tenant;  // unset: every tenant
  std::optional<std::string> biz_type;
  std::vector<RecordState> states;  // empty: any state
  std::optional<bool> purged;       // true: tombstones only; false: live records only
  absl::Time created_before = absl::InfiniteFuture();  // created_at < this
  absl::Time created_since = absl::InfinitePast();     // created_at >= this
  absl::Time expires_by = absl::InfiniteFuture();      // expires_at <= this
  // Continue after this (tenant, key): the last record of the previous page.
  std::optional<std::pair<std::string, std::string>> after;
  int limit = 100;  // at most this many (1 … 10000)
};

// What differs between the SQL databases behind the stores, for the SQL that
// idem's own layers run inside a store's transactions (the step journal).
// A SQL store supplies one (Store::sql_dialect()); code above the store asks it
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

// What a database holds of idem's schema (Store::DescribeSchema; `idem migrate`).
struct SchemaInfo {
  int64_t version = 0;        // 0: no idem schema there
  int64_t build_version = 0;  // the version this build creates and reads
  std::vector<std::string> tables;  // idem's tables (idem_*), sorted
  // MySQL/MariaDB only: idem's stored procedures there (idem_claim_v1, …).
  std::optional<std::vector<std::string>> procedures;
  // OK when the store's user may create what is missing; else why not (what a
  // real `migrate` would fail on).
  absl::Status writable;
};

class Store {
 public:
  virtual ~Store() = default;

  // Begins a read-write transaction that serializes with every other claim of the
  // same key. Blocks up to the store's lock timeout; kUnavailable when the store
  // cannot be reached or stays locked past it.
  virtual absl::StatusOr<std::unique_ptr<StoreTransaction>> Begin() = 0;

  // A transaction as Begin()'s whose calls never wait on another thread, a lock or
  // the disk's sync, for a server's network threads: a key another open
  // transaction holds answers a WouldBlockError at once, and CommitAsync hands the
  // commit to the store's writer. nullptr when this store cannot (the default:
  // its calls block on a database); non_blocking() says so beforehand.
  virtual absl::StatusOr<std::unique_ptr<StoreTransaction>> BeginNonBlocking() { return nullptr; }

  // True when BeginNonBlocking() gives transactions (rocksdb:// with its default
  // writer=queue).
  virtual bool non_blocking() const { return false; }

  // Reads the record of (tenant, key) outside any transaction, or std::nullopt.
  virtual absl::StatusOr<std::optional<Record>> Get(std::string_view tenant,
                                                    std::string_view key) = 0;

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
  virtual absl::StatusOr<std::vector<Record>> ListRecords(const RecordQuery& query) {
    (void)query;
    return absl::UnimplementedError("this store cannot list its records");
  }

  // Returns OK when the store answers (readiness), kUnavailable otherwise.
  virtual absl::Status Ping() = 0;

  // The SQL dialect of this store's transactions, or nullptr when it runs no SQL
  // (memory://).
  virtual const SqlDialect* sql_dialect() const { return nullptr; }

  // True when Transaction::Exec/Query run SQL on this store.
  virtual bool SupportsSql() const { return sql_dialect() != nullptr; }

  // What the store's database holds of idem's schema, read without changing
  // anything. kUnimplemented for a store without a schema (memory://).
  virtual absl::StatusOr<SchemaInfo> DescribeSchema() {
    return absl::UnimplementedError("this store has no schema (it lives inside one process)");
  }

  // True for a store opened with StoreOptions::read_only: nothing may create or
  // change its tables (the step runner checks its journal instead of creating it).
  virtual bool read_only() const { return false; }

  // The URL this store was opened with, with any password removed.
  virtual std::string_view url() const = 0;
};

}  // namespace idem
