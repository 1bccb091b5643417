#include <atomic>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/absl_compat.h"
#include "core/failpoint.h"
#include "core/step_journal.h"
#include "core/step_runner_impl.h"
#include "idem/key.h"
#include "idem/status.h"
#include "idem/steps.h"
#include "store/backend.h"

namespace idem {

std::string_view StepStatusName(StepStatus status) {
  switch (status) {
    case StepStatus::kPending:
      return "PENDING";
    case StepStatus::kSuccess:
      return "SUCCESS";
    case StepStatus::kFailed:
      return "FAILED";
    case StepStatus::kUnknown:
      return "UNKNOWN";
    case StepStatus::kCompensated:
      return "COMPENSATED";
  }
  return "?";
}

std::string_view OperationStatusName(OperationStatus status) {
  switch (status) {
    case OperationStatus::kPending:
      return "PENDING";
    case OperationStatus::kSuccess:
      return "SUCCESS";
    case OperationStatus::kCompensating:
      return "COMPENSATING";
    case OperationStatus::kCompensated:
      return "COMPENSATED";
    case OperationStatus::kCompensationRequired:
      return "COMPENSATION_REQUIRED";
  }
  return "?";
}

bool IsFinal(OperationStatus status) {
  return status == OperationStatus::kSuccess || status == OperationStatus::kCompensated ||
         status == OperationStatus::kCompensationRequired;
}

const std::string* StepContext::result_of(int step_seq) const {
  if (results_ == nullptr || step_seq < 1 || step_seq > static_cast<int>(results_->size())) {
    return nullptr;
  }
  const std::optional<std::string>& r = (*results_)[step_seq - 1];
  return r.has_value() ? &*r : nullptr;
}

namespace {

using steps::Journal;
using steps::OperationRow;
using steps::StepUpdate;
using steps::Unit;
using steps::UnitKind;

bool IsName(std::string_view s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '.' || c == '-';
    if (!ok) return false;
  }
  return true;
}

absl::Status ValidateJournalKey(std::string_view what, std::string_view key) {
  absl::Status s = ValidateKey(key);
  if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat(AV(what), ": ", s.message()));
  return absl::OkStatus();
}

}  // namespace

StepRunner::StepRunner(Store& store, StepRunnerOptions options)
    : store_(store), options_(options), impl_(std::make_unique<Impl>(*this)) {}

StepRunner::~StepRunner() = default;

absl::Status StepRunner::Register(OperationType type) {
  if (!IsName(type.name)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "operation type name \"", AV(type.name), "\": use 1-64 of [A-Za-z0-9_.-]"));
  }
  if (type.steps.empty() || type.steps.size() > 100) {
    return absl::InvalidArgumentError(absl::StrCat("operation type ", AV(type.name), " has ",
                                                   type.steps.size(), " steps; it needs 1-100"));
  }
  for (size_t i = 0; i < type.steps.size(); ++i) {
    const Step& s = type.steps[i];
    const std::string where = absl::StrCat("operation type ", AV(type.name), ", step ", i + 1);
    if (!IsName(s.name)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": name \"", AV(s.name), "\": use 1-64 of [A-Za-z0-9_.-]"));
    }
    if (!s.execute) return absl::InvalidArgumentError(absl::StrCat(where, ": no execute"));
    if (s.external && !s.query) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, " (", AV(s.name), "): an external step needs query (ask before re-sending)"));
    }
    absl::Status policy = s.retry.Validate();
    if (!policy.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", policy.message()));
    }
  }
  if (impl_->types.contains(type.name)) {
    return absl::AlreadyExistsError(
        absl::StrCat("operation type ", AV(type.name), " is already registered"));
  }
  std::string name = type.name;
  impl_->types.emplace(std::move(name), std::move(type));
  return absl::OkStatus();
}

absl::Status StepRunner::Migrate() { return impl_->Ready().status(); }

StepStats StepRunner::stats() const {
  const Impl::Counters& c = impl_->counters;
  auto get = [](const std::atomic<int64_t>& a) { return a.load(std::memory_order_relaxed); };
  return StepStats{get(c.steps_succeeded),       get(c.step_retries),
                   get(c.steps_unknown),         get(c.queries),
                   get(c.compensations),         get(c.operations_succeeded),
                   get(c.operations_compensated), get(c.operations_compensation_required)};
}

