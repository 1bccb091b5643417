#include "idem/guard.h"

#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/absl_compat.h"
#include "core/failpoint.h"
#include "core/guard_internal.h"
#include "core/guard_nonblocking.h"
#include "idem/status.h"

namespace idem {
namespace {

// What a claim meeting an existing record must do.
struct Decision {
  std::optional<Result> final;  // set: answer this, nothing to write
  Record next;                  // else: write this over the existing record
  bool takeover = false;
};

Decision Decide(const Record& existing, const Request& request, absl::Time now,
                absl::Duration lease) {
  Decision d;
  // A tombstone: the key's record was purged after its retention. The
  // same checks as for a live record, then a very late duplicate is told so instead
  // of running again; its key stays taken until the tombstone goes.
  if (existing.purged()) {
    if (existing.biz_type != request.biz_type) {
      d.final = Result{.outcome = Outcome::kKeyReused};
    } else if (!existing.fingerprint.empty() && !request.fingerprint.empty() &&
               existing.fingerprint != request.fingerprint) {
      d.final = Result{.outcome = Outcome::kFingerprintMismatch};
    } else {
      d.final = Result{.outcome = Outcome::kExpired,
                       .token = existing.token,
                       .expires_at = existing.expires_at,
                       .purged_at = existing.purged_at};
    }
    return d;
  }
  // A released key (retryable failure) behaves as absent: whoever claims next
  // acquires it, with the next token.
  if (existing.state != RecordState::kReleased) {
    if (existing.biz_type != request.biz_type) {
      d.final = Result{.outcome = Outcome::kKeyReused};
      return d;
    }
    if (!existing.fingerprint.empty() && !request.fingerprint.empty() &&
        existing.fingerprint != request.fingerprint) {
      d.final = Result{.outcome = Outcome::kFingerprintMismatch};
      return d;
    }
    switch (existing.state) {
      case RecordState::kSucceeded:
        d.final = Result{.outcome = Outcome::kReplayed, .value = existing.result,
                         .token = existing.token, .expires_at = existing.expires_at};
        return d;
      case RecordState::kFailed:
        d.final = Result{.outcome = Outcome::kCachedFailure, .value = existing.error,
                         .token = existing.token, .expires_at = existing.expires_at};
        return d;
      case RecordState::kProcessing:
        if (existing.lease_until > now) {
          d.final = Result{.outcome = Outcome::kInProgress, .token = existing.token,
                           .lease_until = existing.lease_until,
                           .expires_at = existing.expires_at};
          return d;
        }
        d.takeover = true;
        break;
      case RecordState::kReleased:
        break;
    }
  }
  // expires_at stays: the retention window runs from the key's first claim, which a
  // takeover or a retry after a release only continues.
  d.next = existing;
  d.next.biz_type = request.biz_type;
  if (!request.fingerprint.empty()) d.next.fingerprint = request.fingerprint;
  d.next.state = RecordState::kProcessing;
  d.next.token = existing.token + 1;
  d.next.lease_until = now + lease;
  d.next.result.clear();
  d.next.error.clear();
  d.next.updated_at = now;
  return d;
}

}  // namespace

// The failure bytes cached for a handler's final error: a JSON object, so the
// HTTP API can hand it out as any other stored error.
std::string internal::FailureBytes(const absl::Status& status) {
  std::string message;
  for (char c : status.message()) {
    switch (c) {
      case '"':
        message += "\\\"";
        break;
      case '\\':
        message += "\\\\";
        break;
      case '\n':
        message += "\\n";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          absl::StrAppend(&message, " ");
        } else {
          message += c;
        }
    }
  }
  return absl::StrCat(R"({"code":")", absl::StatusCodeToString(status.code()),
                      R"(","message":")", message, "\"}");
}

// The Store's record primitives run statements idem wrote for a request it has
// already validated: whatever fails in them is the store's fault, never
// the request's, so a missing table or a read-only file is 503, not 400: every
// result of one goes through AsStoreFault (idem/store.h).

