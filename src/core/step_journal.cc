#include "core/step_journal.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "idem/fingerprint.h"
#include "idem/status.h"
#include "store/absl_compat.h"
#include "store/backend.h"
#include "store/sql/columns.h"

namespace idem::steps {
namespace {

constexpr int kJournalVersion = 1;

Value Int(int64_t v) { return Value(static_cast<long long>(v)); }
Value Micros(absl::Time t) { return Int(ToMicros(t)); }
// Keys are opaque bytes: bound as blobs everywhere, stored in
// BLOB/BYTEA/VARBINARY columns, so NUL and non-UTF-8 bytes survive and every
// comparison is bytewise.
Value Key(std::string_view k) { return Value(Blob{std::string(k)}); }

// Column values come back as text or as blobs depending on the backend's column
// type (MariaDB VARBINARY, PostgreSQL BYTEA); both read as bytes here.
std::string Str(const Value& v) { return BytesOf(v); }

absl::StatusOr<StepStatus> ParseStepStatus(std::string_view s) {
  for (StepStatus st : {StepStatus::kPending, StepStatus::kSuccess, StepStatus::kFailed,
                        StepStatus::kUnknown, StepStatus::kCompensated}) {
    if (StepStatusName(st) == s) return st;
  }
  return absl::DataLossError(absl::StrCat("step journal: unknown step status \"", AV(s), "\""));
}

absl::StatusOr<OperationStatus> ParseOperationStatus(std::string_view s) {
  for (OperationStatus st :
       {OperationStatus::kPending, OperationStatus::kSuccess, OperationStatus::kCompensating,
        OperationStatus::kCompensated, OperationStatus::kCompensationRequired}) {
    if (OperationStatusName(st) == s) return st;
  }
  return absl::DataLossError(
      absl::StrCat("step journal: unknown operation status \"", AV(s), "\""));
}

Value StatusValue(StepStatus s) { return Value(StepStatusName(s)); }
Value StatusValue(OperationStatus s) { return Value(OperationStatusName(s)); }

}  // namespace

absl::StatusOr<const SqlDialect*> DialectOf(const Store& store) {
  const SqlDialect* dialect = Backend(store).sql_dialect();
  if (dialect == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "steps need a SQL store (sqlite://, postgres://, mysql://); ", AV(store.url()),
        " has no SQL"));
  }
  return dialect;
}

std::string RequestIdFor(std::string_view biz_key, int step_seq) {
  std::string material(biz_key);
  material.push_back('\0');
  absl::StrAppend(&material, step_seq);
  return absl::StrCat("idem-", AV(Fingerprint(material).substr(0, 32)));
}

namespace {

// The journal version in `rows` (SELECT MAX(version) …; 0 when there is none).
// kFailedPrecondition for a journal of a newer idem.
absl::StatusOr<int64_t> JournalVersionOf(const Rows& rows) {
  int64_t version = 0;
  if (!rows.rows.empty() && !rows.rows[0].empty() && !rows.rows[0][0].is_null()) {
    IDEM_ASSIGN_OR_RETURN(version, IntOf(rows.rows[0][0], "version"));
  }
  if (version > kJournalVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the step journal has version ", version, ", newer than this idem's ", kJournalVersion,
        ": upgrade idem"));
  }
  return version;
}

}  // namespace

absl::Status Journal::Check(Store& store) const {
  IDEM_ASSIGN_OR_RETURN(std::unique_ptr<StoreTransaction> tx, store.Begin());
  absl::StatusOr<Rows> rows = tx->Query(sql::kSelectJournalVersion);
  if (!rows.ok()) {
    if (!IsStoreFault(rows.status())) return rows.status();
    return absl::FailedPreconditionError(
        absl::StrCat("no idem step journal here (", rows.status().message(), ")"));
  }
  IDEM_ASSIGN_OR_RETURN(int64_t version, JournalVersionOf(*rows));
  if (version == 0) return absl::FailedPreconditionError("no idem step journal here");
  tx->Rollback();
  return absl::OkStatus();
}

absl::Status Journal::Migrate(Store& store) const {
  IDEM_ASSIGN_OR_RETURN(std::unique_ptr<StoreTransaction> tx, store.Begin());
  for (const std::string& statement : sql_.dialect().JournalSchema()) {
    absl::Status s = tx->Exec(statement).status();
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat("creating the step journal: ", s.message()));
    }
  }
  IDEM_ASSIGN_OR_RETURN(Rows rows, tx->Query(sql::kSelectJournalVersion));
  IDEM_ASSIGN_OR_RETURN(int64_t version, JournalVersionOf(rows));
  if (version == 0) {
    IDEM_RETURN_IF_ERROR(tx->Exec(sql::kInsertJournalVersion, {Int(kJournalVersion)}).status());
  }
  return tx->Commit();
}

