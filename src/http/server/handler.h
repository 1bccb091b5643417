// Handler: what the Server (server.h) asks of the application behind it, the idem
// API (api.h) or the Idempotency-Key proxy (proxy.h), and the Reply it answers with.
//
// Thread safety: Handle, Poll and BeforeBody are called concurrently, from the
// Server's worker threads (Handle, Poll) and I/O threads (BeforeBody).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/time/time.h"
#include "http/server/metrics.h"
#include "http/server/route.h"
#include "http/types.h"

namespace idem::http {

// A request that waits (a claim with wait_ms); opaque to the Server.
struct WaitingClaim;

struct Reply {
  HttpResponse response;
  // The route the answer is counted under (metrics, the access log).
  Route route = Route::kOther;
  // The guard outcome the response reports ("acquired", "lease_lost", ...), or "".
  std::string outcome;
  // The authenticated tenant, for the access log; "" before authentication.
  std::string tenant;
  // Non-null while a claim is waiting: `response` is what to send if the wait must
  // end now (409 in_progress); otherwise call Handler::Poll(*waiting) again after
  // `poll_after`, or sooner when the Handler's Watch wakes it.
  std::shared_ptr<const WaitingClaim> waiting;
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
  virtual ~Handler() = default;

  // Answers `request`. May block (on the store, on an upstream). Never throws.
  virtual Reply Handle(const HttpRequest& request) = 0;

  // The answer to `request` when it can be given at once, without blocking (no
  // store or network I/O), on the network thread that read it; nullopt sends the
  // request to Handle() on the worker pool, and what this call learnt of it (its
  // parsed body, say) may be left in request.prepared for Handle() to reuse instead
  // of doing that work twice. Never throws.
  virtual std::optional<Reply> HandleWithoutBlocking(HttpRequest& request) {
    (void)request;
    return std::nullopt;
  }

  // Where the rest of an asynchronous request goes (HandleAsync): the Server runs
  // the function it is given on the request's network thread, and sends its Reply.
  using Resume = std::function<void(std::function<Reply()>)>;

  // For a request HandleWithoutBlocking did not answer: starts it without blocking
  // this network thread, when its store write can be made so (rocksdb://), and
  // returns true; once the write is durable a store thread calls `resume` with the
  // rest of the work (building the answer), once. false: nothing was done, and the
  // request goes to Handle() on the worker pool. Never throws.
  virtual bool HandleAsync(HttpRequest& request, Resume resume) {
    (void)request;
    (void)resume;
    return false;
  }

  // Re-tries a request that waits (Reply::waiting). May block. Never throws.
  virtual Reply Poll(const WaitingClaim& waiting) = 0;

  // Checked when a request's header is in and it has a body still to come: the
  // answer that ends it there, before any of the body is read or a 100 Continue
  // sent, or nullopt to read on. Does not block; never throws.
  virtual std::optional<Reply> BeforeBody(std::string_view target,
                                          std::string_view authorization) const = 0;

  // Asks for `wake` to be called (once, from any thread) when what `waiting` waits
  // for may have changed, so it is polled at once; the returned handle, while kept,
  // keeps the request; nullptr when the Handler cannot tell (it is then polled on
  // its timer only).
  virtual std::shared_ptr<void> Watch(const WaitingClaim& waiting, std::function<void()> wake) {
    (void)waiting;
    (void)wake;
    return nullptr;
  }

  // Whether HttpRequest::headers is to be filled (the proxy forwards them; the API
  // needs none, and filling them costs allocations).
  virtual bool wants_headers() const { return false; }

  virtual Metrics& metrics() = 0;
};

}  // namespace idem::http
