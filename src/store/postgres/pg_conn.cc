#include "store/postgres/pg_conn.h"

#include <poll.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "idem/status.h"
#include "idem/store.h"
#include "store/absl_compat.h"
#include "store/backend.h"

namespace idem::postgres {
namespace {

// Beyond this many distinct statements on one connection, further ones run
// unprepared (PQexecParams) instead of growing the server's memory without bound.
constexpr size_t kMaxCachedStatements = 256;

std::atomic<uint64_t> round_trips{0};

void CountRoundTrip() { round_trips.fetch_add(1, std::memory_order_relaxed); }

// Type OIDs from pg_type.h (a server header that libpq-dev does not ship).
constexpr Oid kBoolOid = 16;
constexpr Oid kByteaOid = 17;
constexpr Oid kInt8Oid = 20;
constexpr Oid kInt2Oid = 21;
constexpr Oid kInt4Oid = 23;
constexpr Oid kOidOid = 26;
constexpr Oid kFloat4Oid = 700;
constexpr Oid kFloat8Oid = 701;
constexpr Oid kNumericOid = 1700;

std::string TrimMessage(const char* message) {
  std::string s = message != nullptr ? message : "";
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

void IgnoreNotice(void*, const char*) {
  // NOTICEs ("relation already exists, skipping") are not errors; libpq would
  // print them to stderr.
}

// Parameters bound for libpq: text stays text (the server infers its type from the
// statement, as for a quoted literal, so '5' can meet an integer column as in
// SQLite); numbers and bytes are sent in binary with an explicit type so nothing
// is lost in a text round trip.
struct Bound {
  std::vector<Oid> types;
  std::vector<std::string> storage;
  std::vector<const char*> values;
  std::vector<int> lengths;
  std::vector<int> formats;
};

std::string BigEndian64(uint64_t v) {
  std::string out(8, '\0');
  for (int i = 7; i >= 0; --i) {
    out[i] = static_cast<char>(v & 0xff);
    v >>= 8;
  }
  return out;
}

absl::Status Bind(absl::Span<const Value> params, Bound* b) {
  const size_t n = params.size();
  b->types.assign(n, 0);
  b->storage.assign(n, std::string());
  b->values.assign(n, nullptr);
  b->lengths.assign(n, 0);
  b->formats.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const Value& v = params[i];
    if (v.is_null()) continue;  // type 0: the server infers it, value NULL
    if (v.is_int()) {
      b->types[i] = kInt8Oid;
      b->storage[i] = BigEndian64(static_cast<uint64_t>(v.as_int()));
      b->formats[i] = 1;
    } else if (v.is_double()) {
      b->types[i] = kFloat8Oid;
      b->storage[i] = BigEndian64(std::bit_cast<uint64_t>(v.as_double()));
      b->formats[i] = 1;
    } else if (v.is_text()) {
      // Text-format values are C strings for libpq: a NUL would silently cut the
      // value short, and PostgreSQL text cannot hold one anyway.
      if (v.as_text().find('\0') != std::string::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat("parameter $", i + 1,
                         " is text with a NUL byte, which PostgreSQL text cannot hold; bind "
                         "it as a Blob (bytea)"));
      }
      b->storage[i] = v.as_text();
    } else {
      b->types[i] = kByteaOid;
      b->storage[i] = v.as_blob();
      b->formats[i] = 1;
    }
    // `storage` was sized up front, so its strings (and their data) stay put.
    b->values[i] = b->storage[i].data();
    b->lengths[i] = static_cast<int>(b->storage[i].size());
  }
  return absl::OkStatus();
}

bool IsIdentChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '$' || static_cast<unsigned char>(c) >= 0x80;
}