absl::StatusOr<bool> Journal::InsertOperation(Transaction& tx, const OperationState& state,
                                              absl::Time lease_until) const {
  IDEM_ASSIGN_OR_RETURN(
      int64_t inserted,
      tx.Exec(sql_.InsertOperation(),
              {Key(state.biz_key), Value(state.type), Key(state.object_key),
               StatusValue(state.status), Value(Blob{state.input}), Micros(state.next_retry_at),
               Int(1), Micros(lease_until), Key(state.blocked_by), Value(Blob{}),
               Micros(state.created_at), Micros(state.updated_at)}));
  if (inserted == 0) return false;
  // Every step row in one statement: one round trip however many steps.
  std::vector<Value> params;
  params.reserve(state.steps.size() * (1 + sql::kStepColumnCount));
  for (const StepRecord& step : state.steps) {
    for (Value v : {Key(state.biz_key), Int(step.step_seq), Value(step.name),
                    StatusValue(step.status), Value(step.request_id), Value(Blob{}), Int(0),
                    Int(0), Int(0), Value(Blob{}), Micros(state.created_at)}) {
      params.push_back(std::move(v));
    }
  }
  IDEM_RETURN_IF_ERROR(tx.Exec(sql::StepJournalSql::InsertSteps(state.steps.size()), params)
                           .status());
  return true;
}

namespace {

// The operation columns (sql::kOperationColumns order) starting at `r[at]`.
absl::StatusOr<OperationRow> ParseOperation(const std::vector<Value>& r, size_t at) {
  if (r.size() < at + sql::kOperationColumnCount) {
    return absl::DataLossError("step journal: idem_operations has a bad shape");
  }
  OperationRow row;
  OperationState& s = row.state;
  s.biz_key = Str(r[at + 0]);
  s.type = Str(r[at + 1]);
  s.object_key = Str(r[at + 2]);
  IDEM_ASSIGN_OR_RETURN(s.status, ParseOperationStatus(Str(r[at + 3])));
  s.input = Str(r[at + 4]);
  IDEM_ASSIGN_OR_RETURN(int64_t next, IntOf(r[at + 5], "next_retry_at"));
  s.next_retry_at = FromMicros(next);
  IDEM_ASSIGN_OR_RETURN(row.lease_token, IntOf(r[at + 6], "lease_token"));
  IDEM_ASSIGN_OR_RETURN(int64_t lease, IntOf(r[at + 7], "lease_until"));
  s.lease_until = FromMicros(lease);
  s.blocked_by = Str(r[at + 8]);
  s.last_error = Str(r[at + 9]);
  IDEM_ASSIGN_OR_RETURN(int64_t created, IntOf(r[at + 10], "created_at"));
  s.created_at = FromMicros(created);
  IDEM_ASSIGN_OR_RETURN(int64_t updated, IntOf(r[at + 11], "updated_at"));
  s.updated_at = FromMicros(updated);
  return row;
}

// The step columns (sql::kStepColumns order) starting at `r[at]`; their
// compensate_failures in `*comp`.
absl::StatusOr<StepRecord> ParseStep(const std::vector<Value>& r, size_t at, int* comp) {
  if (r.size() < at + sql::kStepColumnCount) {
    return absl::DataLossError("step journal: idem_steps has a bad shape");
  }
  StepRecord s;
  IDEM_ASSIGN_OR_RETURN(int64_t seq, IntOf(r[at + 0], "step_seq"));
  s.step_seq = static_cast<int>(seq);
  s.name = Str(r[at + 1]);
  IDEM_ASSIGN_OR_RETURN(s.status, ParseStepStatus(Str(r[at + 2])));
  s.request_id = Str(r[at + 3]);
  s.payload = Str(r[at + 4]);
  IDEM_ASSIGN_OR_RETURN(int64_t retries, IntOf(r[at + 5], "retry_count"));
  s.retry_count = static_cast<int>(retries);
  IDEM_ASSIGN_OR_RETURN(int64_t failures, IntOf(r[at + 6], "compensate_failures"));
  *comp = static_cast<int>(failures);
  IDEM_ASSIGN_OR_RETURN(int64_t next, IntOf(r[at + 7], "next_retry_at"));
  s.next_retry_at = FromMicros(next);
  s.last_error = Str(r[at + 8]);
  IDEM_ASSIGN_OR_RETURN(int64_t updated, IntOf(r[at + 9], "updated_at"));
  s.updated_at = FromMicros(updated);
  return s;
}

}  // namespace