std::string_view OutcomeName(Outcome outcome) {
  switch (outcome) {
    case Outcome::kExecuted:
      return "executed";
    case Outcome::kAcquired:
      return "acquired";
    case Outcome::kReplayed:
      return "replayed";
    case Outcome::kInProgress:
      return "in_progress";
    case Outcome::kKeyReused:
      return "key_reused";
    case Outcome::kFingerprintMismatch:
      return "fingerprint_mismatch";
    case Outcome::kCachedFailure:
      return "cached_failure";
    case Outcome::kExpired:
      return "expired";
  }
  return "unknown";
}

bool IsRetryable(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kResourceExhausted:
      return true;
    default:
      return false;
  }
}

Guard::Impl::Impl(Store& store, GuardOptions options)
    : store_(Backend(store)), options_(std::move(options)) {
  if (options_.clock == nullptr) options_.clock = Clock::Real();
}

Guard::Guard(Store& store, GuardOptions options)
    : impl_(std::make_unique<Impl>(store, std::move(options))) {}
Guard::~Guard() = default;
Guard::Guard(Guard&&) noexcept = default;
Guard& Guard::operator=(Guard&&) noexcept = default;

const GuardOptions& Guard::options() const { return impl_->options_; }

absl::Status ValidateFingerprint(std::string_view fingerprint) {
  if (fingerprint.size() <= kMaxFingerprintBytes) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("fingerprint is ", fingerprint.size(),
                                                 " bytes, over the limit of ",
                                                 kMaxFingerprintBytes));
}

absl::Status Guard::Impl::Validate(const Request& request) const {
  IDEM_RETURN_IF_ERROR(ValidateFingerprint(request.fingerprint));
  IDEM_RETURN_IF_ERROR(ValidateTenant(request.tenant, options_.limits));
  IDEM_RETURN_IF_ERROR(ValidateBizType(request.biz_type, options_.limits));
  return ValidateKey(request.key, options_.limits);
}

void Guard::Impl::SetFreshClaim(Record& claim, const Request& request, absl::Duration lease,
                                absl::Time now) const {
  claim.tenant = request.tenant;
  claim.biz_type = request.biz_type;
  claim.key = request.key;
  claim.fingerprint = request.fingerprint;
  claim.state = RecordState::kProcessing;
  claim.result.clear();
  claim.error.clear();
  claim.token = 1;
  claim.lease_until = now + lease;
  claim.created_at = now;
  claim.updated_at = now;
  claim.expires_at = options_.retention.ExpiresAt(request.biz_type, now);
  claim.purged_at = absl::InfinitePast();
}

// The PROCESSING record that claims `request` afresh (token 1) at `now`.
Record Guard::Impl::FreshClaim(const Request& request, absl::Duration lease, absl::Time now) const {
  Record claim;
  SetFreshClaim(claim, request, lease, now);
  return claim;
}

// Claims the key inside `tx`: inserts a fresh PROCESSING record, or decides on the
// existing one and, when it may be (re)acquired, writes the next token over it.
// Returns the answer to give when the claim is not this caller's (`final`), else the
// record now held in `tx` (not yet committed).
absl::StatusOr<Guard::Impl::Acquisition> Guard::Impl::Acquire(
    RecordTransaction& tx, const Request& request, absl::Duration lease, absl::Time now,
    const Statement* first, std::optional<absl::StatusOr<int64_t>>* first_result) {
  Record claim = FreshClaim(request, lease, now);
  absl::StatusOr<std::optional<Record>> loaded =
      AsStoreFault(first != nullptr ? tx.InsertOrLoadThen(claim, *first, first_result)
                             : tx.InsertOrLoad(claim));
  return Settle(tx, request, std::move(claim), std::move(loaded), lease, now);
}

absl::StatusOr<Guard::Impl::Acquisition> Guard::Impl::Settle(
    RecordTransaction& tx, const Request& request, Record claim,
    absl::StatusOr<std::optional<Record>> loaded, absl::Duration lease, absl::Time now) {
  Acquisition a;
  a.claim = std::move(claim);
  // Another claim of this key holds its row in an open transaction: in progress.
  if (IsClaimContended(loaded.status())) {
    a.final = Result{.outcome = Outcome::kInProgress};
    return a;
  }
  IDEM_ASSIGN_OR_RETURN(std::optional<Record> existing, std::move(loaded));
  if (!existing.has_value()) return a;
  Decision d = Decide(*existing, request, now, lease);
  if (d.final.has_value()) {
    a.final = std::move(d.final);
    return a;
  }
  IDEM_ASSIGN_OR_RETURN(bool moved,
                        AsStoreFault(tx.Replace(d.next, existing->token, existing->state)));
  if (!moved) {
    // Only possible if the store let another writer in between our read and
    // write; report it as contention rather than guess.
    return absl::AbortedError("claim lost a race on the record; retry");
  }
  a.claim = std::move(d.next);
  a.takeover = d.takeover;
  if (d.takeover) a.previous_token = existing->token;
  return a;
}

