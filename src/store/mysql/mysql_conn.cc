#include "store/mysql/mysql_conn.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "store/absl_compat.h"
#include "idem/status.h"

namespace idem::mysql {
namespace {

// Enough for the record SQL and a service's handful of statements; beyond it the
// least recently used statement is closed on the server.
constexpr size_t kMaxCachedStatements = 128;

// A column buffer starts this large and grows to the longest value fetched.
constexpr size_t kInitialColumnBuffer = 256;

enum class Kind { kInt, kDouble, kText, kBlob };

Kind KindOf(const MYSQL_FIELD& f) {
  switch (f.type) {
    case MYSQL_TYPE_TINY:
    case MYSQL_TYPE_SHORT:
    case MYSQL_TYPE_LONG:
    case MYSQL_TYPE_INT24:
    case MYSQL_TYPE_LONGLONG:
    case MYSQL_TYPE_YEAR:
      return Kind::kInt;
    case MYSQL_TYPE_FLOAT:
    case MYSQL_TYPE_DOUBLE:
      return Kind::kDouble;
    // These report the binary character set but are not bytes: keep DECIMAL exact
    // as text, and hand out dates and JSON as the server formats them.
    case MYSQL_TYPE_DECIMAL:
    case MYSQL_TYPE_NEWDECIMAL:
    case MYSQL_TYPE_DATE:
    case MYSQL_TYPE_NEWDATE:
    case MYSQL_TYPE_TIME:
    case MYSQL_TYPE_TIME2:
    case MYSQL_TYPE_DATETIME:
    case MYSQL_TYPE_DATETIME2:
    case MYSQL_TYPE_TIMESTAMP:
    case MYSQL_TYPE_TIMESTAMP2:
    case MYSQL_TYPE_JSON:
    case MYSQL_TYPE_NULL:
      return Kind::kText;
    case MYSQL_TYPE_BIT:
    case MYSQL_TYPE_GEOMETRY:
      return Kind::kBlob;
    default:
      return f.charsetnr == 63 ? Kind::kBlob : Kind::kText;
  }
}

std::atomic<uint64_t> round_trips{0};
void CountRoundTrip() { round_trips.fetch_add(1, std::memory_order_relaxed); }

std::once_flag library_once;
bool library_ok = false;

absl::Status InitLibrary() {
  // mysql_library_init is not thread-safe and must run before the first
  // mysql_init; stores are opened from any thread.
  std::call_once(library_once, [] { library_ok = mysql_library_init(0, nullptr, nullptr) == 0; });
  if (!library_ok) return absl::InternalError("mysql_library_init failed");
  return absl::OkStatus();
}

absl::Status SetOption(MYSQL* m, mysql_option option, const void* value, std::string_view name) {
  if (mysql_optionsv(m, option, value) != 0) {
    return absl::InternalError(absl::StrCat("mysql option ", AV(name), " was refused"));
  }
  return absl::OkStatus();
}

Value TextCell(const char* p, unsigned long len, Kind kind) {
  std::string s(p, len);
  switch (kind) {
    case Kind::kInt: {
      long long v = 0;
      auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
      if (ec == std::errc() && ptr == s.data() + s.size()) return Value(v);
      return Value(std::move(s));  // an unsigned value beyond int64: keep it exact
    }
    case Kind::kDouble:
      return Value(std::strtod(s.c_str(), nullptr));
    case Kind::kBlob:
      return Value(Blob{std::move(s)});
    case Kind::kText:
      break;
  }
  return Value(std::move(s));
}

}  // namespace

struct Connection::Statement {
  MYSQL_STMT* stmt = nullptr;
  std::list<std::string>::iterator lru;
  ~Statement() {
    if (stmt != nullptr) mysql_stmt_close(stmt);
  }
};

absl::StatusOr<std::unique_ptr<Connection>> Connection::Open(const MysqlOptions& o,
                                                             absl::Time deadline) {
  IDEM_RETURN_IF_ERROR(InitLibrary());
  MYSQL* m = mysql_init(nullptr);
  if (m == nullptr) return absl::ResourceExhaustedError("mysql_init: out of memory");
  std::unique_ptr<Connection> conn(new Connection(m));

  // Within the store call's time, in libmariadb's whole seconds (at least 1).
  unsigned int connect_timeout = o.connect_timeout_s;
  if (deadline != absl::InfiniteFuture()) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::UnavailableError(absl::StrCat(
          "cannot connect to ", o.redacted_url, ": the store call's time ran out"));
    }
    connect_timeout = std::min<unsigned int>(
        connect_timeout,
        static_cast<unsigned int>(absl::ToInt64Seconds(absl::Ceil(left, absl::Seconds(1)))));
  }
  const unsigned int io_timeout = o.io_timeout_s;
  // Auto-reconnect would silently open a new session in the middle of what the
  // caller believes is one transaction; a lost connection must surface instead.
  const my_bool no_reconnect = 0;
  const unsigned int protocol = o.socket.empty() ? MYSQL_PROTOCOL_TCP : MYSQL_PROTOCOL_SOCKET;
  IDEM_RETURN_IF_ERROR(
      SetOption(m, MYSQL_OPT_CONNECT_TIMEOUT, &connect_timeout, "connect_timeout"));
  IDEM_RETURN_IF_ERROR(SetOption(m, MYSQL_OPT_READ_TIMEOUT, &io_timeout, "read_timeout"));
  IDEM_RETURN_IF_ERROR(SetOption(m, MYSQL_OPT_WRITE_TIMEOUT, &io_timeout, "write_timeout"));
  IDEM_RETURN_IF_ERROR(SetOption(m, MYSQL_OPT_RECONNECT, &no_reconnect, "reconnect"));
  IDEM_RETURN_IF_ERROR(SetOption(m, MYSQL_OPT_PROTOCOL, &protocol, "protocol"));
  IDEM_RETURN_IF_ERROR(SetOption(m, MYSQL_SET_CHARSET_NAME, "utf8mb4", "charset"));
  // Session settings run on every (re)connect, before the first statement:
  //  - READ COMMITTED, so a claim's locking read sees the row another transaction
  //    just committed and InnoDB takes no gap locks on the dedupe table;
  //  - the lock wait bound that turns a stuck claim into kUnavailable (whole seconds);
  //  - autocommit on, so Get/Ping outside a transaction never hold a snapshot open
  //    whatever the server's default is.
  const std::string lock_wait =
      absl::StrCat("SET SESSION innodb_lock_wait_timeout = ", o.lock_wait_timeout_s);
  IDEM_RETURN_IF_ERROR(SetOption(m, MYSQL_INIT_COMMAND,
                                 "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
                                 "init_command"));
  IDEM_RETURN_IF_ERROR(SetOption(m, MYSQL_INIT_COMMAND, lock_wait.c_str(), "init_command"));
  IDEM_RETURN_IF_ERROR(
      SetOption(m, MYSQL_INIT_COMMAND, "SET SESSION autocommit = 1", "init_command"));
  if (o.ssl != SslMode::kDisabled) {
    const my_bool on = 1;
    IDEM_RETURN_IF_ERROR(SetOption(m, MYSQL_OPT_SSL_ENFORCE, &on, "ssl_enforce"));
    const my_bool verify = o.ssl == SslMode::kVerify ? 1 : 0;
    IDEM_RETURN_IF_ERROR(SetOption(m, MYSQL_OPT_SSL_VERIFY_SERVER_CERT, &verify, "ssl_verify"));
    if (!o.ssl_ca.empty()) {
      IDEM_RETURN_IF_ERROR(SetOption(m, MYSQL_OPT_SSL_CA, o.ssl_ca.c_str(), "ssl_ca"));
    }
  }
  // client_flag 0 on purpose: CLIENT_FOUND_ROWS would make the duplicate of
  // INSERT … ON DUPLICATE KEY UPDATE k = k report 1 row, the same as an insert,
  // and the claim could no longer tell first arrival from a duplicate.
  if (mysql_real_connect(m, o.socket.empty() ? o.host.c_str() : nullptr, o.user.c_str(),
                         o.has_password ? o.password.c_str() : nullptr, o.database.c_str(), o.port,
                         o.socket.empty() ? nullptr : o.socket.c_str(), 0) == nullptr) {
    conn->broken_ = true;
    return ToStatus(mysql_errno(m), mysql_sqlstate(m), mysql_error(m),
                    absl::StrCat("cannot connect to ", o.redacted_url));
  }
  if ((m->client_flag & CLIENT_FOUND_ROWS) != 0) {
    return absl::InternalError("mysql connection has CLIENT_FOUND_ROWS set; claims need it off");
  }
  return conn;
}

