// A libpq connection with a per-connection prepared-statement cache, Value
// binding and SQLSTATE → absl::Status mapping; the building block of the
// postgres:// store. Not part of the public API.
//
// Thread safety: a Connection is used by one thread at a time (the pool hands it to
// one Transaction or call at a time).
#pragma once

#include <libpq-fe.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "idem/value.h"

namespace idem::postgres {

// Payload attached (with the SQLSTATE as value) to every status made from a server
// error, so a caller can tell 55P03 from 57014 without parsing the message.
inline constexpr std::string_view kSqlStatePayload = "type.idem.dev/postgres.sqlstate";

// Maps a SQLSTATE to the absl code a caller should act on (retryable or not):
// 23xxx (constraint), 22xxx (data), 42xxx (syntax, undefined object) →
// kInvalidArgument; 40001 / 40P01 and other 40xxx → kAborted; 55P03 (lock not
// available), 57014 (statement timeout / cancel), 57P0x (server shutting down),
// 53xxx (out of connections, disk), 58xxx, 08xxx (connection) → kUnavailable;
// 28xxx, 42501 → kPermissionDenied; 25P02 (transaction already failed) → kAborted.
absl::Status StatusFromSqlState(std::string_view sqlstate, std::string message);

// Rewrites `?` placeholders to $1..$n. A `?` inside '…', E'…', "…", $tag$…$tag$,
// -- and /* */ comments is left alone. SQL that already uses $n is passed through;
// mixing both is kInvalidArgument. Sets `*count` to the number of parameters the
// statement expects. Note: PostgreSQL's jsonb operators ?, ?| and ?& cannot be
// written through this API (they would be taken for placeholders); use
// jsonb_exists(), jsonb_exists_any() and jsonb_exists_all().
absl::StatusOr<std::string> RewritePlaceholders(std::string_view sql, int* count);

// True when `sql` holds no statement (only whitespace and comments).
bool IsBlankSql(std::string_view sql);

struct ResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using Result = std::unique_ptr<PGresult, ResultDeleter>;

// Network round trips made by every Connection of this process (one per
// PQexec/PQprepare/PQexecPrepared/PQexecParams, one per pipeline). For tests and
// benchmarks that check how many round trips an operation costs.
uint64_t RoundTrips();

// The rows the statement of `res` changed (its command tag's count; 0 for none).
int64_t RowsChanged(const PGresult* res);

// One statement of a multi-statement round trip (Connection::RunMany): SQL in $n
// form, its parameters, and whether to ask for binary column values.
struct PipedStatement {
  std::string_view sql;
  int nparams = 0;
  absl::Span<const Value> params;
  bool binary_results = false;
};

// The results of a round trip, one per statement in order: a statement's result,
// or its error, or — for one that did not run because an earlier statement of the
// round trip failed (a deferred one included: see Connection::Defer) — that
// earlier error.
struct PipedMany {
  std::vector<absl::StatusOr<Result>> results;
  // The trailing statement's status (OK when it ran) and command tag ("COMMIT", or
  // "ROLLBACK" when it met a failed transaction). Empty tag: it did not run.
  absl::Status then_status;
  std::string then_tag;
};

// How libpq connects: keywords and values for PQconnectdbParams (expand_dbname).
struct ConnectSpec {
  std::vector<std::string> keywords;
  std::vector<std::string> values;
  std::string display;  // the URL with the password removed, for messages
  // The time one store call may take, waiting for a pooled connection, connecting
  // and every answer of the server together (sql::Pool's call_timeout), before
  // the connection is given up as lost (kUnavailable, a store fault) and closed: a
  // peer that went silent without a reset otherwise pins the connection forever.
  // 0: no bound.
  int io_timeout_ms = 0;
  // The longest a new connection may take (within the call's time): TCP, TLS,
  // authentication. libpq's own connect_timeout is whole seconds and counts per
  // host; this one is enforced here, around PQconnectPoll. 0: no bound.
  int connect_timeout_ms = 0;
};

class Connection {
 public:
  // Connects, giving up at `deadline` or after spec.connect_timeout_ms, whichever
  // comes first. Errors: kUnavailable when the server cannot be reached or does
  // not answer in time, kPermissionDenied when it refuses the credentials.
  static absl::StatusOr<std::unique_ptr<Connection>> Open(
      const ConnectSpec& spec, absl::Time deadline = absl::InfiniteFuture());
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Runs `sql` (one or more statements, no parameters) with the simple protocol.
  // When `tag` is given, sets it to the command tag of the last statement ("COMMIT",
  // or "ROLLBACK" when a COMMIT met a failed transaction).
  absl::Status ExecScript(const char* sql, std::string* tag = nullptr);