Value TextCell(const PGresult* res, int row, int col) {
  if (PQgetisnull(res, row, col)) return Value();
  const char* p = PQgetvalue(res, row, col);
  const int len = PQgetlength(res, row, col);
  switch (PQftype(res, col)) {
    case kInt2Oid:
    case kInt4Oid:
    case kInt8Oid:
    case kOidOid: {
      long long v = 0;
      auto [end, ec] = std::from_chars(p, p + len, v);
      if (ec == std::errc() && end == p + len) return Value(v);
      break;  // out of range (an oid above 2^63 cannot happen): keep the text
    }
    case kFloat4Oid:
    case kFloat8Oid:
      // strtod reads "NaN", "Infinity" and "-Infinity" as PostgreSQL writes them.
      return Value(std::strtod(p, nullptr));
    case kNumericOid:
      // Exact, as text (as the MySQL store reads DECIMAL): a double would round
      // amounts past 15 digits (1234567890123456.78 became ...456.75).
      break;
    case kBoolOid:
      // As integers, like SQLite and MySQL answer for booleans.
      return Value(p[0] == 't' ? 1 : 0);
    case kByteaOid: {
      size_t out_len = 0;
      unsigned char* bytes = PQunescapeBytea(reinterpret_cast<const unsigned char*>(p), &out_len);
      if (bytes == nullptr) return Value(Blob{});
      Blob blob{std::string(reinterpret_cast<const char*>(bytes), out_len)};
      PQfreemem(bytes);
      return Value(std::move(blob));
    }
    default:
      break;
  }
  return Value(std::string(p, len));
}

}  // namespace

uint64_t RoundTrips() { return round_trips.load(std::memory_order_relaxed); }

absl::Status StatusFromSqlState(std::string_view state, std::string message) {
  absl::Status status;
  const std::string_view cls = state.substr(0, 2);
  // The store's fault, whatever the statement: a missing or wrong schema
  // (undefined table, column or function, a wrong database or schema), no privilege
  // on a table, a read-only transaction (a standby), lost connections, resources
  // (disk full), shutdown and system errors. (28xxx, rejected credentials, comes at
  // connect time: kPermissionDenied, for the operator.)
  if (state == "42P01" || state == "42703" || state == "42501" || state == "42883" ||
      cls == "3D" || cls == "3F" || state == "25006" || cls == "08" || cls == "53" ||
      cls == "58" || (cls == "57" && state != "57014")) {
    status = StoreFaultError(message);
  } else if (cls == "28") {
    status = absl::PermissionDeniedError(message);
  } else if (state == "55P03" || state == "57014") {
    status = absl::UnavailableError(
        absl::StrCat(message, state == "55P03" ? " (lock not free within lock_timeout)" : ""));
  } else if (state == "25P02") {
    status = absl::AbortedError(
        absl::StrCat(message, " (an earlier statement failed; roll back and retry)"));
  } else if (state == "08P01") {
    // A protocol violation is a bug on this side, not a network problem.
    status = absl::InternalError(message);
  } else if (cls == "23" || cls == "22" || cls == "42" || cls == "54" || cls == "0A" ||
             cls == "2B" || cls == "44" || cls == "26" ||
             cls == "P0" || cls == "21") {
    status = absl::InvalidArgumentError(message);
  } else if (cls == "40") {
    status = absl::AbortedError(message);
  } else if (cls == "25") {
    status = absl::FailedPreconditionError(message);
  } else if (state == "XX001" || state == "XX002") {
    status = absl::DataLossError(message);
  } else {
    status = absl::InternalError(message);
  }
  status.SetPayload(AV(kSqlStatePayload), absl::Cord(AV(state)));
  if (state == "23505") status = MarkUniqueViolation(std::move(status));
  return status;
}

