// The step runner undoing the steps that happened, last first, once an operation
// cannot go forward; a compensation that keeps failing leaves the operation
// COMPENSATION_REQUIRED.
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

absl::StatusOr<Unit> StepRunner::Impl::Compensate(const Journal& j, const OperationType& type,
                                                  std::unique_ptr<StoreTransaction> tx,
                                                  OperationState& op,
                                                  std::vector<StepRecord>& steps,
                                                  const std::vector<int>& comp, int64_t token,
                                                  absl::Time now) {
  int idx = static_cast<int>(steps.size()) - 1;
  for (; idx >= 0; --idx) {
    const StepRecord& rec = steps[idx];
    const Step& def = type.steps[idx];
    if (rec.status == StepStatus::kUnknown && !def.compensate) {
      return Finish(j, *tx, op, OperationStatus::kCompensationRequired,
                    absl::StrCat("step ", rec.step_seq, " (", AV(rec.name),
                                 ") may have happened (UNKNOWN) and has no compensate; "
                                 "check request_id ",
                                 AV(rec.request_id), " by hand"),
                    now);
    }
    if ((rec.status == StepStatus::kSuccess || rec.status == StepStatus::kUnknown) &&
        def.compensate) {
      break;
    }
  }
  if (idx < 0) return Finish(j, *tx, op, OperationStatus::kCompensated, op.last_error, now);
  const StepRecord& rec = steps[idx];
  const Step& def = type.steps[idx];
  if (rec.next_retry_at > now) {
    IDEM_RETURN_IF_ERROR(tx->Commit());
    return Unit{UnitKind::kWait, rec.next_retry_at};
  }
  const std::vector<std::optional<std::string>> results = ResultsOf(steps);
  auto compensated = [&](StoreTransaction& t) -> absl::Status {
    StepUpdate u = UpdateFrom(rec, comp[idx]);
    u.status = StepStatus::kCompensated;
    return j.UpdateStep(t, op.biz_key, u, {StepStatus::kCompensated}, Now()).status();
  };
  if (!def.external) {
    StepContext ctx =
        StepContextBuilder::Make(op, rec, comp[idx] + 1, &results, tx.get(), rec.payload);
    IDEM_FAILPOINT("steps.before_compensate");
    absl::Status s = def.compensate(ctx);
    if (s.ok()) s = compensated(*tx);
    if (s.ok()) s = tx->Commit();
    if (s.ok()) {
      Bump(counters.compensations);
      IDEM_FAILPOINT("steps.after_compensate");
      return Unit{UnitKind::kContinue};
    }
    tx->Rollback();
    return CompensationFailed(j, def, op, rec, comp[idx], token, s);
  }
  IDEM_RETURN_IF_ERROR(tx->Commit());
  StepContext ctx =
      StepContextBuilder::Make(op, rec, comp[idx] + 1, &results, nullptr, rec.payload);
  IDEM_FAILPOINT("steps.before_compensate");
  absl::Status s = def.compensate(ctx);
  IDEM_FAILPOINT("steps.after_compensate_call");
  if (!s.ok()) return CompensationFailed(j, def, op, rec, comp[idx], token, s);
  IDEM_ASSIGN_OR_RETURN(tx, store().Begin());
  IDEM_RETURN_IF_ERROR(Fence(j, *tx, op.biz_key, token, Now()));
  IDEM_RETURN_IF_ERROR(compensated(*tx));
  IDEM_RETURN_IF_ERROR(tx->Commit());
  Bump(counters.compensations);
  IDEM_FAILPOINT("steps.after_compensate");
  return Unit{UnitKind::kContinue};
}

absl::StatusOr<Unit> StepRunner::Impl::CompensationFailed(const Journal& j, const Step& def,
                                                          const OperationState& op,
                                                          const StepRecord& rec, int comp_failures,
                                                          int64_t token,
                                                          const absl::Status& error) {
  const absl::Time now = Now();
  const int attempts = comp_failures + 1;
  const std::string message =
      absl::StrCat("compensating step ", rec.step_seq, " (", AV(rec.name), ") attempt ", attempts,
                   ": ", absl::StatusCodeToString(error.code()), ": ", error.message());
  IDEM_ASSIGN_OR_RETURN(std::unique_ptr<StoreTransaction> tx, store().Begin());
  IDEM_RETURN_IF_ERROR(Fence(j, *tx, op.biz_key, token, now));
  StepUpdate u = UpdateFrom(rec, attempts);
  u.retry_count = rec.retry_count + 1;
  u.last_error = message;
  const bool again =
      ClassifyStatus(error) == RetryClass::kRetryable && attempts < def.retry.max_attempts;
  if (again) u.next_retry_at = now + def.retry.Backoff(comp_failures, *runner.options_.random);
  IDEM_ASSIGN_OR_RETURN(bool wrote,
                        j.UpdateStep(*tx, op.biz_key, u, {StepStatus::kCompensated}, now));
  if (!wrote) {
    IDEM_RETURN_IF_ERROR(tx->Commit());
    return Unit{UnitKind::kContinue};
  }
  if (again) {
    IDEM_RETURN_IF_ERROR(j.UpdateOperation(*tx, op.biz_key, OperationStatus::kCompensating,
                                           u.next_retry_at, "", message, now));
    IDEM_RETURN_IF_ERROR(tx->Commit());
    Bump(counters.step_retries);
    return Unit{UnitKind::kWait, u.next_retry_at};
  }
  return Finish(j, *tx, op, OperationStatus::kCompensationRequired, message, now);
}

}  // namespace idem