// The duplicate fast path: a key whose final state the store already
// knows (e.g. from a cache) is answered by the same Decide() as in a transaction,
// without one. Only final records qualify: they never change, so the answer is the
// one the database would give. Anything else, an error included, goes to the
// database, which is the only layer that decides.
std::optional<Result> Guard::Impl::DecideFromKnown(const Request& request, absl::Duration lease,
                                                   absl::Time now) {
  absl::StatusOr<std::optional<Record>> known = store_.LookupDecided(request.tenant, request.key);
  if (!known.ok()) return std::nullopt;  // advisory only: ignored
  return DecideFrom(*known, request, lease, now);
}

std::optional<Result> Guard::Impl::ClaimIfKnown(const Request& request) {
  if (!Validate(request).ok()) return std::nullopt;  // Claim() says what is wrong
  return DecideFrom(store_.PeekDecided(request.tenant, request.key), request, options_.lease,
                    options_.clock->Now());
}

std::optional<Result> Guard::Impl::DecideFrom(const std::optional<Record>& known,
                                              const Request& request, absl::Duration lease,
                                              absl::Time now) {
  if (!known.has_value()) return std::nullopt;
  const Record& record = *known;
  if ((record.state != RecordState::kSucceeded && record.state != RecordState::kFailed) ||
      record.purged() || record.tenant != request.tenant || record.key != request.key) {
    return std::nullopt;  // not a decided record of this key: let the database answer
  }
  Decision d = Decide(record, request, now, lease);
  return std::move(d.final);
}

absl::StatusOr<Result> Guard::Impl::Claim(const Request& request, absl::Duration lease) {
  IDEM_RETURN_IF_ERROR(Validate(request));
  if (lease <= absl::ZeroDuration()) lease = options_.lease;
  const absl::Time now = options_.clock->Now();
  if (std::optional<Result> known = DecideFromKnown(request, lease, now)) return *std::move(known);
  IDEM_ASSIGN_OR_RETURN(std::unique_ptr<RecordTransaction> tx, AsStoreFault(BeginRecords(store_)));
  IDEM_ASSIGN_OR_RETURN(Acquisition a, Acquire(*tx, request, lease, now));
  if (a.final.has_value()) {
    tx->Rollback();
    return *std::move(a.final);
  }
  IDEM_RETURN_IF_ERROR(AsStoreFault(tx->Commit()));
  return Acquired(a);
}

Result Guard::Impl::Acquired(const Acquisition& a) {
  IDEM_FAILPOINT("guard.after_claim_commit");
  return AcquiredResult(a);
}

Result Guard::Impl::AcquiredResult(const Acquisition& a) {
  return Result{.outcome = Outcome::kAcquired,
                .token = a.claim.token,
                .lease_until = a.claim.lease_until,
                .takeover = a.takeover,
                .previous_token = a.previous_token,
                .expires_at = a.claim.expires_at};
}

namespace {

// The transactions NonBlockingCalls ended on this thread, for the next ones to
// renew (StoreBackend::RenewNonBlocking): a server's claims then allocate nothing
// for theirs. Bounded: past kGuardSpareTransactions they are let go.
constexpr size_t kGuardSpareTransactions = 64;
thread_local std::vector<std::unique_ptr<RecordTransaction>> guard_spare_transactions;

}  // namespace

NonBlockingCall::~NonBlockingCall() {
  if (tx_ == nullptr) return;
  tx_->Rollback();  // ended already (Done came): nothing; else its keys go now
  if (guard_spare_transactions.size() < kGuardSpareTransactions) {
    guard_spare_transactions.push_back(std::move(tx_));
  }
}