absl::StatusOr<std::string> RewritePlaceholders(std::string_view sql, int* count) {
  std::string out;
  out.reserve(sql.size() + 16);
  int question = 0;
  int max_dollar = 0;
  const size_t n = sql.size();
  size_t i = 0;
  auto copy_until = [&](size_t end) {
    end = std::min(end, n);
    out.append(sql.substr(i, end - i));
    i = end;
  };
  while (i < n) {
    const char c = sql[i];
    const char next = i + 1 < n ? sql[i + 1] : '\0';
    if (c == '\'') {
      // E'…' strings take backslash escapes; standard strings only ''.
      const bool escapes =
          i > 0 && (sql[i - 1] == 'E' || sql[i - 1] == 'e') && (i < 2 || !IsIdentChar(sql[i - 2]));
      size_t j = i + 1;
      while (j < n) {
        if (escapes && sql[j] == '\\') {
          j += 2;
        } else if (sql[j] == '\'') {
          if (j + 1 < n && sql[j + 1] == '\'') {
            j += 2;
          } else {
            break;
          }
        } else {
          ++j;
        }
      }
      copy_until(j + 1);
    } else if (c == '"') {
      size_t j = i + 1;
      while (j < n && !(sql[j] == '"' && (j + 1 >= n || sql[j + 1] != '"'))) {
        j += sql[j] == '"' ? 2 : 1;
      }
      copy_until(j + 1);
    } else if (c == '-' && next == '-') {
      size_t j = sql.find('\n', i);
      copy_until(j == std::string_view::npos ? n : j);
    } else if (c == '/' && next == '*') {
      int depth = 0;  // PostgreSQL comments nest
      size_t j = i;
      while (j < n) {
        if (sql[j] == '/' && j + 1 < n && sql[j + 1] == '*') {
          ++depth;
          j += 2;
        } else if (sql[j] == '*' && j + 1 < n && sql[j + 1] == '/') {
          j += 2;
          if (--depth == 0) break;
        } else {
          ++j;
        }
      }
      copy_until(j);
    } else if (c == '$' && next >= '0' && next <= '9' && (i == 0 || !IsIdentChar(sql[i - 1]))) {
      size_t j = i + 1;
      int v = 0;
      while (j < n && sql[j] >= '0' && sql[j] <= '9') {
        v = std::min(v * 10 + (sql[j] - '0'), 100000);
        ++j;
      }
      max_dollar = std::max(max_dollar, v);
      copy_until(j);
    } else if (c == '$' && (i == 0 || !IsIdentChar(sql[i - 1]))) {
      // A dollar-quoted string $tag$…$tag$ (tag may be empty).
      size_t j = i + 1;
      while (j < n && IsIdentChar(sql[j]) && sql[j] != '$') ++j;
      if (j < n && sql[j] == '$') {
        const std::string_view tag = sql.substr(i, j - i + 1);
        size_t close = sql.find(tag, j + 1);
        copy_until(close == std::string_view::npos ? n : close + tag.size());
      } else {
        copy_until(i + 1);
      }
    } else if (c == '?') {
      absl::StrAppend(&out, "$", ++question);
      ++i;
    } else {
      out.push_back(c);
      ++i;
    }
  }
  if (question > 0 && max_dollar > 0) {
    return absl::InvalidArgumentError(
        "SQL mixes ? and $n placeholders; use one style per statement");
  }
  *count = question > 0 ? question : max_dollar;
  return out;
}

