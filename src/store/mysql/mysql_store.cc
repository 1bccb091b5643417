#include "store/mysql/mysql_store.h"

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/absl_compat.h"
#include "idem/status.h"
#include "store/mysql/mysql_conn.h"
#include "store/mysql/mysql_pool.h"
#include "store/mysql/mysql_url.h"

namespace idem {
namespace {

using mysql::Connection;
using mysql::ConnectionPool;
using mysql::MysqlOptions;

constexpr int kSchemaVersion = 1;

// Keys, tenants, biz types and fingerprints are bytes (VARBINARY): no collation
// may fold two different keys into one.
constexpr const char* kCreateVersion =
    "CREATE TABLE IF NOT EXISTS idem_schema_version (version INT NOT NULL) ENGINE=InnoDB";
constexpr const char* kCreateRecords = R"sql(
CREATE TABLE IF NOT EXISTS idem_records (
  tenant      VARBINARY(255) NOT NULL,
  idem_key    VARBINARY(255) NOT NULL,
  biz_type    VARBINARY(255) NOT NULL,
  fingerprint VARBINARY(255) NOT NULL DEFAULT '',
  state       TINYINT        NOT NULL,
  token       BIGINT         NOT NULL,
  lease_until BIGINT         NOT NULL DEFAULT 0,
  result      LONGBLOB,
  error       LONGBLOB,
  created_at  BIGINT         NOT NULL,
  updated_at  BIGINT         NOT NULL,
  PRIMARY KEY (tenant, idem_key),
  CONSTRAINT idem_records_state CHECK (state IN (0, 1, 2, 3))
) ENGINE=InnoDB
)sql";

constexpr size_t kMaxFieldBytes = 255;  // the VARBINARY(255) columns

// How often a claim that opens its transaction is retried after InnoDB picked it
// as a deadlock victim (see InsertOrLoad).
constexpr int kClaimDeadlockRetries = 5;

#define IDEM_RECORD_COLUMNS                                                             \
  "tenant, idem_key, biz_type, fingerprint, state, token, lease_until, result, error, " \
  "created_at, updated_at"

constexpr const char* kSelectRecord =
    "SELECT " IDEM_RECORD_COLUMNS " FROM idem_records WHERE tenant = ? AND idem_key = ?";
constexpr const char* kSelectRecordForUpdate = "SELECT " IDEM_RECORD_COLUMNS
                                               " FROM idem_records WHERE tenant = ? AND "
                                               "idem_key = ? FOR UPDATE";
// Never INSERT IGNORE: it also turns errors such as an over-long value into "0
// rows", which would read as a duplicate (seed 1 §3.1).
constexpr const char* kInsertRecord =
    "INSERT INTO idem_records (" IDEM_RECORD_COLUMNS
    ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE idem_key = idem_key";
constexpr const char* kReplaceRecord =
    "UPDATE idem_records SET biz_type = ?, fingerprint = ?, state = ?, token = ?, "
    "lease_until = ?, result = ?, error = ?, updated_at = ? "
    "WHERE tenant = ? AND idem_key = ? AND token = ? AND state = ?";
constexpr const char* kMatchRecord =
    "SELECT 1 FROM idem_records WHERE tenant = ? AND idem_key = ? AND token = ? AND state = ? "
    "FOR UPDATE";

#undef IDEM_RECORD_COLUMNS

// Times are unix microseconds; 0 stands for "none" (absl::InfinitePast()).
int64_t ToMicros(absl::Time t) { return t == absl::InfinitePast() ? 0 : absl::ToUnixMicros(t); }
absl::Time FromMicros(int64_t us) {
  return us == 0 ? absl::InfinitePast() : absl::FromUnixMicros(us);
}

Value Bytes(const std::string& s) { return Value(Blob{s}); }
Value Int(int64_t v) { return Value(static_cast<long long>(v)); }

std::string BytesOf(const Value& v) {
  if (v.is_blob()) return v.as_blob();
  if (v.is_text()) return v.as_text();
  return std::string();
}
int64_t IntOf(const Value& v) { return v.is_int() ? v.as_int() : 0; }

absl::StatusOr<Record> ReadRecord(const std::vector<Value>& row) {
  if (row.size() != 11) return absl::InternalError("idem_records row has the wrong column count");
  Record r;
  r.tenant = BytesOf(row[0]);
  r.key = BytesOf(row[1]);
  r.biz_type = BytesOf(row[2]);
  r.fingerprint = BytesOf(row[3]);
  r.state = static_cast<RecordState>(IntOf(row[4]));
  r.token = IntOf(row[5]);
  r.lease_until = FromMicros(IntOf(row[6]));
  r.result = BytesOf(row[7]);
  r.error = BytesOf(row[8]);
  r.created_at = FromMicros(IntOf(row[9]));
  r.updated_at = FromMicros(IntOf(row[10]));
  return r;
}

absl::StatusOr<std::optional<Record>> LoadRecord(Connection& conn, const char* sql,
                                                 std::string_view tenant, std::string_view key) {
  const Value params[] = {Value(Blob{std::string(tenant)}), Value(Blob{std::string(key)})};
  IDEM_ASSIGN_OR_RETURN(Rows rows, conn.Query(sql, params));
  if (rows.rows.empty()) return std::nullopt;
  IDEM_ASSIGN_OR_RETURN(Record r, ReadRecord(rows.rows[0]));
  return r;
}

// The columns are VARBINARY(255); a server in a non-strict sql_mode would
// truncate a longer value silently and fold two keys into one, so refuse it here.
absl::Status CheckSizes(const Record& r) {
  const std::pair<const char*, const std::string*> fields[] = {{"tenant", &r.tenant},
                                                               {"key", &r.key},
                                                               {"biz_type", &r.biz_type},
                                                               {"fingerprint", &r.fingerprint}};
  for (const auto& [name, value] : fields) {
    if (value->size() > kMaxFieldBytes) {
      return absl::InvalidArgumentError(absl::StrCat("mysql store: ", name, " is ", value->size(),
                                                     " bytes; at most ", kMaxFieldBytes,
                                                     " fit the idem_records columns"));
    }
  }
  return absl::OkStatus();
}

// The claim INSERT as SQL text for Connection::RunBatch: every value a literal
// (bytes as hex, never quoted text), the same statement as kInsertRecord.
std::string ClaimText(const Record& r) {
  return absl::StrCat("INSERT INTO idem_records (tenant, idem_key, biz_type, fingerprint, state, "
                      "token, lease_until, result, error, created_at, updated_at) VALUES (",
                      mysql::HexLiteral(r.tenant), ", ", mysql::HexLiteral(r.key), ", ",
                      mysql::HexLiteral(r.biz_type), ", ", mysql::HexLiteral(r.fingerprint), ", ",
                      static_cast<int>(r.state), ", ", r.token, ", ", ToMicros(r.lease_until), ", ",
                      mysql::HexLiteral(r.result), ", ", mysql::HexLiteral(r.error), ", ",
                      ToMicros(r.created_at), ", ", ToMicros(r.updated_at),
                      ") ON DUPLICATE KEY UPDATE idem_key = idem_key");
}

// A state no record has: the CHECK constraint refuses it. The result UPDATE of
// ReplaceAndCommit writes it when the row is not at the expected token and state,
// so that the statement fails and the COMMIT behind it in the batch never runs.
constexpr int kFenceViolation = 127;

// The result write of ReplaceAndCommit as SQL text. `state` is assigned first, so
// that its IF reads the row's token and state before this UPDATE changes them
// (MySQL assigns left to right; MariaDB's SIMULTANEOUS_ASSIGNMENT reads old values).
std::string ReplaceText(const Record& r, int64_t expected_token, RecordState expected_state) {
  return absl::StrCat(
      "UPDATE idem_records SET state = IF(token = ", expected_token,
      " AND state = ", static_cast<int>(expected_state), ", ", static_cast<int>(r.state), ", ",
      kFenceViolation, "), biz_type = ", mysql::HexLiteral(r.biz_type),
      ", fingerprint = ", mysql::HexLiteral(r.fingerprint), ", token = ", r.token,
      ", lease_until = ", ToMicros(r.lease_until), ", result = ", mysql::HexLiteral(r.result),
      ", error = ", mysql::HexLiteral(r.error), ", updated_at = ", ToMicros(r.updated_at),
      " WHERE tenant = ", mysql::HexLiteral(r.tenant), " AND idem_key = ", mysql::HexLiteral(r.key));
}

// Records with more bytes than this go through prepared statements instead of a
// text batch (hex doubles them; max_allowed_packet is 16 MiB by default).
constexpr size_t kMaxBatchRecordBytes = 1 << 20;

size_t RecordBytes(const Record& r) {
  return r.tenant.size() + r.key.size() + r.biz_type.size() + r.fingerprint.size() +
         r.result.size() + r.error.size();
}

// MySQL error numbers of a violated CHECK constraint (MariaDB, MySQL 8.0.16+).
constexpr unsigned int kMariadbCheckFailed = 4025;  // ER_CONSTRAINT_FAILED
constexpr unsigned int kMysqlCheckFailed = 3819;    // ER_CHECK_CONSTRAINT_VIOLATED

// START TRANSACTION is deferred to the transaction's first round trip: a claim
// that opens the transaction goes out with it in one batch, and the Guard's
// result UPDATE goes out with the COMMIT, so a guarded transaction takes as many
// round trips as the same transaction without the guard.
class MysqlTransaction final : public StoreTransaction {
 public:
  MysqlTransaction(ConnectionPool& pool, ConnectionPool::Lease lease)
      : pool_(pool), lease_(std::move(lease)) {}
  ~MysqlTransaction() override { Rollback(); }

