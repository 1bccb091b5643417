#include "store/sql/sql_api.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "idem/status.h"
#include "store/absl_compat.h"
#include "store/backend.h"
#include "store/sql/columns.h"

namespace idem::sql {
namespace {

// The statements (MySQL's with {marker} still in them).
constexpr std::string_view kPostgresApi[] = {
#include "store/sql/sql_api_postgres.inc"
};
constexpr std::string_view kMysqlApi[] = {
#include "store/sql/sql_api_mysql.inc"
};

// PostgreSQL's functions by identity (name and argument types), for COMMENT and
// DROP; the aliases first, so a drop removes them before what they call.
constexpr std::string_view kPostgresFunctions[] = {
    "claim(text, text, text, text, interval)",
    "complete(text, text, json, text)",
    "complete(text, text, text, text)",
    "fail(text, text, boolean, json, text)",
    "fail(text, text, boolean, text, text)",
    "lease_claim(text, text, text, text, interval, interval)",
    "lease_complete(text, text, bigint, json, text)",
    "lease_complete(text, text, bigint, text, text)",
    "lease_fail(text, text, bigint, boolean, json, text)",
    "lease_fail(text, text, bigint, boolean, text, text)",
    "claim_v1(text, text, text, text, interval)",
    "complete_v1(text, text, json, text)",
    "complete_v1(text, text, text, text)",
    "fail_v1(text, text, boolean, json, text)",
    "fail_v1(text, text, boolean, text, text)",
    "lease_claim_v1(text, text, text, text, interval, interval)",
    "lease_complete_v1(text, text, bigint, json, text)",
    "lease_complete_v1(text, text, bigint, text, text)",
    "lease_fail_v1(text, text, bigint, boolean, json, text)",
    "lease_fail_v1(text, text, bigint, boolean, text, text)",
    "claim_core_v1(text, text, text, text, interval, interval, boolean)",
    "finish_core_v1(text, text, text, bigint, boolean, smallint, bytea)",
    "json_bytes_v1(text, text)",
    "held_v1(text, bytea, bigint)",
    "json_v1(text, bytea)",
    "name_v1(text, text, integer)",
    "interval_us_v1(text, interval)",
    "time_v1(bigint)",
    "now_us_v1()",
};

constexpr std::string_view kMysqlProcedures[] = {
    "idem_sql_answer_v1",         "idem_sql_check_v1",      "idem_sql_claim_core_v1",
    "idem_sql_claim_v1",          "idem_sql_complete_v1",   "idem_sql_fail_v1",
    "idem_sql_finish_core_v1",    "idem_sql_json_v1",       "idem_sql_lease_claim_v1",
    "idem_sql_lease_complete_v1", "idem_sql_lease_fail_v1",
};

// FNV-1a over the statements: tells one install's text from another's.
uint64_t Digest(const std::vector<std::string>& statements) {
  uint64_t h = 14695981039346656037ULL;
  for (const std::string& s : statements) {
    for (unsigned char c : s) {
      h ^= c;
      h *= 1099511628211ULL;
    }
    h ^= 0xff;  // a boundary, so two splits of one text differ
    h *= 1099511628211ULL;
  }
  return h;
}

// Fills install (from `statements`) and marker.
template <size_t N>
void Build(const std::string_view (&statements)[N], SqlApi* api) {
  std::vector<std::string> install(std::begin(statements), std::end(statements));
  api->marker = absl::StrFormat("idem SQL API v%d %016x", kSqlApiVersion, Digest(install));
  for (std::string& s : install) s = absl::StrReplaceAll(s, {{"{marker}", api->marker}});
  api->install = std::move(install);
}

SqlApi PostgresApi() {
  SqlApi api;
  Build(kPostgresApi, &api);
  for (std::string_view f : kPostgresFunctions) {
    api.install.push_back(
        absl::StrCat("COMMENT ON FUNCTION idem.", AV(f), " IS '", api.marker, "'"));
    api.drop.push_back(absl::StrCat("DROP FUNCTION IF EXISTS idem.", AV(f)));
    api.routines.push_back(std::string(f));  // by identity: overloads share a name
  }
  api.drop.push_back("DROP TYPE IF EXISTS idem.result_v1");
  // The schema goes only when nothing else lives in it (the store's own tables may).
  api.drop.push_back(
      "DO $idem$ BEGIN IF EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'idem') AND NOT "
      "EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE "
      "n.nspname = 'idem') AND NOT EXISTS (SELECT 1 FROM pg_proc p JOIN pg_namespace n ON "
      "n.oid = p.pronamespace WHERE n.nspname = 'idem') AND NOT EXISTS (SELECT 1 FROM pg_type "
      "t JOIN pg_namespace n ON n.oid = t.typnamespace WHERE n.nspname = 'idem') THEN DROP "
      "SCHEMA idem; END IF; END $idem$");
  std::sort(api.routines.begin(), api.routines.end());
  api.list =
      "SELECT p.proname || '(' || oidvectortypes(p.proargtypes) || ')', "
      "coalesce(obj_description(p.oid, 'pg_proc'), '') FROM pg_proc p "
      "JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'idem' ORDER BY 1";
  return api;
}

SqlApi MysqlApi() {
  SqlApi api;
  Build(kMysqlApi, &api);
  for (std::string_view p : kMysqlProcedures) {
    api.drop.push_back(absl::StrCat("DROP PROCEDURE IF EXISTS ", AV(p)));
    api.routines.push_back(std::string(p));
  }
  api.list =
      "SELECT routine_name, routine_comment FROM information_schema.routines WHERE "
      "routine_schema = DATABASE() AND routine_type = 'PROCEDURE' AND "
      "LEFT(routine_name, 9) = 'idem_sql_' ORDER BY 1";
  return api;
}

}  // namespace

absl::StatusOr<SqlApi> SqlApiFor(std::string_view dialect) {
  if (dialect == "postgres") return PostgresApi();
  if (dialect == "mysql") return MysqlApi();
  return absl::UnimplementedError(
      absl::StrCat("the SQL API needs PostgreSQL or MySQL/MariaDB stored routines; ", AV(dialect),
                   " has none (use the C++ library or idem serve)"));
}

SqlApiState CompareSqlApi(const SqlApi& api,
                          const std::vector<std::pair<std::string, std::string>>& found) {
  size_t current = 0;
  for (const std::string& name : api.routines) {
    for (const auto& [n, comment] : found) {
      if (n == name && comment == api.marker) {
        ++current;
        break;
      }
    }
  }
  if (current == api.routines.size()) return SqlApiState::kCurrent;
  for (const auto& [n, comment] : found) {
    if (std::find(api.routines.begin(), api.routines.end(), n) != api.routines.end()) {
      return SqlApiState::kOutdated;
    }
  }
  return SqlApiState::kNone;
}

absl::StatusOr<SqlApiFound> FindSqlApi(Store& store) {
  SqlApiFound found;
  const SqlDialect* dialect = Backend(store).sql_dialect();
  if (dialect == nullptr) return found;
  absl::StatusOr<SqlApi> api = SqlApiFor(dialect->name());
  if (api.status().code() == absl::StatusCode::kUnimplemented) return found;  // SQLite
  IDEM_RETURN_IF_ERROR(api.status());
  IDEM_ASSIGN_OR_RETURN(std::unique_ptr<StoreTransaction> tx, store.Begin());
  IDEM_ASSIGN_OR_RETURN(Rows rows, tx->Query(api->list));
  tx->Rollback();
  std::vector<std::pair<std::string, std::string>> routines;
  for (const std::vector<Value>& row : rows.rows) {
    if (row.size() == 2) routines.emplace_back(BytesOf(row[0]), BytesOf(row[1]));
  }
  found.state = CompareSqlApi(*api, routines);
  found.api = *std::move(api);
  return found;
}

absl::Status RunSqlApiStatements(Store& store, const std::vector<std::string>& statements) {
  IDEM_ASSIGN_OR_RETURN(std::unique_ptr<StoreTransaction> tx, store.Begin());
  for (const std::string& s : statements) {
    absl::Status st = s.starts_with("SELECT") ? tx->Query(s).status() : tx->Exec(s).status();
    if (!st.ok()) {
      // MySQL's named lock outlives a transaction: give it back (best effort; closing
      // the connection also does).
      if (absl::StrContains(statements.front(), "GET_LOCK")) {
        tx->Query("SELECT RELEASE_LOCK('idem_schema')").IgnoreError();
      }
      return st;
    }
  }
  return tx->Commit();
}

}  // namespace idem::sql
