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
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
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
  ~Guard();
  Guard(Guard&&) noexcept;
  Guard& operator=(Guard&&) noexcept;

  // Transactional mode. Claims (tenant, key) with INSERT ... ON CONFLICT DO NOTHING,
  // runs `handler` in the same transaction and commits its writes with the result.
  // Returns kExecuted, kReplayed, kInProgress, kKeyReused, kFingerprintMismatch,
  // kCachedFailure or kExpired (a tombstone: the handler does not run) as values.
  // Errors: kInvalidArgument for a bad key/biz_type/tenant or a fingerprint over
  // kMaxFingerprintBytes (the handler does not run); kUnavailable when the store cannot be reached,
  // stays locked or is unusable (any failure of idem's own statements is the store's fault,
  // IsStoreFault: a missing table, a read-only or deleted file, permission denied; fail closed: the
  // handler does not run, nothing is cached); the handler's own error on its first
  // failure (retryable ones leave no record). A key whose final state
  // the store already knows (e.g. from a cache tier, include/idem/cache.h) is answered
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

  // Lease mode. Commits a PROCESSING record with a lease of `lease` (0 = the
  // default) and a new fencing token, or reports why not. An expired lease is taken
  // over (token + 1, takeover = true). Returns kAcquired, kReplayed, kInProgress,
  // kKeyReused, kFingerprintMismatch, kCachedFailure or kExpired. Errors as Run().
  absl::StatusOr<Result> Claim(const Request& request, absl::Duration lease = absl::ZeroDuration());

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

  // Returns the record of (tenant, key), or its tombstone once purged
  // (Record::purged(): no result or error); kNotFound when there is none (or it was
  // released), kFailedPrecondition when it belongs to another biz_type than a
  // non-empty `request.biz_type`.
  absl::StatusOr<Record> Get(const Request& request);

  const GuardOptions& options() const;

 private:
  // The Guard's state and its internals (src/core/guard_impl.h).
  struct Impl;
  friend struct GuardAccess;
  std::unique_ptr<Impl> impl_;
};

}  // namespace idem