absl::StatusOr<StepRunner::Impl::Taken> StepRunner::Impl::Take(const Journal& j,
                                                               const RunRequest* create,
                                                               std::string_view biz_key) {
  const absl::Time now = Now();
  IDEM_ASSIGN_OR_RETURN(std::unique_ptr<StoreTransaction> tx, store().Begin());
  Taken taken;
  if (create != nullptr) {
    taken.type = &types.find(create->type)->second;
    OperationState fresh;
    fresh.biz_key = create->biz_key;
    fresh.type = create->type;
    fresh.object_key = create->object_key;
    fresh.status = OperationStatus::kPending;
    fresh.input = create->input;
    fresh.next_retry_at = now;
    fresh.created_at = now;
    fresh.updated_at = now;
    for (size_t i = 0; i < taken.type->steps.size(); ++i) {
      StepRecord rec;
      rec.step_seq = static_cast<int>(i + 1);
      rec.name = taken.type->steps[i].name;
      // Persisted with the operation, so it exists before any external call.
      if (taken.type->steps[i].external) rec.request_id = steps::RequestIdFor(fresh.biz_key, rec.step_seq);
      fresh.steps.push_back(std::move(rec));
    }
    IDEM_ASSIGN_OR_RETURN(bool inserted, j.InsertOperation(*tx, fresh, LeaseEnd(now)));
    if (inserted) {
      IDEM_RETURN_IF_ERROR(tx->Commit());
      taken.token = 1;
      return taken;
    }
  }
  IDEM_ASSIGN_OR_RETURN(std::optional<OperationRow> row, j.LoadOperation(*tx, biz_key));
  if (!row.has_value()) {
    return absl::NotFoundError(absl::StrCat("no operation with biz_key ", AV(biz_key)));
  }
  OperationState& op = row->state;
  if (create != nullptr) {
    std::string_view differs;
    if (op.type != create->type) {
      differs = "type";
    } else if (op.input != create->input) {
      differs = "input";
    } else if (op.object_key != create->object_key) {
      differs = "object_key";
    }
    if (!differs.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "operation ", AV(biz_key), " exists with another ", AV(differs), " (type ",
          AV(op.type), "); a biz_key names one operation"));
    }
  } else {
    auto it = types.find(op.type);
    if (it == types.end()) {
      return absl::NotFoundError(absl::StrCat("operation ", AV(biz_key), " has type ",
                                              AV(op.type), ", which is not registered here"));
    }
    taken.type = &it->second;
  }
  if (IsFinal(op.status) || op.lease_until > now) {
    IDEM_ASSIGN_OR_RETURN(op.steps, j.LoadSteps(*tx, biz_key, nullptr));
    tx->Rollback();
    op.busy = !IsFinal(op.status);
    taken.answer = std::move(op);
    return taken;
  }
  IDEM_ASSIGN_OR_RETURN(bool moved, j.TakeLease(*tx, biz_key, row->lease_token,
                                                row->lease_token + 1, LeaseEnd(now), now));
  if (!moved) return absl::AbortedError(absl::StrCat("operation ", AV(biz_key), " changed hands"));
  IDEM_RETURN_IF_ERROR(tx->Commit());
  taken.token = row->lease_token + 1;
  return taken;
}

absl::StatusOr<OperationState> StepRunner::Run(const RunRequest& request) {
  IDEM_RETURN_IF_ERROR(ValidateJournalKey("biz_key", request.biz_key));
  if (!request.object_key.empty()) {
    IDEM_RETURN_IF_ERROR(ValidateJournalKey("object_key", request.object_key));
  }
  if (!impl_->types.contains(request.type)) {
    return absl::NotFoundError(
        absl::StrCat("operation type ", AV(request.type), " is not registered"));
  }
  IDEM_ASSIGN_OR_RETURN(const Journal* j, impl_->Ready());
  IDEM_ASSIGN_OR_RETURN(Impl::Taken taken, impl_->Take(*j, &request, request.biz_key));
  if (taken.answer.has_value()) return std::move(*taken.answer);
  return impl_->Drive(*j, *taken.type, request.biz_key, taken.token, options_.wait_for_retries);
}