  absl::StatusOr<int64_t> Exec(std::string_view sql, absl::Span<const Value> params) override {
    IDEM_RETURN_IF_ERROR(CheckOpen());
    IDEM_RETURN_IF_ERROR(Start());
    empty_ = false;
    return Track(lease_->Exec(sql, params));
  }

  absl::StatusOr<Rows> Query(std::string_view sql, absl::Span<const Value> params) override {
    IDEM_RETURN_IF_ERROR(CheckOpen());
    IDEM_RETURN_IF_ERROR(Start());
    empty_ = false;
    return Track(lease_->Query(sql, params));
  }

  absl::StatusOr<std::optional<Record>> InsertOrLoad(const Record& r) override {
    IDEM_RETURN_IF_ERROR(CheckOpen());
    IDEM_RETURN_IF_ERROR(CheckSizes(r));
    const Value params[] = {Bytes(r.tenant),
                            Bytes(r.key),
                            Bytes(r.biz_type),
                            Bytes(r.fingerprint),
                            Int(static_cast<int>(r.state)),
                            Int(r.token),
                            Int(ToMicros(r.lease_until)),
                            Bytes(r.result),
                            Bytes(r.error),
                            Int(ToMicros(r.created_at)),
                            Int(ToMicros(r.updated_at))};
    // The claim that opens the transaction rides with its START TRANSACTION.
    const bool batched = deferred_ && RecordBytes(r) <= kMaxBatchRecordBytes;
    const std::string batch = batched ? absl::StrCat("START TRANSACTION; ", ClaimText(r)) : "";
    absl::StatusOr<int64_t> inserted = absl::UnknownError("claim not run");
    auto claim_batch = [&](Connection& c) {
      Connection::Batch b = c.RunBatch(batch);
      if (b.status.ok() && b.affected.size() != 2) {
        b.status = absl::InternalError(absl::StrCat("mysql: the claim batch answered ",
                                                    b.affected.size(), " results; expected 2"));
      }
      inserted = b.status.ok() ? absl::StatusOr<int64_t>(b.affected[1]) : b.status;
      return b.status;
    };
    if (batched) {
      absl::Status started = Start(claim_batch);
      if (!lease_) return started;  // no connection could be had (Start ended the transaction)
      // Otherwise `inserted` holds the batch's outcome, a failure included.
    } else {
      IDEM_RETURN_IF_ERROR(Start());
      inserted = lease_->Exec(kInsertRecord, params);
    }
    // Claims of one key queued behind a holder that rolls back can deadlock each
    // other on the vanished row (InnoDB's duplicate-key locking), and InnoDB
    // then rolls the victim's transaction back. When the claim was the first
    // statement, that transaction held nothing else: beginning it again is the
    // same as the caller retrying from Begin(), without the error.
    for (int i = 0;
         i < kClaimDeadlockRetries && empty_ && !inserted.ok() && lease_->last_error() == 1213;
         ++i) {
      if (batched) {
        claim_batch(*lease_).IgnoreError();  // its outcome is in `inserted`
      } else {
        IDEM_RETURN_IF_ERROR(Track(lease_->ExecText("START TRANSACTION")));
        inserted = lease_->Exec(kInsertRecord, params);
      }
    }
    empty_ = false;
    if (!inserted.ok() && lease_->last_error() == 1205) {
      // The claim's INSERT touches only this key's row: waiting past the lock
      // timeout means another open transaction is claiming the same key.
      absl::Status contended = ClaimContendedError(absl::StrCat(
          "mysql: the key is held by another open transaction (a claim in progress) past "
          "innodb_lock_wait_timeout; retry later: ", inserted.status().message()));
      failed_ = contended;  // the transaction refuses further statements, as for any 1205
      return contended;
    }
    IDEM_ASSIGN_OR_RETURN(int64_t affected, Track(std::move(inserted)));
    if (affected == 1) {
      held_.emplace(r.tenant, r.key);
      return std::nullopt;
    }
    if (affected != 0) {
      return absl::InternalError(absl::StrCat("claim insert reported ", affected,
                                              " affected rows; expected 1 (new) or 0 (duplicate)"));
    }
    // The duplicate insert already holds the row's exclusive lock; the locking
    // read returns the latest committed version (READ COMMITTED) and keeps the
    // lock until the end of this transaction, so the Replace that follows cannot
    // race with another claim.
    IDEM_ASSIGN_OR_RETURN(std::optional<Record> existing,
                          Track(LoadRecord(*lease_, kSelectRecordForUpdate, r.tenant, r.key)));
    if (!existing.has_value()) {
      return absl::InternalError("claim insert found a duplicate but the record is not there");
    }
    held_.emplace(r.tenant, r.key);
    return existing;
  }

