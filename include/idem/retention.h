// Retention: how long each biz_type's dedupe records are kept, and the
// purge that removes them once their time is up.
//
//   idem::RetentionPolicy policy;
//   IDEM_RETURN_IF_ERROR(policy.Add("refund", {.redelivery_window = absl::Minutes(10),
//                                              .recon_cycle = absl::Hours(24 * 30),
//                                              .confirm_window = absl::Hours(24 * 3),
//                                              .safety_margin = absl::Hours(24 * 60)}));
//   idem::Guard guard(*store, {.retention = policy});  // claims get expires_at = now + 90d
//   ...
//   auto stats = idem::Purge(*store, {.policy = &policy});  // e.g. hourly, in the background
//
// A record's expires_at is set once, at its first claim: the claim's time plus its
// biz_type's TTL (the derivation of include/idem/ttl.h, or a configured TTL that is
// at least as long). A biz_type without a policy keeps its records for ever. Purge
// never removes a PROCESSING record (a live lease, or a claim whose holder vanished:
// `idem stuck` and a takeover still need it) nor one before its expires_at; by
// default it leaves a tombstone in its place (key, biz_type, fingerprint, token, the
// state it ended in, purged_at; no result or error), so a very late duplicate is
// answered Outcome::kExpired (HTTP 410) instead of running again. A tombstone is
// kept as long again as its record was, then removed too.
//
// Thread safety: a RetentionPolicy is a value, safe to read concurrently once
// built. Purge() is safe to run concurrently with claims on the same store (and with
// another Purge: each re-checks every record under its lock before changing it).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "idem/clock.h"
#include "idem/ttl.h"

namespace idem {

class Store;

// The retention of one biz_type.
struct BizRetention {
  TtlDerivation derivation;                  // from the windows (DeriveTtl)
  std::optional<absl::Duration> configured;  // an explicit TTL, at least derivation.total
  // How long a purged record's tombstone is kept; unset: as long as `ttl()`.
  std::optional<absl::Duration> tombstone;

  // The TTL records of this biz_type get: `configured`, else the derived one.
  absl::Duration ttl() const { return configured.value_or(derivation.total); }
};

class RetentionPolicy {
 public:
  // Adds `biz_type` with the TTL derived from `inputs` (DeriveTtl), or `configured`
  // when set. Errors: kInvalidArgument for a bad term (DeriveTtl's), a biz_type
  // added twice, a non-positive TTL or tombstone period; kFailedPrecondition when
  // `configured` is below the derived TTL (CheckConfiguredTtl's message, which
  // names the dominant window). Nothing is added on error.
  absl::Status Add(std::string biz_type, const TtlInputs& inputs,
                   std::optional<absl::Duration> configured = std::nullopt,
                   std::optional<absl::Duration> tombstone = std::nullopt);

  // The retention of `biz_type`, or nullptr when it has none (kept for ever).
  const BizRetention* Find(std::string_view biz_type) const;

  // When a record of `biz_type` claimed at `claimed_at` may be purged:
  // claimed_at + its TTL, or absl::InfiniteFuture() without a policy for it.
  absl::Time ExpiresAt(std::string_view biz_type, absl::Time claimed_at) const;

  bool empty() const { return by_biz_type_.empty(); }
  const std::map<std::string, BizRetention, std::less<>>& entries() const { return by_biz_type_; }

 private:
  std::map<std::string, BizRetention, std::less<>> by_biz_type_;
};

// What a Purge() did (or, with dry_run, would do). Counts are of records.
struct PurgeStats {
  int64_t scanned = 0;             // records looked at (finished and past expires_at)
  int64_t tombstoned = 0;          // records replaced by their tombstone
  int64_t deleted = 0;             // records removed without a tombstone (tombstones off)
  int64_t tombstones_dropped = 0;  // tombstones removed after their own period
  int64_t kept = 0;  // candidates left alone: still inside their biz_type's policy window,
                     // or changed by a claim meanwhile
  int64_t operations_deleted = 0;  // finished step operations removed (SQL stores)
  int64_t batches = 0;             // transactions committed (or, dry run, counted)
};

struct PurgeOptions {
  const Clock* clock = Clock::Real();  // "now" and the pauses; not owned
  // Records changed per transaction: each batch is one short transaction, so a
  // claim waits at most for one batch on a record it shares with it.
  int batch = 100;
  // At most this many records changed per second, over the whole run (pausing
  // between batches); 0: no limit.
  double max_rate = 0;
  // Pause after every batch (besides max_rate's), so purge traffic leaves room
  // for claims.
  absl::Duration pause = absl::Milliseconds(10);
  // Count what would be purged; change nothing.
  bool dry_run = false;
  // Leave a tombstone for each purged record; false: delete outright, so
  // a very late duplicate runs again.
  bool tombstones = true;
  // How long tombstones are kept; unset: the biz_type's BizRetention::tombstone,
  // else as long as the record's own retention (expires_at - created_at).
  std::optional<absl::Duration> tombstone_ttl;
  // When set, a record whose biz_type has a policy is also kept until created_at
  // plus the policy's TTL: a TTL raised since the record was written protects it
  // too. Not owned.
  const RetentionPolicy* policy = nullptr;
  // Also purge the step journal on a SQL store: finished operations
  // (SUCCESS, COMPENSATED; never one that is still running or needs a person) of an
  // op_type with a policy, once updated_at plus its TTL has passed.
  bool journal = true;
  // Called after every batch with the totals so far (from the calling thread).
  std::function<void(const PurgeStats&)> progress;
  // Asked before every batch; true ends the run early (what was done stays done).
  std::function<bool()> stop;
};

// Purges `store` (see the header comment): finished records past their
// expires_at, then tombstones past theirs, then (options.journal) finished step
// operations, in batches of options.batch, each its own transaction. Returns what
// it did. Errors: kUnimplemented for a store that cannot list its records;
// kInvalidArgument for a batch below 1 or a negative rate; a store error as is
// (kUnavailable: retry later; what committed before it stays). Blocks.
absl::StatusOr<PurgeStats> Purge(Store& store, const PurgeOptions& options = {});

}  // namespace idem
