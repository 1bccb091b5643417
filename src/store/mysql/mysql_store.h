// The mysql:// store: dedupe records in a MySQL 8 or MariaDB 10.11+ (InnoDB)
// database, in the same transaction as the caller's business rows.
//
// URL: mysql://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?PARAM=VALUE&...]; the
// parameters (pool, pool_wait_ms, lock_wait_timeout_s, connect_timeout_s,
// io_timeout_s, socket, ssl, ssl_ca) are described in store/mysql/mysql_url.h.
// The database must exist; the store creates its tables (idem_schema_version,
// idem_records) when missing, under GET_LOCK('idem_schema') so that processes
// starting together do not race.
//
// A claim is `INSERT … ON DUPLICATE KEY UPDATE idem_key = idem_key` (1 affected row:
// first arrival, 0: duplicate), then on a duplicate `SELECT … FOR UPDATE` of that
// row in the same READ COMMITTED transaction, so the following conditional update
// cannot race. A claim that meets another transaction's uncommitted claim of the
// same key waits for it up to lock_wait_timeout_s and then answers kUnavailable
// carrying the payload store/mysql/mysql_conn.h:kLockWaitTimeoutPayload.
//
// Handler SQL (Transaction::Exec/Query) runs as server-side prepared statements
// with `?` placeholders: Blob binds as binary, text as utf8mb4. Exec returns
// MySQL's affected rows, which count rows changed, not rows matched. DDL commits
// the transaction implicitly (a MySQL rule), so keep it out of guarded handlers.
// Errors map as STYLE.md says: constraint violations and bad SQL → kInvalidArgument;
// deadlock → kAborted (the server rolled the transaction back); lock wait timeout
// and lost connections → kUnavailable; a missing table or column, no privilege on a
// table, a read-only server, a full disk → kUnavailable marked IsStoreFault;
// rejected credentials → kPermissionDenied. After a kAborted, a lock wait
// timeout or a lost connection the transaction only answers that error again: the
// server may already have rolled it back.
//
// Thread safety: safe for concurrent use; each transaction holds one pooled
// connection from Begin() to Commit()/Rollback().
#pragma once

#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "idem/store.h"
#include "store/backend.h"
#include "store/sql/schema.h"

namespace idem {

// Opens the store named by `url` ("mysql://…") and creates its schema if missing.
// Errors: kInvalidArgument for a malformed URL or parameter; kUnavailable when the
// server cannot be reached; kPermissionDenied for rejected credentials;
// kFailedPrecondition when the database does not exist or holds a newer idem
// schema. Blocks on the server (connect, schema check).
// `mode`: StoreOptions::read_only and require_schema.
absl::StatusOr<std::unique_ptr<Store>> OpenMysqlStore(std::string_view url,
                                                      sql::SchemaMode mode = {});

}  // namespace idem