absl::StatusOr<std::unique_ptr<RecordTransaction>> Guard::Impl::HoldNonBlocking(
    const Request& request) {
  if (!Validate(request).ok()) return nullptr;
  std::unique_ptr<RecordTransaction> spare;
  if (!guard_spare_transactions.empty()) {
    spare = std::move(guard_spare_transactions.back());
    guard_spare_transactions.pop_back();
  }
  absl::StatusOr<std::unique_ptr<RecordTransaction>> begun =
      store_.RenewNonBlocking(std::move(spare));
  if (!begun.ok() || *begun == nullptr) return nullptr;
  // A key another open transaction holds: a wait, left to the blocking call.
  IDEM_ASSIGN_OR_RETURN(RecordTransaction::KeyLock lock,
                        AsStoreFault((*begun)->TryLock(request.tenant, request.key)));
  if (lock == RecordTransaction::KeyLock::kWouldBlock) return nullptr;
  return begun;
}

bool Guard::Impl::ClaimNonBlocking(const Request& request, absl::Duration lease,
                                   NonBlockingCall& call) {
  absl::StatusOr<std::unique_ptr<RecordTransaction>> held = HoldNonBlocking(request);
  if (held.ok() && *held == nullptr) return false;
  if (!held.ok()) {
    call.Done(held.status());
    return true;
  }
  std::unique_ptr<RecordTransaction>& tx = GuardAccess::TransactionOf(call);
  tx = *std::move(held);
  if (lease <= absl::ZeroDuration()) lease = options_.lease;
  const absl::Time now = options_.clock->Now();
  // Acquire's insert, its claim record written into one this thread reuses: a new
  // key is acquired without a copy of its strings.
  thread_local Record claim;
  SetFreshClaim(claim, request, lease, now);
  absl::StatusOr<std::optional<Record>> loaded = AsStoreFault(tx->InsertOrLoad(claim));
  if (loaded.ok() && !loaded->has_value()) {
    GuardAccess::AcquiredOf(call) = Result{.outcome = Outcome::kAcquired,
                                           .token = claim.token,
                                           .lease_until = claim.lease_until,
                                           .expires_at = claim.expires_at};
    GuardAccess::CommitAsync(call);  // NonBlockingCall::Committed
    return true;
  }
  absl::StatusOr<Acquisition> a = Settle(*tx, request, claim, std::move(loaded), lease, now);
  // kAborted (a race on the record): nothing is written, and the blocking path's
  // caller repeats the claim (the Api does).
  if (!a.ok() && a.status().code() == absl::StatusCode::kAborted) {
    tx.reset();
    return false;
  }
  if (!a.ok()) {
    tx.reset();  // rolled back: its key is free before the answer
    call.Done(a.status());
    return true;
  }
  if (a->final.has_value()) {
    tx->Rollback();
    call.Done(*std::move(a->final));
    return true;
  }
  GuardAccess::AcquiredOf(call) = AcquiredResult(*a);
  GuardAccess::CommitAsync(call);  // NonBlockingCall::Committed
  return true;
}

void NonBlockingCall::Committed(absl::Status status) {
  std::optional<Result> acquired = std::move(acquired_);
  acquired_.reset();
  if (!status.ok()) {
    Done(AsStoreFault(status));
  } else if (acquired.has_value()) {
    IDEM_FAILPOINT("guard.after_claim_commit");
    Done(*std::move(acquired));
  } else {
    Done(Result{});
  }
}

absl::StatusOr<Result> Guard::Run(const Request& request, const Handler& handler) {
  return impl_->RunTransactional(request, nullptr,
                                 [&handler](Transaction& tx, int64_t) { return handler(tx); });
}

absl::StatusOr<Result> Guard::Run(const Request& request, const Statement& first,
                                  const HandlerAfterFirst& handler) {
  return impl_->RunTransactional(request, &first, handler);
}

absl::StatusOr<Result> Guard::Claim(const Request& request, absl::Duration lease) {
  return impl_->Claim(request, lease);
}

