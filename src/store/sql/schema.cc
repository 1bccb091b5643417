#include "store/sql/schema.h"

#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "store/absl_compat.h"
#include "idem/status.h"
#include "store/sql/records.h"

namespace idem::sql {
namespace {

constexpr std::string_view kVersion = "SELECT max(version) FROM idem_schema_version";

// The version in `rows` (kVersion's answer); 0 when the table has no row.
absl::StatusOr<int64_t> VersionIn(const Rows& rows) {
  if (rows.rows.empty() || rows.rows[0].empty()) return 0;
  return IntOf(rows.rows[0][0], "idem_schema_version.version");
}

absl::Status CheckVersion(int64_t version, std::string_view where) {
  if (version > kSchemaVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat(AV(where), " has an idem schema newer than this build (version ", version,
                     " > ", kSchemaVersion, "); upgrade idem"));
  }
  return absl::OkStatus();
}

// A schema found in place: not newer than this build and not damaged.
absl::Status CheckExisting(SchemaSession& session, int64_t version, std::string_view where) {
  IDEM_RETURN_IF_ERROR(CheckVersion(version, where));
  absl::Status ping = session.Query(kPing).status();
  // A connection lost meanwhile shows no sign of damage: its own error.
  if (ping.ok() || session.broken()) return ping;
  return DamagedSchemaError(where, ping);
}

absl::Status InsertVersion(SchemaSession& session, int64_t version) {
  const Value v[] = {Value(static_cast<long long>(version))};
  return session.Query("INSERT INTO idem_schema_version (version) VALUES (?)", v).status();
}

// Under the schema lock: creates what is missing (a fresh database gets this
// build's tables and version), or upgrades an older version step by step, each
// step recorded as a row of idem_schema_version (max(version) is the version).
absl::Status Create(SchemaSession& session, const Dialect& dialect, std::string_view where) {
  for (const std::string& ddl : dialect.RecordSchema()) {
    IDEM_RETURN_IF_ERROR(session.Query(ddl).status());
  }
  IDEM_ASSIGN_OR_RETURN(Rows rows, session.Query(kVersion));
  IDEM_ASSIGN_OR_RETURN(int64_t version, VersionIn(rows));
  if (version == 0) return InsertVersion(session, kSchemaVersion);
  IDEM_RETURN_IF_ERROR(CheckVersion(version, where));  // newer: made by a newer idem
  for (int64_t to = version + 1; to <= kSchemaVersion; ++to) {
    for (const std::string& ddl : dialect.UpgradeTo(to)) {
      IDEM_RETURN_IF_ERROR(session.Query(ddl).status());
    }
    IDEM_RETURN_IF_ERROR(InsertVersion(session, to));
  }
  return absl::OkStatus();
}

// How often a creation the database rolled back (kAborted: a deadlock, or a
// certification conflict on Galera, where the schema lock is node-local and two
// processes on two nodes create together) is tried again. The next try usually
// takes the fast path: it finds the winner's schema.
constexpr int kCreateAttempts = 5;

absl::Status OpenSchemaOnce(SchemaSession& session, const Dialect& dialect,
                            std::string_view where, SchemaMode mode) {
  // Fast path without a lock: the schema is usually there, and an existing schema
  // needs neither DDL nor the lock (a store opens while another process holds
  // long transactions on the tables).
  absl::StatusOr<Rows> rows = session.Query(kVersion);
  if (rows.ok()) {
    IDEM_ASSIGN_OR_RETURN(int64_t version, VersionIn(*rows));
    if (version >= kSchemaVersion) return CheckExisting(session, version, where);
    if (version != 0) {
      // An older schema: upgraded below (under the lock, like a creation), after
      // the same damage check as a current one.
      IDEM_RETURN_IF_ERROR(CheckExisting(session, version, where));
      if (mode.read_only && !mode.require_schema) return absl::OkStatus();  // described
      if (mode.read_only || !mode.create) return OutdatedSchemaError(where, version);
    }
  } else if (session.broken() || !session.IsNoTable(rows.status())) {
    return rows.status();
  }
  if (mode.read_only && !mode.require_schema) return absl::OkStatus();
  if (mode.read_only || !mode.create) {
    return NoSchemaError(where, rows.ok() ? "has no idem schema version" : "has no idem tables");
  }
  absl::Status s = session.BeginCreate();
  if (s.ok()) s = Create(session, dialect, where);
  if (s.ok()) {
    s = session.EndCreate(/*commit=*/true);
  } else if (!session.broken()) {
    session.EndCreate(/*commit=*/false).IgnoreError();  // best effort: the open fails anyway
  }
  if (!s.ok()) {
    return absl::Status(s.code(),
                        absl::StrCat(AV(where), ": creating the idem schema: ", s.message()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status OpenSchema(SchemaSession& session, const Dialect& dialect, std::string_view where,
                        SchemaMode mode) {
  absl::Status s;
  for (int attempt = 0; attempt < kCreateAttempts; ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(50 << (attempt - 1)));
    s = OpenSchemaOnce(session, dialect, where, mode);
    if (s.code() != absl::StatusCode::kAborted || session.broken()) return s;
  }
  return s;
}

absl::StatusOr<SchemaInfo> DescribeSchema(SchemaSession& session, const Dialect& dialect) {
  SchemaInfo info;
  info.build_version = kSchemaVersion;
  IDEM_ASSIGN_OR_RETURN(Rows tables, session.Query(dialect.spec().list_tables));
  for (const std::vector<Value>& row : tables.rows) {
    if (!row.empty()) info.tables.push_back(BytesOf(row[0]));
  }
  for (const std::string& t : info.tables) {
    if (t != "idem_schema_version") continue;
    IDEM_ASSIGN_OR_RETURN(Rows rows, session.Query(kVersion));
    IDEM_ASSIGN_OR_RETURN(info.version, VersionIn(rows));
  }
  info.writable = session.CheckCanCreate();
  if (session.broken()) {  // the connection went: no answer
    return info.writable.ok() ? absl::UnavailableError("the connection was lost") : info.writable;
  }
  return info;
}

absl::Status DamagedSchemaError(std::string_view where, const absl::Status& ping) {
  return absl::FailedPreconditionError(absl::StrCat(
      AV(where), ": the idem schema is damaged: its version is recorded but the table "
      "idem_records cannot be read (", ping.message(), "); restore idem_records (it "
      "holds every key's record), or drop idem_schema_version to start with no records"));
}

absl::Status OutdatedSchemaError(std::string_view where, int64_t version) {
  return absl::FailedPreconditionError(absl::StrCat(
      AV(where), " has idem schema version ", version, ", older than this build's ",
      kSchemaVersion, "; run `idem migrate` on it (or start idem serve, which upgrades it)"));
}

absl::Status NoSchemaError(std::string_view where, std::string_view what) {
  return absl::FailedPreconditionError(absl::StrCat("no idem schema here: ", AV(where), " ", AV(what),
                                                   "; `idem migrate` creates it"));
}

}  // namespace idem::sql
