// idem's versioned schema in a SQL database: the check of a schema found in place,
// its creation under a lock, the read-only check, readiness (kPing) and the
// description `idem migrate` prints. One algorithm for every SQL backend; each
// supplies a SchemaSession over its own connection. Not part of the public API.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "idem/store.h"
#include "idem/value.h"
#include "store/backend.h"
#include "store/sql/dialect.h"

namespace idem::sql {

// The schema version the stores of this build create and read. 2: idem_records
// has expires_at and purged_at (retention). An open that may write
// upgrades an older schema (Dialect::UpgradeTo); a read-only one refuses it.
inline constexpr int64_t kSchemaVersion = 2;

// Readiness (Store::Ping): the schema version and the record table are there and
// readable. `WHERE 1 = 0` reads no row, so it costs a lookup of the table only; a
// record table that was dropped, renamed or never made (a wrong database) fails it.
inline constexpr std::string_view kPing =
    "SELECT (SELECT max(version) FROM idem_schema_version), "
    "(SELECT count(*) FROM idem_records WHERE 1 = 0)";

// The connection a schema is checked, created or described on.
class SchemaSession {
 public:
  virtual ~SchemaSession() = default;
  virtual absl::StatusOr<Rows> Query(std::string_view sql, absl::Span<const Value> params = {}) = 0;
  // True once the connection is lost (its errors then say nothing of the schema).
  virtual bool broken() const = 0;
  // True when `s`, an error of this connection, says a table does not exist.
  virtual bool IsNoTable(const absl::Status& s) const = 0;
  // Begins the creation: a transaction and/or a lock that serializes processes
  // creating the schema together. End(true) commits and releases; End(false) is
  // best effort, after a failure.
  virtual absl::Status BeginCreate() = 0;
  virtual absl::Status EndCreate(bool commit) = 0;
  // OK when this connection's user may create idem's tables; else why not.
  virtual absl::Status CheckCanCreate() = 0;
};

// The part of a SchemaSession every driver's connection gives alike: its
// Query(sql, params) and broken().
template <typename Conn>
class SchemaOn : public SchemaSession {
 public:
  explicit SchemaOn(Conn& conn) : conn_(conn) {}
  absl::StatusOr<Rows> Query(std::string_view sql, absl::Span<const Value> params) override {
    return conn_.Query(sql, params);
  }
  bool broken() const override { return conn_.broken(); }

 protected:
  Conn& conn_;
};

// How a store opens its schema (StoreOptions).
struct SchemaMode {
  bool read_only = false;      // create and change nothing
  bool require_schema = true;  // with read_only: no schema is an error
  bool create = true;          // false: a missing or older schema is an error
};

// Makes sure idem's schema is there: a schema in place must not be newer than this
// build nor damaged; a missing one is created and an older one upgraded (unless
// mode.read_only or !mode.create: then "no idem schema here", or OK when read-only
// and !mode.require_schema, and OutdatedSchemaError for an older one). `where` names the database in
// messages ("postgres database 'postgres://idem@db/app'"); it holds no password.
absl::Status OpenSchema(SchemaSession& session, const Dialect& dialect, std::string_view where,
                        SchemaMode mode);

// What the database holds of idem's schema (Store::DescribeSchema), without
// changing anything.
absl::StatusOr<SchemaInfo> DescribeSchema(SchemaSession& session, const Dialect& dialect);

// The answer of an open that finds idem's schema version but cannot read its record
// table (`ping`: kPing's error). Making the table anew would forget every key, so
// every duplicate would run again: the open refuses, and a person decides.
absl::Status DamagedSchemaError(std::string_view where, const absl::Status& ping);

// The answer of a read-only open on a database with an older idem schema.
absl::Status OutdatedSchemaError(std::string_view where, int64_t version);

// The answer of a read-only open on a database without idem's schema.
absl::Status NoSchemaError(std::string_view where, std::string_view what);

}  // namespace idem::sql
