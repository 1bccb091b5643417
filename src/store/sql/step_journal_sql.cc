#include "store/sql/step_journal_sql.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "store/absl_compat.h"

namespace idem::sql {
namespace {

std::string SelectOperationsWhere(std::string_view where_and_tail) {
  return absl::StrCat("SELECT ", AV(kOperationColumns), " FROM idem_operations ",
                      AV(where_and_tail));
}

// `columns` ("a, b, …") each qualified with `table` ("t.a, t.b, …").
std::string QualifiedJournalColumns(std::string_view table, std::string_view columns) {
  std::string out;
  for (absl::string_view c : absl::StrSplit(AV(columns), ", ")) {
    absl::StrAppend(&out, out.empty() ? "" : ", ", AV(table), ".", c);
  }
  return out;
}

std::string SelectJournalSql(std::string_view lock) {
  return absl::StrCat("SELECT ", QualifiedJournalColumns("o", kOperationColumns), ", ",
                      QualifiedJournalColumns("s", kStepColumns),
                      " FROM idem_operations o JOIN idem_steps s ON s.biz_key = o.biz_key"
                      " WHERE o.biz_key = ? ORDER BY s.step_seq",
                      AV(lock));
}

}  // namespace

StepJournalSql::StepJournalSql(const SqlDialect& dialect)
    : dialect_(&dialect),
      insert_operation_(dialect.KeepExisting(
          absl::StrCat("INSERT INTO idem_operations (", AV(kOperationColumns),
                       ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"),
          "biz_key")),
      select_operation_{SelectOperationsWhere("WHERE biz_key = ?"),
                        SelectOperationsWhere(absl::StrCat("WHERE biz_key = ?",
                                                           AV(dialect.ForUpdate())))},
      select_journal_{SelectJournalSql(""), SelectJournalSql(dialect.ForUpdate())},
      select_finished_(SelectOperationsWhere(
          absl::StrCat("WHERE op_type = ? AND status IN (?, ?) AND updated_at <= ? AND "
                       "lease_until <= ? AND biz_key > ? ORDER BY biz_key LIMIT ?",
                       AV(dialect.ForUpdate())))),
      insert_object_lock_(dialect.KeepExisting(
          "INSERT INTO idem_object_locks (object_key, holder, acquired_at) VALUES (?, ?, ?)",
          "object_key")),
      select_object_lock_holder_(
          absl::StrCat("SELECT holder FROM idem_object_locks WHERE object_key = ?",
                       AV(dialect.ForUpdate()))) {}

std::string StepJournalSql::InsertSteps(size_t rows) {
  std::string sql =
      absl::StrCat("INSERT INTO idem_steps (biz_key, ", AV(kStepColumns), ") VALUES ");
  for (size_t i = 0; i < rows; ++i) {
    absl::StrAppend(&sql, i == 0 ? "" : ", ", "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  }
  return sql;
}

std::string StepJournalSql::SelectDue(size_t types) const {
  std::string marks;
  for (size_t i = 0; i < types; ++i) absl::StrAppend(&marks, i == 0 ? "?" : ", ?");
  return SelectOperationsWhere(
      absl::StrCat("WHERE status IN (?, ?) AND next_retry_at <= ? AND lease_until <= ?"
                   " AND op_type IN (",
                   marks, ") ORDER BY next_retry_at LIMIT ?",
                   AV(dialect_->ForUpdateSkipLocked())));
}

std::string StepJournalSql::UpdateStep(bool payload, size_t unless) {
  std::string sql =
      "UPDATE idem_steps SET status = ?, retry_count = ?, compensate_failures = ?,"
      " next_retry_at = ?, last_error = ?, updated_at = ?";
  if (payload) sql += ", payload = ?";
  sql += " WHERE biz_key = ? AND step_seq = ?";
  for (size_t i = 0; i < unless; ++i) sql += " AND status <> ?";
  return sql;
}

}  // namespace idem::sql
