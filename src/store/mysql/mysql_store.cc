#include "store/mysql/mysql_store.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "store/absl_compat.h"
#include "idem/status.h"
#include "store/mysql/mysql_conn.h"
#include "store/mysql/mysql_url.h"
#include "store/sql/dialect.h"
#include "store/sql/pool.h"
#include "store/sql/records.h"
#include "store/sql/schema.h"
#include "store/sql/txn.h"

namespace idem {
namespace {

using mysql::Connection;
using mysql::MysqlOptions;

using ConnectionPool = sql::Pool<Connection>;

constexpr size_t kMaxFieldBytes = 255;  // the VARBINARY(255) columns

// How often a claim that opens its transaction is retried after InnoDB picked it
// as a deadlock victim (see InsertOrLoad).
constexpr int kClaimDeadlockRetries = 5;

const std::string kSelectRecordForUpdate = absl::StrCat(AV(sql::kSelectRecord), " FOR UPDATE");
const std::string kInsertRecord = sql::MysqlDialect().KeepExisting(sql::kInsertRecord, "idem_key");
// Whether the row is at the expected token and state: the WHERE of
// sql::kReplaceRecord, whose last four parameters it takes.
constexpr const char* kMatchRecord =
    "SELECT 1 FROM idem_records WHERE tenant = ? AND idem_key = ? AND token = ? AND state = ? "
    "FOR UPDATE";

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

// Stored procedures that give a guarded transaction as many round trips as the
// same transaction without the guard, every value a bound parameter of CALL:
// idem_claim_v2 begins the transaction and claims the key, answering the
// existing record (locked) on a duplicate; idem_finish_v1 writes the result and
// commits only when the record was still at the expected token and state
// (ROW_COUNT counts changed rows, so a write of identical values is told apart
// by reading the row). Created with the schema when the user may (CREATE
// ROUTINE); without them every call takes the classic statements. The _vN
// suffix versions them: a change makes new names, old servers keep working
// (idem_claim_v2 writes and answers schema version 2's expires_at and purged_at;
// an idem_claim_v1 left by an older idem is not called).
constexpr const char* kClaimProcedure = "idem_claim_v2";
constexpr const char* kFinishProcedure = "idem_finish_v1";
constexpr const char* kCreateClaimProcedure = R"sql(
CREATE PROCEDURE idem_claim_v2(
  IN p_tenant VARBINARY(255), IN p_key VARBINARY(255), IN p_biz_type VARBINARY(255),
  IN p_fingerprint VARBINARY(255), IN p_state TINYINT, IN p_token BIGINT,
  IN p_lease_until BIGINT, IN p_result LONGBLOB, IN p_error LONGBLOB,
  IN p_created_at BIGINT, IN p_updated_at BIGINT, IN p_expires_at BIGINT,
  IN p_purged_at BIGINT)
  MODIFIES SQL DATA SQL SECURITY INVOKER
  COMMENT 'idem: START TRANSACTION and the claim of a key in one round trip'
BEGIN
  START TRANSACTION;
  INSERT INTO idem_records (tenant, idem_key, biz_type, fingerprint, state, token,
                            lease_until, result, error, created_at, updated_at, expires_at,
                            purged_at)
    VALUES (p_tenant, p_key, p_biz_type, p_fingerprint, p_state, p_token, p_lease_until,
            p_result, p_error, p_created_at, p_updated_at, p_expires_at, p_purged_at)
    ON DUPLICATE KEY UPDATE idem_key = idem_key;
  IF ROW_COUNT() = 1 THEN
    SELECT 1 AS inserted;
  ELSE
    SELECT 0 AS inserted, tenant, idem_key, biz_type, fingerprint, state, token, lease_until,
           result, error, created_at, updated_at, expires_at, purged_at
      FROM idem_records WHERE tenant = p_tenant AND idem_key = p_key FOR UPDATE;
  END IF;
END)sql";
constexpr const char* kCreateFinishProcedure = R"sql(
CREATE PROCEDURE idem_finish_v1(
  IN p_biz_type VARBINARY(255), IN p_fingerprint VARBINARY(255), IN p_state TINYINT,
  IN p_token BIGINT, IN p_lease_until BIGINT, IN p_result LONGBLOB, IN p_error LONGBLOB,
  IN p_updated_at BIGINT, IN p_tenant VARBINARY(255), IN p_key VARBINARY(255),
  IN p_expected_token BIGINT, IN p_expected_state TINYINT)
  MODIFIES SQL DATA SQL SECURITY INVOKER
  COMMENT 'idem: the result write and the COMMIT in one round trip, only if still ours'
BEGIN
  UPDATE idem_records SET biz_type = p_biz_type, fingerprint = p_fingerprint, state = p_state,
                          token = p_token, lease_until = p_lease_until, result = p_result,
                          error = p_error, updated_at = p_updated_at
    WHERE tenant = p_tenant AND idem_key = p_key AND token = p_expected_token
      AND state = p_expected_state;
  IF ROW_COUNT() = 1 OR EXISTS (SELECT 1 FROM idem_records WHERE tenant = p_tenant
                                  AND idem_key = p_key AND token = p_expected_token
                                  AND state = p_expected_state) THEN
    COMMIT;
    SELECT 1 AS moved;
  ELSE
    SELECT 0 AS moved;
  END IF;
END)sql";
constexpr const char* kCallClaim = "CALL idem_claim_v2(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
constexpr const char* kCallFinish = "CALL idem_finish_v1(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";

