// `idem migrate`: creates or upgrades the versioned schema of a store, and says what
// it found and did.
//
//   idem migrate --store postgres://idem@db/app [--dry-run]
//   idem migrate --from sqlite://./idem.db --to rocksdb://./idem-db [--dry-run]
//     (copies records between stores: migrate_copy.cc)
//
// Opening a store already creates/upgrades its schema idempotently (under a lock, so
// processes starting together do not race); migrate does exactly that open, but
// reads the schema before and after (Store::DescribeSchema, on a read-only open) so
// an operator can see the change, and --dry-run only reads, then checks that the
// real run could write (file permissions; CREATE privilege). Running it twice is a no-op the
// second time ("unchanged"). Output on stdout, one "name: value" per line:
//
//   backend: postgres
//   store: postgres://idem@db/app
//   schema version: 0 (none) -> 2
//   step journal: created
//   tables: idem_journal_version, idem_object_locks, idem_operations, idem_records,
//           idem_schema_version, idem_steps   (one line)
//   procedures: idem_claim_v2, idem_finish_v1   (MySQL/MariaDB only)
//   sql api: installed (v1: claim_v1, complete_v1, …)   (PostgreSQL, MySQL/MariaDB)
//   action: created
//
// action is one of created, upgraded, unchanged, would create, would upgrade.
// The SQL API (docs/sql.md, store/sql/sql_api.h) is installed or upgraded with the
// schema; --drop-sql-api removes it (the records stay). --dry-run prints the
// statements a real run would send for it, after the lines above.
// Exit status: 0 done (also nothing to do); 1 the database cannot be
// reached or holds a schema newer than this build; 2 bad usage (malformed URL, a
// store without a schema such as memory:// or sqlite://:memory:).
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/commands.h"
#include "cli/migrate_copy.h"
#include "cli/reason.h"
#include "cli/secrets.h"
#include "core/absl_compat.h"
#include "idem/idem.h"
#include "idem/steps.h"
#include "store/backend.h"
#include "store/sql/sql_api.h"