Connection::Connection(MYSQL* mysql) : mysql_(mysql) {}

Connection::~Connection() {
  cache_.clear();  // closes the statements before the connection
  mysql_close(mysql_);
}

absl::Status Connection::ConnError(std::string_view context) {
  const unsigned int err = mysql_errno(mysql_);
  last_error_ = err;
  if (IsConnectionError(err)) broken_ = true;
  return ToStatus(err, mysql_sqlstate(mysql_), mysql_error(mysql_), context);
}

absl::Status Connection::StmtError(MYSQL_STMT* stmt, std::string_view context) {
  const unsigned int err = mysql_stmt_errno(stmt);
  last_error_ = err;
  if (IsConnectionError(err)) broken_ = true;
  return ToStatus(err, mysql_stmt_sqlstate(stmt), mysql_stmt_error(stmt), context);
}

void Connection::DropStatement(const std::string& sql) {
  auto it = cache_.find(sql);
  if (it == cache_.end()) return;
  lru_.erase(it->second->lru);
  cache_.erase(it);
}

absl::StatusOr<Connection::Statement*> Connection::Prepare(std::string_view sql,
                                                           bool* unsupported) {
  *unsupported = false;
  std::string key(sql);
  if (auto it = cache_.find(key); it != cache_.end()) {
    lru_.splice(lru_.end(), lru_, it->second->lru);
    return it->second.get();
  }
  MYSQL_STMT* stmt = mysql_stmt_init(mysql_);
  if (stmt == nullptr) return ConnError("prepare");
  auto st = std::make_unique<Statement>();
  st->stmt = stmt;
  CountRoundTrip();
  if (mysql_stmt_prepare(stmt, sql.data(), sql.size()) != 0) {
    if (mysql_stmt_errno(stmt) == 1295) {  // ER_UNSUPPORTED_PS
      *unsupported = true;
      return nullptr;
    }
    return StmtError(stmt, "prepare");
  }
  // Lets the first fetch size column buffers to the longest value in the result.
  const my_bool update_max_length = 1;
  mysql_stmt_attr_set(stmt, STMT_ATTR_UPDATE_MAX_LENGTH, &update_max_length);
  if (cache_.size() >= kMaxCachedStatements) DropStatement(lru_.front());
  st->lru = lru_.insert(lru_.end(), key);
  Statement* out = st.get();
  cache_.emplace(std::move(key), std::move(st));
  return out;
}