absl::StatusOr<OperationState> StepRunner::Resume(std::string_view biz_key) {
  IDEM_RETURN_IF_ERROR(ValidateJournalKey("biz_key", biz_key));
  IDEM_ASSIGN_OR_RETURN(const Journal* j, impl_->Ready());
  IDEM_ASSIGN_OR_RETURN(Impl::Taken taken, impl_->Take(*j, nullptr, biz_key));
  if (taken.answer.has_value()) return std::move(*taken.answer);
  return impl_->Drive(*j, *taken.type, std::string(biz_key), taken.token, /*wait=*/false);
}

absl::StatusOr<int> StepRunner::ResumeDue(int limit) {
  if (limit < 1) return absl::InvalidArgumentError("ResumeDue: limit must be at least 1");
  IDEM_ASSIGN_OR_RETURN(const Journal* j, impl_->Ready());
  std::vector<std::string> names;
  for (const auto& [name, type] : impl_->types) names.push_back(name);
  if (names.empty()) return 0;
  const absl::Time now = impl_->Now();
  std::vector<std::pair<std::string, int64_t>> taken;
  {
    IDEM_ASSIGN_OR_RETURN(std::unique_ptr<StoreTransaction> tx, store_.Begin());
    IDEM_ASSIGN_OR_RETURN(std::vector<OperationRow> due, j->SelectDue(*tx, names, now, limit));
    for (const OperationRow& row : due) {
      IDEM_ASSIGN_OR_RETURN(bool moved,
                            j->TakeLease(*tx, row.state.biz_key, row.lease_token,
                                         row.lease_token + 1, impl_->LeaseEnd(now), now));
      if (moved) taken.emplace_back(row.state.biz_key, row.lease_token + 1);
    }
    IDEM_RETURN_IF_ERROR(tx->Commit());
  }
  int resumed = 0;
  absl::Status first_unavailable;
  for (const auto& [biz_key, token] : taken) {
    absl::StatusOr<OperationState> op = impl_->Load(*j, biz_key);
    if (!op.ok()) {
      if (absl::IsUnavailable(op.status()) && first_unavailable.ok()) first_unavailable = op.status();
      continue;
    }
    absl::StatusOr<OperationState> done =
        impl_->Drive(*j, impl_->types.find(op->type)->second, biz_key, token, /*wait=*/false);
    // One operation's trouble must not stop the pass; its lease ends and a later
    // pass retries it. A store outage is reported to the caller.
    if (done.ok()) {
      ++resumed;
    } else if (absl::IsUnavailable(done.status()) && first_unavailable.ok()) {
      first_unavailable = done.status();
    }
  }
  if (resumed == 0 && !first_unavailable.ok()) return first_unavailable;
  return resumed;
}

absl::StatusOr<OperationState> StepRunner::Resolve(std::string_view biz_key,
                                                  std::string_view note) {
  IDEM_RETURN_IF_ERROR(ValidateJournalKey("biz_key", biz_key));
  if (note.empty()) {
    return absl::InvalidArgumentError("resolve: say what was done (a note is required)");
  }
  IDEM_ASSIGN_OR_RETURN(const Journal* j, impl_->Ready());
  const absl::Time now = impl_->Now();
  {
    IDEM_ASSIGN_OR_RETURN(std::unique_ptr<StoreTransaction> tx, store_.Begin());
    IDEM_ASSIGN_OR_RETURN(std::optional<OperationRow> row, j->LoadOperation(*tx, biz_key));
    if (!row.has_value()) {
      return absl::NotFoundError(absl::StrCat("no operation with biz_key ", AV(biz_key)));
    }
    const OperationState& op = row->state;
    if (op.status != OperationStatus::kCompensationRequired) {
      return absl::FailedPreconditionError(absl::StrCat(
          "operation ", AV(biz_key), " is ", AV(OperationStatusName(op.status)),
          "; only a COMPENSATION_REQUIRED operation is resolved by hand"));
    }
    IDEM_RETURN_IF_ERROR(j->UpdateOperation(
        *tx, biz_key, OperationStatus::kCompensated, absl::InfinitePast(), "",
        absl::StrCat("resolved by hand: ", AV(note), " (was: ", AV(op.last_error), ")"), now));
    if (!op.object_key.empty()) IDEM_RETURN_IF_ERROR(j->UnlockObject(*tx, op.object_key, biz_key));
    IDEM_RETURN_IF_ERROR(tx->Commit());
  }
  return impl_->Load(*j, biz_key);
}