namespace idem::cli {
namespace {

struct MigrateFlags {
  std::string store = "sqlite://./idem.db";
  bool dry_run = false;
  bool drop_sql_api = false;
  std::string from;  // --from/--to: copy records between stores (migrate_copy.h)
  std::string to;
  int batch = 500;
};

bool HasTable(const SchemaInfo& info, std::string_view name) {
  for (const std::string& t : info.tables) {
    if (t == name) return true;
  }
  return false;
}

std::string VersionText(int64_t v) { return v == 0 ? "0 (none)" : std::to_string(v); }

// Exit status for a failed step: a malformed URL is bad usage, the rest operational.
int Fail(const absl::Status& raw, std::string_view what, std::string_view url) {
  // The drivers may quote the URL, password included (libpq on a malformed URI).
  const absl::Status status = RedactStoreSecrets(raw, url);
  PrintReason(absl::StrCat("migrate: ", AV(what), ": ", status.message()));
  return status.code() == absl::StatusCode::kInvalidArgument ? kExitUsage : kExitFailure;
}

// The statements as a script for psql or mysql (whose procedures need a delimiter).
void PrintStatements(const sql::SqlApi& api, const std::vector<std::string>& statements) {
  const bool mysql = api.routines.front().starts_with("idem_sql_");
  std::printf("\n-- the SQL API statements a real run sends:\n");
  if (mysql) std::printf("DELIMITER //\n");
  for (const std::string& s : statements) std::printf("%s%s\n", s.c_str(), mysql ? "//" : ";");
  if (mysql) std::printf("DELIMITER ;\n");
}

std::string RoutineList(const sql::SqlApi& api) {
  std::string out = absl::StrCat("v", sql::kSqlApiVersion, ": ");
  bool first = true;
  std::string last;
  for (const std::string& identity : api.routines) {
    // The routines a caller calls, by name (PostgreSQL's overloads once); the
    // helpers (_core, checks) stay unnamed.
    const std::string r = identity.substr(0, identity.find('('));
    if (r == last) continue;
    last = r;
    if (r.find("core") != std::string::npos || !r.ends_with("_v1")) continue;
    if (r.find("claim") == std::string::npos && r.find("complete") == std::string::npos &&
        r.find("fail") == std::string::npos) {
      continue;
    }
    absl::StrAppend(&out, first ? "" : ", ", r);
    first = false;
  }
  return out;
}

bool IsPrivilegeFailure(const absl::Status& s) {
  return s.code() == absl::StatusCode::kPermissionDenied ||
         absl::StrContains(s.message(), "permission denied");
}

// The install's own refusal (sql_api_postgres.inc): a schema idem would move a store
// whose search_path starts with "$user" for a user named idem.
bool IsSearchPathRefusal(const absl::Status& s) {
  return absl::StrContains(s.message(), "idem: creating schema idem would move this store");
}

// What `url`'s database holds now, read without creating or changing anything.
absl::StatusOr<SchemaInfo> Describe(const std::string& url, std::string* backend,
                                    sql::SqlApiFound* api) {
  IDEM_ASSIGN_OR_RETURN(std::unique_ptr<Store> store,
                        OpenStore(url, {.read_only = true, .require_schema = false}));
  if (Backend(*store).sql_dialect() != nullptr)
    *backend = std::string(Backend(*store).sql_dialect()->name());
  IDEM_ASSIGN_OR_RETURN(SchemaInfo info, Backend(*store).DescribeSchema());
  IDEM_ASSIGN_OR_RETURN(*api, sql::FindSqlApi(*store));
  return info;
}

int RunMigrate(const MigrateFlags& flags) {
  const std::string& url = flags.store;
  if (url.starts_with("sqlite://:memory:")) {
    PrintReason("migrate: sqlite://:memory: has no schema to migrate (it lives only inside one "
                "process)");
    return kExitUsage;
  }
  std::string backend;
  sql::SqlApiFound api;
  absl::StatusOr<SchemaInfo> before = Describe(url, &backend, &api);
  if (before.status().code() == absl::StatusCode::kUnimplemented) {
    PrintReason(absl::StrCat("migrate: ", RedactStoreUrl(url), ": ", before.status().message()));
    return kExitUsage;
  }
  if (!before.ok()) return Fail(before.status(), "reading the schema", url);
  if (before->version > before->build_version) {
    PrintReason(absl::StrCat("migrate: the store holds idem schema version ", before->version,
                             ", newer than this build's ", before->build_version,
                             "; upgrade idem"));
    return kExitFailure;
  }
  if (flags.drop_sql_api && !api.api.has_value()) {
    PrintReason(absl::StrCat("migrate: --drop-sql-api: ", RedactStoreUrl(url),
                             " has no SQL API (only PostgreSQL and MySQL/MariaDB have one)"));
    return kExitUsage;
  }

  SchemaInfo after = *before;
  std::string action;
  std::string api_line;                                      // what became of the SQL API
  const std::vector<std::string>* api_statements = nullptr;  // a dry run prints them
  std::string display = RedactStoreUrl(url);
  if (flags.dry_run) {
    after.version = before->build_version;
    const bool missing_procedures =
        before->procedures.has_value() && before->procedures->size() < 2;
    action = before->version == 0                        ? "would create"
             : before->version != before->build_version ? "would upgrade"
             : missing_procedures                         ? "would upgrade"
                                                          : "unchanged";
    if (api.api.has_value()) {
      if (flags.drop_sql_api) {
        api_line = api.state == sql::SqlApiState::kNone ? "(none)" : "would drop";
        if (api.state != sql::SqlApiState::kNone) api_statements = &api.api->drop;
      } else if (api.state == sql::SqlApiState::kCurrent) {
        api_line = absl::StrCat("unchanged (", RoutineList(*api.api), ")");
      } else {
        api_line = absl::StrCat(
            api.state == sql::SqlApiState::kNone ? "would install (" : "would upgrade (",
            RoutineList(*api.api), ")");
        api_statements = &api.api->install;
      }
      if (api_statements != nullptr && action == "unchanged") action = "would upgrade";
    }
    // A dry run that says "would create" must mean the real run can write.
    if (action != "unchanged" && !before->writable.ok()) {
      PrintReason(absl::StrCat("migrate: --dry-run: the real run would fail: ",
                               RedactStoreSecrets(before->writable, url).message()));
      return kExitFailure;
    }
  } else {
    // The store's own open is the migration: one code path for serve and migrate.
    absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(url);
    if (!store.ok()) return Fail(store.status(), "opening the store", url);
    display = std::string((*store)->url());
    // The step journal too, so a server or worker whose database user
    // may not run DDL finds every table it needs.
    StepRunner journal(**store);
    if (absl::Status s = journal.Migrate(); !s.ok()) return Fail(s, "creating the step journal", url);
    absl::StatusOr<SchemaInfo> now = Backend(*(*store)).DescribeSchema();
    if (!now.ok()) return Fail(now.status(), "reading the schema after opening", url);
    after = *now;
    action = after.version == before->version
                 ? (after.procedures == before->procedures ? "unchanged" : "upgraded")
             : before->version == 0 ? "created"
                                    : "upgraded";
    if (api.api.has_value()) {
      bool changed = false;
      if (flags.drop_sql_api) {
        if (api.state == sql::SqlApiState::kNone) {
          api_line = "(none)";
        } else if (absl::Status s = sql::RunSqlApiStatements(**store, api.api->drop); !s.ok()) {
          return Fail(s, "dropping the SQL API", url);
        } else {
          api_line = "dropped (the records stay)";
          changed = true;
        }
      } else if (api.state == sql::SqlApiState::kCurrent) {
        api_line = absl::StrCat("unchanged (", RoutineList(*api.api), ")");
      } else if (absl::Status s = sql::RunSqlApiStatements(**store, api.api->install); s.ok()) {
        api_line = absl::StrCat(api.state == sql::SqlApiState::kNone ? "installed (" : "upgraded (",
                                RoutineList(*api.api), ")");
        changed = true;
      } else if (IsPrivilegeFailure(s)) {
        // As the procedures above: the store works without it; say why it is missing.
        api_line = absl::StrCat("(none: this user may not create functions or procedures: ",
                                RedactStoreSecrets(s, url).message(), ")");
      } else if (IsSearchPathRefusal(s)) {
        // Nothing was made (one transaction); the store migrated as before.
        api_line = absl::StrCat("(none: ", RedactStoreSecrets(s, url).message(), ")");
      } else {
        return Fail(s, "installing the SQL API", url);
      }
      if (changed && action == "unchanged") action = "upgraded";
    }
  }

  std::printf("backend: %s\n", backend.c_str());
  std::printf("store: %s\n", display.c_str());
  std::printf("schema version: %s -> %s\n", VersionText(before->version).c_str(),
              VersionText(after.version).c_str());
  std::printf("step journal: %s\n", HasTable(*before, "idem_operations") ? "unchanged"
                                     : flags.dry_run                       ? "would create"
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
  if (!api_line.empty()) std::printf("sql api: %s\n", api_line.c_str());
  std::printf("action: %s%s\n", action.c_str(), flags.dry_run ? " (dry run: nothing changed)" : "");
  if (api_statements != nullptr) PrintStatements(*api.api, *api_statements);
  std::fflush(stdout);
  return kExitOk;
}

}  // namespace

CommandFn AddMigrateCommand(CLI::App& root) {
  auto flags = std::make_shared<MigrateFlags>();
  CLI::App* sub = root.add_subcommand(
      "migrate",
      "Create or upgrade the store's schema and, on PostgreSQL and MySQL/MariaDB, its SQL API "
      "(idempotent; a second run changes nothing) and print the backend, schema version "
      "before -> after, the tables and the SQL API");
  AddStoreOptions(root, sub,
                  {{"--store", &flags->store, "Store URL: sqlite://PATH, postgres://… or mysql://…"},
                   {"--from", &flags->from,
                    "Copy every record of this store (opened read-only) into --to, e.g. "
                    "--from sqlite://./idem.db --to rocksdb://./idem-db; records already in --to "
                    "are kept; stop the servers on both first"},
                   {"--to", &flags->to, "The store --from's records are copied into"}});
  sub->add_flag("--dry-run", flags->dry_run,
                "Only read: print what migrate would do (and the SQL API statements it would "
                "send), change nothing");
  sub->add_flag("--drop-sql-api", flags->drop_sql_api,
                "Remove the SQL API (PostgreSQL: the functions of schema idem; MySQL/MariaDB: "
                "the idem_sql_* procedures; docs/sql.md); the records stay");
  sub->add_option("--batch", flags->batch, "Records per transaction of a --from/--to copy")
      ->check(CLI::Range(1, 10000))
      ->capture_default_str();
  return [flags, sub] {
    if (!flags->from.empty() || !flags->to.empty()) {
      if (flags->from.empty() || flags->to.empty() || sub->count("--store") > 0) {
        PrintReason("migrate: --from and --to go together, without --store");
        return kExitUsage;
      }
      return RunMigrateCopy(flags->from, flags->to, flags->dry_run, flags->batch);
    }
    return RunMigrate(*flags);
  };
}

}  // namespace idem::cli
