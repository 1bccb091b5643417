// The Guard's entry points for a server's network threads (src/http/api/claims.cc):
// answers that need no I/O, and claims and finishes that never wait. Internal to
// idem.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "idem/guard.h"
#include "store/backend.h"

namespace idem {

// One claim, complete or fail started without blocking, as the caller keeps it
// (one per request; started again only after Done): it holds the transaction
// until the commit has ended and is told the answer. `request` must stay alive
// until Done too.
class NonBlockingCall : private RecordTransaction::CommitDone {
 public:
  NonBlockingCall() = default;
  NonBlockingCall(const NonBlockingCall&) = delete;
  NonBlockingCall& operator=(const NonBlockingCall&) = delete;

  // The blocking call's answer: a claim's Result, or for a complete or fail an
  // empty Result when it is OK. Called once per started call (see ClaimNonBlocking
  // for the thread); it may destroy this object.
  virtual void Done(absl::StatusOr<Result> answer) = 0;

 protected:
  // Leaves its ended transaction to this thread's next call (RenewNonBlocking).
  ~NonBlockingCall();

 private:
  friend struct GuardAccess;
  void Committed(absl::Status status) override;

  // The started call's transaction, kept (ended) until the next start or the
  // object's end, so that it is let go on the caller's thread.
  std::unique_ptr<RecordTransaction> tx_;
  // A claim's answer once its write is durable; nullopt for a complete or fail.
  std::optional<Result> acquired_;
};

// The answer Claim() would give when it needs no I/O: the store holds the key's
// final record in memory (StoreBackend::PeekDecided), so kReplayed, kCachedFailure,
// kKeyReused or kFingerprintMismatch; std::nullopt otherwise (also for an invalid
// request), and then Claim() decides. Never blocks: for a network thread.
std::optional<Result> ClaimIfKnown(Guard& guard, const Request& request);

// Guard::Claim(), Complete() and Fail() for a server's network thread, on a
// transaction of StoreBackend::BeginNonBlocking(): nothing waits on a lock, the
// disk's sync or another thread. Each returns false, having changed nothing, when
// the store has no such transactions, the request is invalid, or the key is locked
// by another transaction at this instant (RecordTransaction::TryLock answers
// kWouldBlock; for a claim, also when it lost a race on the record, kAborted): the
// caller then makes the blocking call, which waits or words the error. Otherwise
// `done` is called once with the blocking call's answer (without Claim()'s read of
// StoreBackend::LookupDecided, which may be a round trip): on this thread before
// the return when nothing is written, else on the store's writer thread once the
// write is durable, where it must be quick.
//
// The forms taking a NonBlockingCall allocate nothing for the call: the caller's
// object holds the transaction until the write is durable and hears the answer
// (NonBlockingCall::Done); those taking a function wrap it in one.
bool ClaimNonBlocking(Guard& guard, const Request& request, absl::Duration lease,
                      NonBlockingCall& call);
bool CompleteNonBlocking(Guard& guard, const Request& request, int64_t token,
                         std::string_view result, NonBlockingCall& call);
bool FailNonBlocking(Guard& guard, const Request& request, int64_t token, bool retryable,
                     std::string_view error, NonBlockingCall& call);
bool ClaimNonBlocking(Guard& guard, const Request& request, absl::Duration lease,
                      std::function<void(absl::StatusOr<Result>)> done);
bool CompleteNonBlocking(Guard& guard, const Request& request, int64_t token,
                         std::string_view result, std::function<void(absl::Status)> done);
bool FailNonBlocking(Guard& guard, const Request& request, int64_t token, bool retryable,
                     std::string_view error, std::function<void(absl::Status)> done);

// One item of DecideBatchNonBlocking: a claim (Guard::Claim(request, lease)), a
// complete (Guard::Complete(request, token, bytes)) or a fail (Guard::Fail(request,
// token, retryable, bytes)).
struct BatchCall {
  enum class Op { kClaim, kComplete, kFail };
  Op op = Op::kClaim;
  Request request;
  absl::Duration lease;    // kClaim
  int64_t token = 0;       // kComplete, kFail
  bool retryable = false;  // kFail
  std::string_view bytes;  // kComplete's result, kFail's error; must outlive the call
};

// What DecideBatchNonBlocking made of one item.
struct BatchDecision {
  enum class State {
    kDecided,     // `claim` (kClaim) or `finish` is the single call's answer
    kBusy,        // its key is held by another transaction: make the single call
    kOverBudget,  // not decided: the answers before it reached the byte budget
  };
  State state = State::kBusy;
  absl::StatusOr<Result> claim = absl::UnknownError("not decided");
  absl::Status finish;
};

// The items of `calls` decided in their order in ONE transaction of
// StoreBackend::BeginNonBlocking() and made durable by its one commit, each with the
// answer its single call (Claim, Complete, Fail) would give, and an item of a key
// seeing the effects of the items of that key before it. An item whose key another
// transaction holds at this instant is left kBusy, and so is every later item of
// that key (the caller makes their single calls after `done`, in order); once the
// stored values (result, error) of the answers reach `value_budget` bytes, the rest
// are left kOverBudget. With `all`, a kBusy item ends it all instead: nothing is
// done and false returned. False as well, having done nothing, when the store has
// no such transactions. Otherwise true, and `done` is called once, with
// `*decisions` (one per item, in order) filled in: on this thread before the return
// when nothing was written, else on the store's writer thread once the write is
// durable, where it must be quick. When that write fails, every item decided in the
// transaction answers its error. `*decisions` must stay alive until then. Never
// blocks: for a network thread.
bool DecideBatchNonBlocking(Guard& guard, absl::Span<const BatchCall> calls, bool all,
                            size_t value_budget, std::vector<BatchDecision>* decisions,
                            std::function<void()> done);

}  // namespace idem