  absl::StatusOr<bool> Replace(const Record& r, int64_t expected_token,
                               RecordState expected_state) override {
    IDEM_RETURN_IF_ERROR(CheckOpen());
    IDEM_RETURN_IF_ERROR(CheckSizes(r));
    IDEM_RETURN_IF_ERROR(Start());
    empty_ = false;
    const Value params[] = {
        Bytes(r.biz_type), Bytes(r.fingerprint),         Int(static_cast<int>(r.state)),
        Int(r.token),      Int(ToMicros(r.lease_until)), Bytes(r.result),
        Bytes(r.error),    Int(ToMicros(r.updated_at)),  Bytes(r.tenant),
        Bytes(r.key),      Int(expected_token),          Int(static_cast<int>(expected_state))};
    IDEM_ASSIGN_OR_RETURN(int64_t changed, Track(lease_->Exec(kReplaceRecord, params)));
    if (changed > 0) return true;
    if (r.token != expected_token || r.state != expected_state) return false;
    // MySQL counts rows changed, not matched: a write of identical values reports
    // 0. Whether the condition matched is then a question for the row itself.
    const Value match[] = {Bytes(r.tenant), Bytes(r.key), Int(expected_token),
                           Int(static_cast<int>(expected_state))};
    IDEM_ASSIGN_OR_RETURN(Rows rows, Track(lease_->Query(kMatchRecord, match)));
    return !rows.rows.empty();
  }

