// `idem migrate`: creates or upgrades the versioned schema of a store, and says what
// it found and did.
//
//   idem migrate --store postgres://idem@db/app [--dry-run]
//
// Opening a store already creates/upgrades its schema idempotently (under a lock, so
// processes starting together do not race); migrate does exactly that open, but
// reads the schema before and after with a plain connection so an operator can see
// the change, and --dry-run only reads. Running it twice is a no-op the second time
// ("unchanged"). Output on stdout, one "name: value" per line:
//
//   backend: postgres
//   store: postgres://idem@db/app
//   schema version: 0 (none) -> 1
//   step journal: created
//   tables: idem_journal_version, idem_object_locks, idem_operations, idem_records,
//           idem_schema_version, idem_steps   (one line)
//   procedures: idem_claim_v1, idem_finish_v1   (MySQL/MariaDB only)
//   action: created
//
// action is one of created, upgraded, unchanged, would create, would upgrade.
// Exit status (SPEC §12): 0 done (also nothing to do); 1 the database cannot be
// reached or holds a schema newer than this build; 2 bad usage (malformed URL, a
// store without a schema such as memory:// or sqlite://:memory:).
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/commands.h"
#include "cli/reason.h"
#include "core/absl_compat.h"
#include "idem/idem.h"
#include "idem/steps.h"
#include "store/store_url.h"
#if IDEM_HAVE_MYSQL
#include "store/mysql/mysql_conn.h"
#include "store/mysql/mysql_url.h"
#endif
#if IDEM_HAVE_POSTGRES
#include "store/postgres/pg_conn.h"
#include "store/postgres/pg_url.h"
#endif

