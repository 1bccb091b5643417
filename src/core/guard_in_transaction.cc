// RunIn (core/guard_batch.h): transactional mode inside the caller's transaction (a consumer's
// poll batch, src/messaging/runner.cc). Each key gets a savepoint of its own, so one
// message's failure undoes only that message's claim and writes, and the batch's
// transaction stays usable on every backend (PostgreSQL aborts a transaction at
// its first failed statement unless a savepoint confines it). RunBatchIn is
// the optimistic fast path of a batch: no savepoints, and the store's claims and
// result writes of all its keys sent together.
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/guard_batch.h"
#include "core/guard_internal.h"
#include "idem/guard.h"
#include "idem/status.h"

namespace idem {
namespace {

constexpr std::string_view kSavepoint = "SAVEPOINT idem_guard";
constexpr std::string_view kRollbackTo = "ROLLBACK TO SAVEPOINT idem_guard";
constexpr std::string_view kRelease = "RELEASE SAVEPOINT idem_guard";

// Undoes everything since the savepoint (also a statement that failed inside it)
// and ends the savepoint.
absl::Status Undo(RecordTransaction& tx) {
  IDEM_RETURN_IF_ERROR(AsStoreFault(tx.Exec(kRollbackTo).status()));
  return AsStoreFault(tx.Exec(kRelease).status());
}

}  // namespace

absl::Status Guard::Impl::CheckSql() const {
  if (store_.SupportsSql()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      "Guard::RunIn needs a store that runs SQL (sqlite://, postgres://, mysql://): the "
      "batch's effects share its transaction");
}

absl::StatusOr<Result> Guard::Impl::RunIn(RecordTransaction& tx, const Request& request,
                                          const Handler& handler, bool confine) {
  IDEM_RETURN_IF_ERROR(Validate(request));
  IDEM_RETURN_IF_ERROR(CheckSql());
  const absl::Time now = options_.clock->Now();
  if (std::optional<Result> known = DecideFromKnown(request, options_.lease, now)) {
    return *std::move(known);
  }
  if (!confine) return RunUnconfined(tx, request, handler, now);
  IDEM_RETURN_IF_ERROR(AsStoreFault(tx.Exec(kSavepoint).status()));
  absl::StatusOr<Acquisition> acquired = Acquire(tx, request, options_.lease, now);
  if (!acquired.ok()) {
    Undo(tx).IgnoreError();  // the caller rolls the whole transaction back anyway
    return acquired.status();
  }
  if (acquired->final.has_value()) {
    // Nothing was written; a lock timeout (kInProgress) may have aborted the
    // transaction on PostgreSQL, which rolling back to the savepoint repairs.
    IDEM_RETURN_IF_ERROR(Undo(tx));
    return *std::move(acquired->final);
  }
  const Record claim = std::move(acquired->claim);

  absl::StatusOr<std::string> value = handler(tx);
  if (!value.ok()) {
    // The handler's writes and the claim go; the record is back to what it was
    // before the claim (absent, released, or an expired lease), under our lock.
    IDEM_RETURN_IF_ERROR(Undo(tx));
    if (IsRetryable(value.status())) return value.status();
    Record failed = claim;
    failed.state = RecordState::kFailed;
    failed.error = internal::FailureBytes(value.status());
    failed.lease_until = absl::InfinitePast();
    failed.updated_at = options_.clock->Now();
    IDEM_ASSIGN_OR_RETURN(std::optional<Record> before, AsStoreFault(tx.InsertOrLoad(failed)));
    if (before.has_value()) {
      failed.token = before->token + 1;
      IDEM_ASSIGN_OR_RETURN(bool moved,
                            AsStoreFault(tx.Replace(failed, before->token, before->state)));
      if (!moved) return absl::AbortedError("record moved while caching a failure; retry");
    }
    return value.status();
  }
  Record done = claim;
  done.state = RecordState::kSucceeded;
  done.result = *std::move(value);
  done.lease_until = absl::InfinitePast();
  done.updated_at = options_.clock->Now();
  IDEM_ASSIGN_OR_RETURN(bool moved,
                        AsStoreFault(tx.Replace(done, claim.token, RecordState::kProcessing)));
  if (!moved) {
    Undo(tx).IgnoreError();  // reported as kAborted: the caller retries the batch
    return absl::AbortedError("record moved during the handler; rolled back");
  }
  IDEM_RETURN_IF_ERROR(AsStoreFault(tx.Exec(kRelease).status()));
  return Result{.outcome = Outcome::kExecuted, .value = std::move(done.result),
                .token = done.token, .expires_at = done.expires_at};
}

// RunIn without the savepoint: claim, handler, result, and on anything but
// success or a plain duplicate the caller rolls the whole transaction back.
absl::StatusOr<Result> Guard::Impl::RunUnconfined(RecordTransaction& tx, const Request& request,
                                                  const Handler& handler, absl::Time now) {
  IDEM_ASSIGN_OR_RETURN(Acquisition a, Acquire(tx, request, options_.lease, now));
  if (a.final.has_value()) return *std::move(a.final);
  IDEM_ASSIGN_OR_RETURN(std::string value, handler(tx));
  Record done = std::move(a.claim);
  const int64_t token = done.token;
  done.state = RecordState::kSucceeded;
  done.result = std::move(value);
  done.lease_until = absl::InfinitePast();
  done.updated_at = options_.clock->Now();
  IDEM_ASSIGN_OR_RETURN(bool moved,
                        AsStoreFault(tx.Replace(done, token, RecordState::kProcessing)));
  if (!moved) return absl::AbortedError("record moved during the handler; roll back");
  return Result{.outcome = Outcome::kExecuted, .value = std::move(done.result), .token = token,
                .expires_at = done.expires_at};
}

absl::StatusOr<Result> RunIn(Guard& guard, StoreTransaction& tx, const Request& request,
                             const Handler& handler, bool confine) {
  return GuardAccess::Of(guard).RunIn(Records(tx), request, handler, confine);
}

absl::StatusOr<std::vector<Result>> RunBatchIn(Guard& guard, StoreTransaction& tx,
                                               absl::Span<const Request> requests,
                                               const BatchHandler& handler) {
  return GuardAccess::Of(guard).RunBatchIn(
      Records(tx), requests, {},
      [&handler](size_t i, Transaction& t, int64_t) { return handler(i, t); });
}

absl::StatusOr<std::vector<Result>> RunBatchIn(Guard& guard, StoreTransaction& tx,
                                               absl::Span<const Request> requests,
                                               absl::Span<const Statement> firsts,
                                               const BatchHandlerAfterFirst& handler) {
  return GuardAccess::Of(guard).RunBatchIn(Records(tx), requests, firsts, handler);
}

absl::StatusOr<std::vector<Result>> Guard::Impl::RunBatchIn(RecordTransaction& tx,
                                                            absl::Span<const Request> requests,
                                                            absl::Span<const Statement> firsts,
                                                            const BatchHandlerAfterFirst& handler) {
  if (!firsts.empty() && firsts.size() != requests.size()) {
    return absl::InvalidArgumentError(absl::StrCat("RunBatchIn: ", firsts.size(),
                                                   " first statements for ", requests.size(),
                                                   " requests"));
  }
  for (const Request& r : requests) IDEM_RETURN_IF_ERROR(Validate(r));
  IDEM_RETURN_IF_ERROR(CheckSql());
  std::vector<Result> results(requests.size());
  // A key met a second time must see the first one's result, which is written at
  // the end of the first one's segment: a repeat starts the next segment, whose
  // claims then load the record the previous segment wrote (kReplayed).
  size_t begin = 0;
  while (begin < requests.size()) {
    std::set<std::pair<std::string_view, std::string_view>> keys;
    size_t end = begin;
    while (end < requests.size() && keys.emplace(requests[end].tenant, requests[end].key).second) {
      ++end;
    }
    IDEM_RETURN_IF_ERROR(RunSegmentIn(tx, requests, firsts, begin, end, handler, &results));
    begin = end;
  }
  return results;
}

absl::Status Guard::Impl::RunSegmentIn(RecordTransaction& tx, absl::Span<const Request> requests,
                                       absl::Span<const Statement> firsts, size_t begin, size_t end,
                                       const BatchHandlerAfterFirst& handler,
                                       std::vector<Result>* results) {
  const absl::Time now = options_.clock->Now();
  std::vector<size_t> asked;  // the requests whose keys go to the store
  std::vector<Record> claims;
  for (size_t i = begin; i < end; ++i) {
    if (std::optional<Result> known = DecideFromKnown(requests[i], options_.lease, now)) {
      (*results)[i] = *std::move(known);
      continue;
    }
    asked.push_back(i);
    claims.push_back(FreshClaim(requests[i], options_.lease, now));
  }
  IDEM_ASSIGN_OR_RETURN(std::vector<std::optional<Record>> loaded,
                        AsStoreFault(tx.InsertOrLoadMany(claims)));
  if (loaded.size() != claims.size()) {
    return absl::InternalError("InsertOrLoadMany answered another number of records");
  }
  std::vector<size_t> won;  // the requests whose keys are now held in `tx`
  std::vector<Record> held;
  for (size_t j = 0; j < asked.size(); ++j) {
    const size_t i = asked[j];
    IDEM_ASSIGN_OR_RETURN(Acquisition a, Settle(tx, requests[i], std::move(claims[j]),
                                                std::move(loaded[j]), options_.lease, now));
    if (a.final.has_value()) {
      (*results)[i] = *std::move(a.final);
      continue;
    }
    won.push_back(i);
    held.push_back(std::move(a.claim));
  }
  std::vector<int64_t> first_rows(won.size(), 0);
  if (!firsts.empty() && !won.empty()) {
    std::vector<Statement> statements;
    statements.reserve(won.size());
    for (size_t i : won) statements.push_back(firsts[i]);
    // The caller's statements: their errors are the handler's, not the store's.
    IDEM_ASSIGN_OR_RETURN(first_rows, tx.ExecMany(statements));
    if (first_rows.size() != won.size()) {
      return absl::InternalError("ExecMany answered another number of statements");
    }
  }
  std::vector<RecordTransaction::Replacement> writes;
  writes.reserve(won.size());
  for (size_t k = 0; k < won.size(); ++k) {
    const size_t i = won[k];
    IDEM_ASSIGN_OR_RETURN(std::string value, handler(i, tx, first_rows[k]));
    Record done = std::move(held[k]);
    const int64_t token = done.token;
    done.state = RecordState::kSucceeded;
    done.result = std::move(value);
    done.lease_until = absl::InfinitePast();
    done.updated_at = options_.clock->Now();
    (*results)[i] = Result{.outcome = Outcome::kExecuted, .value = done.result, .token = token,
                           .expires_at = done.expires_at};
    writes.push_back({.record = std::move(done), .expected_token = token,
                      .expected_state = RecordState::kProcessing});
  }
  IDEM_ASSIGN_OR_RETURN(std::vector<bool> moved, AsStoreFault(tx.ReplaceMany(writes)));
  for (size_t k = 0; k < writes.size(); ++k) {
    if (k >= moved.size() || !moved[k]) {
      return absl::AbortedError("record moved during the handler; roll back");
    }
  }
  return absl::OkStatus();
}

}  // namespace idem
