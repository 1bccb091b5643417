// The SQL API (docs/sql.md): the guard's claim, complete and fail as versioned
// PostgreSQL functions (schema `idem`) and MySQL/MariaDB stored procedures
// (idem_sql_*), over the record table idem's stores use, called inside a caller's
// own transaction from any language. This file holds their DDL and the statements
// `idem migrate` runs to create, upgrade, describe and remove them. Not part of the
// public API.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace idem::sql {

// The version in the names of the API's routines (claim_v1, idem_sql_claim_v1, …).
inline constexpr int kSqlApiVersion = 1;

// The SQL API of one database.
struct SqlApi {
  // Creates or replaces every routine, under a lock; idempotent. In order, each one
  // statement (MySQL/MariaDB: a CREATE PROCEDURE is one statement, sent as text).
  std::vector<std::string> install;
  // Removes every routine of the API (the records stay).
  std::vector<std::string> drop;
  // The routines a complete install has, sorted.
  std::vector<std::string> routines;
  // Answers (name, comment) of the API's routines in the database.
  std::string list;
  // The comment every routine of this install carries: the API version and a
  // digest of its statements, so a later migrate tells current from outdated.
  std::string marker;
};

// The query that answers the schema the store's tables live in (PostgreSQL:
// current_schema(), quoted as an identifier), for SqlApiFor's `records_schema`.
inline constexpr std::string_view kRecordsSchemaQuery = "SELECT quote_ident(current_schema())";

// The SQL API for the dialect named `dialect` ("postgres" or "mysql").
// `records_schema`: PostgreSQL only, the quoted schema of idem_records
// (kRecordsSchemaQuery). kUnimplemented for another dialect (SQLite has no
// stored routines).
absl::StatusOr<SqlApi> SqlApiFor(std::string_view dialect, std::string_view records_schema);

// How the routines found in a database (`found`: (name, comment) rows of
// SqlApi::list) compare with `api`.
enum class SqlApiState { kNone, kCurrent, kOutdated };
SqlApiState CompareSqlApi(const SqlApi& api,
                          const std::vector<std::pair<std::string, std::string>>& found);

}  // namespace idem::sql
