// Handler: what the Server (server.h) asks of the application behind it, the idem
// API (api/api.h), the Idempotency-Key proxy (proxy/proxy.h) or the /metrics-only
// listener (metrics_endpoint.h); the Call it makes of each request; and the Reply it
// answers with.
//
// A request is routed once, when its header is in (Handler::Begin): the Call holds
// what the Handler made of it (its route, the parts of its target, later its parsed
// body) for every step after. The Server then asks the Call, in this order, and
// stops at the first that answers: BeforeBody (only when a body is still to come),
// AnswerWithoutBlocking, StartAsync, and Answer on the worker pool. A Reply whose
// `waiting` is set is polled again through it (Waiting::Poll), never through the
// Handler: a Handler whose requests never wait has nothing to implement for it.
//
// Thread safety: Begin, BeforeBody, AnswerWithoutBlocking and StartAsync run on the
// Server's I/O threads, Answer and Waiting::Poll on its worker threads, for many
// requests at once; one Call is used by one thread at a time.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/time/time.h"
#include "http/server/metrics.h"
#include "http/server/route.h"
#include "http/types.h"

namespace idem::http {

struct Reply;

// A request that waits (a claim with wait_ms): the Server tries it again after
// Reply::poll_after, or sooner when Watch wakes it. Opaque to the Server otherwise.
class Waiting {
 public:
  virtual ~Waiting() = default;

  // Tries the request again: a Reply waiting on, or its final answer. May block.
  // Never throws.
  virtual Reply Poll() const = 0;

  // Asks for `wake` to be called (once, from any thread) when what this waits for
  // may have changed, so it is polled at once; the returned handle, while kept,
  // keeps the request; nullptr when that cannot be told (it is then polled on its
  // timer only).
  virtual std::shared_ptr<void> Watch(std::function<void()> wake) const {
    (void)wake;
    return nullptr;
  }
};

struct Reply {
  HttpResponse response;
  // The route the answer is counted under (metrics, the access log).
  Route route = Route::kOther;
  // The guard outcome the response reports ("acquired", "lease_lost", ...), or "".
  std::string outcome;
  // The authenticated tenant, for the access log; "" before authentication.
  std::string tenant;
  // Non-null while a claim is waiting: `response` is what to send if the wait must
  // end now (409 in_progress); otherwise call waiting->Poll() after `poll_after`,
  // or sooner when its Watch wakes it.
  std::shared_ptr<const Waiting> waiting;
  absl::Duration poll_after = absl::Milliseconds(15);
  // The store wrote this request's claim, complete or fail: it takes writes again,
  // so an outage is over (StoreHealth::Up; /readyz's ping is the other way). Not
  // set for answers that never reached it (bad input, a duplicate answered from a
  // cache tier, a fail-open claim) nor for reads, which a store refusing writes
  // may still answer (rocksdb:// after a failed WAL write): each such request in
  // an outage logged "store available again", and the next "store unavailable".
  bool store_wrote = false;
};

class Handler {
 public:
  // Where the rest of an asynchronous request goes (Call::StartAsync): the Server
  // runs the function it is given on the request's network thread, and sends its
  // Reply.
  using Resume = std::function<void(std::function<Reply()>)>;

  // One request, routed.
  class Call {
   public:
    explicit Call(HttpRequest request) : request_(std::move(request)) {}
    virtual ~Call() = default;
    Call(const Call&) = delete;
    Call& operator=(const Call&) = delete;

    // The request. Begin gets it without its body and headers; the Server fills
    // in `body` (and `headers`, for a Handler that wants_headers) once read, before
    // AnswerWithoutBlocking.
    HttpRequest& request() { return request_; }
    const HttpRequest& request() const { return request_; }

    // Checked when the header is in and a body is still to come: the answer that
    // ends the request there, before any of the body is read or a 100 Continue
    // sent, or nullopt to read on. Does not block; never throws.
    virtual std::optional<Reply> BeforeBody() const { return std::nullopt; }

    // The answer when it can be given at once, without blocking (no store or
    // network I/O), on the network thread that read the request; nullopt goes on
    // to StartAsync. What it learnt (the parsed body, say) stays in the Call for
    // the steps after. Never throws.
    virtual std::optional<Reply> AnswerWithoutBlocking() { return std::nullopt; }

    // Starts the request without blocking this network thread, when its I/O can
    // be made so, and returns true: `resume` is then called once, from another
    // thread, with the rest of the work (building the answer). false: nothing was
    // done, and Answer() runs on the worker pool. The Call outlives the answer.
    // Never throws.
    virtual bool StartAsync(const Resume& resume) {
      (void)resume;
      return false;
    }

    // Answers the request. May block (on the store, on an upstream). Never throws.
    virtual Reply Answer() = 0;

   protected:
    HttpRequest request_;
  };

  virtual ~Handler() = default;

  // Routes `request`, whose header is in (method, target, authorization,
  // request_id, received; no body nor headers yet). Does not block; never throws.
  virtual std::unique_ptr<Call> Begin(HttpRequest request) = 0;

  // Whether HttpRequest::headers is to be filled (the proxy forwards them; the API
  // needs none, and filling them costs allocations).
  virtual bool wants_headers() const { return false; }

  virtual Metrics& metrics() = 0;
};

}  // namespace idem::http
