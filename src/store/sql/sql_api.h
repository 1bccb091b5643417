// The SQL API (docs/sql.md): the guard's claim, complete and fail as versioned
// PostgreSQL functions (schema `idem`) and MySQL/MariaDB stored procedures
// (idem_sql_*), over the record table idem's stores use, called inside a caller's
// own transaction from any language. This file holds their DDL and the statements
// `idem migrate` runs to create, upgrade, describe and remove them. Not part of the
// public API.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "idem/store.h"

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
  // The routines a complete install has, sorted: MySQL's by name, PostgreSQL's by
  // identity (`complete_v1(text, text, json, text)`: overloads share a name).
  std::vector<std::string> routines;
  // Answers (routine as in `routines`, comment) of the API's routines in the database.
  std::string list;
  // The comment every routine of this install carries: the API version and a
  // digest of its statements, so a later migrate tells current from outdated.
  std::string marker;
};

// The SQL API for the dialect named `dialect` ("postgres" or "mysql"): one per
// database (PostgreSQL: its functions use the idem_records of the caller's
// search_path, as the store does). kUnimplemented for another dialect (SQLite has
// no stored routines).
absl::StatusOr<SqlApi> SqlApiFor(std::string_view dialect);

// How the routines found in a database (`found`: (name, comment) rows of
// SqlApi::list) compare with `api`.
enum class SqlApiState { kNone, kCurrent, kOutdated };
SqlApiState CompareSqlApi(const SqlApi& api,
                          const std::vector<std::pair<std::string, std::string>>& found);

// The SQL API of `store`'s database and how much of it is there now. `api` is unset
// for a store without one (SQLite, memory://). Reads only.
struct SqlApiFound {
  std::optional<SqlApi> api;
  SqlApiState state = SqlApiState::kNone;
};
absl::StatusOr<SqlApiFound> FindSqlApi(Store& store);

// Sends `statements` (SqlApi::install or drop) in one transaction of `store`
// (PostgreSQL: all or nothing; MySQL/MariaDB commit each DDL by itself).
absl::Status RunSqlApiStatements(Store& store, const std::vector<std::string>& statements);

}  // namespace idem::sql