  // One round trip when this transaction holds the row's lock (it claimed or
  // loaded it): the UPDATE and the COMMIT in one batch. The UPDATE fails on a
  // row that is not at the expected token and state (kFenceViolation against the
  // CHECK constraint), and the server then skips the COMMIT. The row cannot be
  // missing: this transaction locked it. Otherwise, or on a server that ignores
  // CHECK constraints, Replace then Commit.
  absl::StatusOr<bool> ReplaceAndCommit(const Record& r, int64_t expected_token,
                                        RecordState expected_state) override {
    if (!CheckOpen().ok() || deferred_ || !held_.contains({r.tenant, r.key}) ||
        !lease_->enforces_check_constraints() || !CheckSizes(r).ok() ||
        RecordBytes(r) > kMaxBatchRecordBytes) {
      return StoreTransaction::ReplaceAndCommit(r, expected_token, expected_state);
    }
    Connection::Batch b =
        lease_->RunBatch(absl::StrCat(ReplaceText(r, expected_token, expected_state), "; COMMIT"));
    if (b.status.ok()) {
      done_ = true;
      lease_.Release();
      return true;
    }
    absl::Status s = b.status;
    if (lease_->broken()) {
      // The COMMIT may or may not have reached the server. Retrying through the
      // Guard is safe either way: it replays what did commit.
      s = absl::UnavailableError(absl::StrCat(s.message(), " (the commit outcome is unknown)"));
    } else if (b.affected.empty() && (lease_->last_error() == kMariadbCheckFailed ||
                                      lease_->last_error() == kMysqlCheckFailed)) {
      Rollback();
      return false;  // the row had moved on; the COMMIT did not run
    }
    Rollback();
    return s;
  }

