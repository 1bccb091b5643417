// The step runner running an operation's steps forward, and what a failed step
// leaves: a retry later, or compensation (step_compensation.cc).
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/absl_compat.h"
#include "core/failpoint.h"
#include "core/step_journal.h"
#include "core/step_runner_impl.h"
#include "idem/retry.h"
#include "idem/status.h"
#include "idem/steps.h"

namespace idem {
namespace {

using steps::Journal;
using steps::ResultsOf;
using steps::StepUpdate;
using steps::Unit;
using steps::UnitKind;
using steps::UpdateFrom;

}  // namespace

absl::StatusOr<Unit> StepRunner::Impl::Forward(const Journal& j, const OperationType& type,
                                               std::unique_ptr<StoreTransaction> tx,
                                               OperationState& op, std::vector<StepRecord>& steps,
                                               const std::vector<int>& comp, int64_t token,
                                               absl::Time now) {
  size_t idx = 0;
  while (idx < steps.size() && steps[idx].status == StepStatus::kSuccess) ++idx;
  if (idx == steps.size()) return Finish(j, *tx, op, OperationStatus::kSuccess, "", now);
  const StepRecord& rec = steps[idx];
  const Step& def = type.steps[idx];
  if (rec.next_retry_at > now) {
    IDEM_RETURN_IF_ERROR(tx->Commit());  // the lease renewal
    return Unit{UnitKind::kWait, rec.next_retry_at};
  }
  const std::vector<std::optional<std::string>> results = ResultsOf(steps);
  auto success = [&](StoreTransaction& t, std::string payload) -> absl::StatusOr<bool> {
    StepUpdate u = UpdateFrom(rec, comp[idx]);
    u.status = StepStatus::kSuccess;
    u.payload = std::move(payload);
    u.last_error.clear();
    return j.UpdateStep(t, op.biz_key, u, {StepStatus::kSuccess}, Now());
  };

  if (!def.external) {
    StepContext ctx =
        StepContextBuilder::Make(op, rec, rec.retry_count + 1, &results, tx.get(), "");
    IDEM_FAILPOINT("steps.before_call");
    absl::StatusOr<std::string> r = def.execute(ctx);
    IDEM_FAILPOINT("steps.after_call");
    absl::Status s = r.status();
    if (s.ok()) {
      absl::StatusOr<bool> wrote = success(*tx, *std::move(r));
      s = wrote.ok() ? tx->Commit() : wrote.status();
      if (s.ok()) {
        Bump(counters.steps_succeeded);
        IDEM_FAILPOINT("steps.after_journal");
        return Unit{UnitKind::kContinue};
      }
    }
    tx->Rollback();  // the step's own writes go with it
    return StepFailed(j, def, op, rec, comp[idx], token, s, /*unknown=*/false);
  }

  // External: never hold a transaction across the call.
  StepContext ctx = StepContextBuilder::Make(op, rec, rec.retry_count + 1, &results, nullptr, "");
  const bool may_have_been_sent = rec.status != StepStatus::kPending || rec.retry_count > 0;
  if (may_have_been_sent) {
    IDEM_RETURN_IF_ERROR(tx->Commit());
    Bump(counters.queries);
    absl::StatusOr<QueryResult> q = def.query(ctx);
    if (q.ok() && q->answer == QueryAnswer::kDone) {
      IDEM_ASSIGN_OR_RETURN(tx, store().Begin());
      IDEM_RETURN_IF_ERROR(Fence(j, *tx, op.biz_key, token, Now()));
      IDEM_RETURN_IF_ERROR(success(*tx, std::move(q->payload)).status());
      IDEM_RETURN_IF_ERROR(tx->Commit());
      Bump(counters.steps_succeeded);
      return Unit{UnitKind::kContinue};
    }
    if (!q.ok() || q->answer != QueryAnswer::kNotFound) {
      absl::Status why =
          q.ok() ? absl::UnavailableError(absl::StrCat("query(", AV(ctx.request_id()),
                                                       ") could not tell whether it happened"))
                 : absl::UnavailableError(absl::StrCat("query(", AV(ctx.request_id()),
                                                       ") failed: ", q.status().message()));
      return StepFailed(j, def, op, rec, comp[idx], token, why, /*unknown=*/true);
    }
    IDEM_ASSIGN_OR_RETURN(tx, store().Begin());
    IDEM_RETURN_IF_ERROR(Fence(j, *tx, op.biz_key, token, Now()));
  }
  // In flight: from here until the answer is journaled the outcome is unknown.
  StepUpdate sending = UpdateFrom(rec, comp[idx]);
  sending.status = StepStatus::kUnknown;
  IDEM_RETURN_IF_ERROR(
      j.UpdateStep(*tx, op.biz_key, sending, {StepStatus::kSuccess}, Now()).status());
  IDEM_RETURN_IF_ERROR(tx->Commit());
  IDEM_FAILPOINT("steps.before_call");
  absl::StatusOr<std::string> r = def.execute(ctx);
  IDEM_FAILPOINT("steps.after_call");
  if (!r.ok()) {
    const bool unobserved = absl::IsDeadlineExceeded(r.status()) || absl::IsUnavailable(r.status());
    StepRecord sent = rec;
    sent.status = StepStatus::kUnknown;
    return StepFailed(j, def, op, sent, comp[idx], token, r.status(), unobserved);
  }
  IDEM_ASSIGN_OR_RETURN(tx, store().Begin());
  IDEM_RETURN_IF_ERROR(Fence(j, *tx, op.biz_key, token, Now()));
  IDEM_RETURN_IF_ERROR(success(*tx, *std::move(r)).status());
  IDEM_RETURN_IF_ERROR(tx->Commit());
  Bump(counters.steps_succeeded);
  IDEM_FAILPOINT("steps.after_journal");
  return Unit{UnitKind::kContinue};
}

absl::StatusOr<Unit> StepRunner::Impl::StepFailed(const Journal& j, const Step& def,
                                                  const OperationState& op, const StepRecord& rec,
                                                  int comp_failures, int64_t token,
                                                  const absl::Status& error, bool unknown) {
  const absl::Time now = Now();
  const int attempts = rec.retry_count + 1;
  const std::string message =
      absl::StrCat("step ", rec.step_seq, " (", AV(rec.name), ") attempt ", attempts, ": ",
                   absl::StatusCodeToString(error.code()), ": ", error.message());
  IDEM_ASSIGN_OR_RETURN(std::unique_ptr<StoreTransaction> tx, store().Begin());
  IDEM_RETURN_IF_ERROR(Fence(j, *tx, op.biz_key, token, now));
  StepUpdate u = UpdateFrom(rec, comp_failures);
  u.status = unknown ? StepStatus::kUnknown : StepStatus::kFailed;
  u.retry_count = attempts;
  u.last_error = message;
  // A store fault (a missing table, a read-only or lost database) is not the
  // step's failure: retry it, and past the budget escalate to a person, as for an
  // unobserved outcome; never compensate because of it (that would undo a real
  // effect, e.g. cancel a refund that went through, for a broken database).
  const bool store_fault = IsStoreFault(error);
  // An unobserved outcome is always worth another look (a query), until attempts run out.
  const bool again = (unknown || store_fault || ClassifyStatus(error) == RetryClass::kRetryable) &&
                     attempts < def.retry.max_attempts;
  if (again) u.next_retry_at = now + def.retry.Backoff(rec.retry_count, *runner.options_.random);
  // A commit whose outcome was unknown may have made the step SUCCESS: keep that.
  IDEM_ASSIGN_OR_RETURN(bool wrote, j.UpdateStep(*tx, op.biz_key, u, {StepStatus::kSuccess}, now));
  if (!wrote) {
    IDEM_RETURN_IF_ERROR(tx->Commit());
    return Unit{UnitKind::kContinue};
  }
  if (unknown) Bump(counters.steps_unknown);
  if (again) {
    IDEM_RETURN_IF_ERROR(j.UpdateOperation(*tx, op.biz_key, OperationStatus::kPending,
                                           u.next_retry_at, "", message, now));
    IDEM_RETURN_IF_ERROR(tx->Commit());
    Bump(counters.step_retries);
    return Unit{UnitKind::kWait, u.next_retry_at};
  }
  if (store_fault) {
    return Finish(j, *tx, op, OperationStatus::kCompensationRequired,
                  absl::StrCat(message,
                               " (a store error past the retry budget: nothing was "
                               "compensated; fix the store, then settle the "
                               "operation by hand)"),
                  now);
  }
  IDEM_RETURN_IF_ERROR(
      j.UpdateOperation(*tx, op.biz_key, OperationStatus::kCompensating, now, "", message, now));
  IDEM_RETURN_IF_ERROR(tx->Commit());
  return Unit{UnitKind::kContinue};
}

}  // namespace idem
