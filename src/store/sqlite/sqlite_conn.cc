#include "store/sqlite/sqlite_conn.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "idem/status.h"
#include "idem/store.h"
#include "store/absl_compat.h"
#include "store/backend.h"

namespace idem::sqlite {
namespace {

constexpr size_t kMaxCachedStatements = 256;

}  // namespace

absl::Status ToStatus(int rc, sqlite3* db, std::string_view context) {
  if (rc == SQLITE_OK || rc == SQLITE_DONE || rc == SQLITE_ROW) return absl::OkStatus();
  std::string message = absl::StrCat(AV(context), ": ", db != nullptr ? sqlite3_errmsg(db)
                                                                 : sqlite3_errstr(rc));
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return absl::UnavailableError(absl::StrCat(message, " (locked past the busy timeout)"));
    case SQLITE_ERROR: {
      // A missing table or column is a missing or wrong schema: the store's fault
      //, not the statement's. SQLite gives them no code of their own.
      const char* text = db != nullptr ? sqlite3_errmsg(db) : "";
      const std::string_view what(text != nullptr ? text : "");
      if (what.starts_with("no such table") || what.starts_with("no such column")) {
        return StoreFaultError(message);
      }
      return absl::InvalidArgumentError(message);
    }
    case SQLITE_CONSTRAINT:
      if (rc == SQLITE_CONSTRAINT_UNIQUE || rc == SQLITE_CONSTRAINT_PRIMARYKEY) {
        return MarkUniqueViolation(absl::InvalidArgumentError(message));
      }
      return absl::InvalidArgumentError(message);
    case SQLITE_MISMATCH:
    case SQLITE_RANGE:
    case SQLITE_TOOBIG:
      return absl::InvalidArgumentError(message);
    case SQLITE_NOMEM:
      return absl::ResourceExhaustedError(message);
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT:
    case SQLITE_FORMAT:
      // Not an idem (or any) database: nobody should retry before someone looks.
      // (The Guard still answers it as the store's fault, AsStoreFault.)
      return absl::FailedPreconditionError(message);
    default:
      // READONLY, PERM, AUTH (the
      // file may not be written), CANTOPEN, IOERR, FULL (disk full), PROTOCOL, ...:
      // the store's fault.
      return StoreFaultError(message);
  }
}

absl::StatusOr<std::unique_ptr<Connection>> Connection::Open(const std::string& path,
                                                             std::string_view synchronous,
                                                             int busy_timeout_ms, bool read_only) {
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db,
                           (read_only ? SQLITE_OPEN_READONLY
                                      : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) |
                               SQLITE_OPEN_NOMUTEX,
                           nullptr);
  if (rc != SQLITE_OK) {
    absl::Status status = ToStatus(rc, db, absl::StrCat("cannot open sqlite database '", path, "'"));
    sqlite3_close_v2(db);
    return status;
  }
  std::unique_ptr<Connection> conn(new Connection(db));
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, busy_timeout_ms);
  std::string pragmas =
      read_only ? std::string("PRAGMA query_only=ON;")
                : absl::StrCat("PRAGMA journal_mode=WAL; PRAGMA synchronous=", AV(synchronous),
                               "; PRAGMA foreign_keys=ON;");
  if (absl::Status s = conn->ExecScript(pragmas.c_str()); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("sqlite database '", path, "': ", s.message()));
  }
  return conn;
}

Connection::~Connection() {
  for (auto& [sql, stmt] : cache_) sqlite3_finalize(stmt);
  sqlite3_close_v2(db_);
}

absl::StatusOr<sqlite3_stmt*> Connection::Prepare(std::string_view sql,
                                                  absl::Span<const Value> params) {
  sqlite3_stmt* stmt = nullptr;
  auto it = cache_.find(std::string(sql));
  if (it != cache_.end()) {
    stmt = it->second;
    sqlite3_reset(stmt);
    sqlite3_clear_bindings(stmt);
  } else {
    const char* tail = nullptr;
    int rc = sqlite3_prepare_v3(db_, sql.data(), static_cast<int>(sql.size()),
                                SQLITE_PREPARE_PERSISTENT, &stmt, &tail);
    if (rc != SQLITE_OK) return ToStatus(rc, db_, "prepare");
    if (stmt == nullptr) return absl::InvalidArgumentError("empty SQL statement");
    std::string_view rest(tail, sql.data() + sql.size() - tail);
    if (rest.find_first_not_of(" \t\r\n;") != std::string_view::npos) {
      sqlite3_finalize(stmt);
      return absl::InvalidArgumentError("one SQL statement per call; found more after the first");
    }
    if (cache_.size() >= kMaxCachedStatements) {
      for (auto& [s, st] : cache_) sqlite3_finalize(st);
      cache_.clear();
    }
    cache_.emplace(std::string(sql), stmt);
  }
  const int expected = sqlite3_bind_parameter_count(stmt);
  if (expected != static_cast<int>(params.size())) {
    return absl::InvalidArgumentError(absl::StrCat("statement has ", expected,
                                                   " parameters but ", params.size(),
                                                   " values were given"));
  }
  for (int i = 0; i < expected; ++i) {
    const Value& v = params[i];
    int rc = SQLITE_OK;
    if (v.is_null()) {
      rc = sqlite3_bind_null(stmt, i + 1);
    } else if (v.is_int()) {
      rc = sqlite3_bind_int64(stmt, i + 1, v.as_int());
    } else if (v.is_double()) {
      rc = sqlite3_bind_double(stmt, i + 1, v.as_double());
    } else if (v.is_text()) {
      rc = sqlite3_bind_text64(stmt, i + 1, v.as_text().data(), v.as_text().size(),
                               SQLITE_STATIC, SQLITE_UTF8);
    } else {
      rc = sqlite3_bind_blob64(stmt, i + 1, v.as_blob().data(), v.as_blob().size(),
                               SQLITE_STATIC);
    }
    if (rc != SQLITE_OK) return ToStatus(rc, db_, "bind");
  }
  return stmt;
}

