// The dialect seam of the SQL backends: the column types and the few statements
// in which SQLite, PostgreSQL and MySQL/MariaDB differ, as one object per database
// (the one implementation of the public SqlDialect), and the DDL of idem's tables
// written once over them. Not part of the public API.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "idem/store.h"
#include "store/backend.h"

namespace idem::sql {

// The column types of one database, by role.
struct Types {
  std::string_view bytes_key;  // a key: opaque bytes, compared bytewise
  std::string_view text;       // a name up to 255 bytes (tenant, biz type, fingerprint)
  std::string_view short_text; // a word up to 64 bytes (a status, a step name)
  std::string_view small_int;  // 0..255
  std::string_view int32;
  std::string_view int64;
  std::string_view blob;       // any bytes, up to the request size limits
};

class Dialect final : public SqlDialect {
 public:
  struct Spec {
    std::string_view name;
    Types types;
    std::string_view table_options;  // after a CREATE TABLE's ")"
    std::string_view keyed_table_options;  // for the tables read by primary key only
    bool inline_indexes = false;     // indexes inside CREATE TABLE (MySQL has no IF NOT EXISTS)
    bool on_duplicate_key = false;   // ON DUPLICATE KEY UPDATE, not ON CONFLICT
    std::string_view for_update;
    std::string_view for_update_skip_locked;
    // Run first in a transaction that creates tables, to serialize processes
    // creating them together ("" where the transaction itself does: SQLite's
    // BEGIN IMMEDIATE; MySQL takes a named lock around it instead).
    std::string_view schema_lock;
    // Lists idem's tables (idem_*) in the connection's database or schema, sorted.
    std::string_view list_tables;
  };

  explicit Dialect(Spec spec);

  std::string_view name() const override { return spec_.name; }
  std::string KeepExisting(std::string_view insert, std::string_view key) const override;
  std::string_view ForUpdate() const override { return spec_.for_update; }
  std::string_view ForUpdateSkipLocked() const override { return spec_.for_update_skip_locked; }
  bool UpsertReturning() const override { return !spec_.on_duplicate_key; }
  const std::vector<std::string>& JournalSchema() const override { return journal_schema_; }

  // The statements that make the record tables (idem_schema_version, idem_records)
  // where they are missing; without the lock (see Spec::schema_lock).
  const std::vector<std::string>& RecordSchema() const { return record_schema_; }
  // The statements that move the record tables from schema version `to` - 1 to
  // `to` (2 … kSchemaVersion), to run in order under the schema lock.
  const std::vector<std::string>& UpgradeTo(int64_t to) const { return upgrades_.at(to); }
  const Spec& spec() const { return spec_; }

 private:
  const Spec spec_;
  std::vector<std::string> record_schema_;
  std::vector<std::string> journal_schema_;
  std::vector<std::vector<std::string>> upgrades_;  // by target version
};

const Dialect& SqliteDialect();
const Dialect& PostgresDialect();
const Dialect& MysqlDialect();

}  // namespace idem::sql