  absl::StatusOr<std::optional<Record>> Load(std::string_view tenant,
                                             std::string_view key) override {
    IDEM_RETURN_IF_ERROR(CheckOpen());
    IDEM_RETURN_IF_ERROR(Start());
    empty_ = false;
    // Locking read: a Load in a write transaction precedes a Replace (complete,
    // fail), and two of them for one key must take turns, not both succeed.
    absl::StatusOr<std::optional<Record>> out =
        Track(LoadRecord(*lease_, kSelectRecordForUpdate, tenant, key));
    if (out.ok() && out->has_value()) held_.emplace(std::string(tenant), std::string(key));
    return out;
  }

  absl::Status Commit() override {
    if (done_) return absl::FailedPreconditionError("the transaction has already ended");
    if (!failed_.ok()) {
      absl::Status s = failed_;
      Rollback();
      return s;
    }
    if (deferred_) {
      // No statement ran: START TRANSACTION never went out, nothing to commit.
      done_ = true;
      lease_.Release();
      return absl::OkStatus();
    }
    absl::Status s = lease_->ExecText("COMMIT");
    if (!s.ok()) {
      if (lease_->broken()) {
        // The COMMIT may or may not have reached the server. Retrying through the
        // Guard is safe either way: it replays what did commit.
        s = absl::UnavailableError(absl::StrCat(s.message(), " (the commit outcome is unknown)"));
      }
      Rollback();
      return s;
    }
    done_ = true;
    lease_.Release();
    return absl::OkStatus();
  }

  void Rollback() override {
    if (done_) return;
    done_ = true;
    if (lease_ && !deferred_ && !lease_->broken() && !lease_->ExecText("ROLLBACK").ok()) {
      // A session whose transaction state is unknown must not go back to the pool.
      lease_->MarkBroken();
    }
    lease_.Release();
  }

