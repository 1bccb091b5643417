// Guard: one effect, once.
//
//   auto store = idem::OpenStore("sqlite://./idem.db");
//   idem::Guard guard(**store);
//   auto r = guard.Run({.biz_type = "refund", .key = "R-1", .fingerprint = digest},
//                      [&](idem::Transaction& tx) -> absl::StatusOr<std::string> {
//                        IDEM_RETURN_IF_ERROR(tx.Exec("INSERT INTO ledger ...", {...}));
//                        return std::string(R"({"refund_id":"F-1"})");
//                      });
//
// Two modes with the same outcomes:
//  - transactional, Run(): the claim, the handler's writes and the result commit in
//    one local transaction (or roll back together);
//  - lease, Claim()/Complete()/Fail(): for effects outside the database; a claim
//    commits a PROCESSING record with a lease and a fencing token.
//
// Checks run in this order: biz_type (kKeyReused), fingerprint (only when both the
// record and the request carry one; also on a takeover), then state.
//
// Thread safety: a Guard is safe for concurrent use. `store` and `options.clock`
// must outlive the Guard.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "idem/clock.h"
#include "idem/key.h"
#include "idem/record.h"
#include "idem/retention.h"
#include "idem/store.h"

namespace idem {

enum class Outcome {
  kExecuted,             // first arrival: the handler ran, its result is stored
  kAcquired,             // lease mode: the caller holds the claim and must Complete/Fail
  kReplayed,             // done before: `value` is the byte-identical first result
  kInProgress,           // another holder has a live lease (see lease_until)
  kKeyReused,            // the key belongs to another biz_type
  kFingerprintMismatch,  // same key and biz_type, different payload
  kCachedFailure,        // the first run failed non-retryably: `value` is that failure
  // The key's record was purged after its retention and its tombstone
  // remembers it: a very late duplicate, not run again (see purged_at, expires_at).
  kExpired,
};

// Returns "executed", "acquired", "replayed", "in_progress", "key_reused",
// "fingerprint_mismatch", "cached_failure" or "expired".
std::string_view OutcomeName(Outcome outcome);

// The longest fingerprint a request may carry, in bytes. A fingerprint is a digest
// of the request (idem::Fingerprint gives 64 hex digits); the bound keeps what a
// record stores and the server compares small whatever a client sends.
inline constexpr size_t kMaxFingerprintBytes = 1024;

// OK for a fingerprint of at most kMaxFingerprintBytes (empty: none), else
// kInvalidArgument giving its length and the limit.
absl::Status ValidateFingerprint(std::string_view fingerprint);

struct Request {
  std::string tenant = "default";
  std::string biz_type;
  std::string key;          // opaque bytes
  std::string fingerprint;  // optional, at most kMaxFingerprintBytes; see idem::Fingerprint
};

struct Result {
  Outcome outcome = Outcome::kExecuted;
  // kExecuted/kReplayed: the stored result; kCachedFailure: the stored error.
  std::string value;
  // kAcquired/kExecuted: the fencing token of this claim. kInProgress: the holder's.
  int64_t token = 0;
  // kAcquired/kInProgress: when the lease ends.
  absl::Time lease_until = absl::InfinitePast();
  // kAcquired: an earlier holder's lease expired and was taken over; its effect
  // may already have happened, so probe before re-sending.
  bool takeover = false;
  int64_t previous_token = 0;
  // When the key's record may be purged (Record::expires_at; absl::InfiniteFuture():
  // kept for ever). kExpired: when its tombstone goes.
  absl::Time expires_at = absl::InfiniteFuture();
  // kExpired: when the record was purged.
  absl::Time purged_at = absl::InfinitePast();
};

struct GuardOptions {
  const Clock* clock = Clock::Real();       // not owned
  KeyLimits limits;
  absl::Duration lease = absl::Seconds(30);  // Run()'s lease, and Claim()'s default
  // Sets each new record's expires_at from its biz_type's TTL; a biz_type
  // it does not name keeps its records for ever.
  RetentionPolicy retention;
};

// The handler of Run(). Its SQL goes through `tx`, which is the same transaction
// as the dedupe record. Return the result bytes to store (replayed verbatim), or
// an error: kUnavailable, kAborted, kDeadlineExceeded and kResourceExhausted are
// retryable (everything rolls back and no record is left); any other code is a
// final failure, cached and answered as kCachedFailure from then on.
using Handler = std::function<absl::StatusOr<std::string>(Transaction& tx)>;

// The handler of Run() with a first statement: as Handler, and it gets the
// number of rows the first statement changed.
using HandlerAfterFirst =
    std::function<absl::StatusOr<std::string>(Transaction& tx, int64_t first_rows)>;

// Returns true for the status codes a caller may retry with the same key.
bool IsRetryable(const absl::Status& status);

class Guard {
 public:
  explicit Guard(Store& store, GuardOptions options = {});

