// What guard.cc shares with the other files of the Guard (guard_in_transaction.cc,
// the entry points of guard_batch.h and guard_nonblocking.h): the Guard's state and
// its internals. Internal to src/core.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "core/guard_batch.h"
#include "core/guard_nonblocking.h"
#include "idem/guard.h"
#include "store/backend.h"

namespace idem {

namespace internal {

// The bytes cached for a handler's final error: {"code":"…","message":"…"}, a JSON
// object, so the HTTP API can hand it out as any other stored error.
std::string FailureBytes(const absl::Status& status);

}  // namespace internal

struct Guard::Impl {
  Impl(Store& store, GuardOptions options);

  // Guard::Run, with or without a first statement.
  absl::StatusOr<Result> RunTransactional(const Request& request, const Statement* first,
                                          const HandlerAfterFirst& handler);
  absl::StatusOr<Result> Claim(const Request& request, absl::Duration lease);
  // Guard::Complete (kSucceeded) and Guard::Fail (kReleased, kFailed).
  absl::Status Finish(const Request& request, int64_t token, RecordState final_state,
                      std::string_view bytes);
  absl::StatusOr<Record> Get(const Request& request);

  // The entry points of guard_batch.h.
  absl::StatusOr<Result> RunIn(RecordTransaction& tx, const Request& request,
                               const Handler& handler, bool confine);
  absl::StatusOr<std::vector<Result>> RunBatchIn(RecordTransaction& tx,
                                                 absl::Span<const Request> requests,
                                                 absl::Span<const Statement> firsts,
                                                 const BatchHandlerAfterFirst& handler);

  // The entry points of guard_nonblocking.h.
  std::optional<Result> ClaimIfKnown(const Request& request);
  bool ClaimNonBlocking(const Request& request, absl::Duration lease, NonBlockingCall& call);
  bool FinishNonBlocking(const Request& request, int64_t token, RecordState final_state,
                         std::string_view bytes, NonBlockingCall& call);
  bool DecideBatchNonBlocking(absl::Span<const BatchCall> calls, bool all, size_t value_budget,
                              std::vector<BatchDecision>* decisions, std::function<void()> done);

  // A transaction of StoreBackend::BeginNonBlocking that holds `request`'s key
  // (RecordTransaction::TryLock), or nullptr when there is none to be had without
  // waiting: the store has none, the request is invalid, or another transaction
  // holds the key (kWouldBlock); the blocking call then does the work. Errors: the
  // store's, as store faults.
  absl::StatusOr<std::unique_ptr<RecordTransaction>> HoldNonBlocking(const Request& request);

  struct Acquisition {
    std::optional<Result> final;  // set: the answer, the key is not this caller's
    Record claim;                 // else: the record held in the transaction
    bool takeover = false;
    int64_t previous_token = 0;
  };
  // Claims `request` in `tx`. With `first`, the claim goes out with that statement
  // (RecordTransaction::InsertOrLoadThen) and `first_result` receives its outcome
  // when it ran.
  absl::StatusOr<Acquisition> Acquire(
      RecordTransaction& tx, const Request& request, absl::Duration lease, absl::Time now,
      const Statement* first = nullptr,
      std::optional<absl::StatusOr<int64_t>>* first_result = nullptr);
  // The fresh PROCESSING record (token 1) that claims `request` at `now`; or
  // written into `claim`, whose buffers are reused.
  Record FreshClaim(const Request& request, absl::Duration lease, absl::Time now) const;
  void SetFreshClaim(Record& claim, const Request& request, absl::Duration lease,
                     absl::Time now) const;
  // Decides the claim `claim` of `request` from the store's answer to inserting it
  // (`loaded`, from InsertOrLoad or InsertOrLoadMany), taking the existing record
  // over in `tx` when it may be.
  absl::StatusOr<Acquisition> Settle(RecordTransaction& tx, const Request& request, Record claim,
                                     absl::StatusOr<std::optional<Record>> loaded,
                                     absl::Duration lease, absl::Time now);
  // RunBatchIn for requests[begin, end), whose keys are distinct.
  absl::Status RunSegmentIn(RecordTransaction& tx, absl::Span<const Request> requests,
                            absl::Span<const Statement> firsts, size_t begin, size_t end,
                            const BatchHandlerAfterFirst& handler, std::vector<Result>* results);
  absl::Status CheckSql() const;
  absl::StatusOr<Result> RunUnconfined(RecordTransaction& tx, const Request& request,
                                       const Handler& handler, absl::Time now);
  // The answer for a key the store already knows is final (StoreBackend::LookupDecided),
  // or std::nullopt: then the database decides in a transaction.
  std::optional<Result> DecideFromKnown(const Request& request, absl::Duration lease,
                                        absl::Time now);
  // The same for a `known` record (from LookupDecided or PeekDecided).
  std::optional<Result> DecideFrom(const std::optional<Record>& known, const Request& request,
                                   absl::Duration lease, absl::Time now);
  absl::Status Validate(const Request& request) const;
  // Finish()'s checks and write in `tx`: true when `tx` now holds the write to
  // commit, false when the answer is OK without one (the same call again).
  absl::StatusOr<bool> FinishIn(RecordTransaction& tx, const Request& request, int64_t token,
                                RecordState final_state, std::string_view bytes);
  // The answer of a claim whose acquisition `a` is committed (AcquiredResult, after
  // the failpoint guard.after_claim_commit).
  static Result Acquired(const Acquisition& a);
  static Result AcquiredResult(const Acquisition& a);

  StoreBackend& store_;
  GuardOptions options_;
};

// The internals of a Guard, for the entry points of guard_batch.h and
// guard_nonblocking.h.
struct GuardAccess {
  static Guard::Impl& Of(Guard& guard) { return *guard.impl_; }
  // A NonBlockingCall's transaction, and a claim's answer once it is durable.
  static std::unique_ptr<RecordTransaction>& TransactionOf(NonBlockingCall& call) {
    return call.tx_;
  }
  static std::optional<Result>& AcquiredOf(NonBlockingCall& call) { return call.acquired_; }
  static void CommitAsync(NonBlockingCall& call) { call.tx_->CommitAsync(call); }
};

}  // namespace idem