 private:
  absl::Status CheckOpen() const {
    if (done_) return absl::FailedPreconditionError("the transaction has already ended");
    return failed_;
  }

  // The transaction's first round trip: START TRANSACTION, or `first` when given
  // (a batch that begins with it). A pooled connection that went stale while
  // idle (a server restart, a KILL) fails before anything happened on the server,
  // so the round trip runs again on another connection, and the other idle ones
  // (likely stale too) are closed; a failure on a connection made just now is the
  // server's real answer. A failure that is not about the connection is returned
  // with the transaction as the server left it (Rollback ends it).
  absl::Status Start(const std::function<absl::Status(Connection&)>& first = {}) {
    if (!deferred_) return absl::OkStatus();
    deferred_ = false;
    auto run = [&first](Connection& c) {
      return first ? first(c) : c.ExecText("START TRANSACTION");
    };
    const int attempts = pool_.options().pool + 1;
    absl::Status s;
    for (int i = 0; i < attempts; ++i) {
      s = run(*lease_);
      if (s.ok() || !lease_->broken() || lease_.fresh()) break;
      lease_.Release();
      pool_.DropIdle();
      absl::StatusOr<ConnectionPool::Lease> other = pool_.Acquire();
      if (!other.ok()) {
        s = other.status();
        break;
      }
      lease_ = *std::move(other);
    }
    if (!s.ok() && (!lease_ || lease_->broken())) failed_ = s;  // nothing to go on with
    return s;
  }

  // After a deadlock InnoDB has rolled the whole transaction back, after a lock
  // wait timeout it may have (innodb_rollback_on_timeout), and after a lost
  // connection the session is gone: further statements would run outside the
  // transaction (autocommit) and break its all-or-nothing promise. So such an
  // error ends the transaction for every later call.
  template <typename T>
  T Track(T result) {
    if (!result.ok()) {
      const absl::Status& s = idem::internal::AsStatus(result);
      if (s.code() == absl::StatusCode::kAborted || s.code() == absl::StatusCode::kUnavailable ||
          !lease_ || lease_->broken()) {
        failed_ = s;
      }
    }
    return result;
  }

  ConnectionPool& pool_;
  ConnectionPool::Lease lease_;
  bool deferred_ = true;  // START TRANSACTION has not gone out yet
  bool done_ = false;
  bool empty_ = true;  // no statement has run in this transaction yet
  absl::Status failed_;
  // Rows this transaction inserted or locked: (tenant, key).
  std::set<std::pair<std::string, std::string>> held_;
};

class MysqlStore final : public Store {
 public:
  explicit MysqlStore(MysqlOptions options) : pool_(std::move(options)) {}

  absl::StatusOr<std::unique_ptr<StoreTransaction>> Begin() override {
    // START TRANSACTION goes out with the first statement (MysqlTransaction).
    IDEM_ASSIGN_OR_RETURN(ConnectionPool::Lease lease, pool_.Acquire());
    return std::make_unique<MysqlTransaction>(pool_, std::move(lease));
  }

  absl::StatusOr<std::optional<Record>> Get(std::string_view tenant,
                                            std::string_view key) override {
    std::optional<Record> out;
    IDEM_ASSIGN_OR_RETURN(ConnectionPool::Lease lease, Acquire([&](Connection& c) {
                            absl::StatusOr<std::optional<Record>> r =
                                LoadRecord(c, kSelectRecord, tenant, key);
                            if (r.ok()) out = *std::move(r);
                            return r.status();
                          }));
    return out;
  }

  absl::Status Ping() override {
    return Acquire([](Connection& c) {
             return c.Query("SELECT version FROM idem_schema_version").status();
           })
        .status();
  }

  bool SupportsSql() const override { return true; }
  std::string_view url() const override { return pool_.options().redacted_url; }