namespace idem::cli {
namespace {

// The schema version the stores of this build create (kSchemaVersion in
// src/store/*/…_store.cc). Only --dry-run needs it: a real run reads the version
// the store left behind.
constexpr int64_t kBuildSchemaVersion = 1;

struct MigrateFlags {
  std::string store = "sqlite://./idem.db";
  bool dry_run = false;
};

// What a store's database holds of idem's schema.
struct SchemaState {
  int64_t version = 0;  // 0: no idem schema
  std::vector<std::string> tables;
  // MySQL/MariaDB only: idem's stored procedures (idem_claim_v1, idem_finish_v1).
  std::optional<std::vector<std::string>> procedures;
};

std::string AsString(const Value& v) {
  if (v.is_text()) return v.as_text();
  if (v.is_blob()) return v.as_blob();
  if (v.is_int()) return std::to_string(v.as_int());
  return "";
}

int64_t AsInt(const Value& v) {
  if (v.is_int()) return v.as_int();
  int64_t out = 0;
  std::string s = AsString(v);
  return absl::SimpleAtoi(AV(s), &out) ? out : 0;
}

bool HasTable(const SchemaState& state, std::string_view name) {
  for (const std::string& t : state.tables) {
    if (t == name) return true;
  }
  return false;
}

// Fills `state` from a table listing and, when the version table exists, its max.
template <typename QueryFn>
absl::Status ReadSchema(QueryFn query, std::string_view list_sql, SchemaState* state) {
  absl::StatusOr<Rows> tables = query(list_sql);
  if (!tables.ok()) return tables.status();
  for (const std::vector<Value>& row : tables->rows) state->tables.push_back(AsString(row[0]));
  if (!HasTable(*state, "idem_schema_version")) return absl::OkStatus();
  absl::StatusOr<Rows> version = query("SELECT max(version) FROM idem_schema_version");
  if (!version.ok()) return version.status();
  if (!version->rows.empty() && !version->rows[0].empty()) {
    state->version = AsInt(version->rows[0][0]);
  }
  return absl::OkStatus();
}

absl::StatusOr<SchemaState> ProbePostgres(std::string_view url) {
#if !IDEM_HAVE_POSTGRES
  (void)url;
  return OpenStore("postgres://").status();  // the build's "not compiled in" answer
#else
  IDEM_ASSIGN_OR_RETURN(postgres::Options options, postgres::ParseUrl(url));
  IDEM_ASSIGN_OR_RETURN(std::unique_ptr<postgres::Connection> conn,
                        postgres::Connection::Open(options.connect));
  SchemaState state;
  // current_schema(): the store puts its tables in the connection's search_path
  // schema (options=-csearch_path%3D…), so that is where to look.
  IDEM_RETURN_IF_ERROR(ReadSchema(
      [&](std::string_view sql) { return conn->Query(sql, {}); },
      "SELECT table_name::text FROM information_schema.tables WHERE table_schema = "
      "current_schema() AND table_name LIKE 'idem\\_%' ORDER BY 1",
      &state));
  return state;
#endif
}

absl::StatusOr<SchemaState> ProbeMysql(std::string_view url) {
#if !IDEM_HAVE_MYSQL
  (void)url;
  return OpenStore("mysql://").status();  // the build's "not compiled in" answer
#else
  IDEM_ASSIGN_OR_RETURN(mysql::MysqlOptions options, mysql::ParseMysqlUrl(url));
  IDEM_ASSIGN_OR_RETURN(std::unique_ptr<mysql::Connection> conn,
                        mysql::Connection::Open(options));
  SchemaState state;
  // '\\\\_' in C++ is '\\_' in SQL text, which MySQL's string literal turns into the
  // LIKE escape '\_' (a literal underscore).
  IDEM_RETURN_IF_ERROR(ReadSchema(
      [&](std::string_view sql) { return conn->Query(sql); },
      "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() AND "
      "table_name LIKE 'idem\\\\_%' ORDER BY 1",
      &state));
  IDEM_ASSIGN_OR_RETURN(
      Rows procedures,
      conn->Query("SELECT routine_name FROM information_schema.routines WHERE routine_schema = "
                  "DATABASE() AND routine_type = 'PROCEDURE' AND routine_name LIKE 'idem\\\\_%' "
                  "ORDER BY 1"));
  state.procedures.emplace();
  for (const std::vector<Value>& row : procedures.rows) state.procedures->push_back(AsString(row[0]));
  return state;
#endif
}

// The file path of a sqlite:// URL (without its query), or an error for one that
// has no file.
absl::StatusOr<std::string> SqlitePath(std::string_view url) {
  std::string_view rest = url.substr(std::string_view("sqlite://").size());
  rest = rest.substr(0, rest.find('?'));
  if (rest.empty()) {
    return absl::InvalidArgumentError("sqlite URL has no path; use sqlite://./idem.db");
  }
  if (rest == ":memory:") {
    return absl::InvalidArgumentError(
        "sqlite://:memory: has no schema to migrate (it lives only inside one process)");
  }
  return std::string(rest);
}

absl::StatusOr<SchemaState> ProbeSqlite(std::string_view url) {
  IDEM_ASSIGN_OR_RETURN(std::string path, SqlitePath(url));
  SchemaState state;
  struct stat st;
  // A missing file is an empty store; opening it read-only would fail, and opening
  // it read-write would create it, which a probe must not do.
  if (stat(path.c_str(), &st) != 0) return state;
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr);
  std::unique_ptr<sqlite3, int (*)(sqlite3*)> guard(db, sqlite3_close_v2);
  if (rc != SQLITE_OK) {
    return absl::UnavailableError(absl::StrCat("cannot open sqlite database '", path,
                                               "': ", db ? sqlite3_errmsg(db) : "out of memory"));
  }
  sqlite3_busy_timeout(db, 5000);
  auto query = [&](std::string_view sql) -> absl::StatusOr<Rows> {
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v2(db, sql.data(), static_cast<int>(sql.size()), &stmt, nullptr) !=
        SQLITE_OK) {
      // SQLITE_NOTADB and friends surface here: not an idem (or any) database.
      return absl::FailedPreconditionError(
          absl::StrCat("sqlite database '", path, "': ", sqlite3_errmsg(db)));
    }
    std::unique_ptr<sqlite3_stmt, int (*)(sqlite3_stmt*)> st_guard(stmt, sqlite3_finalize);
    Rows rows;
    for (;;) {
      int step = sqlite3_step(stmt);
      if (step == SQLITE_DONE) break;
      if (step != SQLITE_ROW) {
        return absl::UnavailableError(
            absl::StrCat("sqlite database '", path, "': ", sqlite3_errmsg(db)));
      }
      std::vector<Value> row;
      for (int i = 0; i < sqlite3_column_count(stmt); ++i) {
        if (sqlite3_column_type(stmt, i) == SQLITE_INTEGER) {
          row.emplace_back(static_cast<int64_t>(sqlite3_column_int64(stmt, i)));
        } else if (sqlite3_column_type(stmt, i) == SQLITE_NULL) {
          row.emplace_back(nullptr);
        } else {
          const unsigned char* text = sqlite3_column_text(stmt, i);
          row.emplace_back(std::string(text ? reinterpret_cast<const char*>(text) : ""));
        }
      }
      rows.rows.push_back(std::move(row));
    }
    return rows;
  };
  IDEM_RETURN_IF_ERROR(ReadSchema(query,
                                  "SELECT name FROM sqlite_master WHERE type = 'table' AND "
                                  "name LIKE 'idem\\_%' ESCAPE '\\' ORDER BY 1",
                                  &state));
  return state;
}