absl::StatusOr<Result> Guard::Impl::RunTransactional(const Request& request, const Statement* first,
                                                     const HandlerAfterFirst& handler) {
  IDEM_RETURN_IF_ERROR(Validate(request));
  const absl::Time now = options_.clock->Now();
  if (std::optional<Result> known = DecideFromKnown(request, options_.lease, now)) {
    return *std::move(known);
  }
  IDEM_ASSIGN_OR_RETURN(std::unique_ptr<RecordTransaction> tx, AsStoreFault(BeginRecords(store_)));
  std::optional<absl::StatusOr<int64_t>> first_result;
  absl::StatusOr<Acquisition> acquired =
      Acquire(*tx, request, options_.lease, now, first, &first_result);
  const bool fresh_insert =
      acquired.ok() && !acquired->final.has_value() && acquired->claim.token == 1;
  if (first != nullptr && first_result.has_value() && !first_result->ok() && !fresh_insert &&
      !(acquired.ok() && acquired->final.has_value())) {
    // `first` went out with the claim and failed, and the claim found a record
    // this caller may take over: the failed statement has aborted the transaction
    // (PostgreSQL) the takeover needs. Start again without sending them together.
    tx->Rollback();
    IDEM_ASSIGN_OR_RETURN(tx, AsStoreFault(BeginRecords(store_)));
    first_result.reset();
    acquired = Acquire(*tx, request, options_.lease, now);
  }
  IDEM_ASSIGN_OR_RETURN(Acquisition a, std::move(acquired));
  if (a.final.has_value()) {
    tx->Rollback();
    return *std::move(a.final);
  }
  Record& claim = a.claim;
  const int64_t expected_token = claim.token;
  IDEM_FAILPOINT("guard.after_claim");

  absl::StatusOr<std::string> value = absl::UnknownError("handler not run");
  if (first == nullptr) {
    value = handler(*tx, 0);
  } else {
    // A store that did not send `first` with the claim (or a takeover) runs it now.
    if (!first_result.has_value()) first_result = tx->Exec(first->sql, first->params);
    if (first_result->ok()) {
      value = handler(*tx, **first_result);
    } else {
      value = first_result->status();
    }
  }
  if (!value.ok()) {
    tx->Rollback();
    if (IsRetryable(value.status())) return value.status();
    // A final failure: the handler's writes are gone with the rollback; cache the
    // failure in a transaction of its own. If someone claimed the key in between,
    // their record stands and ours is not written.
    IDEM_ASSIGN_OR_RETURN(std::unique_ptr<RecordTransaction> ftx,
                          AsStoreFault(BeginRecords(store_)));
    Record failed = claim;
    failed.state = RecordState::kFailed;
    failed.error = internal::FailureBytes(value.status());
    failed.lease_until = absl::InfinitePast();
    failed.updated_at = options_.clock->Now();
    IDEM_ASSIGN_OR_RETURN(std::optional<Record> now_existing,
                          AsStoreFault(ftx->InsertOrLoad(failed)));
    if (now_existing.has_value()) {
      // The rollback restored what this claim had acquired: a released key, or the
      // expired lease it took over (same token as before the takeover). Either is
      // still ours to end; anything else is another holder's and stands.
      const bool acquired_from_it =
          !now_existing->purged() &&
          (now_existing->state == RecordState::kReleased ||
           (now_existing->state == RecordState::kProcessing &&
            now_existing->token == claim.token - 1 && now_existing->lease_until <= now));
      if (acquired_from_it) {
        failed.token = now_existing->token + 1;
        IDEM_RETURN_IF_ERROR(
            AsStoreFault(ftx->Replace(failed, now_existing->token, now_existing->state)).status());
      } else {
        ftx->Rollback();
        return value.status();
      }
    }
    IDEM_RETURN_IF_ERROR(AsStoreFault(ftx->Commit()));
    return value.status();
  }
  IDEM_FAILPOINT("guard.after_handler");

  Record done = claim;
  done.state = RecordState::kSucceeded;
  done.result = *std::move(value);
  done.lease_until = absl::InfinitePast();
  done.updated_at = options_.clock->Now();
  // Before anything of the commit is sent: the result write goes out with it.
  IDEM_FAILPOINT("guard.before_commit");
  IDEM_ASSIGN_OR_RETURN(
      bool moved,
      AsStoreFault(tx->ReplaceAndCommit(done, expected_token, RecordState::kProcessing)));
  if (!moved) return absl::AbortedError("record moved during the handler; rolled back");
  IDEM_FAILPOINT("guard.after_commit");
  return Result{.outcome = Outcome::kExecuted, .value = std::move(done.result),
                .token = done.token, .expires_at = done.expires_at};
}

