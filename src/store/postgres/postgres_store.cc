#include "store/postgres/postgres_store.h"

#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "store/absl_compat.h"
#include "idem/status.h"
#include "store/postgres/pg_conn.h"
#include "store/postgres/pg_listener.h"
#include "store/postgres/pg_url.h"
#include "store/sql/dialect.h"
#include "store/sql/pool.h"
#include "store/sql/records.h"
#include "store/sql/schema.h"
#include "store/sql/txn.h"

namespace idem {
namespace {

using postgres::Connection;

using Pool = sql::Pool<Connection>;

constexpr int kNumColumns = sql::kRecordColumnCount;

// The most statements InsertOrLoadMany/ReplaceMany send in one round trip. libpq's
// pipeline sends them all before it reads an answer: bounded so that the answers
// (a claim's carries its row description, ~0.5 KB) fit in the sockets' buffers
// while the client is still sending, and a batch still costs only a few trips.
constexpr size_t kPipedPerTrip = 100;

// `sql` (one of src/store/sql's, written with ?) numbered for libpq ($1, $2, …).
std::string Numbered(std::string_view sql) {
  int n = 0;
  absl::StatusOr<std::string> out = postgres::RewritePlaceholders(sql, &n);
  return out.ok() ? *std::move(out) : std::string(sql);  // idem's own constants: always ok
}

// Binary-format column decoding (the record statements ask for binary results).
std::string Bytes(const PGresult* res, int row, int col) {
  if (PQgetisnull(res, row, col)) return std::string();
  return std::string(PQgetvalue(res, row, col), PQgetlength(res, row, col));
}

absl::StatusOr<int64_t> BinaryInt(const PGresult* res, int row, int col) {
  const int len = PQgetlength(res, row, col);
  if (PQgetisnull(res, row, col) || (len != 2 && len != 4 && len != 8)) {
    return absl::InternalError(absl::StrCat("postgres: column ", PQfname(res, col),
                                            " is not a binary integer (", len, " bytes)"));
  }
  const auto* p = reinterpret_cast<const unsigned char*>(PQgetvalue(res, row, col));
  uint64_t v = (p[0] & 0x80) ? ~uint64_t{0} : 0;  // sign-extend the narrower types
  for (int i = 0; i < len; ++i) v = (v << 8) | p[i];
  return static_cast<int64_t>(v);
}

absl::StatusOr<Record> ReadRecord(const PGresult* res, int row, int first) {
  return sql::ReadRecord([&](int i) { return Bytes(res, row, first + i); },
                         [&](int i) { return BinaryInt(res, row, first + i); });
}

// Reads the record of (tenant, key); `lock` adds FOR UPDATE.
absl::StatusOr<std::optional<Record>> SelectRecord(Connection& conn, std::string_view tenant,
                                                   std::string_view key, bool lock) {
  static const std::string plain = Numbered(sql::kSelectRecord);
  static const std::string locking = plain + " FOR UPDATE";
  IDEM_ASSIGN_OR_RETURN(postgres::Result res, conn.Run(lock ? locking : plain, 2,
                                                       sql::KeyParams(tenant, key),
                                                       /*binary_results=*/true));
  if (PQntuples(res.get()) == 0) return std::nullopt;
  IDEM_ASSIGN_OR_RETURN(Record r, ReadRecord(res.get(), 0, 0));
  return r;
}

// The result write of ReplaceAndCommit: Replace's UPDATE, made to fail when it
// matches no row, because the COMMIT pipelined behind it must never commit the
// handler's rows without the result. The failure is a division by zero (SQLSTATE
// 22012) in the outer SELECT, which reads the UPDATE's RETURNING rows: 1 / 1 when
// it moved the row, 1 / 0 when it did not. Why not a plpgsql function that RAISEs?
// It would need a schema migration on existing databases and the right to create
// functions; this needs nothing but the UPDATE itself. 22012 cannot come from
// anything else in the statement (no other arithmetic; the values are bound
// parameters stored as they are), so it means "not moved" exactly. The error
// aborts the transaction, and the COMMIT behind it answers ROLLBACK.
constexpr std::string_view kReplaceOrFail =
    "WITH moved AS (UPDATE idem_records SET biz_type = $1, fingerprint = $2, state = $3, "
    "token = $4, lease_until = $5, result = $6, error = $7, updated_at = $8 "
    "WHERE tenant = $9 AND idem_key = $10 AND token = $11 AND state = $12 RETURNING 1) "
    "SELECT 1 / count(*) FROM moved";
constexpr std::string_view kDivisionByZero = "22012";

// Finishing a claim (any state but processing) NOTIFYs this channel in the same
// transaction; PostgreSQL delivers it at commit, to every process that LISTENs
// (Store::SubscribeFinished). The payload is the tenant and the key, each in
// URL-safe base64 (keys are bytes; a payload is text), joined by '.'.
constexpr std::string_view kFinishedChannel = "idem_finished";
constexpr std::string_view kNotifyFinished = "SELECT pg_notify('idem_finished', $1)";

std::string FinishedPayload(std::string_view tenant, std::string_view key) {
  return absl::StrCat(absl::WebSafeBase64Escape(AV(tenant)), ".",
                      absl::WebSafeBase64Escape(AV(key)));
}

bool ParseFinishedPayload(std::string_view payload, std::string* tenant, std::string* key) {
  const size_t dot = payload.find('.');
  return dot != std::string_view::npos &&
         absl::WebSafeBase64Unescape(AV(payload.substr(0, dot)), tenant) &&
         absl::WebSafeBase64Unescape(AV(payload.substr(dot + 1)), key);
}

const std::string& ReplaceSql() {
  static const std::string sql = Numbered(sql::kReplaceRecord);
  return sql;
}

class PostgresTransaction final : public sql::PooledTransaction<Connection> {
 public:
  // `lease` has the transaction's BEGIN deferred (Connection::Defer): it goes out
  // with the first statement. `pool` lends a fresh connection if the lease's turns
  // out dead on that first round trip.
  PostgresTransaction(ConnPool& pool, ConnPool::Lease lease, const std::vector<std::string>& begin,
                      int lock_timeout_ms, bool notify)
      : PooledTransaction(pool, std::move(lease)),
        begin_(begin),
        lock_timeout_ms_(lock_timeout_ms),
        notify_(notify) {}
  ~PostgresTransaction() override { Rollback(); }