// OK when a real migrate could create or change the SQLite file of `url`: the file
// (if it exists) and its directory (for the file, its -wal and -shm) are writable.
absl::Status CheckSqliteWritable(std::string_view url) {
  IDEM_ASSIGN_OR_RETURN(std::string path, SqlitePath(url));
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  for (const std::string& p : {path, dir}) {
    struct stat st;
    if (p == path && stat(p.c_str(), &st) != 0) continue;  // not there yet: its dir decides
    if (access(p.c_str(), W_OK) != 0) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot write '", p, "': ", std::strerror(errno)));
    }
  }
  return absl::OkStatus();
}

// The backend name of `url`'s scheme: sqlite, postgres, mysql, memory or "".
std::string Backend(std::string_view url) {
  const size_t sep = url.find("://");
  if (sep == std::string_view::npos) return "";
  std::string_view scheme = url.substr(0, sep);
  if (scheme == "postgres" || scheme == "postgresql") return "postgres";
  if (scheme == "mysql" || scheme == "mariadb") return "mysql";
  if (scheme == "sqlite" || scheme == "memory") return std::string(scheme);
  return "";
}

absl::StatusOr<SchemaState> Probe(const std::string& backend, std::string_view url) {
  if (backend == "postgres") return ProbePostgres(url);
  if (backend == "mysql") {
    // The mysql parser knows only "mysql://"; mariadb:// is the same store.
    if (url.starts_with("mariadb://")) {
      return ProbeMysql(absl::StrCat("mysql://", AV(url.substr(10))));
    }
    return ProbeMysql(url);
  }
  return ProbeSqlite(url);
}

std::string VersionText(int64_t v) { return v == 0 ? "0 (none)" : std::to_string(v); }

// Exit status for a failed step: a malformed URL is bad usage, the rest operational.
int Fail(const absl::Status& raw, std::string_view what, std::string_view url) {
  // The drivers may quote the URL, password included (libpq on a malformed URI).
  const absl::Status status = store::RedactSecretsIn(raw, url);
  PrintReason(absl::StrCat("migrate: ", AV(what), ": ", status.message()));
  return status.code() == absl::StatusCode::kInvalidArgument ? kExitUsage : kExitFailure;
}