absl::StatusOr<int64_t> Connection::Exec(std::string_view sql, absl::Span<const Value> params) {
  return Run(sql, params, nullptr);
}

absl::StatusOr<Rows> Connection::Query(std::string_view sql, absl::Span<const Value> params) {
  Rows rows;
  IDEM_RETURN_IF_ERROR(Run(sql, params, &rows));
  return rows;
}

absl::Status Connection::ExecText(std::string_view sql) { return RunText(sql, nullptr).status(); }

uint64_t RoundTrips() { return round_trips.load(std::memory_order_relaxed); }

absl::StatusOr<int64_t> Connection::Run(std::string_view sql, absl::Span<const Value> params,
                                        Rows* rows) {
  if (broken_) return absl::UnavailableError("mysql connection is lost");
  bool unsupported = false;
  IDEM_ASSIGN_OR_RETURN(Statement * st, Prepare(sql, &unsupported));
  if (unsupported) {
    if (!params.empty()) {
      return absl::InvalidArgumentError(
          "this statement cannot be prepared by the server, so it cannot take ? parameters");
    }
    return RunText(sql, rows);
  }
  MYSQL_STMT* stmt = st->stmt;
  const unsigned long expected = mysql_stmt_param_count(stmt);
  if (expected != params.size()) {
    return absl::InvalidArgumentError(absl::StrCat("statement has ", expected, " parameters but ",
                                                   params.size(), " values were given"));
  }
  // Numbers are copied because MYSQL_BIND wants a mutable buffer; strings are
  // bound in place (libmariadb only reads them).
  std::vector<MYSQL_BIND> binds(params.size());
  std::vector<long long> ints(params.size());
  std::vector<double> doubles(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const Value& v = params[i];
    MYSQL_BIND& b = binds[i];
    if (v.is_null()) {
      b.buffer_type = MYSQL_TYPE_NULL;
    } else if (v.is_int()) {
      ints[i] = v.as_int();
      b.buffer_type = MYSQL_TYPE_LONGLONG;
      b.buffer = &ints[i];
    } else if (v.is_double()) {
      doubles[i] = v.as_double();
      b.buffer_type = MYSQL_TYPE_DOUBLE;
      b.buffer = &doubles[i];
    } else {
      const std::string& s = v.is_text() ? v.as_text() : v.as_blob();
      b.buffer_type = v.is_text() ? MYSQL_TYPE_STRING : MYSQL_TYPE_BLOB;
      b.buffer = const_cast<char*>(s.data());
      b.buffer_length = s.size();
    }
  }
  if (!binds.empty() && mysql_stmt_bind_param(stmt, binds.data()) != 0) {
    return StmtError(stmt, "bind");
  }
  CountRoundTrip();
  if (mysql_stmt_execute(stmt) != 0) return StmtError(stmt, "execute");
  int64_t affected = 0;
  if (mysql_stmt_field_count(stmt) == 0) {
    affected = static_cast<int64_t>(mysql_stmt_affected_rows(stmt));
  } else {
    IDEM_RETURN_IF_ERROR(FetchRows(*st, rows));
  }
  // A CALL leaves further results; drain them so the connection stays in step.
  int more;
  while ((more = mysql_stmt_next_result(stmt)) == 0) {
    if (mysql_stmt_field_count(stmt) > 0) IDEM_RETURN_IF_ERROR(FetchRows(*st, nullptr));
  }
  if (more > 0) return StmtError(stmt, "next result");
  return affected;
}