absl::StatusOr<std::unique_ptr<Connection>> Connection::Open(const ConnectSpec& spec,
                                                             absl::Time deadline) {
  std::vector<const char*> keywords, values;
  for (size_t i = 0; i < spec.keywords.size(); ++i) {
    keywords.push_back(spec.keywords[i].c_str());
    values.push_back(spec.values[i].c_str());
  }
  keywords.push_back(nullptr);
  values.push_back(nullptr);
  // Asynchronously, so that one bound covers every step (a server that accepts
  // TCP but never answers the startup packet, a frozen one, costs the bound and
  // no more); libpq's connect_timeout is not applied on this path.
  PGconn* conn = PQconnectStartParams(keywords.data(), values.data(), /*expand_dbname=*/1);
  if (conn == nullptr) {
    return absl::ResourceExhaustedError("postgres: libpq could not allocate a connection");
  }
  if (spec.connect_timeout_ms > 0) {
    deadline = std::min(deadline, absl::Now() + absl::Milliseconds(spec.connect_timeout_ms));
  }
  PostgresPollingStatusType polled = PGRES_POLLING_WRITING;
  bool timed_out = false;
  while (PQstatus(conn) != CONNECTION_BAD && polled != PGRES_POLLING_OK &&
         polled != PGRES_POLLING_FAILED) {
    // The socket may change between calls (another host, another address).
    pollfd p{PQsocket(conn), static_cast<short>(polled == PGRES_POLLING_READING ? POLLIN : POLLOUT),
             0};
    int wait_ms = -1;
    if (deadline != absl::InfiniteFuture()) {
      wait_ms = static_cast<int>(
          std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now() +
                                                         absl::Microseconds(999))));
    }
    const int n = wait_ms == 0 ? 0 : ::poll(&p, 1, wait_ms);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) {
      timed_out = true;
      break;
    }
    polled = PQconnectPoll(conn);
  }
  if (timed_out || PQstatus(conn) != CONNECTION_OK) {
    const std::string message =
        timed_out ? absl::StrCat("postgres ", spec.display,
                                 ": cannot connect: the server did not answer in time (the call's "
                                 "io_timeout_ms=", spec.io_timeout_ms, ", connect_timeout=",
                                 spec.connect_timeout_ms, " ms)")
                  : absl::StrCat("postgres ", spec.display, ": cannot connect: ",
                                 TrimMessage(PQerrorMessage(conn)));
    PQfinish(conn);
    // libpq reports connection failures as text only; these phrases are its own
    // (and the server's, in the C locale the test servers run with).
    if (message.find("authentication failed") != std::string::npos ||
        message.find("no password supplied") != std::string::npos) {
      return absl::PermissionDeniedError(message);
    }
    if (message.find("does not exist") != std::string::npos) {
      return absl::FailedPreconditionError(message);
    }
    return absl::UnavailableError(message);
  }
  PQsetNoticeProcessor(conn, IgnoreNotice, nullptr);
  return std::unique_ptr<Connection>(new Connection(conn, spec.display, spec.io_timeout_ms));
}

absl::StatusOr<std::vector<std::string>> Connection::TakeNotifications() {
  if (PQconsumeInput(conn_) == 0) {
    broken_ = true;
    return StoreFaultError(absl::StrCat("postgres ", display_, ": the listening connection broke: ",
                                        TrimMessage(PQerrorMessage(conn_))));
  }
  std::vector<std::string> payloads;
  while (PGnotify* n = PQnotifies(conn_)) {
    payloads.emplace_back(n->extra != nullptr ? n->extra : "");
    PQfreemem(n);
  }
  return payloads;
}

absl::Status Connection::AwaitInput(std::string_view context) {
  if (io_timeout_ms_ <= 0) return absl::OkStatus();
  const absl::Time deadline = deadline_ != absl::InfiniteFuture()
                                  ? deadline_
                                  : absl::Now() + absl::Milliseconds(io_timeout_ms_);
  while (PQisBusy(conn_)) {
    const int64_t left = absl::ToInt64Milliseconds(deadline - absl::Now() + absl::Microseconds(999));
    pollfd p{PQsocket(conn_), POLLIN, 0};
    const int n = left > 0 ? ::poll(&p, 1, static_cast<int>(left)) : 0;
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) {
      // The session is in an unknown state: never reuse it (the pool closes it).
      broken_ = true;
      return StoreFaultError(absl::StrCat("postgres ", display_, ": ", AV(context),
                                          ": no answer within the store call's io_timeout_ms=",
                                          io_timeout_ms_, "; the connection is given up"));
    }
    // An error here (a reset) is what PQgetResult reports next.
    if (n < 0 || PQconsumeInput(conn_) == 0) return absl::OkStatus();
  }
  return absl::OkStatus();
}