  absl::StatusOr<int64_t> Exec(std::string_view sql, absl::Span<const Value> params) override {
    return Step([&] { return lease_->Exec(sql, params); });
  }

  absl::StatusOr<Rows> Query(std::string_view sql, absl::Span<const Value> params) override {
    return Step([&] { return lease_->Query(sql, params); });
  }

  // One round trip in the common cases: the INSERT … ON CONFLICT DO NOTHING and the
  // locking read of an existing row are one statement. Why not ON CONFLICT DO
  // UPDATE … RETURNING xmax? It would write a new row version for every duplicate
  // (the common case of an idempotency store: replays), and telling "inserted" from
  // "updated" by xmax relies on undocumented internals.
  //
  // The catch under READ COMMITTED: all parts of a statement share one snapshot.
  // When the conflicting row was inserted by a transaction that committed after
  // that snapshot (we queued behind its uncommitted insert, the usual race on a
  // hot key), the INSERT sees the conflict but the SELECT cannot see the row, and
  // the statement returns inserted = 0 with no row. Only then a second statement,
  // with a fresh snapshot, reads and locks it. If the row vanished in between
  // (purged), the insert is tried again.
  absl::StatusOr<std::optional<Record>> InsertOrLoad(const Record& r) override {
    return Step([&] { return Claim(r); });
  }