absl::Status Connection::FetchRows(Statement& st, Rows* rows) {
  MYSQL_STMT* stmt = st.stmt;
  if (mysql_stmt_store_result(stmt) != 0) return StmtError(stmt, "fetch");
  absl::Cleanup free_result = [stmt] { mysql_stmt_free_result(stmt); };
  MYSQL_RES* meta = mysql_stmt_result_metadata(stmt);
  if (meta == nullptr) return StmtError(stmt, "result metadata");
  absl::Cleanup free_meta = [meta] { mysql_free_result(meta); };
  if (rows == nullptr) return absl::OkStatus();

  const unsigned int n = mysql_num_fields(meta);
  const MYSQL_FIELD* fields = mysql_fetch_fields(meta);
  std::vector<Kind> kinds(n);
  std::vector<MYSQL_BIND> binds(n);
  std::vector<std::string> bufs(n);
  std::vector<long long> ints(n);
  std::vector<double> doubles(n);
  std::vector<unsigned long> lengths(n);
  std::vector<my_bool> nulls(n), errors(n);
  rows->columns.clear();
  for (unsigned int i = 0; i < n; ++i) {
    rows->columns.emplace_back(fields[i].name, fields[i].name_length);
    kinds[i] = KindOf(fields[i]);
    MYSQL_BIND& b = binds[i];
    b.length = &lengths[i];
    b.is_null = &nulls[i];
    b.error = &errors[i];
    if (kinds[i] == Kind::kInt) {
      b.buffer_type = MYSQL_TYPE_LONGLONG;
      b.buffer = &ints[i];
      b.is_unsigned = (fields[i].flags & UNSIGNED_FLAG) != 0;
    } else if (kinds[i] == Kind::kDouble) {
      b.buffer_type = MYSQL_TYPE_DOUBLE;
      b.buffer = &doubles[i];
    } else {
      // STRING also makes libmariadb format dates and decimals as text.
      bufs[i].resize(std::max<size_t>(kInitialColumnBuffer, fields[i].max_length));
      b.buffer_type = MYSQL_TYPE_STRING;
      b.buffer = bufs[i].data();
      b.buffer_length = bufs[i].size();
    }
  }
  if (mysql_stmt_bind_result(stmt, binds.data()) != 0) return StmtError(stmt, "bind result");
  while (true) {
    const int rc = mysql_stmt_fetch(stmt);
    if (rc == MYSQL_NO_DATA) break;
    if (rc == 1) return StmtError(stmt, "fetch");
    bool rebind = false;
    std::vector<Value> row;
    row.reserve(n);
    for (unsigned int i = 0; i < n; ++i) {
      if (nulls[i]) {
        row.emplace_back(nullptr);
        continue;
      }
      switch (kinds[i]) {
        case Kind::kInt:
          if (binds[i].is_unsigned &&
              static_cast<unsigned long long>(ints[i]) >
                  static_cast<unsigned long long>(std::numeric_limits<long long>::max())) {
            row.emplace_back(std::to_string(static_cast<unsigned long long>(ints[i])));
          } else {
            row.emplace_back(ints[i]);
          }
          break;
        case Kind::kDouble:
          row.emplace_back(doubles[i]);
          break;
        case Kind::kText:
        case Kind::kBlob: {
          if (lengths[i] > bufs[i].size()) {
            // Longer than the buffer (max_length is not known for every type):
            // fetch this column again into a buffer of the reported length.
            bufs[i].resize(lengths[i]);
            binds[i].buffer = bufs[i].data();
            binds[i].buffer_length = bufs[i].size();
            if (mysql_stmt_fetch_column(stmt, &binds[i], i, 0) != 0) {
              return StmtError(stmt, "fetch column");
            }
            rebind = true;
          }
          std::string bytes(bufs[i].data(), lengths[i]);
          if (kinds[i] == Kind::kBlob) {
            row.emplace_back(Blob{std::move(bytes)});
          } else {
            row.emplace_back(std::move(bytes));
          }
          break;
        }
      }
    }
    rows->rows.push_back(std::move(row));
    if (rebind && mysql_stmt_bind_result(stmt, binds.data()) != 0) {
      return StmtError(stmt, "bind result");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> Connection::RunText(std::string_view sql, Rows* rows) {
  if (broken_) return absl::UnavailableError("mysql connection is lost");
  CountRoundTrip();
  if (mysql_real_query(mysql_, sql.data(), sql.size()) != 0) return ConnError("query");
  int64_t affected = 0;
  bool first = true;
  while (true) {
    MYSQL_RES* res = mysql_store_result(mysql_);
    if (res != nullptr) {
      absl::Cleanup free_res = [res] { mysql_free_result(res); };
      if (first && rows != nullptr) {
        const unsigned int n = mysql_num_fields(res);
        const MYSQL_FIELD* fields = mysql_fetch_fields(res);
        rows->columns.clear();
        for (unsigned int i = 0; i < n; ++i) {
          rows->columns.emplace_back(fields[i].name, fields[i].name_length);
        }
        while (MYSQL_ROW r = mysql_fetch_row(res)) {
          const unsigned long* lens = mysql_fetch_lengths(res);
          std::vector<Value> row;
          row.reserve(n);
          for (unsigned int i = 0; i < n; ++i) {
            row.push_back(r[i] == nullptr ? Value() : TextCell(r[i], lens[i], KindOf(fields[i])));
          }
          rows->rows.push_back(std::move(row));
        }
      }
    } else if (mysql_field_count(mysql_) != 0) {
      return ConnError("store result");
    } else if (first) {
      affected = static_cast<int64_t>(mysql_affected_rows(mysql_));
    }
    first = false;
    const int more = mysql_next_result(mysql_);
    if (more < 0) break;
    if (more > 0) return ConnError("next result");
  }
  return affected;
}

}  // namespace idem::mysql
