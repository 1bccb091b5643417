// The step journal: the operation, step and object-lock tables of
// StepRunner, written through the Store's Transaction. The statements live with
// the SQL layer (store/sql/step_journal_sql.h), made for the store's SqlDialect;
// this binds their parameters and reads their rows. Internal to src/core.
//
// Tables (times are unix microseconds, 0 = none):
//   idem_operations   one row per operation; its status, input, lease (a token
//                     that grows on every takeover) and next_retry_at
//   idem_steps        one row per (biz_key, step_seq): status, request_id,
//                     payload, retry_count, next_retry_at, updated_at
//   idem_object_locks one row per locked business object, held by a biz_key
//
// Thread safety: a Journal is immutable after construction; its functions use
// only the Transaction they are given.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "idem/steps.h"
#include "idem/store.h"
#include "store/backend.h"
#include "store/sql/step_journal_sql.h"

namespace idem::steps {

// The SQL dialect of `store`. kFailedPrecondition for a store without SQL
// (memory://).
absl::StatusOr<const SqlDialect*> DialectOf(const Store& store);

// An operation row, with the lease fields StepRunner fences its writes on.
struct OperationRow {
  OperationState state;  // without steps
  int64_t lease_token = 0;
};

// One step's new journal values (a full overwrite of the mutable columns).
struct StepUpdate {
  int step_seq = 0;
  StepStatus status = StepStatus::kPending;
  std::optional<std::string> payload;  // unset: keep the stored one
  int retry_count = 0;
  int compensate_failures = 0;
  absl::Time next_retry_at = absl::InfinitePast();
  std::string last_error;
};

class Journal {
 public:
  explicit Journal(const SqlDialect& dialect) : sql_(dialect) {}
  const SqlDialect& dialect() const { return sql_.dialect(); }

  // Creates the tables when missing and checks the journal version.
  // kFailedPrecondition for a journal of a newer idem.
  absl::Status Migrate(Store& store) const;

  // Checks, without creating or changing anything, that the journal is there and
  // not newer than this idem: kFailedPrecondition ("no idem step journal here", or
  // a newer version) otherwise. For read-only stores.
  absl::Status Check(Store& store) const;

  // Inserts a new operation row (lease token 1) and its step rows unless
  // `state.biz_key` exists. Returns whether it inserted.
  absl::StatusOr<bool> InsertOperation(Transaction& tx, const OperationState& state,
                                       absl::Time lease_until) const;

  // The operation row, or std::nullopt; with `for_update`, locked for this
  // transaction (FOR UPDATE where the dialect has it).
  absl::StatusOr<std::optional<OperationRow>> LoadOperation(Transaction& tx,
                                                            std::string_view biz_key,
                                                            bool for_update = true) const;

  // The operation row with its steps (in order), in one read, or std::nullopt;
  // with `for_update`, locked for this transaction. The steps' compensation
  // counters go to `compensate_failures` (same order), when non-null.
  absl::StatusOr<std::optional<OperationRow>> LoadJournal(
      Transaction& tx, std::string_view biz_key, bool for_update,
      std::vector<int>* compensate_failures) const;

  // The steps of `biz_key` in order, with their internal compensation counters
  // in `compensate_failures` (same order), when non-null.
  absl::StatusOr<std::vector<StepRecord>> LoadSteps(Transaction& tx, std::string_view biz_key,
                                                    std::vector<int>* compensate_failures) const;

  // Moves the lease of `biz_key` from `token` to `new_token`, until `lease_until`.
  // Returns false when the stored token is not `token` (someone else moved it).
  absl::StatusOr<bool> TakeLease(Transaction& tx, std::string_view biz_key, int64_t token,
                                 int64_t new_token, absl::Time lease_until, absl::Time now) const;

  // The fence of every runner write: extends the lease of `biz_key` while
  // `token` holds it. Returns false when it does not (the lease was taken over).
  absl::StatusOr<bool> RenewLease(Transaction& tx, std::string_view biz_key, int64_t token,
                                  absl::Time lease_until, absl::Time now) const;

  // Sets the operation's status, next_retry_at, blocked_by and last_error.
  absl::Status UpdateOperation(Transaction& tx, std::string_view biz_key, OperationStatus status,
                               absl::Time next_retry_at, std::string_view blocked_by,
                               std::string_view last_error, absl::Time now) const;

  // Writes a step's journal values unless the step is in one of the statuses of
  // `unless` (e.g. never overwrite SUCCESS with a failure). Returns whether it wrote.
  absl::StatusOr<bool> UpdateStep(Transaction& tx, std::string_view biz_key,
                                  const StepUpdate& update,
                                  std::initializer_list<StepStatus> unless, absl::Time now) const;

  // Takes the lock of `object_key` for `holder` unless another holds it. Returns
  // the holder after the call (== holder: taken or already ours).
  absl::StatusOr<std::string> LockObject(Transaction& tx, std::string_view object_key,
                                         std::string_view holder, absl::Time now) const;
  absl::Status UnlockObject(Transaction& tx, std::string_view object_key,
                            std::string_view holder) const;

  // Due operations of `types` (PENDING/COMPENSATING, next_retry_at <= now, lease
  // ended), oldest due first, locked for this transaction, skipping rows other
  // transactions hold (SKIP LOCKED where the dialect has it).
  absl::StatusOr<std::vector<OperationRow>> SelectDue(Transaction& tx,
                                                      const std::vector<std::string>& types,
                                                      absl::Time now, int limit) const;

  // Operations that need a look (see StepRunner::ListStuck), oldest first.
  absl::StatusOr<std::vector<OperationRow>> SelectStuck(Transaction& tx, absl::Time now,
                                                        int limit) const;

  // Retention: finished operations (SUCCESS, COMPENSATED; never one still
  // running or needing a person) of `op_type`, last changed at or before `cutoff`
  // and without a live lease at `now`, with a biz_key after `after`, in biz_key
  // order, at most `limit`, locked for this transaction.
  absl::StatusOr<std::vector<OperationRow>> SelectFinished(Transaction& tx,
                                                           std::string_view op_type,
                                                           absl::Time cutoff, absl::Time now,
                                                           std::string_view after,
                                                           int limit) const;

  // Deletes operation `row` with its steps and object locks, if it is still in
  // row's status and unchanged since row's updated_at. Returns whether it did.
  absl::StatusOr<bool> DeleteOperation(Transaction& tx, const OperationRow& row) const;

 private:
  // Runs `select` (returning sql::kOperationColumns) and reads its rows.
  absl::StatusOr<std::vector<OperationRow>> SelectOperations(Transaction& tx,
                                                             std::string_view select,
                                                             std::vector<Value> params) const;
  sql::StepJournalSql sql_;
};

// "idem-" + 32 hex digits of SHA-256(biz_key, NUL, step_seq).
std::string RequestIdFor(std::string_view biz_key, int step_seq);

}  // namespace idem::steps