Connection::~Connection() { PQfinish(conn_); }

absl::Status Connection::ErrorStatus(const PGresult* result, std::string_view context) {
  const char* state = result != nullptr ? PQresultErrorField(result, PG_DIAG_SQLSTATE) : nullptr;
  if (state == nullptr) {
    // libpq's own failures (lost connection, out of memory) carry no SQLSTATE; the
    // session state is unknown, so the connection is not reused.
    broken_ = true;
    std::string message =
        TrimMessage(result != nullptr ? PQresultErrorMessage(result) : PQerrorMessage(conn_));
    if (message.empty()) message = TrimMessage(PQerrorMessage(conn_));
    return StoreFaultError(
        absl::StrCat("postgres ", display_, ": ", AV(context), ": connection lost: ", message));
  }
  std::string message =
      absl::StrCat("postgres: ", AV(context), ": ",
                   TrimMessage(PQresultErrorField(result, PG_DIAG_MESSAGE_PRIMARY)));
  if (const char* detail = PQresultErrorField(result, PG_DIAG_MESSAGE_DETAIL); detail != nullptr) {
    absl::StrAppend(&message, " (", TrimMessage(detail), ")");
  }
  absl::StrAppend(&message, " [SQLSTATE ", state, "]");
  const std::string_view s(state);
  if (s.starts_with("08") || s.starts_with("57P") || PQstatus(conn_) != CONNECTION_OK) {
    broken_ = true;
  }
  return StatusFromSqlState(s, std::move(message));
}

absl::Status Connection::ExecScript(const char* sql, std::string* tag) {
  // The simple protocol takes several statements in one string, so deferred ones
  // need no pipeline here; an error is the first failing statement's, as in Run.
  std::string script;
  if (!deferred_.empty()) {
    for (const std::string& d : deferred_) absl::StrAppend(&script, d, "; ");
    absl::StrAppend(&script, sql);
    deferred_.clear();
    sql = script.c_str();
  }
  CountRoundTrip();
  // As PQexec, with the wait bounded: the last result is the answer (none when
  // libpq itself failed).
  Result res;
  if (PQsendQuery(conn_, sql) == 1) {
    while (true) {
      IDEM_RETURN_IF_ERROR(AwaitInput("exec"));
      PGresult* r = PQgetResult(conn_);
      if (r == nullptr) break;
      res.reset(r);
      // COPY hands the session over; there is no end of results to wait for.
      const ExecStatusType st = PQresultStatus(r);
      if (st == PGRES_COPY_IN || st == PGRES_COPY_OUT || st == PGRES_COPY_BOTH) break;
    }
  }
  const ExecStatusType st = res ? PQresultStatus(res.get()) : PGRES_FATAL_ERROR;
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) return ErrorStatus(res.get(), "exec");
  if (tag != nullptr) *tag = PQcmdStatus(res.get());
  return absl::OkStatus();
}

absl::StatusOr<Result> Connection::Run(std::string_view sql, int nparams,
                                       absl::Span<const Value> params, bool binary_results) {
  // One path for every statement: RunMany prepares a statement new to this
  // connection in the same round trip as its first execution.
  const PipedStatement one{sql, nparams, params, binary_results};
  return std::move(RunMany(absl::MakeConstSpan(&one, 1)).results.front());
}

