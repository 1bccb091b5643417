// Transaction's SQL helpers: the state-machine and optimistic-version updates,
// built on Exec() so every backend gets them.
#include <cctype>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "idem/status.h"
#include "idem/store.h"
#include "store/absl_compat.h"
#include "store/backend.h"

namespace idem {

namespace {

// kUnavailable with `message`, marked with `payload` (one of backend.h's kinds).
absl::Status MarkedUnavailable(std::string_view message, std::string_view payload) {
  absl::Status s = absl::UnavailableError(AV(message));
  s.SetPayload(AV(payload), absl::Cord("1"));
  return s;
}

bool IsMarkedUnavailable(const absl::Status& status, std::string_view payload) {
  return status.code() == absl::StatusCode::kUnavailable &&
         status.GetPayload(AV(payload)).has_value();
}

}  // namespace

absl::Status ClaimContendedError(std::string_view message) {
  return MarkedUnavailable(message, kClaimContendedPayload);
}

bool IsClaimContended(const absl::Status& status) {
  return IsMarkedUnavailable(status, kClaimContendedPayload);
}

absl::Status StoreFaultError(std::string_view message) {
  return MarkedUnavailable(message, kStoreFaultPayload);
}

absl::Status AsStoreFault(const absl::Status& status) {
  if (status.ok() || status.code() == absl::StatusCode::kAborted || IsClaimContended(status) ||
      IsStoreFault(status)) {
    return status;
  }
  absl::Status s = absl::UnavailableError(status.message());
  status.ForEachPayload([&s](absl::string_view url, const absl::Cord& payload) {
    s.SetPayload(url, payload);
  });
  s.SetPayload(AV(kStoreFaultPayload), absl::Cord("1"));
  return s;
}

absl::StatusOr<std::vector<std::optional<Record>>> RecordTransaction::InsertOrLoadMany(
    absl::Span<const Record> records) {
  std::vector<std::optional<Record>> out;
  out.reserve(records.size());
  for (const Record& r : records) {
    IDEM_ASSIGN_OR_RETURN(std::optional<Record> loaded, InsertOrLoad(r));
    out.push_back(std::move(loaded));
  }
  return out;
}

absl::StatusOr<std::vector<bool>> RecordTransaction::ReplaceMany(
    absl::Span<const Replacement> replacements) {
  std::vector<bool> out;
  out.reserve(replacements.size());
  for (const Replacement& r : replacements) {
    IDEM_ASSIGN_OR_RETURN(bool moved, Replace(r.record, r.expected_token, r.expected_state));
    out.push_back(moved);
  }
  return out;
}

absl::StatusOr<std::vector<int64_t>> RecordTransaction::ExecMany(
    absl::Span<const Statement> statements) {
  std::vector<int64_t> out;
  out.reserve(statements.size());
  for (const Statement& st : statements) {
    IDEM_ASSIGN_OR_RETURN(int64_t rows, Exec(st.sql, st.params));
    out.push_back(rows);
  }
  return out;
}

bool IsUniqueViolation(const absl::Status& status) {
  return !status.ok() && status.GetPayload(AV(kUniqueViolationPayload)).has_value();
}

absl::Status MarkUniqueViolation(absl::Status status) {
  status.SetPayload(AV(kUniqueViolationPayload), absl::Cord("1"));
  return status;
}

bool IsStoreFault(const absl::Status& status) {
  return !status.ok() && status.GetPayload(AV(kStoreFaultPayload)).has_value();
}

namespace {

absl::Status CheckIdentifier(std::string_view what, std::string_view name) {
  bool ok = !name.empty() && name.size() <= 63 &&
            (std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_');
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') ok = false;
  }
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        AV(what), " '", AV(name), "' is not a plain SQL identifier ([A-Za-z_][A-Za-z0-9_]*, ≤ 63 chars)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<bool> Transaction::Transition(std::string_view table, std::string_view id_column,
                                             const Value& id, std::string_view status_column,
                                             const Value& from, const Value& to) {
  IDEM_RETURN_IF_ERROR(CheckIdentifier("table", table));
  IDEM_RETURN_IF_ERROR(CheckIdentifier("id column", id_column));
  IDEM_RETURN_IF_ERROR(CheckIdentifier("status column", status_column));
  std::string sql = absl::StrCat("UPDATE ", AV(table), " SET ", AV(status_column), " = ? WHERE ",
                                 AV(id_column), " = ? AND ", AV(status_column), " = ?");
  const Value params[] = {to, id, from};
  IDEM_ASSIGN_OR_RETURN(int64_t changed, Exec(sql, params));
  return changed > 0;
}

absl::StatusOr<bool> Transaction::UpdateVersioned(
    std::string_view table, std::string_view id_column, const Value& id,
    std::string_view version_column, int64_t expected_version,
    absl::Span<const std::pair<std::string, Value>> assignments) {
  IDEM_RETURN_IF_ERROR(CheckIdentifier("table", table));
  IDEM_RETURN_IF_ERROR(CheckIdentifier("id column", id_column));
  IDEM_RETURN_IF_ERROR(CheckIdentifier("version column", version_column));
  std::string sql = absl::StrCat("UPDATE ", AV(table), " SET ");
  std::vector<Value> params;
  for (const auto& [column, value] : assignments) {
    IDEM_RETURN_IF_ERROR(CheckIdentifier("column", column));
    if (column == version_column) {
      return absl::InvalidArgumentError(
          absl::StrCat("column '", column, "' is the version column; it is bumped by idem"));
    }
    absl::StrAppend(&sql, column, " = ?, ");
    params.push_back(value);
  }
  absl::StrAppend(&sql, AV(version_column), " = ", AV(version_column), " + 1 WHERE ", AV(id_column),
                  " = ? AND ", AV(version_column), " = ?");
  params.push_back(id);
  params.push_back(Value(static_cast<long long>(expected_version)));
  IDEM_ASSIGN_OR_RETURN(int64_t changed, Exec(sql, params));
  return changed > 0;
}

absl::StatusOr<bool> Transaction::RecordEvent(std::string_view table,
                                              std::string_view biz_id_column, const Value& biz_id,
                                              std::string_view event_type_column,
                                              const Value& event_type) {
  IDEM_RETURN_IF_ERROR(CheckIdentifier("table", table));
  IDEM_RETURN_IF_ERROR(CheckIdentifier("biz_id column", biz_id_column));
  IDEM_RETURN_IF_ERROR(CheckIdentifier("event_type column", event_type_column));
  const std::string sql = absl::StrCat("INSERT INTO ", AV(table), " (", AV(biz_id_column), ", ",
                                       AV(event_type_column), ") VALUES (?, ?)");
  const Value params[] = {biz_id, event_type};
  absl::StatusOr<int64_t> inserted = TryExec(sql, params);
  if (inserted.ok()) return true;
  if (IsUniqueViolation(inserted.status())) return false;
  return inserted.status();
}

absl::Status Transaction::QueryPages(std::string_view, absl::Span<const Value>, size_t,
                                     const std::function<absl::Status(Rows&)>&) {
  return absl::UnimplementedError("this store does not stream query results");
}

absl::StatusOr<int64_t> Transaction::TryExec(std::string_view sql, absl::Span<const Value> params) {
  // SAVEPOINT/ROLLBACK TO is standard SQL on all three backends; it confines a
  // failure to the statement (PostgreSQL would otherwise abort the transaction).
  IDEM_RETURN_IF_ERROR(Exec("SAVEPOINT idem_try").status());
  absl::StatusOr<int64_t> done = Exec(sql, params);
  if (done.ok()) {
    IDEM_RETURN_IF_ERROR(Exec("RELEASE SAVEPOINT idem_try").status());
    return done;
  }
  IDEM_RETURN_IF_ERROR(Exec("ROLLBACK TO SAVEPOINT idem_try").status());
  IDEM_RETURN_IF_ERROR(Exec("RELEASE SAVEPOINT idem_try").status());
  return done.status();
}

}  // namespace idem