absl::Status Guard::Impl::Finish(const Request& request, int64_t token, RecordState final_state,
                                 std::string_view bytes) {
  IDEM_RETURN_IF_ERROR(Validate(request));
  IDEM_ASSIGN_OR_RETURN(std::unique_ptr<RecordTransaction> tx, AsStoreFault(BeginRecords(store_)));
  IDEM_ASSIGN_OR_RETURN(bool write, FinishIn(*tx, request, token, final_state, bytes));
  if (!write) return absl::OkStatus();
  return AsStoreFault(tx->Commit());
}

bool Guard::Impl::FinishNonBlocking(const Request& request, int64_t token, RecordState final_state,
                                    std::string_view bytes, NonBlockingCall& call) {
  absl::StatusOr<std::unique_ptr<RecordTransaction>> held = HoldNonBlocking(request);
  if (held.ok() && *held == nullptr) return false;
  if (!held.ok()) {
    call.Done(held.status());
    return true;
  }
  std::unique_ptr<RecordTransaction>& tx = GuardAccess::TransactionOf(call);
  tx = *std::move(held);
  GuardAccess::AcquiredOf(call).reset();
  absl::StatusOr<bool> write = FinishIn(*tx, request, token, final_state, bytes);
  if (!write.ok() || !*write) {
    tx.reset();  // rolled back: its key is free before the answer
    if (!write.ok()) {
      call.Done(write.status());
    } else {
      call.Done(Result{});
    }
    return true;
  }
  GuardAccess::CommitAsync(call);  // NonBlockingCall::Committed
  return true;
}

absl::StatusOr<bool> Guard::Impl::FinishIn(RecordTransaction& tx, const Request& request,
                                           int64_t token, RecordState final_state,
                                           std::string_view bytes) {
  IDEM_ASSIGN_OR_RETURN(std::optional<Record> existing,
                        AsStoreFault(tx.Load(request.tenant, request.key)));
  if (!existing.has_value()) {
    return absl::NotFoundError(absl::StrCat("no record for key '", request.key, "'"));
  }
  if (existing->purged()) {
    return absl::NotFoundError(absl::StrCat("the record of key '", request.key,
                                            "' was purged after its retention (expired)"));
  }
  if (existing->state != RecordState::kReleased && existing->biz_type != request.biz_type) {
    return absl::FailedPreconditionError(absl::StrCat(
        "key_reused: the key belongs to biz_type '", existing->biz_type, "'"));
  }
  if (existing->state == RecordState::kReleased && existing->token == token &&
      final_state == RecordState::kReleased) {
    return false;  // the same retryable failure reported again
  }
  // The seeded bug of the chaos test (tests/chaos): a stale token passes as the
  // current holder's. Only a test build can arm it.
  if (IDEM_FAILPOINT_ON("guard.finish.skip_token_check")) token = existing->token;
  if (existing->token != token || existing->state == RecordState::kReleased) {
    return absl::AbortedError(absl::StrCat("lease_lost: token ", token,
                                           " is not the current holder's (current token ",
                                           existing->token, ")"));
  }
  if (existing->state != RecordState::kProcessing) {
    // Already finished with this token: the same call again is fine, another is not.
    const bool same = existing->state == final_state &&
                      (final_state == RecordState::kSucceeded ? existing->result == bytes
                                                              : existing->error == bytes);
    if (same) return false;
    return absl::AlreadyExistsError(
        absl::StrCat("the claim with token ", token, " already ended as ",
                     AV(RecordStateName(existing->state)), " with other content"));
  }
  Record next = *existing;
  next.state = final_state;
  next.updated_at = options_.clock->Now();
  next.lease_until = absl::InfinitePast();
  if (final_state == RecordState::kSucceeded) {
    next.result = std::string(bytes);
  } else if (final_state == RecordState::kFailed) {
    next.error = std::string(bytes);
  }
  IDEM_ASSIGN_OR_RETURN(bool moved,
                        AsStoreFault(tx.Replace(next, token, RecordState::kProcessing)));
  if (!moved) return absl::AbortedError("lease_lost: the record moved");
  return true;
}

absl::Status Guard::Complete(const Request& request, int64_t token, std::string_view result) {
  return impl_->Finish(request, token, RecordState::kSucceeded, result);
}