  // One round trip for the claim and the statement after it (pipeline mode): the
  // statement runs whatever the claim found, and the Guard rolls back when the key
  // is not the caller's. A failed claim skips it.
  absl::StatusOr<std::optional<Record>> InsertOrLoadThen(
      const Record& r, const Statement& next,
      std::optional<absl::StatusOr<int64_t>>* next_result) override {
    int nparams = 0;
    absl::StatusOr<std::string> rewritten = postgres::RewritePlaceholders(next.sql, &nparams);
    if (!rewritten.ok() || postgres::IsBlankSql(next.sql)) {
      // A malformed statement fails on its own, after the claim, as Exec would.
      return RecordTransaction::InsertOrLoadThen(r, next, next_result);
    }
    return Step([&]() -> absl::StatusOr<std::optional<Record>> {
      const auto claim_params = sql::RecordParams(r);
      const postgres::PipedStatement statements[] = {
          {ClaimSql(), kNumColumns, claim_params, /*binary_results=*/true},
          {*rewritten, nparams, next.params, /*binary_results=*/false}};
      postgres::PipedMany piped = lease_->RunMany(statements);
      if (piped.results[0].ok()) {
        // The claim ran, so `next` ran after it. Its failure aborts the transaction;
        // should the claim still need its second, locking read (see InsertOrLoad),
        // that read fails too, and the Guard starts over without pipelining.
        absl::StatusOr<postgres::Result>& second = piped.results[1];
        if (second.ok()) {
          *next_result = postgres::RowsChanged(second->get());
        } else {
          *next_result = second.status();
        }
      }
      return ClaimFrom(r, std::move(piped.results[0]));
    });
  }

  // A batch's claims as InsertOrLoad's statement each, kPipedPerTrip of them per
  // round trip (pipeline mode, RunMany): each sees the ones before it in this
  // transaction, as calls one after the other would. The first failure skips the
  // rest of its round trip and is the answer.
  absl::StatusOr<std::vector<std::optional<Record>>> InsertOrLoadMany(
      absl::Span<const Record> records) override {
    std::vector<std::optional<Record>> out;
    out.reserve(records.size());
    for (size_t at = 0; at < records.size(); at += kPipedPerTrip) {
      const absl::Span<const Record> part = records.subspan(at, kPipedPerTrip);
      IDEM_ASSIGN_OR_RETURN(
          std::vector<std::optional<Record>> claimed,
          Step([&]() -> absl::StatusOr<std::vector<std::optional<Record>>> {
            std::vector<std::array<Value, kNumColumns>> params;
            params.reserve(part.size());
            std::vector<postgres::PipedStatement> statements;
            statements.reserve(part.size());
            for (const Record& r : part) {
              params.push_back(sql::RecordParams(r));
              statements.push_back(
                  {ClaimSql(), kNumColumns, params.back(), /*binary_results=*/true});
            }
            postgres::PipedMany piped = lease_->RunMany(statements);
            std::vector<std::optional<Record>> answers;
            answers.reserve(part.size());
            for (size_t i = 0; i < part.size(); ++i) {
              IDEM_ASSIGN_OR_RETURN(std::optional<Record> answer,
                                    ClaimFrom(part[i], std::move(piped.results[i])));
              answers.push_back(std::move(answer));
            }
            return answers;
          }));
      for (std::optional<Record>& c : claimed) out.push_back(std::move(c));
    }
    return out;
  }

  // A batch's result writes as Replace's statement each (and its NOTIFY), in
  // round trips of at most kPipedPerTrip statements.
  absl::StatusOr<std::vector<bool>> ReplaceMany(
      absl::Span<const Replacement> replacements) override {
    std::vector<bool> out;
    out.reserve(replacements.size());
    const size_t per_trip = notify_ ? kPipedPerTrip / 2 : kPipedPerTrip;
    for (size_t at = 0; at < replacements.size(); at += per_trip) {
      const absl::Span<const Replacement> part = replacements.subspan(at, per_trip);
      IDEM_ASSIGN_OR_RETURN(
          std::vector<bool> moved, Step([&]() -> absl::StatusOr<std::vector<bool>> {
            std::vector<std::array<Value, 12>> params;
            std::vector<std::array<Value, 1>> payloads;
            params.reserve(part.size());
            payloads.reserve(part.size());
            std::vector<postgres::PipedStatement> statements;
            std::vector<size_t> update_of;  // part[i]'s UPDATE: statements[update_of[i]]
            for (const Replacement& w : part) {
              params.push_back(sql::ReplaceParams(w.record, w.expected_token, w.expected_state));
              update_of.push_back(statements.size());
              statements.push_back({ReplaceSql(), 12, params.back(), /*binary_results=*/true});
              if (Notifies(w.record)) {
                payloads.push_back({Value(FinishedPayload(w.record.tenant, w.record.key))});
                statements.push_back({kNotifyFinished, 1, payloads.back(), false});
              }
            }
            postgres::PipedMany piped = lease_->RunMany(statements);
            std::vector<bool> answers;
            answers.reserve(part.size());
            for (size_t i = 0; i < part.size(); ++i) {
              const size_t u = update_of[i];
              if (!piped.results[u].ok()) return piped.results[u].status();
              if (Notifies(part[i].record) && !piped.results[u + 1].ok()) {
                return piped.results[u + 1].status();
              }
              answers.push_back(postgres::RowsChanged(piped.results[u]->get()) == 1);
            }
            return answers;
          }));
      out.insert(out.end(), moved.begin(), moved.end());
    }
    return out;
  }