absl::StatusOr<std::vector<OperationRow>> Journal::SelectOperations(
    Transaction& tx, std::string_view select, std::vector<Value> params) const {
  IDEM_ASSIGN_OR_RETURN(Rows rows, tx.Query(select, params));
  std::vector<OperationRow> out;
  out.reserve(rows.rows.size());
  for (const std::vector<Value>& r : rows.rows) {
    IDEM_ASSIGN_OR_RETURN(OperationRow row, ParseOperation(r, 0));
    out.push_back(std::move(row));
  }
  return out;
}

absl::StatusOr<std::optional<OperationRow>> Journal::LoadJournal(
    Transaction& tx, std::string_view biz_key, bool for_update,
    std::vector<int>* compensate_failures) const {
  IDEM_ASSIGN_OR_RETURN(Rows rows, tx.Query(sql_.SelectJournal(for_update), {Key(biz_key)}));
  if (compensate_failures != nullptr) compensate_failures->clear();
  if (rows.rows.empty()) return std::nullopt;
  IDEM_ASSIGN_OR_RETURN(OperationRow row, ParseOperation(rows.rows[0], 0));
  for (const std::vector<Value>& r : rows.rows) {
    int comp = 0;
    IDEM_ASSIGN_OR_RETURN(StepRecord step, ParseStep(r, sql::kOperationColumnCount, &comp));
    row.state.steps.push_back(std::move(step));
    if (compensate_failures != nullptr) compensate_failures->push_back(comp);
  }
  return row;
}

absl::StatusOr<std::optional<OperationRow>> Journal::LoadOperation(Transaction& tx,
                                                                   std::string_view biz_key,
                                                                   bool for_update) const {
  IDEM_ASSIGN_OR_RETURN(std::vector<OperationRow> rows,
                        SelectOperations(tx, sql_.SelectOperation(for_update), {Key(biz_key)}));
  if (rows.empty()) return std::nullopt;
  return std::move(rows[0]);
}

absl::StatusOr<std::vector<StepRecord>> Journal::LoadSteps(
    Transaction& tx, std::string_view biz_key, std::vector<int>* compensate_failures) const {
  IDEM_ASSIGN_OR_RETURN(Rows rows, tx.Query(sql::kSelectSteps, {Key(biz_key)}));
  std::vector<StepRecord> out;
  if (compensate_failures != nullptr) compensate_failures->clear();
  for (const std::vector<Value>& r : rows.rows) {
    int comp = 0;
    IDEM_ASSIGN_OR_RETURN(StepRecord s, ParseStep(r, 0, &comp));
    if (compensate_failures != nullptr) compensate_failures->push_back(comp);
    out.push_back(std::move(s));
  }
  return out;
}

absl::StatusOr<bool> Journal::TakeLease(Transaction& tx, std::string_view biz_key, int64_t token,
                                        int64_t new_token, absl::Time lease_until,
                                        absl::Time now) const {
  IDEM_ASSIGN_OR_RETURN(
      int64_t n,
      tx.Exec(sql::kTakeLease,
              {Int(new_token), Micros(lease_until), Micros(now), Key(biz_key), Int(token)}));
  return n == 1;
}

absl::StatusOr<bool> Journal::RenewLease(Transaction& tx, std::string_view biz_key, int64_t token,
                                         absl::Time lease_until, absl::Time now) const {
  IDEM_ASSIGN_OR_RETURN(
      int64_t n, tx.Exec(sql::kRenewLease,
                         {Micros(lease_until), Micros(now), Key(biz_key), Int(token)}));
  return n == 1;
}

absl::Status Journal::UpdateOperation(Transaction& tx, std::string_view biz_key,
                                      OperationStatus status, absl::Time next_retry_at,
                                      std::string_view blocked_by, std::string_view last_error,
                                      absl::Time now) const {
  return tx
      .Exec(sql::kUpdateOperation,
            {StatusValue(status), Micros(next_retry_at), Key(blocked_by),
             Value(Blob{std::string(last_error)}), Micros(now), Key(biz_key)})
      .status();
}

absl::StatusOr<bool> Journal::UpdateStep(Transaction& tx, std::string_view biz_key,
                                         const StepUpdate& u,
                                         std::initializer_list<StepStatus> unless,
                                         absl::Time now) const {
  std::vector<Value> params = {StatusValue(u.status), Int(u.retry_count),
                               Int(u.compensate_failures), Micros(u.next_retry_at),
                               Value(Blob{u.last_error}), Micros(now)};
  if (u.payload.has_value()) params.push_back(Value(Blob{*u.payload}));
  params.push_back(Key(biz_key));
  params.push_back(Int(u.step_seq));
  for (StepStatus s : unless) params.push_back(StatusValue(s));
  IDEM_ASSIGN_OR_RETURN(
      int64_t n,
      tx.Exec(sql::StepJournalSql::UpdateStep(u.payload.has_value(), unless.size()), params));
  return n > 0;
}

