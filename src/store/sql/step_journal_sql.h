// The step journal's statements: the operation, step and object-lock tables that
// StepRunner keeps through src/core/step_journal.cc, written once with `?`
// placeholders (PostgreSQL's connection numbers them). Where the databases differ
// (locking reads, inserts that keep an existing row) the statement is made from the
// store's SqlDialect; the tables themselves are SqlDialect::JournalSchema()
// (dialect.cc). Not part of the public API.
//
// Thread safety: a StepJournalSql is immutable after construction.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "idem/store.h"
#include "store/backend.h"

namespace idem::sql {

#define IDEM_SQL_OPERATION_COLUMNS                                                      \
  "biz_key, op_type, object_key, status, input, next_retry_at, lease_token, lease_until, " \
  "blocked_by, last_error, created_at, updated_at"
#define IDEM_SQL_STEP_COLUMNS                                                          \
  "step_seq, name, status, request_id, payload, retry_count, compensate_failures, " \
  "next_retry_at, last_error, updated_at"

// What every read of operations returns, and InsertOperation() writes, in this order.
inline constexpr std::string_view kOperationColumns = IDEM_SQL_OPERATION_COLUMNS;
inline constexpr size_t kOperationColumnCount = 12;
// What every read of steps returns, in this order; InsertSteps() writes biz_key first.
inline constexpr std::string_view kStepColumns = IDEM_SQL_STEP_COLUMNS;
inline constexpr size_t kStepColumnCount = 10;

inline constexpr std::string_view kSelectJournalVersion =
    "SELECT MAX(version) FROM idem_journal_version";
inline constexpr std::string_view kInsertJournalVersion =
    "INSERT INTO idem_journal_version (version) VALUES (?)";

// The steps of a biz_key, in order. Parameter: biz_key.
inline constexpr std::string_view kSelectSteps =
    "SELECT " IDEM_SQL_STEP_COLUMNS " FROM idem_steps WHERE biz_key = ? ORDER BY step_seq";

// Operations that need a look (StepRunner::ListStuck), oldest first. Parameters:
// PENDING, COMPENSATING, now, now, COMPENSATION_REQUIRED, now, UNKNOWN (a step's),
// limit.
inline constexpr std::string_view kSelectStuck =
    "SELECT " IDEM_SQL_OPERATION_COLUMNS " FROM idem_operations"
    " WHERE (status IN (?, ?) AND next_retry_at <= ? AND lease_until <= ?) OR status = ?"
    " OR (lease_until <= ? AND biz_key IN (SELECT biz_key FROM idem_steps WHERE status = ?))"
    " ORDER BY created_at LIMIT ?";

#undef IDEM_SQL_OPERATION_COLUMNS
#undef IDEM_SQL_STEP_COLUMNS

// Moves a lease on while the expected token holds it. Parameters: new token,
// lease_until, now, biz_key, expected token.
inline constexpr std::string_view kTakeLease =
    "UPDATE idem_operations SET lease_token = ?, lease_until = ?, updated_at = ?,"
    " writes = writes + 1 WHERE biz_key = ? AND lease_token = ?";

// Extends a lease while `token` holds it. `writes` always changes, so MariaDB (which
// counts changed, not matched, rows) reports 1 even when the clock has not moved.
// Parameters: lease_until, now, biz_key, token.
inline constexpr std::string_view kRenewLease =
    "UPDATE idem_operations SET lease_until = ?, updated_at = ?,"
    " writes = writes + 1 WHERE biz_key = ? AND lease_token = ?";

// Parameters: status, next_retry_at, blocked_by, last_error, now, biz_key.
inline constexpr std::string_view kUpdateOperation =
    "UPDATE idem_operations SET status = ?, next_retry_at = ?, blocked_by = ?,"
    " last_error = ?, updated_at = ?, writes = writes + 1 WHERE biz_key = ?";

// Takes an object's lock, or locks the row of the holder that has it, and returns
// the holder, in one statement where SqlDialect::UpsertReturning(). A no-op update
// of an existing row locks it; INSERT … DO NOTHING then SELECT would race on
// PostgreSQL (the holder may delete the row in between, and READ COMMITTED's next
// snapshot sees none). Parameters: object_key, holder, now.
inline constexpr std::string_view kUpsertObjectLock =
    "INSERT INTO idem_object_locks (object_key, holder, acquired_at) VALUES (?, ?, ?)"
    " ON CONFLICT (object_key) DO UPDATE SET holder = idem_object_locks.holder"
    " RETURNING holder";

// Parameters: object_key, holder.
inline constexpr std::string_view kDeleteObjectLock =
    "DELETE FROM idem_object_locks WHERE object_key = ? AND holder = ?";

// An operation, if it is still in the expected status and unchanged since the
// expected updated_at. Parameters: biz_key, status, updated_at.
inline constexpr std::string_view kDeleteOperation =
    "DELETE FROM idem_operations WHERE biz_key = ? AND status = ? AND updated_at = ?";
// Parameter: biz_key.
inline constexpr std::string_view kDeleteSteps = "DELETE FROM idem_steps WHERE biz_key = ?";
// Every lock a biz_key holds. Parameter: the holder's biz_key.
inline constexpr std::string_view kDeleteHolderLocks =
    "DELETE FROM idem_object_locks WHERE holder = ?";

// The statements that differ between the databases, made once from a dialect.
class StepJournalSql {
 public:
  explicit StepJournalSql(const SqlDialect& dialect);