int RunMigrate(const MigrateFlags& flags) {
  const std::string backend = Backend(flags.store);
  if (backend.empty()) {
    PrintReason("migrate: --store '" + store::RedactUrl(flags.store) +
                "' must be sqlite://PATH, postgres://…, postgresql://…, mysql://… or mariadb://…");
    return kExitUsage;
  }
  if (backend == "memory") {
    PrintReason("migrate: memory:// has no schema to migrate (it lives only inside one process)");
    return kExitUsage;
  }
  absl::StatusOr<SchemaState> before = Probe(backend, flags.store);
  if (!before.ok()) return Fail(before.status(), "reading the schema", flags.store);
  if (before->version > kBuildSchemaVersion) {
    PrintReason(absl::StrCat("migrate: the store holds idem schema version ", before->version,
                             ", newer than this build's ", kBuildSchemaVersion, "; upgrade idem"));
    return kExitFailure;
  }

  SchemaState after = *before;
  std::string action;
  std::string display = flags.store;
  if (flags.dry_run) {
    after.version = kBuildSchemaVersion;
    const bool missing_procedures =
        before->procedures.has_value() && before->procedures->size() < 2;
    action = before->version == 0                   ? "would create"
             : before->version != kBuildSchemaVersion ? "would upgrade"
             : missing_procedures                     ? "would upgrade"
                                                      : "unchanged";
    // A dry run that says "would create" must mean the real run can write.
    if (backend == "sqlite" && action != "unchanged") {
      if (absl::Status s = CheckSqliteWritable(flags.store); !s.ok()) {
        PrintReason(absl::StrCat("migrate: --dry-run: the real run would fail: ", s.message()));
        return kExitFailure;
      }
    }
  } else {
    // The store's own open is the migration: one code path for serve and migrate.
    absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(flags.store);
    if (!store.ok()) return Fail(store.status(), "opening the store", flags.store);
    display = std::string((*store)->url());
    // The step journal (SPEC §4) too, so a server or worker whose database user
    // may not run DDL finds every table it needs.
    StepRunner journal(**store);
    if (absl::Status s = journal.Migrate(); !s.ok()) return Fail(s, "creating the step journal", flags.store);
    absl::StatusOr<SchemaState> now = Probe(backend, flags.store);
    if (!now.ok()) return Fail(now.status(), "reading the schema after opening", flags.store);
    after = *now;
    action = after.version == before->version
                 ? (after.procedures == before->procedures ? "unchanged" : "upgraded")
             : before->version == 0 ? "created"
                                    : "upgraded";
  }
  if (display == flags.store && backend == "postgres") display = store::RedactUrl(flags.store);
#if IDEM_HAVE_MYSQL
  if (display == flags.store && backend == "mysql") {
    absl::StatusOr<mysql::MysqlOptions> o = mysql::ParseMysqlUrl(
        flags.store.starts_with("mariadb://") ? "mysql://" + flags.store.substr(10) : flags.store);
    if (o.ok()) display = o->redacted_url;
  }
#endif
  // Whatever is left unredacted (sqlite:// with a secret-looking parameter) is now.
  if (display == flags.store) display = store::RedactUrl(flags.store);

  std::printf("backend: %s\n", backend.c_str());
  std::printf("store: %s\n", display.c_str());
  std::printf("schema version: %s -> %s\n", VersionText(before->version).c_str(),
              VersionText(after.version).c_str());
  const bool had_journal = std::find(before->tables.begin(), before->tables.end(),
                                     "idem_operations") != before->tables.end();
  std::printf("step journal: %s\n", had_journal      ? "unchanged"
                                     : flags.dry_run ? "would create"
                                                     : "created");
  std::printf("tables: %s\n",
              after.tables.empty() ? "(none)" : absl::StrJoin(after.tables, ", ").c_str());
  if (after.procedures.has_value()) {
    // Without them (a user without CREATE ROUTINE) the store works, with two more
    // round trips per guarded transaction.
    std::printf("procedures: %s\n",
                !after.procedures->empty() ? absl::StrJoin(*after.procedures, ", ").c_str()
                : flags.dry_run
                    ? "(none)"
                    : "(none: this user may not CREATE ROUTINE; guarded transactions take two "
                      "more round trips)");
  }
  std::printf("action: %s%s\n", action.c_str(), flags.dry_run ? " (dry run: nothing changed)" : "");
  std::fflush(stdout);
  return kExitOk;
}

}  // namespace

CommandFn AddMigrateCommand(CLI::App& root) {
  auto flags = std::make_shared<MigrateFlags>();
  CLI::App* sub = root.add_subcommand(
      "migrate",
      "Create or upgrade the store's schema (idempotent; a second run changes nothing) and "
      "print the backend, schema version before -> after and the tables");
  sub->add_option("--store", flags->store,
                  "Store URL: sqlite://PATH, postgres://… or mysql://…")
      ->capture_default_str();
  sub->add_flag("--dry-run", flags->dry_run,
                "Only read: print what migrate would do, change nothing");
  return [flags] { return RunMigrate(*flags); };
}

}  // namespace idem::cli