  // A batch's statements (a consumer's first statements of its effects) as Exec
  // would run each, kPipedPerTrip of them per round trip. A malformed one fails
  // before its round trip is sent, as Exec would.
  absl::StatusOr<std::vector<int64_t>> ExecMany(absl::Span<const Statement> statements) override {
    std::vector<int64_t> out;
    out.reserve(statements.size());
    for (size_t at = 0; at < statements.size(); at += kPipedPerTrip) {
      const absl::Span<const Statement> part = statements.subspan(at, kPipedPerTrip);
      std::vector<std::string> rewritten;
      std::vector<postgres::PipedStatement> piped_statements;
      rewritten.reserve(part.size());
      for (const Statement& st : part) {
        if (postgres::IsBlankSql(st.sql)) return absl::InvalidArgumentError("empty SQL statement");
        int nparams = 0;
        IDEM_ASSIGN_OR_RETURN(std::string sql, postgres::RewritePlaceholders(st.sql, &nparams));
        rewritten.push_back(std::move(sql));
        piped_statements.push_back({rewritten.back(), nparams, st.params, false});
      }
      IDEM_ASSIGN_OR_RETURN(std::vector<int64_t> rows,
                            Step([&]() -> absl::StatusOr<std::vector<int64_t>> {
                              postgres::PipedMany piped = lease_->RunMany(piped_statements);
                              std::vector<int64_t> changed;
                              changed.reserve(part.size());
                              for (absl::StatusOr<postgres::Result>& r : piped.results) {
                                if (!r.ok()) return r.status();
                                changed.push_back(postgres::RowsChanged(r->get()));
                              }
                              return changed;
                            }));
      out.insert(out.end(), rows.begin(), rows.end());
    }
    return out;
  }

  absl::StatusOr<bool> Replace(const Record& r, int64_t expected_token,
                               RecordState expected_state) override {
    const auto params = sql::ReplaceParams(r, expected_token, expected_state);
    absl::StatusOr<postgres::Result> res = Step([&]() -> absl::StatusOr<postgres::Result> {
      if (!Notifies(r)) return lease_->Run(ReplaceSql(), 12, params, true);
      const Value payload[] = {Value(FinishedPayload(r.tenant, r.key))};
      const postgres::PipedStatement statements[] = {
          {ReplaceSql(), 12, params, /*binary_results=*/true},
          {kNotifyFinished, 1, payload, /*binary_results=*/false}};
      postgres::PipedMany piped = lease_->RunMany(statements);  // still one round trip
      if (piped.results[0].ok() && !piped.results[1].ok()) return piped.results[1].status();
      return std::move(piped.results[0]);
    });
    IDEM_RETURN_IF_ERROR(res.status());
    return postgres::RowsChanged(res->get()) == 1;
  }

