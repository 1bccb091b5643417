// Api: the routes and handlers of the `idem serve` HTTP API (SPEC §11), apart from
// any socket so it can be driven directly by tests. The server (server.h) turns Beast
// messages into HttpRequest values, runs Handle() on a worker pool, and writes the
// HttpResponse back.
//
//   POST /v1/claims                    Guard::Claim   201 acquired | 200 replayed,
//                                                     cached_failure | 409 | 422
//   POST /v1/claims/complete           Guard::Complete
//   POST /v1/claims/fail               Guard::Fail
//   GET  /v1/records/{biz_type}/{key}  Guard::Get (percent-decoded segments)
//   GET  /healthz                      200 while the process serves
//   GET  /readyz                       200 when Store::Ping() is OK, else 503
//   GET  /metrics                      Prometheus text
//
// Every /v1/ call needs "Authorization: Bearer <token>"; the token names the tenant,
// which becomes Request::tenant, so tenants never see each other's keys. A missing or
// malformed header, or a token no tenant has, is 401 with "WWW-Authenticate: Bearer".
// /healthz, /readyz and /metrics need no token (and ignore one), unless
// ApiOptions::metrics_require_token puts /metrics behind any tenant's token.
//
// A claim with wait_ms > 0 that meets a live lease does not block: Handle() returns
// a Reply whose `waiting` is set; the caller re-polls with Poll() after a short delay
// (the server uses a timer) until `waiting` comes back empty, or sends the Reply's
// current response (409 in_progress) if it has to stop early.
//
// The caller counts each final answer with Metrics::CountRequest(reply.route,
// status, reply.outcome) when it sends it.
//
// Thread safety: an Api is safe for concurrent use. `guard`, `store` and `metrics`
// must outlive it. Handle() and Poll() block on the store (SQLite), so servers call
// them off their I/O threads.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/time/time.h"
#include "http/metrics.h"
#include "http/types.h"
#include "idem/clock.h"
#include "idem/guard.h"
#include "idem/store.h"

namespace idem::http {

struct Tenant {
  std::string name;
  std::string token;
};

struct ApiOptions {
  std::vector<Tenant> tenants;
  size_t max_body_bytes = 1 << 20;  // larger bodies are 413
  bool metrics_require_token = false;
  const Clock* clock = Clock::Real();  // not owned; Retry-After and wait deadlines
};

// A claim that met a live lease and is waiting for it (wait_ms). Opaque to callers.
struct WaitingClaim {
  Request request;
  absl::Duration lease;
  absl::Time deadline;
};

struct Reply {
  HttpResponse response;
  // The route template, for metrics ("/v1/claims", "/healthz", "other", ...).
  std::string route;
  // The guard outcome the response reports ("acquired", "lease_lost", ...), or "".
  std::string outcome;
  // Non-null while a claim is waiting: `response` is what to send if the wait must
  // end now (409 in_progress); otherwise call Api::Poll(*waiting) again shortly.
  std::shared_ptr<const WaitingClaim> waiting;
};

class Api {
 public:
  Api(Guard& guard, Store& store, Metrics& metrics, ApiOptions options);

  // Routes and answers `request`. Blocks on the store. Never throws.
  Reply Handle(const HttpRequest& request);

  // Re-tries a waiting claim. Blocks on the store. Never throws.
  Reply Poll(const WaitingClaim& waiting);

  // Answers for conditions found before a request reaches Handle() (the server's
  // parser): 413 body too large, 400 malformed HTTP, 431 header too large.
  static HttpResponse BodyTooLarge(size_t limit);
  static HttpResponse BadHttp(std::string_view what);
  static HttpResponse HeaderTooLarge();

  Metrics& metrics() { return metrics_; }
  const ApiOptions& options() const { return options_; }

 private:
  Reply Claims(const HttpRequest& request, const std::string& tenant);
  Reply Complete(const HttpRequest& request, const std::string& tenant);
  Reply Fail(const HttpRequest& request, const std::string& tenant);
  Reply GetRecord(std::string_view biz_type_enc, std::string_view key_enc,
                  const std::string& tenant);
  Reply Ready();
  Reply ClaimAnswer(const Request& request, absl::Duration lease, absl::Time deadline);

  // Returns the tenant named by the bearer token, or nullptr.
  const Tenant* Authenticate(std::string_view authorization) const;
  // Turns a non-OK guard/store status into a problem response; counts store errors.
  Reply StatusReply(const absl::Status& status, std::string_view action);
  absl::Status ValidateIds(std::string_view biz_type, std::string_view key) const;

  Guard& guard_;
  Store& store_;
  Metrics& metrics_;
  const ApiOptions options_;
};

// Percent-decodes one path segment ("%2F" -> "/"); kInvalidArgument for a bad escape.
absl::StatusOr<std::string> PercentDecode(std::string_view segment);

}  // namespace idem::http