namespace {

// One statement of a pipelined round trip, checked before anything is sent.
struct PipePrepared {
  Bound bound;
  std::string key;           // SQL text + parameter types: the statement cache's key
  std::string name;          // server-side statement name; empty: unnamed
  bool prepare_now = false;  // PREPARE it in this round trip
};

// What each answer of the round trip belongs to, in the order they come.
enum class PipeSlotKind { kDeferred, kPrepare, kMain, kThen };
struct PipeSlot {
  PipeSlotKind kind;
  size_t index = 0;  // kPrepare/kMain: the statement
};

// Binds `statements` and names them: the name `cached` (the connection's prepared
// statements) has, or a new one (from *next_statement) to PREPARE in this round trip
// while the cache has room, else none (unnamed). Errors: a statement whose parameter
// count does not match its values, or a value that cannot be bound.
absl::Status PreparePipeline(absl::Span<const PipedStatement> statements,
                             const std::unordered_map<std::string, std::string>& cached,
                             uint64_t* next_statement, std::vector<PipePrepared>* prepared) {
  prepared->resize(statements.size());
  std::unordered_map<std::string, std::string> naming;  // names given in this round trip
  for (size_t i = 0; i < statements.size(); ++i) {
    const PipedStatement& st = statements[i];
    if (static_cast<int>(st.params.size()) != st.nparams) {
      return absl::InvalidArgumentError(absl::StrCat("statement has ", st.nparams,
                                                     " parameters but ", st.params.size(),
                                                     " values were given"));
    }
    PipePrepared& p = (*prepared)[i];
    IDEM_RETURN_IF_ERROR(Bind(st.params, &p.bound));
    p.key = std::string(st.sql);
    p.key.push_back('\0');
    for (Oid t : p.bound.types) absl::StrAppend(&p.key, t, ",");
    if (auto it = cached.find(p.key); it != cached.end()) {
      p.name = it->second;
    } else if (auto jt = naming.find(p.key); jt != naming.end()) {
      p.name = jt->second;
    } else if (cached.size() + naming.size() < kMaxCachedStatements) {
      // A statement not prepared yet on this connection is prepared in the same
      // round trip instead of one of its own.
      p.name = absl::StrCat("idem_", ++*next_statement);
      p.prepare_now = true;
      naming.emplace(p.key, p.name);
    }
  }
  return absl::OkStatus();
}

// Sends the round trip in pipeline mode: the `deferred` statements, each statement
// (after its PREPARE when it has one), a sync point, then `then` and its own sync
// point. *slots says what each answer will belong to, *syncs how many sync points
// were sent. False when libpq refused part of it.
bool SendPipeline(PGconn* conn, const std::vector<std::string>& deferred,
                  absl::Span<const PipedStatement> statements,
                  const std::vector<PipePrepared>& prepared, const char* then,
                  std::vector<PipeSlot>* slots, int* syncs) {
  bool sent = PQenterPipelineMode(conn) == 1;
  for (const std::string& d : deferred) {
    sent =
        sent && PQsendQueryParams(conn, d.c_str(), 0, nullptr, nullptr, nullptr, nullptr, 0) == 1;
    slots->push_back({PipeSlotKind::kDeferred});
  }
  for (size_t i = 0; i < statements.size(); ++i) {
    const PipedStatement& st = statements[i];
    const PipePrepared& p = prepared[i];
    const std::string text(st.sql);
    const int result_format = st.binary_results ? 1 : 0;
    if (p.prepare_now) {
      sent = sent && PQsendPrepare(conn, p.name.c_str(), text.c_str(), st.nparams,
                                   p.bound.types.data()) == 1;
      slots->push_back({PipeSlotKind::kPrepare, i});
    }
    if (p.name.empty()) {
      sent = sent && PQsendQueryParams(conn, text.c_str(), st.nparams, p.bound.types.data(),
                                       p.bound.values.data(), p.bound.lengths.data(),
                                       p.bound.formats.data(), result_format) == 1;
    } else {
      sent = sent && PQsendQueryPrepared(conn, p.name.c_str(), st.nparams, p.bound.values.data(),
                                         p.bound.lengths.data(), p.bound.formats.data(),
                                         result_format) == 1;
    }
    slots->push_back({PipeSlotKind::kMain, i});
  }
  *syncs = 1;
  sent = sent && PQpipelineSync(conn) == 1;
  if (then != nullptr) {
    sent = sent && PQsendQueryParams(conn, then, 0, nullptr, nullptr, nullptr, nullptr, 0) == 1;
    slots->push_back({PipeSlotKind::kThen});
    sent = sent && PQpipelineSync(conn) == 1;
    ++*syncs;
  }
  return sent;
}

// Reads the answers of a round trip of `syncs` sync points into *results, one for each
// slot. Each statement answers with its result (PGRES_PIPELINE_ABORTED when an earlier
// error of the same sync segment skipped it) and then NULL; each sync point with
// PGRES_PIPELINE_SYNC. A lost connection ends the stream early, COPY too (*copy).
// Returns how many sync points were read, or await's error.
absl::StatusOr<int> ReadPipeline(PGconn* conn, int syncs, absl::FunctionRef<absl::Status()> await,
                                 std::vector<Result>* results, bool* copy) {
  size_t q = 0;
  bool have = false;  // (*results)[q] is filled; the next result belongs to q + 1
  int seen_syncs = 0;
  while (seen_syncs < syncs) {
    IDEM_RETURN_IF_ERROR(await());
    PGresult* r = PQgetResult(conn);
    if (r == nullptr) {
      if (!have || PQstatus(conn) != CONNECTION_OK) break;
      ++q;
      have = false;
      continue;
    }
    const ExecStatusType st = PQresultStatus(r);
    if (st == PGRES_PIPELINE_SYNC) {
      PQclear(r);
      ++seen_syncs;
      if (have) ++q;
      have = false;
      continue;
    }
    if (st == PGRES_COPY_IN || st == PGRES_COPY_OUT || st == PGRES_COPY_BOTH) {
      PQclear(r);
      *copy = true;
      break;
    }
    if (have && st == PGRES_PIPELINE_ABORTED) {  // in case libpq sent no NULL before it
      ++q;
      have = false;
    }
    if (!have && q < results->size()) {
      (*results)[q].reset(r);
    } else {
      PQclear(r);
    }
    have = true;
  }
  return seen_syncs;
}

}  // namespace