  // One round trip: the UPDATE (kReplaceOrFail), a sync point, then COMMIT. When
  // the UPDATE fails, not moving the row included, the transaction is aborted and
  // the COMMIT answers ROLLBACK: nothing of it is committed. Not retried on a fresh
  // connection even as a first statement: a COMMIT was sent, so a lost connection
  // leaves the outcome unknown.
  absl::StatusOr<bool> ReplaceAndCommit(const Record& r, int64_t expected_token,
                                        RecordState expected_state) override {
    IDEM_RETURN_IF_ERROR(CheckOpen());
    if (absl::Status s = Begun() ? Committable() : absl::OkStatus(); !s.ok()) {
      Rollback();
      return s;
    }
    StartCall();
    const auto params = sql::ReplaceParams(r, expected_token, expected_state);
    const Value payload[] = {Value(FinishedPayload(r.tenant, r.key))};
    const postgres::PipedStatement statements[] = {
        {kReplaceOrFail, 12, params, /*binary_results=*/false},
        {kNotifyFinished, 1, payload, /*binary_results=*/false}};
    postgres::PipedMany piped =
        lease_->RunMany(absl::MakeConstSpan(statements, Notifies(r) ? 2 : 1), "COMMIT");
    absl::StatusOr<postgres::Result>& result = piped.results[0];
    if (result.ok() && piped.results.size() > 1 && !piped.results[1].ok()) {
      result = piped.results[1].status();  // the COMMIT met an aborted transaction
    }
    absl::StatusOr<bool> out;
    if (result.ok()) {
      if (!piped.then_status.ok()) {
        out = piped.then_status;
      } else if (piped.then_tag == "COMMIT") {
        out = true;
      } else {
        out = absl::AbortedError(
            absl::StrCat("postgres: COMMIT answered ", piped.then_tag, "; retry"));
      }
    } else if (auto state = result.status().GetPayload(AV(postgres::kSqlStatePayload));
               state.has_value() && *state == AV(kDivisionByZero)) {
      out = false;  // the row had moved on: the COMMIT answered ROLLBACK
    } else {
      out = result.status();
    }
    if (lease_->broken()) {
      out = sql::CommitOutcomeUnknown(
          out.ok() ? absl::UnavailableError("postgres: connection lost after COMMIT was sent")
                   : out.status());
    }
    // Ends the transaction whatever happened: after a COMMIT the session is idle
    // (nothing to send); when nothing went out (bad parameters), it rolls back.
    Rollback();
    return out;
  }

  // Locks the row (FOR UPDATE) so that the caller's check-then-Replace (Guard's
  // complete/fail) cannot interleave with another one under READ COMMITTED.
  absl::StatusOr<std::optional<Record>> Load(std::string_view tenant,
                                             std::string_view key) override {
    return Step([&]() -> absl::StatusOr<std::optional<Record>> {
      absl::StatusOr<std::optional<Record>> out = SelectRecord(*lease_, tenant, key, /*lock=*/true);
      if (!out.ok()) out = Contended(out.status());
      return out;
    });
  }

 private:
  bool Begun() const override { return !lease_->has_deferred(); }

  // A transaction whose statement failed is aborted on the server: its COMMIT
  // would answer ROLLBACK.
  absl::Status Committable() const {
    if (lease_->transaction_status() != PQTRANS_INERROR) return absl::OkStatus();
    return absl::AbortedError(
        "postgres: a statement of this transaction failed earlier, so it was rolled back "
        "instead of committed; retry");
  }

  absl::Status CommitNow() override {
    IDEM_RETURN_IF_ERROR(Committable());
    std::string tag;
    IDEM_RETURN_IF_ERROR(lease_->ExecScript("COMMIT", &tag));
    if (tag == "COMMIT") return absl::OkStatus();
    return absl::AbortedError(absl::StrCat("postgres: COMMIT answered ", tag, "; retry"));
  }

  void RollbackNow() override {
    if (lease_->transaction_status() == PQTRANS_IDLE) return;  // ended by a COMMIT
    // A failed ROLLBACK leaves the connection outside PQTRANS_IDLE or broken, and
    // the pool closes it (the server then rolls back); nothing else to do here.
    lease_->ExecScript("ROLLBACK").IgnoreError();
  }