constexpr unsigned int kNoSuchProcedure = 1305;  // ER_SP_DOES_NOT_EXIST

// START TRANSACTION is deferred to the transaction's first round trip: a claim
// that opens the transaction is one CALL of idem_claim_v2 (which begins it), and
// the Guard's result write with the COMMIT is one CALL of idem_finish_v1, so a
// guarded transaction takes as many round trips as the same one without the guard.
class MysqlTransaction final : public sql::PooledTransaction<Connection> {
 public:
  // `procedures`: whether idem_claim_v2/idem_finish_v1 exist (shared by the
  // store's transactions; cleared when a CALL finds them gone).
  MysqlTransaction(ConnPool& pool, ConnPool::Lease lease, std::atomic<bool>& procedures)
      : PooledTransaction(pool, std::move(lease)), procedures_(procedures) {}
  ~MysqlTransaction() override { Rollback(); }

  absl::StatusOr<int64_t> Exec(std::string_view sql, absl::Span<const Value> params) override {
    IDEM_RETURN_IF_ERROR(Ready());
    return Track(lease_->Exec(sql, params));
  }

  absl::StatusOr<Rows> Query(std::string_view sql, absl::Span<const Value> params) override {
    IDEM_RETURN_IF_ERROR(Ready());
    return Track(lease_->Query(sql, params));
  }

  absl::StatusOr<std::optional<Record>> InsertOrLoad(const Record& r) override {
    IDEM_RETURN_IF_ERROR(CheckOpen());
    IDEM_RETURN_IF_ERROR(CheckSizes(r));
    const auto params = sql::RecordParams(r);
    if (deferred_ && procedures_.load(std::memory_order_relaxed)) {
      absl::StatusOr<std::optional<Record>> claimed = ClaimByProcedure(params);
      if (claimed.ok() || !lease_ || lease_->broken() ||
          lease_->last_error() != kNoSuchProcedure) {
        return claimed;
      }
      // Dropped since the store opened. The CALL failed before its START
      // TRANSACTION ran: nothing began, so begin the classic way.
      procedures_.store(false, std::memory_order_relaxed);
      deferred_ = true;
      empty_ = true;
    }
    IDEM_RETURN_IF_ERROR(Start());
    absl::StatusOr<int64_t> inserted = lease_->Exec(kInsertRecord, params);
    // Claims of one key queued behind a holder that rolls back can deadlock each
    // other on the vanished row (InnoDB's duplicate-key locking), and InnoDB
    // then rolls the victim's transaction back. When the claim was the first
    // statement, that transaction held nothing else: beginning it again is the
    // same as the caller retrying from Begin(), without the error.
    for (int i = 0;
         i < kClaimDeadlockRetries && empty_ && !inserted.ok() && lease_->last_error() == 1213;
         ++i) {
      IDEM_RETURN_IF_ERROR(Track(lease_->ExecText("START TRANSACTION")));
      inserted = lease_->Exec(kInsertRecord, params);
    }
    empty_ = false;
    if (!inserted.ok() && lease_->last_error() == 1205) return Contended(inserted.status());
    IDEM_ASSIGN_OR_RETURN(int64_t affected, Track(std::move(inserted)));
    if (affected == 1) return std::nullopt;
    if (affected != 0) {
      return absl::InternalError(absl::StrCat("claim insert reported ", affected,
                                              " affected rows; expected 1 (new) or 0 (duplicate)"));
    }
    // The duplicate insert already holds the row's exclusive lock; the locking
    // read returns the latest committed version (READ COMMITTED) and keeps the
    // lock until the end of this transaction, so the Replace that follows cannot
    // race with another claim.
    IDEM_ASSIGN_OR_RETURN(std::optional<Record> existing,
                          Track(sql::LoadRecord(*lease_, kSelectRecordForUpdate, r.tenant, r.key)));
    if (!existing.has_value()) {
      return absl::InternalError("claim insert found a duplicate but the record is not there");
    }
    return existing;
  }

