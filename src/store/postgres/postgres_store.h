// The postgres:// store: dedupe records in PostgreSQL (libpq), in the same
// transaction as the caller's business rows.
//
// URL: postgres://USER:PASSWORD@HOST:PORT/DB?PARAMS or postgresql://… — a libpq
// connection URI (https://www.postgresql.org/docs/15/libpq-connect.html), so every
// libpq parameter works (sslmode=, options=-csearch_path%3Dmyschema, target_session_attrs=,
// application_name=, …). idem's own parameters are taken out before the URI goes
// to libpq:
//   pool=N             (default 8, 1..1024: connections at most; each open
//                       Transaction holds one)
//   pool_timeout_ms=N  (default 2000: how long Begin/Get/Ping wait for a free pooled
//                       connection before kUnavailable)
//   lock_timeout_ms=N  (default 2000, 0 = wait forever: SET LOCAL lock_timeout of
//                       every transaction; a claim that waits longer for a row held
//                       by another transaction is answered as a claim in progress)
//   io_timeout_ms=N    (default 3000, 0 = none: one deadline for each store call,
//                       covering the wait for a pooled connection, a new connection
//                       and every answer of the server; past it the call is
//                       kUnavailable and its connection closed. The server's
//                       statement_timeout is set 500 ms below it)
//   notify=on|off      (default on: finished claims wake waiters in other processes)
// and libpq's connect_timeout (whole seconds, 0 = none) bounds a new connection
// within the call's deadline; it defaults to 1.5 s. So a database that stops
// answering (frozen, partitioned) costs the first call on a pooled connection
// io_timeout_ms and every later one, which must connect, the connect bound.
//
// Tables: idem_schema_version and idem_records in the connection's current
// schema, created on first open under a transaction-scoped advisory lock.
// Transactions are READ COMMITTED; a claim locks its record row (FOR UPDATE), so
// concurrent claims of one key queue on the row and never both win.
//
// Round trips (libpq pipeline mode): Begin() sends nothing (it fails closed only
// when no connection can be had); the BEGIN and SET LOCAL go out with the
// transaction's first statement, whose errors they become. The Guard's result
// UPDATE and the COMMIT share one round trip (ReplaceAndCommit), so a guarded
// handler costs 3: claim, the handler's statements, result + COMMIT.
//
// Prepared statements are per connection: use a session-mode pooler (or none) in
// front of the server, not PgBouncer's transaction mode.
//
// Thread safety: safe for concurrent use.
#pragma once

#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "idem/store.h"
#include "store/backend.h"
#include "store/sql/schema.h"

namespace idem {

// Opens the PostgreSQL database named by `url` ("postgres://…" or "postgresql://…")
// and creates the idem tables when missing. Blocks while connecting. Errors:
// kInvalidArgument for a malformed URL or parameter, kUnavailable when the server
// cannot be reached, kPermissionDenied when it refuses the credentials,
// kFailedPrecondition when the database does not exist or has a newer idem schema.
// `mode`: StoreOptions::read_only and require_schema.
absl::StatusOr<std::unique_ptr<Store>> OpenPostgresStore(std::string_view url,
                                                         sql::SchemaMode mode = {});

}  // namespace idem
