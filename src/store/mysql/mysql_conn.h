// A MySQL/MariaDB connection (libmariadb) with a server-side prepared-statement
// cache and error mapping; the building block of the mysql:// store. Not part of
// the public API.
//
// Thread safety: a Connection is used by one thread at a time.
#pragma once

#include <mysql.h>

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "idem/value.h"
#include "store/mysql/mysql_error.h"
#include "store/mysql/mysql_url.h"

namespace idem::mysql {

class Connection {
 public:
  // Connects with the session settings idem relies on: READ COMMITTED,
  // innodb_lock_wait_timeout, utf8mb4, no auto-reconnect, affected (not found)
  // rows. Gives up after connect_timeout_s, or at `deadline` if sooner (rounded up
  // to whole seconds, libmariadb's unit). Errors: kUnavailable when the server
  // cannot be reached or does not answer in time, kPermissionDenied for bad
  // credentials, kFailedPrecondition for an unknown database.
  static absl::StatusOr<std::unique_ptr<Connection>> Open(
      const MysqlOptions& options, absl::Time deadline = absl::InfiniteFuture());
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Runs one statement with `?` placeholders bound to `params` as a cached
  // server-side prepared statement; returns the affected rows (rows changed, not
  // rows matched). A statement the server cannot prepare (error 1295) runs through
  // the text protocol when it has no parameters.
  absl::StatusOr<int64_t> Exec(std::string_view sql, absl::Span<const Value> params = {});

  // As Exec, and returns the rows: integers as int, FLOAT/DOUBLE as double,
  // binary strings (VARBINARY, BLOB) as Blob, DECIMAL, dates and other strings as
  // text, SQL NULL as null.
  absl::StatusOr<Rows> Query(std::string_view sql, absl::Span<const Value> params = {});

  // Runs a statement without parameters or results through the text protocol
  // (START TRANSACTION, COMMIT, ROLLBACK, SET).
  absl::Status ExecText(std::string_view sql);

  // The MySQL error number of the last failed call (0 after a success is not
  // guaranteed; read it only right after an error).
  unsigned int last_error() const { return last_error_; }

  // True once an error said the connection is gone; the pool then drops it.
  bool broken() const { return broken_; }
  void MarkBroken() { broken_ = true; }
  // Whether the connection may wait idle in a pool (sql::Pool).
  bool Reusable() const { return !broken_; }

 private:
  struct Statement;

  explicit Connection(MYSQL* mysql);

  absl::StatusOr<int64_t> Run(std::string_view sql, absl::Span<const Value> params, Rows* rows);
  absl::StatusOr<int64_t> RunText(std::string_view sql, Rows* rows);
  absl::StatusOr<Statement*> Prepare(std::string_view sql, bool* unsupported);
  absl::Status FetchRows(Statement& st, Rows* rows);
  absl::Status ConnError(std::string_view context);
  absl::Status StmtError(MYSQL_STMT* stmt, std::string_view context);
  void DropStatement(const std::string& sql);

  MYSQL* mysql_;
  bool broken_ = false;
  unsigned int last_error_ = 0;
  // Least recently used at the front; bounded so a caller issuing ever-new SQL
  // text cannot exhaust the server's max_prepared_stmt_count.
  std::list<std::string> lru_;
  std::unordered_map<std::string, std::unique_ptr<Statement>> cache_;
};

// Round trips to any MySQL server by this process so far (statement prepares,
// executions and text queries), for tests and benchmarks that check what an
// operation costs.
uint64_t RoundTrips();

}  // namespace idem::mysql