absl::StatusOr<std::string> Journal::LockObject(Transaction& tx, std::string_view object_key,
                                                std::string_view holder, absl::Time now) const {
  if (sql_.dialect().UpsertReturning()) {
    IDEM_ASSIGN_OR_RETURN(
        Rows rows, tx.Query(sql::kUpsertObjectLock,
                            {Key(object_key), Key(holder), Micros(now)}));
    if (rows.rows.empty() || rows.rows[0].empty()) {
      return absl::InternalError("step journal: object lock upsert returned no row");
    }
    return Str(rows.rows[0][0]);
  }
  // MariaDB: ON DUPLICATE KEY UPDATE locks the existing row, so the SELECT after
  // it reads the holder that keeps it.
  IDEM_ASSIGN_OR_RETURN(
      int64_t inserted,
      tx.Exec(sql_.InsertObjectLock(),
              {Key(object_key), Key(holder), Micros(now)}));
  if (inserted == 1) return std::string(holder);
  IDEM_ASSIGN_OR_RETURN(
      Rows rows, tx.Query(sql_.SelectObjectLockHolder(), {Key(object_key)}));
  if (rows.rows.empty() || rows.rows[0].empty()) {
    return absl::InternalError(
        absl::StrCat("step journal: the lock row of object ", AV(object_key), " vanished"));
  }
  return Str(rows.rows[0][0]);
}

absl::Status Journal::UnlockObject(Transaction& tx, std::string_view object_key,
                                   std::string_view holder) const {
  return tx
      .Exec(sql::kDeleteObjectLock,
            {Key(object_key), Key(holder)})
      .status();
}

absl::StatusOr<std::vector<OperationRow>> Journal::SelectDue(Transaction& tx,
                                                             const std::vector<std::string>& types,
                                                             absl::Time now, int limit) const {
  if (types.empty()) return std::vector<OperationRow>();
  std::vector<Value> params = {Value(OperationStatusName(OperationStatus::kPending)),
                               Value(OperationStatusName(OperationStatus::kCompensating)),
                               Micros(now), Micros(now)};
  for (const std::string& t : types) params.push_back(Value(t));
  params.push_back(Int(limit));
  return SelectOperations(tx, sql_.SelectDue(types.size()), std::move(params));
}

absl::StatusOr<std::vector<OperationRow>> Journal::SelectStuck(Transaction& tx, absl::Time now,
                                                               int limit) const {
  return SelectOperations(
      tx, sql::kSelectStuck,
      {Value(OperationStatusName(OperationStatus::kPending)),
       Value(OperationStatusName(OperationStatus::kCompensating)), Micros(now), Micros(now),
       Value(OperationStatusName(OperationStatus::kCompensationRequired)), Micros(now),
       Value(StepStatusName(StepStatus::kUnknown)), Int(limit)});
}

absl::StatusOr<std::vector<OperationRow>> Journal::SelectFinished(Transaction& tx,
                                                                  std::string_view op_type,
                                                                  absl::Time cutoff,
                                                                  absl::Time now,
                                                                  std::string_view after,
                                                                  int limit) const {
  return SelectOperations(
      tx, sql_.SelectFinished(),
      {Value(std::string(op_type)), Value(OperationStatusName(OperationStatus::kSuccess)),
       Value(OperationStatusName(OperationStatus::kCompensated)), Micros(cutoff), Micros(now),
       Key(after), Int(limit)});
}

absl::StatusOr<bool> Journal::DeleteOperation(Transaction& tx, const OperationRow& row) const {
  const OperationState& op = row.state;
  IDEM_ASSIGN_OR_RETURN(
      int64_t gone,
      tx.Exec(sql::kDeleteOperation,
              {Key(op.biz_key), StatusValue(op.status), Micros(op.updated_at)}));
  if (gone == 0) return false;
  IDEM_RETURN_IF_ERROR(tx.Exec(sql::kDeleteSteps, {Key(op.biz_key)}).status());
  // A finished operation has released its object lock; one left behind by a
  // crash between the two writes would block the object for ever.
  IDEM_RETURN_IF_ERROR(
      tx.Exec(sql::kDeleteHolderLocks, {Key(op.biz_key)}).status());
  return true;
}

}  // namespace idem::steps
