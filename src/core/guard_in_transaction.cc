// Guard::RunIn: transactional mode inside the caller's transaction (a consumer's
// poll batch, src/kafka/runner.cc). Each key gets a savepoint of its own, so one
// message's failure undoes only that message's claim and writes, and the batch's
// transaction stays usable on every backend (PostgreSQL aborts a transaction at
// its first failed statement unless a savepoint confines it).
#include <memory>
#include <optional>
#include <utility>

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
absl::Status Undo(StoreTransaction& tx) {
  IDEM_RETURN_IF_ERROR(AsStoreFault(tx.Exec(kRollbackTo).status()));
  return AsStoreFault(tx.Exec(kRelease).status());
}

template <typename T>
absl::StatusOr<T> Fault(absl::StatusOr<T> value) {
  if (!value.ok()) return AsStoreFault(value.status());
  return value;
}

}  // namespace

absl::StatusOr<Result> Guard::RunIn(StoreTransaction& tx, const Request& request,
                                    const Handler& handler, bool confine) {
  IDEM_RETURN_IF_ERROR(Validate(request));
  if (!store_.SupportsSql()) {
    return absl::FailedPreconditionError(
        "Guard::RunIn needs a store that runs SQL (sqlite://, postgres://, mysql://): the "
        "batch's claims are confined by savepoints");
  }
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
    IDEM_ASSIGN_OR_RETURN(std::optional<Record> before, Fault(tx.InsertOrLoad(failed)));
    if (before.has_value()) {
      failed.token = before->token + 1;
      IDEM_ASSIGN_OR_RETURN(bool moved,
                            Fault(tx.Replace(failed, before->token, before->state)));
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
                        Fault(tx.Replace(done, claim.token, RecordState::kProcessing)));
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
absl::StatusOr<Result> Guard::RunUnconfined(StoreTransaction& tx, const Request& request,
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
  IDEM_ASSIGN_OR_RETURN(bool moved, Fault(tx.Replace(done, token, RecordState::kProcessing)));
  if (!moved) return absl::AbortedError("record moved during the handler; roll back");
  return Result{.outcome = Outcome::kExecuted, .value = std::move(done.result), .token = token,
                .expires_at = done.expires_at};
}

}  // namespace idem
