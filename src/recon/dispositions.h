// What is done about each difference, configurable per
// class, each idempotent:
//
//   missing_local     replay: POST the upstream row to a configured URL with
//                     Idempotency-Key = the key (behind `idem proxy` or the guard, a
//                     second delivery is answered, not run again), or a ticket
//   missing_upstream  a ticket for a person; never an automatic refund (no action
//                     but ticket or none is accepted for it)
//   status_mismatch   repush: POST the upstream event again when the local status is
//                     stuck in an intermediate state (another final state gets a ticket)
//   amount_mismatch   a high-severity ticket
//   duplicate         a high-severity ticket
//
// Every decision is first a row of recon_ticket (unique on source, key, class), so a
// rerun over the same differences adds no ticket and sends nothing again: a replay
// or re-push row is `pending` until its POST got a 2xx, then `done`; pending rows are
// retried by the next run, whatever its window.
//
// Thread safety: ApplyDispositions may run concurrently on distinct sources.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "http/client/upstream.h"
#include "http/types.h"
#include "idem/store.h"
#include "recon/comparer.h"

namespace idem::recon {

enum class Action : uint8_t { kNone, kTicket, kReplay, kRepush };

// "none", "ticket", "replay", "repush".
std::string_view ActionName(Action a);

// Parses "CLASS=ACTION" (--on). kInvalidArgument for an unknown class or action, or
// one the class does not allow (missing_upstream: ticket or none; replay only for
// missing_local, repush only for status_mismatch).
absl::Status ParseActionFlag(std::string_view text, std::array<Action, kClassCount>* plan);

// What sending a replay or re-push ended with.
struct SendOutcome {
  absl::Status status;   // OK when the effect is done (or was already: the receiver
                         // dedupes by key); any error leaves the row pending
  int http_status = 0;   // the status of an answer that refused it (not 2xx); 0 none
  std::string response;  // that answer's first kResponseExcerptBytes bytes, escaped
                         // (EscapeControl)
};

// Sends the POST of a replay or a re-push. Implemented over HTTP by
// NewHttpActionSink; a C++ caller may implement it with a callback that runs the
// effect through its Guard with the key. Called on the thread of ApplyDispositions.
class ActionSink {
 public:
  virtual ~ActionSink() = default;
  virtual SendOutcome Send(Action action, const std::string& key, const std::string& payload) = 0;
};

// A header sent with every replay and re-push (ParseReplayHeaders checks them).
using Header = std::pair<std::string, std::string>;

// The POST of a replay or re-push of `key` with `payload` (JSON): Idempotency-Key =
// the key, Content-Type, X-Request-Id "recon", then `extra` (e.g. Authorization).
// kInvalidArgument, and nothing to send, for a key ValidateHeaderKey refuses (a CR
// or LF in it would add header lines, or a second request, to what is sent).
absl::StatusOr<http::HttpRequest> ActionRequest(const std::string& key, const std::string& payload,
                                                const std::vector<Header>& extra = {});

// The target ActionRequest is sent to on `to`: its URL's path, or "/" for none.
std::string ActionTarget(const http::Upstream& to);

// POSTs JSON to `replay_url` / `repush_url` (http://HOST[:PORT]/PATH; "" when the
// action is not configured), with Idempotency-Key = the key and `headers`.
// kInvalidArgument for a malformed URL.
absl::StatusOr<std::unique_ptr<ActionSink>> NewHttpActionSink(const std::string& replay_url,
                                                              const std::string& repush_url,
                                                              absl::Duration timeout,
                                                              std::vector<Header> headers = {});

// A replay or re-push that was not done in a run.
struct ActionFailure {
  std::string id;  // the ticket's (TicketId)
  std::string key;
  std::string cls;
  std::string action;
  int http_status = 0;   // of the answer that refused it; 0 when none came
  std::string response;  // its first bytes, escaped
  std::string error;     // what went wrong
};

// How many ActionFailures a DispositionResult keeps (the first ones).
inline constexpr size_t kMaxReportedFailures = 20;

struct DispositionResult {
  int64_t new_rows = 0;                 // recon_ticket rows this run added
  int64_t sent = 0;                     // replays and re-pushes done in this run
  int64_t failed = 0;                   // replays and re-pushes still pending after this run
  std::vector<ActionFailure> failures;  // the first kMaxReportedFailures of them
};

// Records every difference in recon_ticket as `plan` says, then sends every pending
// replay and re-push of `source` through `sink` (nullptr: none is configured; they
// stay pending). Errors: the store's (kUnavailable); a failed POST is not an error
// but counted in DispositionResult::failed.
absl::StatusOr<DispositionResult> ApplyDispositions(Store& store, const std::string& source,
                                                    const std::string& run_id,
                                                    const std::vector<Difference>& differences,
                                                    const std::array<Action, kClassCount>& plan,
                                                    ActionSink* sink, int64_t now_us);

}  // namespace idem::recon