  // Transactional mode. Claims (tenant, key) with INSERT ... ON CONFLICT DO NOTHING,
  // runs `handler` in the same transaction and commits its writes with the result.
  // Returns kExecuted, kReplayed, kInProgress, kKeyReused, kFingerprintMismatch,
  // kCachedFailure or kExpired (a tombstone: the handler does not run) as values.
  // Errors: kInvalidArgument for a bad key/biz_type/tenant or a fingerprint over
  // kMaxFingerprintBytes (the handler does not run); kUnavailable when the store cannot be reached, stays locked or is unusable
  // (any failure of idem's own statements is the store's fault, IsStoreFault: a
  // missing table, a read-only or deleted file, permission denied; fail closed: the
  // handler does not run, nothing is cached); the handler's own error on its first
  // failure (retryable ones leave no record). A key whose final state
  // the store already knows (Store::LookupDecided, e.g. a cache tier) is answered
  // without a transaction; any other key is decided by the database. Blocks.
  absl::StatusOr<Result> Run(const Request& request, const Handler& handler);

  // Transactional mode with a first statement known up front: as Run(request,
  // handler), with `first` run in the transaction right after the claim and
  // before `handler`. A store that can (PostgreSQL, in pipeline mode) sends the
  // claim and `first` in one round trip, which saves one round trip per first
  // arrival — for a handler that is one INSERT, a third of the guarded
  // transaction's round trips. `first` may then run before the claim is decided:
  // when the key is not this caller's (any outcome but kExecuted) the transaction
  // rolls back, so its effect is undone, and `handler` is not called. An error of
  // `first` counts as the handler's: retryable leaves no record, final is cached.
  // Errors as Run().
  absl::StatusOr<Result> Run(const Request& request, const Statement& first,
                             const HandlerAfterFirst& handler);

  // Transactional mode inside a transaction the caller owns: a message consumer
  // runs the effects of one poll batch in one `tx` (one commit for the batch) while
  // each message stays individually idempotent. Claims the key in `tx` under a
  // savepoint, runs `handler` there and, on success, writes the result into `tx`;
  // nothing is committed: the caller commits `tx` (or rolls it back, undoing every
  // claim and effect of the batch). A key claimed earlier in the same `tx` is
  // answered kReplayed, as after a commit. Outcomes as Run(). A handler's final
  // error rolls its writes back to the savepoint, caches the failure in `tx` (so
  // after the commit it is answered kCachedFailure) and is returned; a retryable
  // one rolls back to the savepoint and is returned, leaving no record. Errors as
  // Run(); after kUnavailable/kAborted the caller should roll `tx` back and retry
  // the batch. With `confine` false there is no savepoint (two round trips fewer
  // per key): kExecuted and kReplayed are as above, but after any other outcome or
  // an error `tx` must be rolled back (its state is undefined, a PostgreSQL
  // transaction is aborted) and the batch run again with `confine` true: the
  // optimistic fast path of a batch whose messages almost always succeed.
  // REQUIRES: `tx` is from this Guard's store, which runs SQL
  // (Store::SupportsSql; else kFailedPrecondition), and is used by this thread
  // only. Blocks.
  absl::StatusOr<Result> RunIn(StoreTransaction& tx, const Request& request,
                               const Handler& handler, bool confine = true);

  // The effect of requests[index] in RunBatchIn, in the batch's transaction.
  using BatchHandler = std::function<absl::StatusOr<std::string>(size_t index, Transaction& tx)>;