  // Runs a caller's statement with `?` placeholders bound to `params` (text
  // results). Returns the number of rows changed.
  absl::StatusOr<int64_t> Exec(std::string_view sql, absl::Span<const Value> params);
  absl::StatusOr<Rows> Query(std::string_view sql, absl::Span<const Value> params);

  // Runs `sql` (already in $n form, `nparams` parameters) as a cached prepared
  // statement. `binary_results` asks for binary column values. The result has
  // status PGRES_TUPLES_OK or PGRES_COMMAND_OK.
  absl::StatusOr<Result> Run(std::string_view sql, int nparams, absl::Span<const Value> params,
                             bool binary_results);

  // Holds `statements` (each one statement, no parameters) back and sends them in
  // the same round trip as the next Run/Exec/Query/RunMany, ahead of it (libpq
  // pipeline mode): a transaction's BEGIN then costs no round trip of its own. If
  // one of them fails, that statement's error is what the next call returns (with
  // the usual SQLSTATE mapping) and the statements after it are not run.
  void Defer(std::vector<std::string> statements) { deferred_ = std::move(statements); }
  bool has_deferred() const { return !deferred_.empty(); }
  // Forgets deferred statements that never went out (nothing to undo on the server).
  void DropDeferred() { deferred_.clear(); }

  // Whether the connection may wait idle in a pool (sql::Pool): not broken and
  // outside any transaction (the server rolls back one whose connection closes).
  // A deferred BEGIN that never went out opened nothing: it is dropped.
  bool Reusable() {
    DropDeferred();
    return !broken() && transaction_status() == PQTRANS_IDLE;
  }

  // One round trip: the deferred statements, then `statements` in order (each as
  // Run), a sync point, then `then` (one statement without parameters, e.g.
  // "COMMIT"; null: none) and a second sync point. A failure skips the statements
  // after it (they get its error). The sync point makes it end its part of the
  // pipeline only: `then` still runs, so a COMMIT meets the failed transaction and
  // answers ROLLBACK instead of being skipped with the transaction left open. Used
  // to send a claim together with the statement that follows it, and a result
  // write with its COMMIT.
  PipedMany RunMany(absl::Span<const PipedStatement> statements, const char* then = nullptr);

  // True once the connection is lost (server restart, pg_terminate_backend,
  // network): the pool must not hand it out again.
  bool broken() const { return broken_ || PQstatus(conn_) != CONNECTION_OK; }

  // The deadline of the store call this connection serves (sql::Pool): no wait
  // for the server's answer goes past it. Until one is set (a connection not from
  // a pool), each round trip waits up to io_timeout_ms.
  void set_deadline(absl::Time deadline) { deadline_ = deadline; }

  // PQTRANS_IDLE, PQTRANS_INTRANS, PQTRANS_INERROR, … of the session.
  PGTransactionStatusType transaction_status() const { return PQtransactionStatus(conn_); }

  // For a connection that LISTENs (Listener, pg_listener.h): the socket to poll for
  // input, and the payloads of the notifications that arrived, after reading what
  // the socket holds without blocking. kUnavailable once the connection is lost.
  int socket() const { return PQsocket(conn_); }
  absl::StatusOr<std::vector<std::string>> TakeNotifications();

 private:
  Connection(PGconn* conn, std::string display, int io_timeout_ms)
      : conn_(conn), display_(std::move(display)), io_timeout_ms_(io_timeout_ms) {}

  // Waits until a result can be read without blocking, at most until the call's
  // deadline (or io_timeout_ms_ from now, without one). On a timeout marks the
  // connection broken and returns the store fault to answer.
  absl::Status AwaitInput(std::string_view context);

  // The status for a failed `result` (may be null when libpq itself failed).
  absl::Status ErrorStatus(const PGresult* result, std::string_view context);

  PGconn* conn_;
  const std::string display_;
  const int io_timeout_ms_;
  absl::Time deadline_ = absl::InfiniteFuture();  // set_deadline
  bool broken_ = false;
  uint64_t next_statement_ = 0;
  // SQL text + parameter type signature → server-side statement name.
  std::unordered_map<std::string, std::string> statements_;
  std::vector<std::string> deferred_;
};

}  // namespace idem::postgres