  absl::StatusOr<bool> Replace(const Record& r, int64_t expected_token,
                               RecordState expected_state) override {
    IDEM_RETURN_IF_ERROR(CheckOpen());
    IDEM_RETURN_IF_ERROR(CheckSizes(r));
    IDEM_RETURN_IF_ERROR(Ready());
    const auto params = sql::ReplaceParams(r, expected_token, expected_state);
    IDEM_ASSIGN_OR_RETURN(int64_t changed, Track(lease_->Exec(sql::kReplaceRecord, params)));
    if (changed > 0) return true;
    if (r.token != expected_token || r.state != expected_state) return false;
    // MySQL counts rows changed, not matched: a write of identical values reports
    // 0. Whether the condition matched is then a question for the row itself.
    const auto match = absl::MakeConstSpan(params).subspan(8);
    IDEM_ASSIGN_OR_RETURN(Rows rows, Track(lease_->Query(kMatchRecord, match)));
    return !rows.rows.empty();
  }

  // One round trip: CALL idem_finish_v1, which writes the result and commits only
  // when the record was still at the expected token and state. Without the
  // procedures, Replace then Commit.
  absl::StatusOr<bool> ReplaceAndCommit(const Record& r, int64_t expected_token,
                                        RecordState expected_state) override {
    if (!CheckOpen().ok() || deferred_ || !procedures_.load(std::memory_order_relaxed) ||
        !CheckSizes(r).ok()) {
      return RecordTransaction::ReplaceAndCommit(r, expected_token, expected_state);
    }
    const auto params = sql::ReplaceParams(r, expected_token, expected_state);
    absl::StatusOr<Rows> called = lease_->Query(kCallFinish, params);
    if (called.ok()) {
      if (called->rows.size() != 1 || called->rows[0].size() != 1 ||
          !called->rows[0][0].is_int()) {
        // What happened to the COMMIT cannot be told: never guess "committed".
        lease_->MarkBroken();
        Rollback();
        return absl::UnavailableError(
            absl::StrCat("mysql: ", kFinishProcedure, " answered ", called->rows.size(),
                         " rows, not one number (the commit outcome is unknown)"));
      }
      if (called->rows[0][0].as_int() == 1) {
        End();  // committed by the procedure
        return true;
      }
      Rollback();
      return false;  // the record had moved on: nothing committed
    }
    absl::Status s = called.status();
    if (lease_->broken()) {
      s = sql::CommitOutcomeUnknown(s);  // the procedure's COMMIT may or may not have run
    } else if (lease_->last_error() == kNoSuchProcedure) {
      // Dropped since the store opened; the CALL ran nothing.
      procedures_.store(false, std::memory_order_relaxed);
      return RecordTransaction::ReplaceAndCommit(r, expected_token, expected_state);
    }
    Rollback();
    return s;
  }

  absl::StatusOr<std::optional<Record>> Load(std::string_view tenant,
                                             std::string_view key) override {
    IDEM_RETURN_IF_ERROR(Ready());
    // Locking read: a Load in a write transaction precedes a Replace (complete,
    // fail), and two of them for one key must take turns, not both succeed.
    return Track(sql::LoadRecord(*lease_, kSelectRecordForUpdate, tenant, key));
  }

 private:
  bool Begun() const override { return !deferred_; }
  absl::Status CommitNow() override { return lease_->ExecText("COMMIT"); }
  void RollbackNow() override {
    if (!lease_->ExecText("ROLLBACK").ok()) lease_->MarkBroken();
  }

  // CheckOpen, then the transaction's first round trip if it is still to come;
  // a statement of the transaction then runs.
  absl::Status Ready() {
    IDEM_RETURN_IF_ERROR(CheckOpen());
    IDEM_RETURN_IF_ERROR(Start());
    empty_ = false;
    return absl::OkStatus();
  }