absl::StatusOr<OperationState> StepRunner::Get(std::string_view biz_key) {
  IDEM_ASSIGN_OR_RETURN(const Journal* j, impl_->Ready());
  return impl_->Load(*j, biz_key);
}

std::string StuckReason(const OperationState& op, absl::Time now) {
  if (op.status == OperationStatus::kCompensationRequired) return "compensation required";
  for (const StepRecord& s : op.steps) {
    if (s.status == StepStatus::kUnknown) return absl::StrCat("step ", s.step_seq, " outcome unknown");
  }
  if (!op.blocked_by.empty()) return "waiting for object lock held by " + op.blocked_by;
  if (op.next_retry_at <= now) return "due, no runner";
  return "waiting";
}

absl::StatusOr<std::vector<OperationState>> StepRunner::ListStuck(int limit) {
  if (limit < 1) return absl::InvalidArgumentError("ListStuck: limit must be at least 1");
  IDEM_ASSIGN_OR_RETURN(const Journal* j, impl_->Ready());
  IDEM_ASSIGN_OR_RETURN(std::unique_ptr<StoreTransaction> tx, store_.Begin());
  IDEM_ASSIGN_OR_RETURN(std::vector<OperationRow> rows, j->SelectStuck(*tx, impl_->Now(), limit));
  std::vector<OperationState> out;
  for (OperationRow& row : rows) {
    IDEM_ASSIGN_OR_RETURN(row.state.steps, j->LoadSteps(*tx, row.state.biz_key, nullptr));
    out.push_back(std::move(row.state));
  }
  tx->Rollback();
  return out;
}

absl::StatusOr<OperationState> StepRunner::Impl::Drive(const Journal& j, const OperationType& type,
                                                       const std::string& biz_key, int64_t token,
                                                       bool wait) {
  absl::Time lock_wait_started = absl::InfinitePast();
  for (;;) {
    IDEM_ASSIGN_OR_RETURN(Unit unit, RunUnit(j, type, biz_key, token));
    if (unit.kind == UnitKind::kDone) break;
    if (unit.kind == UnitKind::kContinue) {
      lock_wait_started = absl::InfinitePast();
      continue;
    }
    absl::Time now = Now();
    bool keep_waiting = wait;
    if (wait && unit.lock_wait) {
      if (lock_wait_started == absl::InfinitePast()) lock_wait_started = now;
      keep_waiting = now - lock_wait_started < runner.options_.lock_wait;
    }
    IDEM_ASSIGN_OR_RETURN(std::unique_ptr<StoreTransaction> tx, store().Begin());
    // Waiting here: hold the lease past the wake-up. Not waiting: end it, so a
    // Worker may resume the operation at next_retry_at.
    const absl::Time lease_until =
        keep_waiting ? std::max(unit.until, now) + runner.options_.lease : absl::InfinitePast();
    IDEM_ASSIGN_OR_RETURN(bool held, j.RenewLease(*tx, biz_key, token, lease_until, now));
    if (!held) {
      return absl::AbortedError(absl::StrCat("operation ", AV(biz_key),
                                             ": lease lost (another runner took it over)"));
    }
    IDEM_RETURN_IF_ERROR(tx->Commit());
    if (!keep_waiting) break;
    if (unit.until > now) clock().SleepFor(unit.until - now);
  }
  return Load(j, biz_key);
}

