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

struct StepContextBuilder {
  static StepContext Make(const OperationState& op, const StepRecord& rec, int attempt,
                          const std::vector<std::optional<std::string>>* results,
                          Transaction* tx, std::string_view payload) {
    StepContext c;
    c.biz_key_ = op.biz_key;
    c.step_seq_ = rec.step_seq;
    c.request_id_ = rec.request_id.empty() ? steps::RequestIdFor(op.biz_key, rec.step_seq)
                                           : rec.request_id;
    c.input_ = op.input;
    c.attempt_ = attempt;
    c.payload_ = std::string(payload);
    c.results_ = results;
    c.tx_ = tx;
    return c;
  }
};

namespace {

using steps::Journal;
using steps::OperationRow;
using steps::StepUpdate;

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

enum class UnitKind { kContinue, kWait, kDone };
struct Unit {
  UnitKind kind = UnitKind::kContinue;
  absl::Time until = absl::InfinitePast();
  bool lock_wait = false;
};

}  // namespace

struct StepRunner::Impl {
  explicit Impl(StepRunner& r) : runner(r) {}

  StepRunner& runner;
  std::map<std::string, OperationType, std::less<>> types;
  struct Counters {
    std::atomic<int64_t> steps_succeeded{0}, step_retries{0}, steps_unknown{0}, queries{0},
        compensations{0}, operations_succeeded{0}, operations_compensated{0},
        operations_compensation_required{0};
  } counters;
  static void Bump(std::atomic<int64_t>& c) { c.fetch_add(1, std::memory_order_relaxed); }
  absl::Mutex mu;
  std::optional<Journal> journal ABSL_GUARDED_BY(mu);

  const Clock& clock() const { return *runner.options_.clock; }
  Store& store() const { return runner.store_; }
  absl::Time Now() const { return clock().Now(); }
  absl::Time LeaseEnd(absl::Time now) const { return now + runner.options_.lease; }

  // The journal, created on first use.
  absl::StatusOr<const Journal*> Ready() {
    absl::MutexLock lock(&mu);
    if (journal.has_value()) return &*journal;
    IDEM_ASSIGN_OR_RETURN(const SqlDialect* dialect, steps::DialectOf(store()));
    Journal j(*dialect);
    // A read-only store (inspection tools) must not get the journal's tables made.
    IDEM_RETURN_IF_ERROR(Backend(store()).read_only() ? j.Check(store()) : j.Migrate(store()));
    journal.emplace(j);
    return &*journal;
  }

  // Every write of a runner starts here: extend the lease while `token` holds it.
  absl::Status Fence(const Journal& j, Transaction& tx, std::string_view biz_key, int64_t token,
                     absl::Time now) {
    IDEM_ASSIGN_OR_RETURN(bool held, j.RenewLease(tx, biz_key, token, LeaseEnd(now), now));
    if (!held) {
      return absl::AbortedError(absl::StrCat("operation ", AV(biz_key),
                                             ": lease lost (another runner took it over)"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<OperationState> Load(const Journal& j, std::string_view biz_key) {
    IDEM_ASSIGN_OR_RETURN(std::unique_ptr<StoreTransaction> tx, store().Begin());
    IDEM_ASSIGN_OR_RETURN(std::optional<OperationRow> row,
                          j.LoadJournal(*tx, biz_key, /*for_update=*/false, nullptr));
    if (!row.has_value()) {
      return absl::NotFoundError(absl::StrCat("no operation with biz_key ", AV(biz_key)));
    }
    tx->Rollback();
    return std::move(row->state);
  }

  // Takes the operation for this runner, or says why not. Returns the new lease
  // token, or the state to answer with (final, or busy).
  struct Taken {
    int64_t token = 0;
    std::optional<OperationState> answer;
    const OperationType* type = nullptr;
  };
  absl::StatusOr<Taken> Take(const Journal& j, const RunRequest* create, std::string_view biz_key);

  absl::StatusOr<OperationState> Drive(const Journal& j, const OperationType& type,
                                       const std::string& biz_key, int64_t token, bool wait);
  absl::StatusOr<Unit> RunUnit(const Journal& j, const OperationType& type,
                               const std::string& biz_key, int64_t token);
  absl::StatusOr<Unit> Forward(const Journal& j, const OperationType& type,
                               std::unique_ptr<StoreTransaction> tx, OperationState& op,
                               std::vector<StepRecord>& steps, const std::vector<int>& comp,
                               int64_t token, absl::Time now);
  absl::StatusOr<Unit> Compensate(const Journal& j, const OperationType& type,
                                  std::unique_ptr<StoreTransaction> tx, OperationState& op,
                                  std::vector<StepRecord>& steps, const std::vector<int>& comp,
                                  int64_t token, absl::Time now);
  absl::StatusOr<Unit> StepFailed(const Journal& j, const Step& def, const OperationState& op,
                                  const StepRecord& rec, int comp_failures, int64_t token,
                                  const absl::Status& error, bool unknown);
  absl::StatusOr<Unit> CompensationFailed(const Journal& j, const Step& def,
                                          const OperationState& op, const StepRecord& rec,
                                          int comp_failures, int64_t token,
                                          const absl::Status& error);
  absl::StatusOr<Unit> Finish(const Journal& j, StoreTransaction& tx, const OperationState& op,
                              OperationStatus status, std::string_view last_error, absl::Time now);
};

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

namespace {
std::vector<std::optional<std::string>> ResultsOf(const std::vector<StepRecord>& steps) {
  std::vector<std::optional<std::string>> out;
  for (const StepRecord& s : steps) {
    out.push_back(s.status == StepStatus::kSuccess ? std::optional<std::string>(s.payload)
                                                   : std::nullopt);
  }
  return out;
}

StepUpdate UpdateFrom(const StepRecord& rec, int comp_failures) {
  StepUpdate u;
  u.step_seq = rec.step_seq;
  u.status = rec.status;
  u.retry_count = rec.retry_count;
  u.compensate_failures = comp_failures;
  u.next_retry_at = absl::InfinitePast();
  u.last_error = rec.last_error;
  return u;
}
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
  IDEM_RETURN_IF_ERROR(j.UpdateStep(*tx, op.biz_key, sending, {StepStatus::kSuccess}, Now()).status());
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
  const bool again =
      (unknown || store_fault || ClassifyStatus(error) == RetryClass::kRetryable) &&
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
                  absl::StrCat(message, " (a store error past the retry budget: nothing was "
                                        "compensated; fix the store, then settle the "
                                        "operation by hand)"),
                  now);
  }
  IDEM_RETURN_IF_ERROR(j.UpdateOperation(*tx, op.biz_key, OperationStatus::kCompensating, now, "",
                                         message, now));
  IDEM_RETURN_IF_ERROR(tx->Commit());
  return Unit{UnitKind::kContinue};
}

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
  StepContext ctx = StepContextBuilder::Make(op, rec, comp[idx] + 1, &results, nullptr, rec.payload);
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
                                                          const StepRecord& rec,
                                                          int comp_failures, int64_t token,
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
