// SQL that every SQL backend runs unchanged (SQLite, PostgreSQL, MySQL/MariaDB), and
// the answers they share about it. Not part of the public API.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/absl_compat.h"

namespace idem::sql {

// Readiness (Store::Ping): the schema version and the record table are there and
// readable. `WHERE 1 = 0` reads no row, so it costs a lookup of the table only; a
// record table that was dropped, renamed or never made (a wrong database) fails it.
inline constexpr std::string_view kPing =
    "SELECT (SELECT max(version) FROM idem_schema_version), "
    "(SELECT count(*) FROM idem_records WHERE 1 = 0)";

// The answer of an open that finds idem's schema version but cannot read its record
// table (`ping`: kPing's error). Making the table anew would forget every key, so
// every duplicate would run again: the open refuses, and a person decides.
inline absl::Status DamagedSchemaError(std::string_view where, const absl::Status& ping) {
  return absl::FailedPreconditionError(absl::StrCat(
      AV(where), ": the idem schema is damaged: its version is recorded but the table "
      "idem_records cannot be read (", ping.message(), "); restore idem_records (it "
      "holds every key's record), or drop idem_schema_version to start with no records"));
}

// `ping` (kPing's result on a schema whose version was found) as the open answers
// it: OK, the connection's own error when it was `lost` meanwhile (no sign of
// damage), else DamagedSchemaError.
inline absl::Status IntactSchema(std::string_view where, const absl::Status& ping, bool lost) {
  if (ping.ok() || lost) return ping;
  return DamagedSchemaError(where, ping);
}

// The answer of a read-only open (StoreOptions::read_only) on a database without
// idem's schema: no tables at all, or the tables without a version row.
inline absl::Status NoSchemaError(std::string_view where, bool no_tables) {
  return absl::FailedPreconditionError(absl::StrCat(
      "no idem schema here: ", AV(where), no_tables ? " has no idem tables"
                                                    : " has no idem schema version"));
}

}  // namespace idem::sql
