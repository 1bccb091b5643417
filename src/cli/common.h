// What several `idem` subcommands share: showing opaque bytes and times, and
// opening an existing store for reading.
#pragma once

#include <memory>
#include <string>
#include <vector>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "idem/store.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace idem::cli {

// Keys, tenants and stored bytes are opaque: text (UTF-8 without control bytes)
// is shown as it is, anything else C-escaped, so that a byte cannot forge a line
// of output or garble the terminal.
std::string Printable(std::string_view bytes);

// RFC 3339 UTC with milliseconds; "" for absl::InfinitePast().
std::string FormatUtc(absl::Time t);

// JSON strings must be UTF-8; other bytes are given base64-encoded under
// `<name>_base64` so that nothing is lost or altered.
void PutBytes(nlohmann::json& j, const std::string& name, std::string_view bytes);

// Stored bytes that a client gave as a value (a record's result or error, an
// operation's last error): `name` is the value itself when the bytes are JSON (what
// `idem serve` stores), a string when they are other UTF-8 text, base64 otherwise
// (results stored through the C++ API are any bytes), and `<name>_encoding` says
// which: "json", "text" or "base64". With `present` false (no such value: a
// record that has not succeeded has no result), both are null. JSON that would not
// print back as the same value (nested deeper than 256 levels, or a number of more
// than 19 digits, which would be rounded) is given as text.
//
// A JSON value goes into `j` as a placeholder that `raw` keeps; raw.Dump(j) prints
// `j` with the stored bytes themselves in its place, so a result prints exactly as
// it was stored (its members in their order, 12.50 as 12.50), not as re-encoded.
class RawJsonValues {
 public:
  RawJsonValues();
  // A placeholder for `bytes` (one JSON value) to put into a json value.
  std::string Add(std::string_view bytes);
  // j.dump(indent) with every placeholder replaced by its bytes.
  std::string Dump(const nlohmann::json& j, int indent = -1) const;

 private:
  std::string nonce_;  // random: a stored key or value cannot forge a placeholder
  std::vector<std::string> values_;
};
void PutStored(nlohmann::json& j, const std::string& name, std::string_view bytes, bool present,
               RawJsonValues& raw);

// PutBytes, or null for empty bytes (an absent identifier or message).
void PutBytesOrNull(nlohmann::json& j, const std::string& name, std::string_view bytes);

// `name`: FormatUtc(t), or null for absl::InfinitePast().
void PutTime(nlohmann::json& j, const std::string& name, absl::Time t);

// A record as `idem inspect` and `idem records list` print it, without its result
// and error: expires_at null when it is kept for ever, purged_at null unless it is a
// tombstone.
nlohmann::json RecordJson(const Record& r);

// OpenStore creates a missing SQLite file (and its schema); a read-only command on
// a typo'd path must not leave an empty database behind, so a missing file is
// reported here as kUnavailable. The URL's parameters are still checked first (by
// opening an in-memory database with them) so that a malformed URL stays a usage
// error. Returns OK when the URL is not a sqlite file URL or the file exists.
absl::Status CheckSqliteFileExists(std::string_view url);

// CheckSqliteFileExists, and for a rocksdb:// URL whose directory does not exist
// kUnavailable "store URL: directory DIR does not exist" (RocksDB would make it).
// Both messages name the store (redacted) and `idem migrate`, which creates one.
absl::Status CheckStoreExists(std::string_view url);

// The store `idem serve` (and `idem inspect`) use when --store is not given: the
// embedded store that won bench/claims.sh, rocksdb://./idem-db (sqlite://./idem.db
// in a build without RocksDB). docs/benchmarks.md has the numbers.
std::string_view DefaultServeStore();

// The store earlier versions defaulted to, sqlite://./idem.db; kept so `idem serve`
// without --store can refuse to start next to one (LegacyDefaultStoreInTheWay).
inline constexpr std::string_view kLegacyDefaultStore = "sqlite://./idem.db";

// When `url` is DefaultServeStore() because no --store was given, and ./idem.db
// (an earlier version's default store) exists while ./idem-db does not: the
// message that says how to keep using it or move it (starting on an empty new
// store would forget every key the old one holds, and run them all again).
// Empty otherwise.
std::string LegacyDefaultStoreInTheWay(std::string_view url, bool store_given);

// OpenStore for a command that writes to what is there (purge, stuck --resolve):
// CheckStoreExists first, so a missing SQLite file or RocksDB directory is
// kUnavailable; a database
// without idem's schema is kFailedPrecondition "no idem schema here" and nothing is
// created (StoreOptions::create_schema).
absl::StatusOr<std::unique_ptr<Store>> OpenExistingStore(std::string_view url);

// OpenStore for a command that only looks (inspect, stuck): CheckStoreExists, then
// read-only (StoreOptions::read_only), so it creates and changes nothing, works on a
// read-only SQLite file and answers kFailedPrecondition "no idem schema here" for a
// database without idem's tables.
absl::StatusOr<std::unique_ptr<Store>> OpenReadOnlyStore(std::string_view url);

// The name of the CLI::ParseError that AddStoreOptions (cli/secrets.h) throws for a
// store password that cannot be had: its message is the whole reason and its exit
// code the status (RunCommandLine).
inline constexpr std::string_view kStoreOptionError = "StoreOptionError";

// The exit status for a failure to open a store: 2 (usage) for a malformed URL
// or a backend not compiled in, 1 otherwise.
int ExitCodeForStoreError(const absl::Status& s);

}  // namespace idem::cli