  // The claim's INSERT touches only this key's row: waiting past the lock timeout
  // means another open transaction is claiming the same key.
  absl::Status Contended(const absl::Status& s) {
    failed_ = ClaimContendedError(absl::StrCat(
        "mysql: the key is held by another open transaction (a claim in progress) past "
        "innodb_lock_wait_timeout; retry later: ",
        s.message()));
    return failed_;  // the transaction refuses further statements, as for any 1205
  }

  // The claim that opens the transaction: one CALL of idem_claim_v2.
  absl::StatusOr<std::optional<Record>> ClaimByProcedure(absl::Span<const Value> params) {
    absl::StatusOr<Rows> called = absl::UnknownError("claim not run");
    auto call = [&](Connection& c) {
      called = c.Query(kCallClaim, params);
      return called.status();
    };
    absl::Status started = Start(call);
    if (!lease_) return started;  // no connection could be had (Start ended the transaction)
    // As in InsertOrLoad: a deadlock victim's transaction is gone; begin it again.
    for (int i = 0; i < kClaimDeadlockRetries && !called.ok() && !lease_->broken() &&
                    lease_->last_error() == 1213;
         ++i) {
      call(*lease_).IgnoreError();  // its outcome is in `called`
    }
    if (!called.ok() && !lease_->broken() && lease_->last_error() == kNoSuchProcedure) {
      return called.status();  // the caller falls back; nothing began
    }
    empty_ = false;
    if (!called.ok() && lease_->last_error() == 1205) return Contended(called.status());
    IDEM_ASSIGN_OR_RETURN(Rows rows, Track(std::move(called)));
    if (rows.rows.empty()) {
      return absl::InternalError("claim insert found a duplicate but the record is not there");
    }
    std::vector<Value>& row = rows.rows[0];
    if (rows.rows.size() != 1 || row.empty() || !row[0].is_int()) {
      return absl::InternalError(absl::StrCat("mysql: ", kClaimProcedure, " answered ",
                                              rows.rows.size(), " rows of ", row.size(),
                                              " columns; expected one row"));
    }
    if (row[0].as_int() == 1) return std::nullopt;
    row.erase(row.begin());
    return sql::RecordFromRow(row);
  }

  // The transaction's first round trip: START TRANSACTION, or `first` when given
  // (a CALL that begins the transaction), moved off connections that went stale
  // while idle (Pool::RunFirstUse). A failure that is not about the
  // connection is returned with the transaction as the server left it (Rollback
  // ends it).
  absl::Status Start(const std::function<absl::Status(Connection&)>& first = {}) {
    if (!deferred_) return absl::OkStatus();
    deferred_ = false;
    StartCall();
    auto run = [&first](Connection& c) {
      return first ? first(c) : c.ExecText("START TRANSACTION");
    };
    const absl::Status s = pool_.RunFirstUse(&lease_, run);
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
      // A store fault of one statement (a missing table, no privilege) leaves the
      // session and its transaction as they were; a lost connection shows as broken.
      if (s.code() == absl::StatusCode::kAborted ||
          (s.code() == absl::StatusCode::kUnavailable && !IsStoreFault(s)) || !lease_ ||
          lease_->broken()) {
        failed_ = s;
      }
    }
    return result;
  }

  std::atomic<bool>& procedures_;
  bool deferred_ = true;  // START TRANSACTION has not gone out yet
  bool empty_ = true;     // no statement has run in this transaction yet
};

class MysqlStore final : public StoreBackend {
 public:
  // `read_only`: every session of the pool is SET SESSION TRANSACTION READ ONLY, so
  // that the server refuses whatever would change the database (a ledger only read).
  MysqlStore(MysqlOptions options, bool procedures, bool read_only)
      : options_(std::move(options)),
        pool_([this](absl::Time deadline) { return OpenSession(deadline); },
              options_.pool, absl::Milliseconds(options_.pool_wait_ms),
              absl::StrCat("mysql store ", options_.redacted_url, ": all ", options_.pool,
                           " connections stayed busy for ", options_.pool_wait_ms,
                           " ms (raise pool= or pool_wait_ms=, or look for long transactions)"),
              absl::Seconds(options_.io_timeout_s)),
        procedures_(procedures),
        read_only_(read_only) {}

  absl::StatusOr<std::unique_ptr<StoreTransaction>> Begin() override {
    // START TRANSACTION goes out with the first statement (MysqlTransaction).
    IDEM_ASSIGN_OR_RETURN(ConnectionPool::Lease lease, pool_.Acquire());
    return std::make_unique<MysqlTransaction>(pool_, std::move(lease), procedures_);
  }

