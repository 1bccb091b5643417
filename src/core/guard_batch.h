// The Guard's entry points for a message consumer's batch (src/messaging/runner.cc): many
// keys in one transaction that the caller owns and commits. Internal to idem.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "idem/guard.h"
#include "idem/store.h"

namespace idem {

// Transactional mode inside a transaction the caller owns: a message consumer
// runs the effects of one poll batch in one `tx` (one commit for the batch) while
// each message stays individually idempotent. Claims the key in `tx` under a
// savepoint, runs `handler` there and, on success, writes the result into `tx`;
// nothing is committed: the caller commits `tx` (or rolls it back, undoing every
// claim and effect of the batch). A key claimed earlier in the same `tx` is
// answered kReplayed, as after a commit. Outcomes as Guard::Run(). A handler's final
// error rolls its writes back to the savepoint, caches the failure in `tx` (so
// after the commit it is answered kCachedFailure) and is returned; a retryable
// one rolls back to the savepoint and is returned, leaving no record. Errors as
// Run(); after kUnavailable/kAborted the caller should roll `tx` back and retry
// the batch. With `confine` false there is no savepoint (two round trips fewer
// per key): kExecuted and kReplayed are as above, but after any other outcome or
// an error `tx` must be rolled back (its state is undefined, a PostgreSQL
// transaction is aborted) and the batch run again with `confine` true: the
// optimistic fast path of a batch whose messages almost always succeed.
// REQUIRES: `tx` is from `guard`'s store, which runs SQL
// (Store::SupportsSql; else kFailedPrecondition), and is used by this thread
// only. Blocks.
absl::StatusOr<Result> RunIn(Guard& guard, StoreTransaction& tx, const Request& request,
                             const Handler& handler, bool confine = true);

// The effect of requests[index] in RunBatchIn, in the batch's transaction.
using BatchHandler = std::function<absl::StatusOr<std::string>(size_t index, Transaction& tx)>;

// RunIn without savepoints for each of `requests`, in order, in `tx`, with the
// store's round trips counted per batch instead of per key: the keys are claimed
// together (RecordTransaction::InsertOrLoadMany), the handlers of the claimed ones
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
absl::StatusOr<std::vector<Result>> RunBatchIn(Guard& guard, StoreTransaction& tx,
                                               absl::Span<const Request> requests,
                                               const BatchHandler& handler);

// The effect of requests[index] after its first statement, which changed
// `first_rows` rows.
using BatchHandlerAfterFirst =
    std::function<absl::StatusOr<std::string>(size_t index, Transaction& tx, int64_t first_rows)>;

// RunBatchIn with each request's first statement known up front (as Run with a
// first statement): once the keys are claimed, `firsts[i]` of each request whose
// key this batch claimed is run, all of them sent together
// (RecordTransaction::ExecMany: pipelined on PostgreSQL, so a batch whose effects
// are one statement each costs a few round trips in all), then `handler` of each
// in order. A key that is not the caller's (any outcome but kExecuted) runs
// neither. A first statement's error is returned as a handler's (roll `tx`
// back). Outcomes and errors as RunBatchIn; kInvalidArgument when `firsts` is
// not one statement per request.
absl::StatusOr<std::vector<Result>> RunBatchIn(Guard& guard, StoreTransaction& tx,
                                               absl::Span<const Request> requests,
                                               absl::Span<const Statement> firsts,
                                               const BatchHandlerAfterFirst& handler);

}  // namespace idem