  const SqlDialect& dialect() const { return *dialect_; }

  // A new operation row (kOperationColumns), keeping one already there under its
  // biz_key: it then counts 0 rows.
  const std::string& InsertOperation() const { return insert_operation_; }

  // `rows` step rows in one statement, each (biz_key, kStepColumns).
  static std::string InsertSteps(size_t rows);

  // One operation by biz_key; with `for_update`, locked for the transaction.
  // Parameter: biz_key.
  const std::string& SelectOperation(bool for_update) const {
    return select_operation_[for_update ? 1 : 0];
  }

  // An operation's columns (kOperationColumns) then one step's (kStepColumns), one
  // row per step in order: an operation with its steps in one round trip. An
  // inner join: every operation has its steps (inserted with it), and PostgreSQL
  // cannot lock the nullable side of an outer join. Parameter: biz_key.
  const std::string& SelectJournal(bool for_update) const {
    return select_journal_[for_update ? 1 : 0];
  }

  // Due operations of `types` op types, oldest due first, skipping rows other
  // transactions hold where the dialect can. Parameters: PENDING, COMPENSATING,
  // now, now, the `types` op types, limit.
  std::string SelectDue(size_t types) const;

  // Finished operations of one op type, locked, in biz_key order. Parameters:
  // op_type, SUCCESS, COMPENSATED, cutoff, now, after (a biz_key), limit.
  const std::string& SelectFinished() const { return select_finished_; }

  // Overwrites a step's journal values (and its payload with `payload`) unless it
  // is in one of `unless` statuses. Parameters: status, retry_count,
  // compensate_failures, next_retry_at, last_error, now, [payload,] biz_key,
  // step_seq, then the `unless` statuses.
  static std::string UpdateStep(bool payload, size_t unless);

  // Where !UpsertReturning(): the insert of an object lock, keeping the holder's
  // row (0 rows), then the locking read of its holder (ON DUPLICATE KEY UPDATE has
  // locked that row). Parameters: object_key, holder, now; then object_key.
  const std::string& InsertObjectLock() const { return insert_object_lock_; }
  const std::string& SelectObjectLockHolder() const { return select_object_lock_holder_; }

 private:
  const SqlDialect* dialect_;  // the store's, which lives as long as the program
  std::string insert_operation_;
  std::string select_operation_[2];  // by for_update
  std::string select_journal_[2];    // by for_update
  std::string select_finished_;
  std::string insert_object_lock_;
  std::string select_object_lock_holder_;
};

}  // namespace idem::sql