  absl::StatusOr<std::optional<Record>> Get(std::string_view tenant,
                                            std::string_view key) override {
    std::optional<Record> out;
    IDEM_RETURN_IF_ERROR(pool_.Run([&](Connection& c) -> absl::Status {
      IDEM_ASSIGN_OR_RETURN(out, sql::LoadRecord(c, sql::kSelectRecord, tenant, key));
      return absl::OkStatus();
    }));
    return out;
  }

  absl::StatusOr<std::vector<Record>> ListRecords(const RecordQuery& query) override {
    return sql::ListRecordsOnPool(pool_, query);
  }

  absl::Status Ping() override {
    return AsStoreFault(pool_.Run([](Connection& c) { return c.Query(sql::kPing).status(); }));
  }

  const SqlDialect* sql_dialect() const override { return &sql::MysqlDialect(); }
  absl::StatusOr<SchemaInfo> DescribeSchema() override;
  std::string_view url() const override { return options_.redacted_url; }
  bool read_only() const override { return read_only_; }

 private:
  absl::StatusOr<std::unique_ptr<Connection>> OpenSession(absl::Time deadline) {
    IDEM_ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn, Connection::Open(options_, deadline));
    if (read_only_) IDEM_RETURN_IF_ERROR(conn->ExecText("SET SESSION TRANSACTION READ ONLY"));
    return conn;
  }

  const MysqlOptions options_;
  ConnectionPool pool_;
  std::atomic<bool> procedures_;  // idem_claim_v2 and idem_finish_v1 exist
  const bool read_only_;
};

// MySQL error numbers that mean "this user may not create routines here".
bool IsPrivilegeError(unsigned int err) {
  return err == 1044 ||  // ER_DBACCESS_DENIED_ERROR
         err == 1142 ||  // ER_TABLEACCESS_DENIED_ERROR
         err == 1227 ||  // ER_SPECIFIC_ACCESS_DENIED_ERROR
         err == 1370 ||  // ER_PROCACCESS_DENIED_ERROR
         err == 1419;    // ER_BINLOG_CREATE_ROUTINE_NEED_SUPER
}

// Creates the procedures not in `existing` (ListProcedures); the caller holds
// 'idem_schema'. False when the user may not create routines: the store then
// works without them.
absl::StatusOr<bool> CreateProcedures(Connection& conn, const std::vector<std::string>& existing) {
  for (const auto& [name, ddl] : {std::pair{kClaimProcedure, kCreateClaimProcedure},
                                  std::pair{kFinishProcedure, kCreateFinishProcedure}}) {
    if (std::find(existing.begin(), existing.end(), name) != existing.end()) continue;
    absl::Status s = conn.ExecText(ddl);
    if (s.ok() || conn.last_error() == 1304) continue;  // 1304: made by another process
    if (IsPrivilegeError(conn.last_error())) return false;
    return absl::Status(s.code(), absl::StrCat("creating procedure ", name, ": ", s.message()));
  }
  return true;
}

// The schema on one connection (sql::OpenSchema, sql::DescribeSchema). DDL commits
// by itself in MySQL: creation is serialized by the named lock 'idem_schema'
// instead of a transaction, so that exactly one process inserts the version row.
class MysqlSchema final : public sql::SchemaOn<Connection> {
 public:
  using SchemaOn::SchemaOn;
  bool IsNoTable(const absl::Status&) const override {
    return conn_.last_error() == 1146;  // ER_NO_SUCH_TABLE
  }
  absl::Status BeginCreate() override {
    // Bound the metadata-lock wait of the DDL (the server default is a year).
    IDEM_RETURN_IF_ERROR(conn_.ExecText("SET SESSION lock_wait_timeout = 10"));
    IDEM_ASSIGN_OR_RETURN(Rows got, conn_.Query("SELECT GET_LOCK('idem_schema', 10)"));
    if (got.rows.empty() || !got.rows[0][0].is_int() || got.rows[0][0].as_int() != 1) {
      return absl::UnavailableError(
          "another process held the lock 'idem_schema' for 10 s while creating the schema");
    }
    return absl::OkStatus();
  }
  absl::Status EndCreate(bool) override {
    // Closing the connection also releases the lock, so no error path leaves it held.
    return conn_.Query("SELECT RELEASE_LOCK('idem_schema')").status();
  }
  absl::Status CheckCanCreate() override {
    // The grantee as information_schema writes it: 'user'@'host'.
    constexpr std::string_view kGrantee =
        "CONCAT('''', SUBSTRING_INDEX(CURRENT_USER(), '@', 1), '''@''', "
        "SUBSTRING_INDEX(CURRENT_USER(), '@', -1), '''')";
    IDEM_ASSIGN_OR_RETURN(
        Rows rows,
        conn_.Query(absl::StrCat(
            "SELECT DATABASE() IS NULL, CURRENT_USER(), (SELECT COUNT(*) FROM "
            "information_schema.user_privileges WHERE privilege_type = 'CREATE' AND grantee = ",
            AV(kGrantee), ") + (SELECT COUNT(*) FROM information_schema.schema_privileges WHERE "
            "privilege_type = 'CREATE' AND DATABASE() LIKE table_schema AND grantee = ",
            AV(kGrantee), ")")));
    if (rows.rows.size() != 1 || rows.rows[0].size() != 3) {
      return absl::InternalError("mysql: the privilege check answered no row");
    }
    const std::vector<Value>& row = rows.rows[0];
    IDEM_ASSIGN_OR_RETURN(int64_t no_database, IntOf(row[0], "database"));
    IDEM_ASSIGN_OR_RETURN(int64_t grants, IntOf(row[2], "grants"));
    if (no_database != 0) return absl::FailedPreconditionError("the URL names no database");
    if (grants > 0) return absl::OkStatus();
    return absl::PermissionDeniedError(
        absl::StrCat("user ", BytesOf(row[1]), " has no CREATE privilege on this database"));
  }

};