absl::StatusOr<int64_t> Connection::Exec(std::string_view sql, absl::Span<const Value> params) {
  IDEM_ASSIGN_OR_RETURN(sqlite3_stmt * stmt, Prepare(sql, params));
  int rc;
  while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
  }
  absl::Status status = ToStatus(rc, db_, "exec");
  sqlite3_reset(stmt);
  IDEM_RETURN_IF_ERROR(status);
  return static_cast<int64_t>(sqlite3_changes64(db_));
}

namespace {

std::vector<Value> RowOf(sqlite3_stmt* stmt, int n) {
  std::vector<Value> row;
  row.reserve(n);
  for (int i = 0; i < n; ++i) {
    switch (sqlite3_column_type(stmt, i)) {
      case SQLITE_INTEGER:
        row.emplace_back(static_cast<long long>(sqlite3_column_int64(stmt, i)));
        break;
      case SQLITE_FLOAT:
        row.emplace_back(sqlite3_column_double(stmt, i));
        break;
      case SQLITE_TEXT:
        row.emplace_back(std::string(reinterpret_cast<const char*>(sqlite3_column_text(stmt, i)),
                                     sqlite3_column_bytes(stmt, i)));
        break;
      case SQLITE_BLOB: {
        const char* p = static_cast<const char*>(sqlite3_column_blob(stmt, i));
        row.emplace_back(Blob{std::string(p == nullptr ? "" : p,
                                          p == nullptr ? 0 : sqlite3_column_bytes(stmt, i))});
        break;
      }
      default:
        row.emplace_back(nullptr);
    }
  }
  return row;
}

std::vector<std::string> ColumnsOf(sqlite3_stmt* stmt) {
  std::vector<std::string> columns;
  const int n = sqlite3_column_count(stmt);
  for (int i = 0; i < n; ++i) columns.emplace_back(sqlite3_column_name(stmt, i));
  return columns;
}

}  // namespace

absl::StatusOr<Rows> Connection::Query(std::string_view sql, absl::Span<const Value> params) {
  IDEM_ASSIGN_OR_RETURN(sqlite3_stmt * stmt, Prepare(sql, params));
  Rows rows;
  rows.columns = ColumnsOf(stmt);
  const int n = static_cast<int>(rows.columns.size());
  int rc;
  while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) rows.rows.push_back(RowOf(stmt, n));
  absl::Status status = ToStatus(rc, db_, "query");
  sqlite3_reset(stmt);
  IDEM_RETURN_IF_ERROR(status);
  return rows;
}

absl::Status Connection::QueryPages(std::string_view sql, absl::Span<const Value> params,
                                    size_t page_rows,
                                    const std::function<absl::Status(Rows&)>& page) {
  IDEM_ASSIGN_OR_RETURN(sqlite3_stmt * stmt, Prepare(sql, params));
  Rows rows;
  rows.columns = ColumnsOf(stmt);
  const int n = static_cast<int>(rows.columns.size());
  page_rows = std::max<size_t>(page_rows, 1);
  rows.rows.reserve(page_rows);
  int rc;
  absl::Status handed;
  bool any = false;
  while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
    rows.rows.push_back(RowOf(stmt, n));
    if (rows.rows.size() < page_rows) continue;
    handed = page(rows);
    any = true;
    rows.rows.clear();
    if (!handed.ok()) break;
  }
  if (!handed.ok()) {
    sqlite3_reset(stmt);
    return handed;
  }
  absl::Status status = ToStatus(rc, db_, "query");
  sqlite3_reset(stmt);
  IDEM_RETURN_IF_ERROR(status);
  return rows.rows.empty() && any ? absl::OkStatus() : page(rows);
}

absl::Status Connection::ExecScript(const char* sql) {
  char* err = nullptr;
  int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    std::string message = err != nullptr ? err : sqlite3_errstr(rc);
    sqlite3_free(err);
    absl::Status s = ToStatus(rc, nullptr, "");
    return absl::Status(s.code(), message);
  }
  return absl::OkStatus();
}

}  // namespace idem::sqlite
