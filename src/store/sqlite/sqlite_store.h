// The sqlite:// store: dedupe records in a SQLite file, in the same transaction
// as the caller's business rows.
//
// URL: sqlite://PATH (sqlite://./idem.db, sqlite:///var/lib/idem/idem.db,
// sqlite://:memory:) with optional parameters:
//   synchronous=full|normal|off  (default full: a committed claim survives power loss)
//   busy_timeout_ms=N            (default 5000: how long a claim waits for the write lock
//                                 before kUnavailable)
//   readers=N                    (default 4: connections for reads outside transactions;
//                                 a read waits up to busy_timeout_ms for a free one)
// The file is opened in WAL mode. Writers are serialized by one write connection.
//
// Thread safety: safe for concurrent use.
#pragma once

#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "idem/clock.h"
#include "idem/store.h"
#include "store/sql/schema.h"

namespace idem {

// Opens (creating if needed) the database named by `url` ("sqlite://…") and its
// schema. Errors: kInvalidArgument for a malformed URL or parameter, kUnavailable
// when the file cannot be opened or created, kFailedPrecondition when the file is
// not a SQLite database or has a newer idem schema.
// `mode`: StoreOptions::read_only and require_schema.
absl::StatusOr<std::unique_ptr<Store>> OpenSqliteStore(std::string_view url,
                                                       sql::SchemaMode mode = {});

}  // namespace idem