PipedMany Connection::RunMany(absl::Span<const PipedStatement> statements, const char* then) {
  PipedMany out;
  out.results.reserve(statements.size());
  for (size_t i = 0; i < statements.size(); ++i)
    out.results.emplace_back(absl::UnknownError("not run"));
  auto fail = [&out](const absl::Status& s) {
    for (auto& r : out.results) r = s;
    out.then_status = s;
    return std::move(out);
  };
  // Checked before anything is sent, so a caller's mistake leaves the deferred
  // statements deferred and the session as it was.
  std::vector<PipePrepared> prepared;
  if (absl::Status s = PreparePipeline(statements, statements_, &next_statement_, &prepared);
      !s.ok()) {
    return fail(s);
  }
  std::vector<PipeSlot> slots;
  const std::vector<std::string> deferred = std::move(deferred_);
  deferred_.clear();
  int syncs = 0;
  const bool sent = SendPipeline(conn_, deferred, statements, prepared, then, &slots, &syncs);
  CountRoundTrip();
  if (!sent) {
    // Part of the pipeline may be out: the session state is unknown.
    broken_ = true;
    return fail(ErrorStatus(nullptr, "pipeline"));
  }
  std::vector<Result> results(slots.size());
  bool copy = false;
  absl::StatusOr<int> seen_syncs = ReadPipeline(
      conn_, syncs, [this] { return AwaitInput("pipeline"); }, &results, &copy);
  if (!seen_syncs.ok()) return fail(seen_syncs.status());
  if (copy || *seen_syncs < syncs || PQstatus(conn_) != CONNECTION_OK ||
      PQexitPipelineMode(conn_) != 1) {
    // Whatever is left unread would confuse the next caller: never reuse it.
    broken_ = true;
  }

  absl::Status first_error;  // the first failure of the round trip, before `then`
  for (size_t i = 0; i < slots.size(); ++i) {
    const PGresult* r = results[i].get();
    const ExecStatusType st = r != nullptr ? PQresultStatus(r) : PGRES_FATAL_ERROR;
    switch (slots[i].kind) {
      case PipeSlotKind::kDeferred:
      case PipeSlotKind::kPrepare:
        if (!first_error.ok()) break;  // skipped (PGRES_PIPELINE_ABORTED) after it
        if (st != PGRES_COMMAND_OK) {
          first_error =
              ErrorStatus(r, slots[i].kind == PipeSlotKind::kPrepare ? "prepare" : "exec");
        } else if (slots[i].kind == PipeSlotKind::kPrepare) {
          statements_.emplace(prepared[slots[i].index].key, prepared[slots[i].index].name);
        }
        break;
      case PipeSlotKind::kMain: {
        absl::StatusOr<Result>& res = out.results[slots[i].index];
        if (!first_error.ok()) {
          // A statement skipped after an earlier one failed did not run: the
          // earlier failure is its answer too (the transaction is aborted).
          res = first_error;
        } else if (copy) {
          // The session went into COPY mode, which this API cannot drive (the
          // connection is broken: see above).
          res = absl::InvalidArgumentError("COPY is not supported through Transaction::Exec");
          first_error = res.status();
        } else if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) {
          res = std::move(results[i]);
        } else {
          res = st == PGRES_EMPTY_QUERY ? absl::InvalidArgumentError("empty SQL statement")
                                        : ErrorStatus(r, "exec");
          first_error = res.status();
        }
        break;
      }
      case PipeSlotKind::kThen:
        if (st == PGRES_COMMAND_OK) {
          out.then_tag = PQcmdStatus(const_cast<PGresult*>(r));
        } else if (r == nullptr || PQresultErrorField(r, PG_DIAG_SQLSTATE) != nullptr) {
          out.then_status = ErrorStatus(r, "commit");
        } else {
          broken_ = true;
          out.then_status =
              absl::InternalError(absl::StrCat("postgres: ", then, " was skipped in its pipeline"));
        }
        break;
    }
  }
  return out;
}

