// The step runner's internals (include/idem/steps.h), shared by its files:
// step_runner.cc (the API; taking, driving and finishing an operation),
// step_forward.cc (running the steps forward) and step_compensation.cc (undoing the
// steps that happened, last first). Not part of the library's API.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/absl_compat.h"
#include "core/step_journal.h"
#include "idem/status.h"
#include "idem/steps.h"
#include "store/backend.h"

namespace idem {

struct StepContextBuilder {
  static StepContext Make(const OperationState& op, const StepRecord& rec, int attempt,
                          const std::vector<std::optional<std::string>>* results, Transaction* tx,
                          std::string_view payload) {
    StepContext c;
    c.biz_key_ = op.biz_key;
    c.step_seq_ = rec.step_seq;
    c.request_id_ =
        rec.request_id.empty() ? steps::RequestIdFor(op.biz_key, rec.step_seq) : rec.request_id;
    c.input_ = op.input;
    c.attempt_ = attempt;
    c.payload_ = std::string(payload);
    c.results_ = results;
    c.tx_ = tx;
    return c;
  }
};

namespace steps {

// What one unit of a runner's work (a transaction on the journal) left to do next:
// go on, wait until `until` (lock_wait: for another runner's lease), or nothing.
enum class UnitKind { kContinue, kWait, kDone };
struct Unit {
  UnitKind kind = UnitKind::kContinue;
  absl::Time until = absl::InfinitePast();
  bool lock_wait = false;
};

// The results of the steps that succeeded, by step_seq - 1 (StepContext::result_of).
inline std::vector<std::optional<std::string>> ResultsOf(const std::vector<StepRecord>& steps) {
  std::vector<std::optional<std::string>> out;
  for (const StepRecord& s : steps) {
    out.push_back(s.status == StepStatus::kSuccess ? std::optional<std::string>(s.payload)
                                                   : std::nullopt);
  }
  return out;
}

// The journal update that writes `rec` back as it is, with `comp_failures` failed
// compensations and no retry time.
inline StepUpdate UpdateFrom(const StepRecord& rec, int comp_failures) {
  StepUpdate u;
  u.step_seq = rec.step_seq;
  u.status = rec.status;
  u.retry_count = rec.retry_count;
  u.compensate_failures = comp_failures;
  u.next_retry_at = absl::InfinitePast();
  u.last_error = rec.last_error;
  return u;
}

}  // namespace steps

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
  std::optional<steps::Journal> journal ABSL_GUARDED_BY(mu);

  const Clock& clock() const { return *runner.options_.clock; }
  Store& store() const { return runner.store_; }
  absl::Time Now() const { return clock().Now(); }
  absl::Time LeaseEnd(absl::Time now) const { return now + runner.options_.lease; }

  // The journal, created on first use.
  absl::StatusOr<const steps::Journal*> Ready() {
    absl::MutexLock lock(&mu);
    if (journal.has_value()) return &*journal;
    IDEM_ASSIGN_OR_RETURN(const SqlDialect* dialect, steps::DialectOf(store()));
    steps::Journal j(*dialect);
    // A read-only store (inspection tools) must not get the journal's tables made.
    IDEM_RETURN_IF_ERROR(Backend(store()).read_only() ? j.Check(store()) : j.Migrate(store()));
    journal.emplace(j);
    return &*journal;
  }

  // Every write of a runner starts here: extend the lease while `token` holds it.
  absl::Status Fence(const steps::Journal& j, Transaction& tx, std::string_view biz_key,
                     int64_t token, absl::Time now) {
    IDEM_ASSIGN_OR_RETURN(bool held, j.RenewLease(tx, biz_key, token, LeaseEnd(now), now));
    if (!held) {
      return absl::AbortedError(
          absl::StrCat("operation ", AV(biz_key), ": lease lost (another runner took it over)"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<OperationState> Load(const steps::Journal& j, std::string_view biz_key) {
    IDEM_ASSIGN_OR_RETURN(std::unique_ptr<StoreTransaction> tx, store().Begin());
    IDEM_ASSIGN_OR_RETURN(std::optional<steps::OperationRow> row,
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
  absl::StatusOr<Taken> Take(const steps::Journal& j, const RunRequest* create,
                             std::string_view biz_key);

  absl::StatusOr<OperationState> Drive(const steps::Journal& j, const OperationType& type,
                                       const std::string& biz_key, int64_t token, bool wait);
  absl::StatusOr<steps::Unit> RunUnit(const steps::Journal& j, const OperationType& type,
                                      const std::string& biz_key, int64_t token);
  absl::StatusOr<steps::Unit> Forward(const steps::Journal& j, const OperationType& type,
                                      std::unique_ptr<StoreTransaction> tx, OperationState& op,
                                      std::vector<StepRecord>& steps, const std::vector<int>& comp,
                                      int64_t token, absl::Time now);
  absl::StatusOr<steps::Unit> Compensate(const steps::Journal& j, const OperationType& type,
                                         std::unique_ptr<StoreTransaction> tx, OperationState& op,
                                         std::vector<StepRecord>& steps,
                                         const std::vector<int>& comp, int64_t token,
                                         absl::Time now);
  absl::StatusOr<steps::Unit> StepFailed(const steps::Journal& j, const Step& def,
                                         const OperationState& op, const StepRecord& rec,
                                         int comp_failures, int64_t token,
                                         const absl::Status& error, bool unknown);
  absl::StatusOr<steps::Unit> CompensationFailed(const steps::Journal& j, const Step& def,
                                                 const OperationState& op, const StepRecord& rec,
                                                 int comp_failures, int64_t token,
                                                 const absl::Status& error);
  absl::StatusOr<steps::Unit> Finish(const steps::Journal& j, StoreTransaction& tx,
                                     const OperationState& op, OperationStatus status,
                                     std::string_view last_error, absl::Time now);
};

}  // namespace idem