absl::StatusOr<Unit> StepRunner::Impl::RunUnit(const Journal& j, const OperationType& type,
                                               const std::string& biz_key, int64_t token) {
  const absl::Time now = Now();
  IDEM_ASSIGN_OR_RETURN(std::unique_ptr<StoreTransaction> tx, store().Begin());
  IDEM_RETURN_IF_ERROR(Fence(j, *tx, biz_key, token, now));
  std::vector<int> comp;
  IDEM_ASSIGN_OR_RETURN(std::optional<OperationRow> row,
                        j.LoadJournal(*tx, biz_key, /*for_update=*/true, &comp));
  if (!row.has_value()) {
    return absl::DataLossError(absl::StrCat("operation ", AV(biz_key), " vanished while running"));
  }
  OperationState& op = row->state;
  std::vector<StepRecord> steps = std::move(op.steps);
  op.steps.clear();
  // A step's journal row (its status, request_id) belongs to that step only: a
  // type whose step list changed under open operations must not run them.
  bool same_steps = steps.size() == type.steps.size();
  for (size_t i = 0; same_steps && i < steps.size(); ++i) {
    same_steps = steps[i].name == type.steps[i].name;
  }
  if (!same_steps) {
    std::string journal_names, type_names;
    for (const StepRecord& s : steps) absl::StrAppend(&journal_names, journal_names.empty() ? "" : ", ", s.name);
    for (const Step& s : type.steps) absl::StrAppend(&type_names, type_names.empty() ? "" : ", ", s.name);
    return absl::FailedPreconditionError(absl::StrCat(
        "operation ", AV(biz_key), " was journaled with steps [", journal_names, "] but type ",
        AV(type.name), " now declares [", type_names,
        "]; a type's steps must not change while operations of it are open (register the new "
        "list under a new type name)"));
  }
  if (IsFinal(op.status)) {
    tx->Rollback();
    return Unit{UnitKind::kDone};
  }
  if (!op.object_key.empty()) {
    IDEM_ASSIGN_OR_RETURN(std::string holder, j.LockObject(*tx, op.object_key, biz_key, now));
    if (holder != biz_key) {
      const absl::Time next = now + runner.options_.lock_retry;
      IDEM_RETURN_IF_ERROR(j.UpdateOperation(
          *tx, biz_key, op.status, next, holder,
          absl::StrCat("waiting for the lock of object ", AV(op.object_key), " held by ",
                       AV(holder)),
          now));
      IDEM_RETURN_IF_ERROR(tx->Commit());
      return Unit{UnitKind::kWait, next, /*lock_wait=*/true};
    }
    if (!op.blocked_by.empty()) {
      IDEM_RETURN_IF_ERROR(
          j.UpdateOperation(*tx, biz_key, op.status, op.next_retry_at, "", "", now));
      op.blocked_by.clear();
    }
  }
  if (op.status == OperationStatus::kPending) {
    return Forward(j, type, std::move(tx), op, steps, comp, token, now);
  }
  return Compensate(j, type, std::move(tx), op, steps, comp, token, now);
}

absl::StatusOr<Unit> StepRunner::Impl::Finish(const Journal& j, StoreTransaction& tx,
                                              const OperationState& op, OperationStatus status,
                                              std::string_view last_error, absl::Time now) {
  IDEM_RETURN_IF_ERROR(
      j.UpdateOperation(tx, op.biz_key, status, absl::InfinitePast(), "", last_error, now));
  // A half-undone operation keeps its object locked until a person resolves it
  // (Resolve): an order change must not run over a refund nobody has settled.
  if (!op.object_key.empty() && status != OperationStatus::kCompensationRequired) {
    IDEM_RETURN_IF_ERROR(j.UnlockObject(tx, op.object_key, op.biz_key));
  }
  IDEM_RETURN_IF_ERROR(tx.Commit());
  switch (status) {
    case OperationStatus::kSuccess:
      Bump(counters.operations_succeeded);
      break;
    case OperationStatus::kCompensated:
      Bump(counters.operations_compensated);
      break;
    case OperationStatus::kCompensationRequired:
      Bump(counters.operations_compensation_required);
      break;
    default:
      break;
  }
  return Unit{UnitKind::kDone};
}

}  // namespace idem
