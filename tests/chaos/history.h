// The history of a chaos run: every operation a client sent to `idem serve` (its
// HTTP API), with when it was invoked, when its answer came (or did not), and what the
// answer said. The checker (checker.h) judges a History together with the effect
// log (effect_log.h); the driver (driver.h) fills one.
//
// An Operation is recorded once it is over (answered, or failed without an answer),
// so a History only holds finished operations; one whose answer was lost is recorded
// with status 0 and the transport error, exactly as the client saw it.
//
// Thread safety: History::Record and History::Operations may be called from any
// number of threads at once; an Operation is a plain value.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace idem::chaos {

using Clock = std::chrono::steady_clock;

// What the client asked for.
enum class OpKind {
  kClaim,     // POST /v1/claims during the run
  kComplete,  // POST /v1/claims/complete
  kFail,      // POST /v1/claims/fail
  kReplay,    // the final read after the run: POST /v1/claims of a key, faults healed
};

// "claim", "complete", "fail", "replay".
std::string_view OpKindName(OpKind kind);

struct Operation {
  int client = 0;  // the client thread's id
  std::string key;
  OpKind kind = OpKind::kClaim;
  Clock::time_point invoke;    // just before the request was written
  Clock::time_point complete;  // when the answer (or the transport error) came
  int status = 0;              // HTTP status; 0 = no answer (reset, refused, timed out)
  // The answer's `outcome` member ("acquired", "replayed", "in_progress",
  // "lease_lost", ...), "" when it has none; for status 0 the transport error text.
  std::string error;
  std::string body;  // the answer's body as received
  // claim answered 201: the token granted; complete/fail: the token sent; else 0.
  int64_t token = 0;
  // claim answered 201: whether it took over an expired lease, and the token it
  // took over from (0 when not a takeover).
  bool takeover = false;
  int64_t previous_token = 0;
  int64_t lease_ms = 0;  // claim: the lease asked for
  // complete: the result sent, as raw JSON bytes; fail: whether it was retryable.
  std::string result;
  bool retryable = false;
};

// Fills status, error, body and, for an answered claim, token/takeover/previous_token
// of `op` from an HTTP answer. `transport_error` non-empty means no answer came
// (status 0). Malformed bodies leave the fields they would have filled at 0/"".
void FillAnswer(Operation* op, int status, std::string_view body,
                std::string_view transport_error);

// The raw bytes of the top-level member `name` of the JSON object `json` (e.g.
// `result` of a replay answer), exactly as they appear there, or "" when `json` is
// not an object or has no such member. Used to compare results byte for byte.
std::string RawMember(std::string_view json, std::string_view name);

// One line describing `op` for a human: client, key, kind, times (ms since `t0`),
// token, status, outcome and body.
std::string FormatOperation(const Operation& op, Clock::time_point t0);

// An append-only list of finished operations.
class History {
 public:
  // Appends `op`.
  void Record(Operation op);
  // A copy of every operation recorded so far, in the order recorded.
  std::vector<Operation> Operations() const;
  size_t size() const;

 private:
  mutable std::mutex mu_;
  std::vector<Operation> ops_;  // guarded by mu_
};

}  // namespace idem::chaos