  // RunIn without savepoints for each of `requests`, in order, in `tx`, with the
  // store's round trips counted per batch instead of per key: the keys are claimed
  // together (StoreTransaction::InsertOrLoadMany), the handlers of the claimed ones
  // run in order, and their results are written together (ReplaceMany). On
  // PostgreSQL that is two round trips per batch plus the handlers' own, instead
  // of three per key. Each request stays individually idempotent: its own claim
  // and record. Returns one Result per request, in order: kExecuted (the handler
  // ran; its result is written in `tx`), or, without running the handler or
  // writing anything, kReplayed (also for a key earlier in the same batch or
  // `tx`), kInProgress (a live lease), kKeyReused, kFingerprintMismatch,
  // kCachedFailure, kExpired; `tx` stays usable after each of them. Errors: a
  // request's bad key, biz_type or tenant (kInvalidArgument, nothing written), the
  // first handler error (retryable or final: nothing is cached), a key held by
  // another open transaction (a ClaimContendedError), or a store error as Run()'s;
  // after an error `tx` must be rolled back (a PostgreSQL transaction is aborted)
  // and the batch run again with RunIn(confine true) per key, which confines each
  // failure to its own key. Nothing is committed: the caller commits `tx`.
  // REQUIRES: as RunIn. Blocks.
  absl::StatusOr<std::vector<Result>> RunBatchIn(StoreTransaction& tx,
                                                 absl::Span<const Request> requests,
                                                 const BatchHandler& handler);

  // The effect of requests[index] after its first statement, which changed
  // `first_rows` rows.
  using BatchHandlerAfterFirst =
      std::function<absl::StatusOr<std::string>(size_t index, Transaction& tx, int64_t first_rows)>;

  // RunBatchIn with each request's first statement known up front (as Run with a
  // first statement): once the keys are claimed, `firsts[i]` of each request whose
  // key this batch claimed is run, all of them sent together
  // (StoreTransaction::ExecMany: pipelined on PostgreSQL, so a batch whose effects
  // are one statement each costs a few round trips in all), then `handler` of each
  // in order. A key that is not the caller's (any outcome but kExecuted) runs
  // neither. A first statement's error is returned as a handler's (roll `tx`
  // back). Outcomes and errors as RunBatchIn; kInvalidArgument when `firsts` is
  // not one statement per request.
  absl::StatusOr<std::vector<Result>> RunBatchIn(StoreTransaction& tx,
                                                 absl::Span<const Request> requests,
                                                 absl::Span<const Statement> firsts,
                                                 const BatchHandlerAfterFirst& handler);

  // Lease mode. Commits a PROCESSING record with a lease of `lease` (0 = the
  // default) and a new fencing token, or reports why not. An expired lease is taken
  // over (token + 1, takeover = true). Returns kAcquired, kReplayed, kInProgress,
  // kKeyReused, kFingerprintMismatch, kCachedFailure or kExpired. Errors as Run().
  absl::StatusOr<Result> Claim(const Request& request, absl::Duration lease = absl::ZeroDuration());

  // The answer Claim() would give when it needs no I/O: the store holds the key's
  // final record in memory (Store::PeekDecided), so kReplayed, kCachedFailure,
  // kKeyReused or kFingerprintMismatch; std::nullopt otherwise (also for an invalid
  // request), and then Claim() decides. Never blocks: for a network thread.
  std::optional<Result> ClaimIfKnown(const Request& request);

  // Stores `result` for the claim holding `token` and marks the key SUCCEEDED.
  // Repeating the same call is OK. Errors: kNotFound (no record, or only its
  // tombstone), kFailedPrecondition
  // (the key belongs to another biz_type), kAborted (lease lost: the token is stale
  // or the key was released; nothing changed), kAlreadyExists (already finished
  // with this token but with another result or as a failure), kUnavailable.
  absl::Status Complete(const Request& request, int64_t token, std::string_view result);

  // Ends the claim holding `token` with a failure. Retryable: the key is released
  // (the next claim acquires it, with a larger token). Otherwise `error` is cached
  // and answered as kCachedFailure. Errors as Complete().
  absl::Status Fail(const Request& request, int64_t token, bool retryable, std::string_view error);