  static const std::string& ClaimSql() {
    static const std::string sql =
        absl::StrCat("WITH ins AS (INSERT INTO idem_records (", AV(sql::kRecordColumns),
                     ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)"
                     " ON CONFLICT (tenant, idem_key) DO NOTHING RETURNING 1),"
                     " cur AS (SELECT ",
                     AV(sql::kRecordColumns),
                     " FROM idem_records WHERE tenant = $1 AND idem_key = $2"
                     " AND NOT EXISTS (SELECT 1 FROM ins) FOR UPDATE)"
                     " SELECT n.inserted, cur.* FROM (SELECT count(*) AS inserted FROM ins) n"
                     " LEFT JOIN cur ON true");
    return sql;
  }

  absl::StatusOr<std::optional<Record>> Claim(const Record& r) {
    const auto params = sql::RecordParams(r);
    return ClaimFrom(r, lease_->Run(ClaimSql(), kNumColumns, params, /*binary_results=*/true));
  }

  // Reads the claim statement's answer `res`; see InsertOrLoad for the second
  // statement it may take.
  absl::StatusOr<std::optional<Record>> ClaimFrom(const Record& r,
                                                  absl::StatusOr<postgres::Result> res) {
    const auto params = sql::RecordParams(r);
    for (int attempt = 0; attempt < 3; ++attempt) {
      if (attempt > 0) res = lease_->Run(ClaimSql(), kNumColumns, params, /*binary_results=*/true);
      if (!res.ok()) return Contended(res.status());
      const PGresult* pg = res->get();
      if (PQntuples(pg) != 1 || PQnfields(pg) != kNumColumns + 1) {
        return absl::InternalError("postgres: claim statement returned an unexpected shape");
      }
      IDEM_ASSIGN_OR_RETURN(int64_t inserted, BinaryInt(pg, 0, 0));
      if (inserted == 1) return std::nullopt;
      if (!PQgetisnull(pg, 0, 1)) {
        IDEM_ASSIGN_OR_RETURN(Record existing, ReadRecord(pg, 0, 1));
        return existing;
      }
      absl::StatusOr<std::optional<Record>> locked =
          SelectRecord(*lease_, r.tenant, r.key, /*lock=*/true);
      if (!locked.ok()) return Contended(locked.status());
      if (locked->has_value()) return locked;
    }
    return absl::AbortedError("postgres: the record kept appearing and vanishing; retry");
  }

  // Runs `op` (the transaction's next statement or statements) and then After().
  // While the BEGIN is still deferred, nothing of this transaction has reached the
  // server, so a pooled connection found dead by that first round trip (it died
  // while idle: server restart, terminated backend) is replaced by a fresh one and
  // `op` repeated (Pool::RunFirstUse), as Begin() did when it sent BEGIN itself: a
  // caller never sees a dead idle connection. Safe: no COMMIT went out, and the
  // server rolls back whatever a session that lost its client had begun.
  template <typename Op>
  auto Step(Op op) -> decltype(op()) {
    IDEM_RETURN_IF_ERROR(CheckOpen());
    StartCall();
    if (Begun()) return After(op());
    decltype(op()) out = absl::UnknownError("not run");
    absl::Status s = pool_.RunFirstUse(&lease_, [&](Connection& c) {
      if (!c.has_deferred()) c.Defer(begin_);  // a fresh connection in place of a dead one
      out = op();
      return out.status();
    });
    if (!lease_) {  // no fresh connection could be had
      failed_ = LostError();
      End();
      return s;
    }
    return After(std::move(out));
  }

  static absl::Status LostError() {
    return absl::UnavailableError(
        "postgres: the connection was lost inside this transaction; nothing was committed");
  }