// The names of idem's procedures in the database, sorted.
absl::StatusOr<std::vector<std::string>> ListProcedures(Connection& conn) {
  IDEM_ASSIGN_OR_RETURN(
      Rows rows, conn.Query("SELECT routine_name FROM information_schema.routines WHERE "
                            "routine_schema = DATABASE() AND routine_type = 'PROCEDURE' AND "
                            "routine_name IN (?, ?) ORDER BY 1",
                            {Value(kClaimProcedure), Value(kFinishProcedure)}));
  std::vector<std::string> out;
  for (const std::vector<Value>& row : rows.rows) out.push_back(BytesOf(row[0]));
  return out;
}

// Opens (creates, checks) the schema; answers whether idem's procedures are there.
absl::StatusOr<bool> OpenMysqlSchema(const MysqlOptions& o, sql::SchemaMode mode) {
  // A connection of its own, closed afterwards, so its session settings (the DDL
  // lock wait) and named lock never reach the pool.
  IDEM_ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn, Connection::Open(o));
  MysqlSchema session(*conn);
  const std::string where = absl::StrCat("mysql database '", o.database, "'");
  IDEM_RETURN_IF_ERROR(sql::OpenSchema(session, sql::MysqlDialect(), where, mode));
  if (!o.procedures) return false;
  IDEM_ASSIGN_OR_RETURN(std::vector<std::string> procedures, ListProcedures(*conn));
  if (procedures.size() == 2 || mode.read_only || !mode.create) return procedures.size() == 2;
  absl::Status s = session.BeginCreate();
  absl::StatusOr<bool> made =
      s.ok() ? CreateProcedures(*conn, procedures) : absl::StatusOr<bool>(s);
  if (s.ok()) session.EndCreate(made.ok()).IgnoreError();  // best effort: see EndCreate
  if (!made.ok()) {
    return absl::Status(made.status().code(), absl::StrCat(where, ": ", made.status().message()));
  }
  return made;
}

absl::StatusOr<SchemaInfo> MysqlStore::DescribeSchema() {
  IDEM_ASSIGN_OR_RETURN(ConnectionPool::Lease lease, pool_.Acquire());
  IDEM_RETURN_IF_ERROR(pool_.RunFirstUse(&lease, [](Connection& c) { return c.ExecText("DO 0"); }));
  MysqlSchema session(*lease);
  IDEM_ASSIGN_OR_RETURN(SchemaInfo info, sql::DescribeSchema(session, sql::MysqlDialect()));
  IDEM_ASSIGN_OR_RETURN(info.procedures, ListProcedures(*lease));
  return info;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Store>> OpenMysqlStore(std::string_view url, sql::SchemaMode mode) {
  IDEM_ASSIGN_OR_RETURN(MysqlOptions options, mysql::ParseMysqlUrl(url));
  IDEM_ASSIGN_OR_RETURN(bool procedures, OpenMysqlSchema(options, mode));
  return std::make_unique<MysqlStore>(std::move(options), procedures, mode.read_only);
}

}  // namespace idem