 private:
  // Takes a pooled connection and runs `first_use` on it. A connection that sat
  // idle across a server restart or a KILL fails on first use with a connection
  // error before anything happened on the server, so the call is repeated on
  // another connection (the other idle ones are likely stale too and are closed);
  // a failure on a connection made just now is the server's real answer.
  absl::StatusOr<ConnectionPool::Lease> Acquire(
      const std::function<absl::Status(Connection&)>& first_use) {
    const int attempts = pool_.options().pool + 1;
    absl::Status last;
    for (int i = 0; i < attempts; ++i) {
      IDEM_ASSIGN_OR_RETURN(ConnectionPool::Lease lease, pool_.Acquire());
      last = first_use(*lease);
      if (last.ok()) return lease;
      if (!lease->broken() || lease.fresh()) return last;
      lease.Release();
      pool_.DropIdle();
    }
    return last;
  }

  ConnectionPool pool_;
};

absl::Status CheckVersion(const Rows& rows, const MysqlOptions& o) {
  const Value& v = rows.rows[0][0];
  if (!v.is_int() || v.as_int() > kSchemaVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("mysql database '", o.database, "' has an idem schema newer than this build (",
                     kSchemaVersion, "); upgrade idem"));
  }
  return absl::OkStatus();
}

absl::Status CreateSchema(Connection& conn, const MysqlOptions& o) {
  // Bound the metadata-lock wait of the DDL (the server default is a year).
  IDEM_RETURN_IF_ERROR(conn.ExecText("SET SESSION lock_wait_timeout = 10"));
  // Serializes processes that start together on an empty database, so that
  // exactly one of them inserts the version row. Closing the connection also
  // releases the lock, so an error path cannot leave it held.
  IDEM_ASSIGN_OR_RETURN(Rows got, conn.Query("SELECT GET_LOCK('idem_schema', 10)"));
  if (got.rows.empty() || !got.rows[0][0].is_int() || got.rows[0][0].as_int() != 1) {
    return absl::UnavailableError(
        "mysql store: another process held the lock 'idem_schema' for 10 s while creating the "
        "schema");
  }
  IDEM_RETURN_IF_ERROR(conn.ExecText(kCreateVersion));
  IDEM_RETURN_IF_ERROR(conn.ExecText(kCreateRecords));
  IDEM_ASSIGN_OR_RETURN(Rows rows, conn.Query("SELECT version FROM idem_schema_version"));
  if (rows.rows.empty()) {
    const Value v[] = {Value(kSchemaVersion)};
    IDEM_RETURN_IF_ERROR(conn.Exec("INSERT INTO idem_schema_version (version) VALUES (?)", v));
  } else {
    IDEM_RETURN_IF_ERROR(CheckVersion(rows, o));
  }
  // Best effort: the lock also goes away with the connection, closed right after.
  conn.Query("SELECT RELEASE_LOCK('idem_schema')").IgnoreError();
  return absl::OkStatus();
}

absl::Status EnsureSchema(const MysqlOptions& o) {
  // A connection of its own, closed afterwards, so its session settings (the DDL
  // lock wait) and named lock never reach the pool.
  IDEM_ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn, Connection::Open(o));
  // An existing schema needs neither DDL nor the named lock: a store opens while
  // another process holds long transactions on the tables.
  absl::StatusOr<Rows> rows = conn->Query("SELECT version FROM idem_schema_version");
  if (rows.ok() && !rows->rows.empty() && conn->Query("SELECT 1 FROM idem_records LIMIT 0").ok()) {
    return CheckVersion(*rows, o);
  }
  if (conn->broken()) return rows.status();
  absl::Status s = CreateSchema(*conn, o);
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat("creating the idem schema in mysql database '",
                                               o.database, "': ", s.message()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Store>> OpenMysqlStore(std::string_view url) {
  IDEM_ASSIGN_OR_RETURN(MysqlOptions options, mysql::ParseMysqlUrl(url));
  IDEM_RETURN_IF_ERROR(EnsureSchema(options));
  return std::make_unique<MysqlStore>(std::move(options));
}

}  // namespace idem