  // Runs after every statement: a lost connection ends the transaction (nothing
  // was committed; retryable), and so does caller SQL that ran COMMIT/ROLLBACK,
  // which idem must not allow: the claim would no longer commit together with the
  // business rows. The statement's own error, if any, is what the caller sees.
  template <typename T>
  absl::StatusOr<T> After(absl::StatusOr<T> out) {
    absl::Status ended;
    if (lease_->has_deferred()) {
      return out;  // nothing was sent (a caller's mistake): the transaction goes on
    } else if (lease_->broken()) {
      ended = failed_ = LostError();
    } else if (lease_->transaction_status() == PQTRANS_IDLE) {
      ended = absl::FailedPreconditionError(
          "postgres: the statement ended idem's transaction (COMMIT/ROLLBACK/END are idem's "
          "to run); what it committed is not covered by the claim");
    } else {
      return out;
    }
    End();
    if (!out.ok()) return out;
    return ended;
  }

  // A claim that waited past lock_timeout for a row held by another transaction
  // is told so: the key is being claimed right now.
  absl::Status Contended(absl::Status s) const {
    auto state = s.GetPayload(AV(postgres::kSqlStatePayload));
    if (!state.has_value() || *state != "55P03") return s;
    absl::Status out = ClaimContendedError(absl::StrCat(
        "postgres: the key is held by another open transaction (a claim in progress) for "
        "longer than lock_timeout_ms=",
        lock_timeout_ms_, "; retry later: ", s.message()));
    out.SetPayload(AV(postgres::kSqlStatePayload), *state);
    return out;
  }

  // A write that finishes a claim (completed, failed, released) is announced.
  bool Notifies(const Record& r) const { return notify_ && r.state != RecordState::kProcessing; }

  const std::vector<std::string>& begin_;  // the store's, which outlives this
  const int lock_timeout_ms_;
  const bool notify_;
};

class PostgresStore final : public StoreBackend {
 public:
  explicit PostgresStore(postgres::Options options)
      : options_(std::move(options)),
        // A read-only store's transactions are READ ONLY: the server refuses
        // whatever would change the database (a ledger only read).
        begin_({options_.read_only ? "BEGIN ISOLATION LEVEL READ COMMITTED READ ONLY"
                                   : "BEGIN ISOLATION LEVEL READ COMMITTED",
                absl::StrCat("SET LOCAL lock_timeout = ", options_.lock_timeout_ms)}),
        pool_([this](absl::Time deadline) { return Connection::Open(options_.connect, deadline); },
              options_.pool, absl::Milliseconds(options_.pool_timeout_ms),
              absl::StrCat("postgres: all ", options_.pool, " pooled connections stayed busy for ",
                           options_.pool_timeout_ms, " ms (raise pool= or pool_timeout_ms=)"),
              options_.connect.io_timeout_ms > 0 ? absl::Milliseconds(options_.connect.io_timeout_ms)
                                                 : absl::InfiniteDuration()) {}

  void Seed(std::unique_ptr<Connection> conn) { pool_.Seed(std::move(conn)); }

  // Fails closed when no connection can be had (pool exhausted, server down for a
  // new connection). The BEGIN itself is deferred: it goes out in the same round
  // trip as the transaction's first statement, which answers its errors (and
  // replaces a pooled connection that turns out dead, see PostgresTransaction).
  absl::StatusOr<std::unique_ptr<StoreTransaction>> Begin() override {
    IDEM_ASSIGN_OR_RETURN(Pool::Lease lease, pool_.Acquire());
    lease->Defer(begin_);
    return std::make_unique<PostgresTransaction>(pool_, std::move(lease), begin_,
                                                 options_.lock_timeout_ms, options_.notify);
  }

  // A pooled connection can have died while idle (server restart, terminated
  // backend); its first statement then fails before anything ran, and runs again
  // on a new connection (Pool::Run) instead of failing a caller for a
  // connection it never saw.
  absl::StatusOr<std::optional<Record>> Get(std::string_view tenant,
                                            std::string_view key) override {
    std::optional<Record> out;
    IDEM_RETURN_IF_ERROR(pool_.Run([&](Connection& c) -> absl::Status {
      IDEM_ASSIGN_OR_RETURN(out, SelectRecord(c, tenant, key, /*lock=*/false));
      return absl::OkStatus();
    }));
    return out;
  }