bool IsBlankSql(std::string_view sql) {
  for (char c : sql) {
    if (c != ' ' && c != '\t' && c != '\r' && c != '\n' && c != ';') return false;
  }
  return true;
}

int64_t RowsChanged(const PGresult* res) {
  const char* tuples = PQcmdTuples(const_cast<PGresult*>(res));
  int64_t changed = 0;
  if (tuples != nullptr) std::from_chars(tuples, tuples + std::strlen(tuples), changed);
  return changed;
}

namespace {

// A caller's statement (`?` placeholders), with text results.
absl::StatusOr<Result> RunCaller(Connection& conn, std::string_view sql,
                                 absl::Span<const Value> params) {
  if (IsBlankSql(sql)) return absl::InvalidArgumentError("empty SQL statement");
  int nparams = 0;
  IDEM_ASSIGN_OR_RETURN(std::string rewritten, RewritePlaceholders(sql, &nparams));
  return conn.Run(rewritten, nparams, params, /*binary_results=*/false);
}

}  // namespace

absl::StatusOr<int64_t> Connection::Exec(std::string_view sql, absl::Span<const Value> params) {
  IDEM_ASSIGN_OR_RETURN(Result res, RunCaller(*this, sql, params));
  return RowsChanged(res.get());
}

absl::StatusOr<Rows> Connection::Query(std::string_view sql, absl::Span<const Value> params) {
  IDEM_ASSIGN_OR_RETURN(Result res, RunCaller(*this, sql, params));
  Rows rows;
  const int ncols = PQnfields(res.get());
  const int nrows = PQntuples(res.get());
  for (int c = 0; c < ncols; ++c) rows.columns.emplace_back(PQfname(res.get(), c));
  rows.rows.reserve(nrows);
  for (int r = 0; r < nrows; ++r) {
    std::vector<Value> row;
    row.reserve(ncols);
    for (int c = 0; c < ncols; ++c) row.push_back(TextCell(res.get(), r, c));
    rows.rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace idem::postgres
