// idem: exactly-once effects on at-least-once delivery. The one header to include.
//
// Thread safety: see each header; every Store and Guard is safe for concurrent use.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"

#include "absl/status/statusor.h"
#include "idem/clock.h"
#include "idem/fingerprint.h"
#include "idem/guard.h"
#include "idem/key.h"
#include "idem/record.h"
#include "idem/status.h"
#include "idem/store.h"
#include "idem/value.h"

namespace idem {

struct StoreOptions {
  const Clock* clock = Clock::Real();  // not owned; must outlive the Store
  // Open without creating or changing anything, for tools that only look
  // (inspect, stuck): no schema is made or upgraded, a SQLite file is opened
  // read-only (a read-only file works), and a database without idem's tables is
  // kFailedPrecondition "no idem schema here". Writes through such a store fail.
  bool read_only = false;
  // With read_only: false lets the open succeed on a database without idem's
  // schema (or, for SQLite, without a file), for `idem migrate --dry-run` to say
  // what is missing; nothing else is of use on such a store.
  bool require_schema = true;
  // False: open for writing only a store that is already there (`idem purge`,
  // `idem stuck --resolve`; only `idem migrate` creates one). A
  // database without idem's schema, a missing SQLite file or RocksDB directory is
  // kFailedPrecondition "no idem schema here", an older schema is too, and nothing
  // is created (tables, procedures, files) or upgraded. True (the default): made
  // when missing, as an embedded store's first run needs.
  bool create_schema = true;
  // When a database server (postgres://, mysql://) cannot be reached at open
  // (kUnavailable: down, refusing, unreachable), succeed anyway with a store that
  // answers every call kUnavailable (a store fault) and opens the real store on
  // the first call after the database answers, trying at most once a second. A
  // server then starts before its database and reports not-ready until it is
  // there. Every other failure (a bad URL, wrong credentials, a newer or damaged
  // schema, an embedded file that cannot be opened) still fails the open.
  bool open_when_reachable = false;
};

// Opens the Store named by `url`: memory://, sqlite://PATH (sqlite://./idem.db,
// sqlite:///var/lib/idem/idem.db, sqlite://:memory:), rocksdb://DIR
// (rocksdb:///var/lib/idem/db: key/value records for lease mode, no SQL),
// postgres://…, mysql://…, with optional query parameters (sqlite:
// synchronous=full|normal|off|extra, busy_timeout_ms=N, readers=N; rocksdb:
// sync=full|off, lock_timeout_ms=N, ttl=DURATION). Creates the schema when missing.
// options.clock is also the rocksdb:// retention filter's "now". Returns kInvalidArgument for a malformed URL or
// an unknown parameter, kNotFound for a backend that was not compiled in,
// kUnavailable when the database cannot be opened or created, kFailedPrecondition
// when the file is not an idem database (corrupt, or a newer schema), or, with
// options.read_only, when it holds no idem schema.
absl::StatusOr<std::unique_ptr<Store>> OpenStore(std::string_view url,
                                                 const StoreOptions& options = {});

// `url` without its secrets, for messages and logs: the password of
// `user:password@` and parameters named password, pass, passwd or secret are
// dropped. Never fails (malformed URLs too).
std::string RedactStoreUrl(std::string_view url);

// `status` with every secret of `url` in its message (the password, raw and
// percent-decoded; secret parameters) replaced by "***"; code and payloads kept.
absl::Status RedactStoreSecrets(const absl::Status& status, std::string_view url);

// `url` with `password` written into it (percent-encoded), for a password kept off
// the command line (`idem serve --store-password-file`, IDEM_STORE_PASSWORD):
// "postgres://idem@db/x" → "postgres://idem:PASSWORD@db/x". kInvalidArgument when
// the URL already has a password or takes none (sqlite://, memory://, rocksdb://).
absl::StatusOr<std::string> StoreUrlWithPassword(std::string_view url, std::string_view password);

}  // namespace idem
