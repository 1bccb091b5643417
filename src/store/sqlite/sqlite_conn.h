// A SQLite connection with a prepared-statement cache and status mapping; the
// building block of the sqlite:// store. Not part of the public API.
//
// Thread safety: a Connection is used by one thread at a time.
#pragma once

#include <sqlite3.h>

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "idem/value.h"

namespace idem::sqlite {

// Maps a SQLite result code to the absl code a caller should act on (STYLE.md).
absl::Status ToStatus(int rc, sqlite3* db, std::string_view context);

class Connection {
 public:
  // Opens `path` with the given pragmas. `read_only`: opens an existing file only,
  // for reading, and sets no pragma that writes (journal_mode). Errors as
  // OpenSqliteStore.
  static absl::StatusOr<std::unique_ptr<Connection>> Open(const std::string& path,
                                                          std::string_view synchronous,
                                                          int busy_timeout_ms,
                                                          bool read_only = false);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Runs `sql` to completion; returns sqlite3_changes().
  absl::StatusOr<int64_t> Exec(std::string_view sql, absl::Span<const Value> params = {});

  // Runs `sql` and collects its rows.
  absl::StatusOr<Rows> Query(std::string_view sql, absl::Span<const Value> params = {});

  // Runs `sql`, handing its rows to `page` every `page_rows` rows and at the end,
  // at least once (Transaction::QueryPages). `page` must not use this connection.
  absl::Status QueryPages(std::string_view sql, absl::Span<const Value> params, size_t page_rows,
                          const std::function<absl::Status(Rows&)>& page);

  // Runs one or more statements without parameters (schema, BEGIN, COMMIT).
  absl::Status ExecScript(const char* sql);

  sqlite3* db() const { return db_; }

  // For sql::Pool: a SQLite connection has no server to lose, and a reader
  // leaves no transaction open.
  bool broken() const { return false; }
  bool Reusable() const { return true; }

 private:
  explicit Connection(sqlite3* db) : db_(db) {}

  // Prepares (or reuses) the statement for `sql`, resets it and binds `params`.
  // REQUIRES: the returned statement is used before the next Prepare of the same SQL,
  // and `params` outlive its steps (they are bound without a copy).
  absl::StatusOr<sqlite3_stmt*> Prepare(std::string_view sql, absl::Span<const Value> params);

  sqlite3* db_;
  std::unordered_map<std::string, sqlite3_stmt*> cache_;
};

}  // namespace idem::sqlite