  // One listening connection per subscription (a server makes one), apart from
  // the pool.
  std::shared_ptr<void> SubscribeFinished(
      std::function<void(std::string_view, std::string_view)> finished) override {
    if (!options_.notify) return nullptr;
    return std::make_shared<postgres::Listener>(
        options_.connect, std::string(kFinishedChannel),
        [finished = std::move(finished)](std::string_view payload) {
          std::string tenant, key;
          if (ParseFinishedPayload(payload, &tenant, &key)) finished(tenant, key);
        });
  }

  absl::StatusOr<std::vector<Record>> ListRecords(const RecordQuery& query) override {
    return sql::ListRecordsOnPool(pool_, query);
  }

  absl::Status Ping() override {
    return AsStoreFault(
        pool_.Run([](Connection& c) { return c.Run(sql::kPing, 0, {}, false).status(); }));
  }

  const SqlDialect* sql_dialect() const override { return &sql::PostgresDialect(); }
  absl::StatusOr<SchemaInfo> DescribeSchema() override;
  std::string_view url() const override { return options_.connect.display; }
  bool read_only() const override { return options_.read_only; }

 private:
  const postgres::Options options_;
  const std::vector<std::string> begin_;  // BEGIN …; SET LOCAL lock_timeout = …
  Pool pool_;
};

// The schema on one connection (sql::OpenSchema, sql::DescribeSchema).
class PostgresSchema final : public sql::SchemaOn<Connection> {
 public:
  using SchemaOn::SchemaOn;
  bool IsNoTable(const absl::Status& s) const override {
    absl::optional<absl::Cord> state = s.GetPayload(AV(postgres::kSqlStatePayload));
    return state.has_value() && *state == "42P01";  // undefined_table
  }
  absl::Status BeginCreate() override {
    IDEM_RETURN_IF_ERROR(conn_.ExecScript("BEGIN"));
    return conn_.ExecScript(std::string(sql::PostgresDialect().spec().schema_lock).c_str());
  }
  absl::Status EndCreate(bool commit) override {
    return conn_.ExecScript(commit ? "COMMIT" : "ROLLBACK");
  }
  absl::Status CheckCanCreate() override {
    IDEM_ASSIGN_OR_RETURN(
        Rows rows,
        conn_.Query("SELECT CASE WHEN current_schema() IS NULL THEN -1 WHEN "
                    "has_schema_privilege(current_schema(), 'CREATE') THEN 1 ELSE 0 END, "
                    "current_user::text, coalesce(current_schema(), '')::text",
                    {}));
    if (rows.rows.size() != 1 || rows.rows[0].size() != 3) {
      return absl::InternalError("postgres: the privilege check answered no row");
    }
    const std::vector<Value>& row = rows.rows[0];
    IDEM_ASSIGN_OR_RETURN(int64_t can, IntOf(row[0], "privilege"));
    if (can == 1) return absl::OkStatus();
    if (can < 0) {
      return absl::FailedPreconditionError(
          "no schema to create tables in: the search_path names no existing schema");
    }
    return absl::PermissionDeniedError(absl::StrCat(
        "user ", BytesOf(row[1]), " may not create tables in schema ", BytesOf(row[2])));
  }

};

absl::StatusOr<SchemaInfo> PostgresStore::DescribeSchema() {
  IDEM_ASSIGN_OR_RETURN(Pool::Lease lease, pool_.Acquire());
  PostgresSchema session(*lease);
  return sql::DescribeSchema(session, sql::PostgresDialect());
}

}  // namespace

absl::StatusOr<std::unique_ptr<Store>> OpenPostgresStore(std::string_view url,
                                                         sql::SchemaMode mode) {
  IDEM_ASSIGN_OR_RETURN(postgres::Options options, postgres::ParseUrl(url));
  options.read_only = mode.read_only;
  IDEM_ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn, Connection::Open(options.connect));
  PostgresSchema session(*conn);
  IDEM_RETURN_IF_ERROR(sql::OpenSchema(
      session, sql::PostgresDialect(),
      absl::StrCat("postgres database '", options.connect.display, "'"), mode));
  auto store = std::make_unique<PostgresStore>(std::move(options));
  store->Seed(std::move(conn));
  return store;
}

}  // namespace idem