  // Claim(), Complete() and Fail() for a server's network thread, on a transaction
  // of Store::BeginNonBlocking(): nothing waits on a lock, the disk's sync or
  // another thread. Each returns false, having changed nothing, when the store has
  // no such transactions, the request is invalid, or the key is locked by another
  // transaction at this instant (for a claim, also when it lost a race on the
  // record, kAborted): the caller then makes the blocking call, which waits or
  // words the error. Otherwise `done` is called once with the blocking
  // call's answer (without Claim()'s read of Store::LookupDecided, which may be a
  // round trip): on this thread before the return when nothing is written, else on
  // the store's writer thread once the write is durable, where it must be quick.
  bool ClaimNonBlocking(const Request& request, absl::Duration lease,
                        std::function<void(absl::StatusOr<Result>)> done);
  bool CompleteNonBlocking(const Request& request, int64_t token, std::string_view result,
                           std::function<void(absl::Status)> done);
  bool FailNonBlocking(const Request& request, int64_t token, bool retryable,
                       std::string_view error, std::function<void(absl::Status)> done);

  // Returns the record of (tenant, key), or its tombstone once purged
  // (Record::purged(): no result or error); kNotFound when there is none (or it was
  // released), kFailedPrecondition when it belongs to another biz_type than a
  // non-empty `request.biz_type`.
  absl::StatusOr<Record> Get(const Request& request);

  const GuardOptions& options() const { return options_; }

 private:
  struct Acquisition {
    std::optional<Result> final;  // set: the answer, the key is not this caller's
    Record claim;                 // else: the record held in the transaction
    bool takeover = false;
    int64_t previous_token = 0;
  };
  // Claims `request` in `tx`. With `first`, the claim goes out with that statement
  // (StoreTransaction::InsertOrLoadThen) and `first_result` receives its outcome
  // when it ran.
  absl::StatusOr<Acquisition> Acquire(StoreTransaction& tx, const Request& request,
                                      absl::Duration lease, absl::Time now,
                                      const Statement* first = nullptr,
                                      std::optional<absl::StatusOr<int64_t>>* first_result =
                                          nullptr);
  // The fresh PROCESSING record (token 1) that claims `request` at `now`.
  Record FreshClaim(const Request& request, absl::Duration lease, absl::Time now) const;
  // Decides the claim `claim` of `request` from the store's answer to inserting it
  // (`loaded`, from InsertOrLoad or InsertOrLoadMany), taking the existing record
  // over in `tx` when it may be.
  absl::StatusOr<Acquisition> Settle(StoreTransaction& tx, const Request& request, Record claim,
                                     absl::StatusOr<std::optional<Record>> loaded,
                                     absl::Duration lease, absl::Time now);
  // RunBatchIn for requests[begin, end), whose keys are distinct.
  absl::Status RunSegmentIn(StoreTransaction& tx, absl::Span<const Request> requests,
                            absl::Span<const Statement> firsts, size_t begin, size_t end,
                            const BatchHandlerAfterFirst& handler, std::vector<Result>* results);
  absl::Status CheckSql() const;
  absl::StatusOr<Result> RunUnconfined(StoreTransaction& tx, const Request& request,
                                       const Handler& handler, absl::Time now);
  absl::StatusOr<Result> RunTransactional(const Request& request, const Statement* first,
                                          const HandlerAfterFirst& handler);
  // The answer for a key the store already knows is final (Store::LookupDecided),
  // or std::nullopt: then the database decides in a transaction.
  std::optional<Result> DecideFromKnown(const Request& request, absl::Duration lease,
                                        absl::Time now);
  // The same for a `known` record (from LookupDecided or PeekDecided).
  std::optional<Result> DecideFrom(const std::optional<Record>& known, const Request& request,
                                   absl::Duration lease, absl::Time now);
  absl::Status Validate(const Request& request) const;
  absl::Status Finish(const Request& request, int64_t token, RecordState final_state,
                      std::string_view bytes);
  bool FinishNonBlocking(const Request& request, int64_t token, RecordState final_state,
                         std::string_view bytes, std::function<void(absl::Status)> done);
  // Finish()'s checks and write in `tx`: true when `tx` now holds the write to
  // commit, false when the answer is OK without one (the same call again).
  absl::StatusOr<bool> FinishIn(StoreTransaction& tx, const Request& request, int64_t token,
                                RecordState final_state, std::string_view bytes);
  // The answer of a claim whose acquisition `a` is committed.
  static Result Acquired(const Acquisition& a);

  Store& store_;
  GuardOptions options_;
};

}  // namespace idem