absl::Status Guard::Fail(const Request& request, int64_t token, bool retryable,
                         std::string_view error) {
  return impl_->Finish(request, token, retryable ? RecordState::kReleased : RecordState::kFailed,
                       error);
}

absl::StatusOr<Record> Guard::Get(const Request& request) { return impl_->Get(request); }

std::optional<Result> ClaimIfKnown(Guard& guard, const Request& request) {
  return GuardAccess::Of(guard).ClaimIfKnown(request);
}

bool ClaimNonBlocking(Guard& guard, const Request& request, absl::Duration lease,
                      NonBlockingCall& call) {
  return GuardAccess::Of(guard).ClaimNonBlocking(request, lease, call);
}

bool CompleteNonBlocking(Guard& guard, const Request& request, int64_t token,
                         std::string_view result, NonBlockingCall& call) {
  return GuardAccess::Of(guard).FinishNonBlocking(request, token, RecordState::kSucceeded, result,
                                                  call);
}

bool FailNonBlocking(Guard& guard, const Request& request, int64_t token, bool retryable,
                     std::string_view error, NonBlockingCall& call) {
  return GuardAccess::Of(guard).FinishNonBlocking(
      request, token, retryable ? RecordState::kReleased : RecordState::kFailed, error, call);
}

namespace {

// The function forms' call: made per call, it deletes itself once answered.
template <typename Answer>
class NonBlockingFunctionCall final : public NonBlockingCall {
 public:
  explicit NonBlockingFunctionCall(std::function<void(Answer)> done) : done_(std::move(done)) {}

  void Done(absl::StatusOr<Result> answer) override {
    std::unique_ptr<NonBlockingFunctionCall> self(this);
    // Let go here: this may be the store's writer thread, which begins none.
    GuardAccess::TransactionOf(*this).reset();
    if constexpr (std::is_same_v<Answer, absl::Status>) {
      done_(answer.status());
    } else {
      done_(std::move(answer));
    }
  }

  // Starts it with `start`; false (nothing started) deletes it.
  static bool Start(std::function<void(Answer)> done,
                    const std::function<bool(NonBlockingCall&)>& start) {
    auto call = std::make_unique<NonBlockingFunctionCall>(std::move(done));
    if (!start(*call)) return false;
    call.release();  // Done deletes it (it may have already)
    return true;
  }

 private:
  std::function<void(Answer)> done_;
};

}  // namespace

bool ClaimNonBlocking(Guard& guard, const Request& request, absl::Duration lease,
                      std::function<void(absl::StatusOr<Result>)> done) {
  return NonBlockingFunctionCall<absl::StatusOr<Result>>::Start(
      std::move(done),
      [&](NonBlockingCall& call) { return ClaimNonBlocking(guard, request, lease, call); });
}

bool CompleteNonBlocking(Guard& guard, const Request& request, int64_t token,
                         std::string_view result, std::function<void(absl::Status)> done) {
  return NonBlockingFunctionCall<absl::Status>::Start(std::move(done), [&](NonBlockingCall& call) {
    return CompleteNonBlocking(guard, request, token, result, call);
  });
}

bool FailNonBlocking(Guard& guard, const Request& request, int64_t token, bool retryable,
                     std::string_view error, std::function<void(absl::Status)> done) {
  return NonBlockingFunctionCall<absl::Status>::Start(std::move(done), [&](NonBlockingCall& call) {
    return FailNonBlocking(guard, request, token, retryable, error, call);
  });
}

absl::StatusOr<Record> Guard::Impl::Get(const Request& request) {
  IDEM_RETURN_IF_ERROR(ValidateTenant(request.tenant, options_.limits));
  IDEM_RETURN_IF_ERROR(ValidateKey(request.key, options_.limits));
  IDEM_ASSIGN_OR_RETURN(std::optional<Record> record,
                        AsStoreFault(store_.Get(request.tenant, request.key)));
  if (!record.has_value() || (record->state == RecordState::kReleased && !record->purged())) {
    return absl::NotFoundError(absl::StrCat("no record for key '", request.key, "'"));
  }
  if (!request.biz_type.empty() && record->biz_type != request.biz_type) {
    return absl::FailedPreconditionError(
        absl::StrCat("key_reused: the key belongs to biz_type '", record->biz_type, "'"));
  }
  return *std::move(record);
}

}  // namespace idem
