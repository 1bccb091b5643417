// Store: where dedupe records live, and the local database transaction that a
// guarded handler shares with them.
//
// Get one with idem::OpenStore(url) (include/idem/idem.h). Backends: memory://
// (reference, no SQL), sqlite://PATH, rocksdb://DIR (key/value, no SQL),
// postgres://, mysql://.
//
// A handler sees only `Transaction` (its SQL runs in the same transaction as the
// dedupe record). Store::Begin() gives a `StoreTransaction` of one's own, to run
// SQL and commit it. The stores themselves are idem's: a program uses them, it
// does not implement one.
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

// True for an error of a statement that broke a unique or primary key (SQLite,
// PostgreSQL 23505, MySQL 1062): a kInvalidArgument.
bool IsUniqueViolation(const absl::Status& status);

// True for an error that is the store's fault, not the request's: a missing or
// wrong schema, permission denied, disk full, a read-only, deleted or replaced
// database file, a lost connection. Such an error is always kUnavailable: fail
// closed and retry later, never cache it as the request's failure.
bool IsStoreFault(const absl::Status& status);

// A SQL statement with `?` placeholders and its bound values, known before it
// runs (Guard::Run's first statement).
struct Statement {
  std::string sql;
  std::vector<Value> params;
};

class RecordTransaction;
class StoreBackend;

// A transaction of one's own (Store::Begin): a Transaction that the caller commits
// or rolls back.
class StoreTransaction : public Transaction {
 public:
  // Commits. On error nothing was committed (kUnavailable / kAborted: retry).
  virtual absl::Status Commit() = 0;

  // Rolls back; also done by the destructor of an uncommitted transaction.
  virtual void Rollback() = 0;

 private:
  // Only the stores make transactions.
  friend class RecordTransaction;
  StoreTransaction() = default;
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

class Store {
 public:
  virtual ~Store() = default;

  // Begins a read-write transaction that serializes with every other claim of the
  // same key. Blocks up to the store's lock timeout; kUnavailable when the store
  // cannot be reached or stays locked past it.
  virtual absl::StatusOr<std::unique_ptr<StoreTransaction>> Begin() = 0;

  // Reads the record of (tenant, key) outside any transaction, or std::nullopt.
  virtual absl::StatusOr<std::optional<Record>> Get(std::string_view tenant,
                                                    std::string_view key) = 0;

  // The records matching `query`, at most query.limit, without their result and
  // error (a page for people and for purge, not a replay), read outside any
  // transaction. Ordered by tenant, then key (in an order each store fixes; pages
  // of one store never skip or repeat a record that stays there: pass the last
  // one's (tenant, key) as query.after). kInvalidArgument for a limit outside
  // 1 … 10000; kUnimplemented on a store that cannot list. Blocks.
  virtual absl::StatusOr<std::vector<Record>> ListRecords(const RecordQuery& query) = 0;

  // Returns OK when the store answers (readiness), kUnavailable otherwise.
  virtual absl::Status Ping() = 0;

  // True when Transaction::Exec/Query run SQL on this store.
  virtual bool SupportsSql() const = 0;

  // The URL this store was opened with, with any password removed.
  virtual std::string_view url() const = 0;

 private:
  // Only idem's stores implement a Store.
  friend class StoreBackend;
  Store() = default;
};

}  // namespace idem
