#include "store/sql/dialect.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "store/absl_compat.h"

namespace idem::sql {
namespace {

// One table of idem's, written once: `columns` names its column types by role
// ({key}, {text}, {short}, {small}, {int32}, {int64}, {blob}).
struct Table {
  std::string_view name;
  std::string_view columns;
  std::vector<std::pair<std::string_view, std::string_view>> indexes;  // name, columns
  bool keyed = false;  // read by primary key only (Spec::keyed_table_options)
};

std::vector<std::string> Ddl(const Dialect::Spec& d, const std::vector<Table>& tables) {
  const Types& t = d.types;
  std::vector<std::string> out;
  for (const Table& table : tables) {
    std::string sql = absl::StrCat("CREATE TABLE IF NOT EXISTS ", AV(table.name), " (",
                                   AV(table.columns));
    for (const auto& [index, columns] : table.indexes) {
      if (d.inline_indexes) absl::StrAppend(&sql, ", INDEX ", AV(index), " (", AV(columns), ")");
    }
    absl::StrAppend(&sql, ")", AV(table.keyed ? d.keyed_table_options : d.table_options));
    out.push_back(absl::StrReplaceAll(
        sql, {{"{key}", AV(t.bytes_key)}, {"{text}", AV(t.text)}, {"{short}", AV(t.short_text)},
              {"{small}", AV(t.small_int)}, {"{int32}", AV(t.int32)}, {"{int64}", AV(t.int64)},
              {"{blob}", AV(t.blob)}}));
    for (const auto& [index, columns] : table.indexes) {
      if (d.inline_indexes) continue;
      out.push_back(absl::StrCat("CREATE INDEX IF NOT EXISTS ", AV(index), " ON ",
                                 AV(table.name), " (", AV(columns), ")"));
    }
  }
  return out;
}

// The dedupe record table: one row per (tenant, key).
const std::vector<Table>& RecordTables() {
  static const std::vector<Table> tables = {
      {"idem_schema_version", "version {int32} NOT NULL", {}},
      {"idem_records",
       "tenant {text} NOT NULL, idem_key {key} NOT NULL, biz_type {text} NOT NULL,"
       " fingerprint {text} NOT NULL DEFAULT '',"
       " state {small} NOT NULL CHECK (state IN (0, 1, 2, 3)), token {int64} NOT NULL,"
       " lease_until {int64} NOT NULL, result {blob}, error {blob},"
       " created_at {int64} NOT NULL, updated_at {int64} NOT NULL,"
       " expires_at {int64} NOT NULL DEFAULT 9223372036854775807,"
       " purged_at {int64} NOT NULL DEFAULT 0,"
       " PRIMARY KEY (tenant, idem_key)",
       {},
       /*keyed=*/true},
  };
  return tables;
}

// The step journal (docs/steps.md).
const std::vector<Table>& JournalTables() {
  static const std::vector<Table> tables = {
      {"idem_journal_version", "version {int32} NOT NULL", {}},
      {"idem_operations",
       "biz_key {key} NOT NULL PRIMARY KEY, op_type {short} NOT NULL, object_key {key} NOT NULL,"
       " status {short} NOT NULL, input {blob}, next_retry_at {int64} NOT NULL,"
       " lease_token {int64} NOT NULL, lease_until {int64} NOT NULL,"
       " blocked_by {key} NOT NULL, last_error {blob}, created_at {int64} NOT NULL,"
       " updated_at {int64} NOT NULL, writes {int64} NOT NULL DEFAULT 0",
       {{"idem_operations_due", "status, next_retry_at"}}},
      {"idem_steps",
       "biz_key {key} NOT NULL, step_seq {int32} NOT NULL, name {short} NOT NULL,"
       " status {short} NOT NULL, request_id {short} NOT NULL, payload {blob},"
       " retry_count {int32} NOT NULL, compensate_failures {int32} NOT NULL,"
       " next_retry_at {int64} NOT NULL, last_error {blob}, updated_at {int64} NOT NULL,"
       " PRIMARY KEY (biz_key, step_seq)",
       {{"idem_steps_due", "status, next_retry_at"}}},
      {"idem_object_locks",
       "object_key {key} NOT NULL PRIMARY KEY, holder {key} NOT NULL,"
       " acquired_at {int64} NOT NULL",
       {}},
  };
  return tables;
}

// Schema version 2 (retention): the columns version 1's idem_records
// lacks, with the values they mean for its rows: kept for ever (expires_at
// "never", as store/sql/columns.h writes absl::InfiniteFuture()), not purged. Constant
// defaults: a metadata-only change on PostgreSQL 11+, MySQL 8 and MariaDB 10.3+ (no
// table rewrite), and SQLite's ADD COLUMN never rewrites.
std::vector<std::string> UpgradeToV2(const Dialect::Spec& d) {
  const std::string expires = absl::StrCat("expires_at ", AV(d.types.int64),
                                           " NOT NULL DEFAULT 9223372036854775807");
  const std::string purged = absl::StrCat("purged_at ", AV(d.types.int64), " NOT NULL DEFAULT 0");
  if (d.name == "sqlite") {  // one column per ALTER; the transaction makes them one change
    return {absl::StrCat("ALTER TABLE idem_records ADD COLUMN ", expires),
            absl::StrCat("ALTER TABLE idem_records ADD COLUMN ", purged)};
  }
  // One statement: MySQL's DDL commits on its own, so two would leave a half-done
  // upgrade behind a crash between them.
  return {absl::StrCat("ALTER TABLE idem_records ADD COLUMN ", expires, ", ADD COLUMN ", purged)};
}

}  // namespace

Dialect::Dialect(Spec spec)
    : spec_(std::move(spec)),
      record_schema_(Ddl(spec_, RecordTables())),
      journal_schema_(Ddl(spec_, JournalTables())),
      upgrades_({{}, {}, UpgradeToV2(spec_)}) {
  if (!spec_.schema_lock.empty()) {
    journal_schema_.insert(journal_schema_.begin(), std::string(spec_.schema_lock));
  }
}

std::string Dialect::KeepExisting(std::string_view insert, std::string_view key) const {
  if (spec_.on_duplicate_key) {
    return absl::StrCat(AV(insert), " ON DUPLICATE KEY UPDATE ", AV(key), " = ", AV(key));
  }
  return absl::StrCat(AV(insert), " ON CONFLICT DO NOTHING");
}

const Dialect& SqliteDialect() {
  static const Dialect d({
      .name = "sqlite",
      .types = {"BLOB", "TEXT", "TEXT", "INTEGER", "INTEGER", "INTEGER", "BLOB"},
      .keyed_table_options = " WITHOUT ROWID",
      // A write transaction (BEGIN IMMEDIATE) holds the whole database.
      .list_tables = "SELECT name FROM sqlite_master WHERE type = 'table' AND "
                     "name LIKE 'idem\\_%' ESCAPE '\\' ORDER BY 1",
  });
  return d;
}

const Dialect& PostgresDialect() {
  static const Dialect d({
      .name = "postgres",
      .types = {"BYTEA", "TEXT", "TEXT", "SMALLINT", "INTEGER", "BIGINT", "BYTEA"},
      .for_update = " FOR UPDATE",
      .for_update_skip_locked = " FOR UPDATE SKIP LOCKED",
      // CREATE TABLE IF NOT EXISTS alone races on the catalog's unique indexes.
      // Two-key form, so it cannot collide with an application's single-bigint
      // advisory locks; the second key is the schema, so stores in different
      // schemas do not wait for each other.
      .schema_lock = "SELECT pg_advisory_xact_lock(1768187245 /* 'idem' */, "
                     "hashtext(coalesce(current_schema(), '')))",
      // current_schema(): the store's tables live in the connection's search_path
      // schema (options=-csearch_path%3D…).
      .list_tables = "SELECT table_name::text FROM information_schema.tables WHERE "
                     "table_schema = current_schema() AND table_name LIKE 'idem\\_%' ORDER BY 1",
  });
  return d;
}

const Dialect& MysqlDialect() {
  // Every name and key is VARBINARY: no collation may fold two keys ("R-1",
  // "r-1") into one.
  static const Dialect d({
      .name = "mysql",
      .types = {"VARBINARY(255)", "VARBINARY(255)", "VARBINARY(64)", "TINYINT", "INT", "BIGINT",
                "LONGBLOB"},
      .table_options = " ENGINE=InnoDB",
      .keyed_table_options = " ENGINE=InnoDB",
      .inline_indexes = true,
      .on_duplicate_key = true,
      .for_update = " FOR UPDATE",
      .for_update_skip_locked = " FOR UPDATE SKIP LOCKED",
      // '\\\\_' in C++ is '\\_' in SQL text, which MySQL's string literal turns
      // into the LIKE escape '\_' (a literal underscore).
      .list_tables = "SELECT table_name FROM information_schema.tables WHERE "
                     "table_schema = DATABASE() AND table_name LIKE 'idem\\\\_%' ORDER BY 1",
  });
  return d;
}

}  // namespace idem::sql
