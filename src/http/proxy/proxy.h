// Proxy: `idem proxy`, the Idempotency-Key header semantics (IETF
// draft-ietf-httpapi-idempotency-key-header) in front of any HTTP API.
//
// For a request whose method is guarded (POST and PATCH by default):
//  - the key is the Idempotency-Key header, an RFC 8941 string ("abc") or a bare
//    token (abc); missing → 400 (unless the path is under an optional prefix, then
//    the request passes through), malformed or given twice → 400;
//  - the fingerprint is SHA-256 over method, target and the body's digest (of its
//    RFC 8785 canonical form with canonical_json, when the body is JSON);
//  - the key is claimed in the store (lease mode, `lease` long); the first request
//    is forwarded, a concurrent retry gets 409, a retry with another fingerprint 422,
//    a retry after the answer the stored status, headers and body with
//    "Idempotent-Replayed: true";
//  - upstream 2xx and final 4xx are stored (not 408, 425 and 429: the client is
//    meant to retry those); 5xx, timeouts and connection errors release the key, so
//    the retry is sent again; the store down → 503 and nothing is forwarded.
// Other methods, and unkeyed requests under an optional prefix, pass through untouched.
//
// Keys are global, or per client when client_header is set (the tenant is a digest
// of that header's value, e.g. Authorization: one client cannot see another's
// answers; a request that gives that header more than once is 400 and is not
// forwarded). Global keys are shared by every client: B sending A's key and request
// gets A's answer; a keyed request with Authorization or Cookie while keys are global
// is logged as a warning (at most once an hour).
//
// Threads: through the Server, every request is taken by HandleAsync (its Call's
// StartAsync) and runs on the Proxy's own threads: the claim (and a replay) on
// `store_threads`, the forwarded call and the complete or fail after it on
// `upstream_threads`. So replays of
// finished keys never queue behind upstream calls that hang, and the upstream
// timeout counts from the request's arrival (HttpRequest::received), time queued
// for a thread included.
//
// Thread safety: safe for concurrent use (Handler).
#pragma once

#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "http/client/upstream.h"
#include "http/server/handler.h"
#include "http/server/metrics.h"
#include "http/server/problem.h"
#include "idem/guard.h"

namespace idem::http {

struct ProxyOptions {
  std::string biz_type = "http";                  // every proxied key's biz_type
  std::set<std::string> methods = {"POST", "PATCH"};  // methods that need a key
  std::vector<std::string> optional_prefixes;     // paths where the key may be left out
  std::string client_header;                      // "": keys are global
  bool canonical_json = false;                    // fingerprint JSON bodies canonically
  absl::Duration lease = absl::Seconds(60);       // longer than the upstream timeout
  bool keep_set_cookie = false;                   // store and replay Set-Cookie
  // The longest Retry-After of a 409 in_progress: the lease's time left, capped.
  absl::Duration retry_after_max = kDefaultRetryAfterMax;
  // Threads for claims (and replays), and for upstream calls; 0 and 0: none, every
  // request is answered by Handle() on the caller's thread (HandleAsync declines).
  int store_threads = 16;
  int upstream_threads = 16;
};

// The key of an Idempotency-Key value: an RFC 8941 sf-string (parameters after it
// are ignored) or a bare token of visible ASCII without separators. kInvalidArgument
// naming what is wrong.
absl::StatusOr<std::string> ParseIdempotencyKey(std::string_view value);

class Proxy : public Handler {
 public:
  // `guard`, `upstream` and `metrics` must outlive the Proxy.
  Proxy(Guard& guard, const Upstream& upstream, Metrics& metrics, ProxyOptions options);
  // Waits for the requests its threads still hold (each ends within the upstream
  // timeout of its arrival).
  ~Proxy() override;

  // A Call that runs HandleAsync, or Handle on the Server's pool when the Proxy
  // has no threads.
  std::unique_ptr<Call> Begin(HttpRequest request) override;
  // Answers `request` on the calling thread. Blocks on the store and the upstream.
  Reply Handle(const HttpRequest& request);
  // Takes `request` (moved from) onto the Proxy's threads and returns true; `resume`
  // is called once, from one of them, with its answer. false (nothing taken) when
  // the Proxy has no threads. Does not block.
  bool HandleAsync(HttpRequest& request, Resume resume);
  bool wants_headers() const override { return true; }
  Metrics& metrics() override { return metrics_; }

 private:
  struct Threads;
  // A guarded request's claimed key: forwarded, it is completed or failed.
  struct Claimed {
    Request request;  // as claimed (biz_type, key, fingerprint, tenant)
    int64_t token = 0;
    bool takeover = false;
    int64_t previous_token = 0;
  };

  // What can be decided before the upstream is called (blocks on the store): the
  // answer (a 400, a replay, 409, 422, 503, ...), or nullopt to forward, with the
  // key claimed in `*claimed` (left empty for a request that passes through).
  std::optional<Reply> Admit(const HttpRequest& request, std::optional<Claimed>* claimed);
  std::optional<Reply> AdmitGuarded(const HttpRequest& request, std::string key,
                                    std::optional<Claimed>* claimed);
  // The parts of AdmitGuarded. Scopes the key to the client named by
  // --client-header (in claim_request->tenant), or answers why it cannot.
  std::optional<Reply> ScopeToClient(const HttpRequest& request, Request* claim_request);
  // The answer to a claim the store refused (`status`): 400 or 503.
  Reply AnswerClaimError(const HttpRequest& request, const absl::Status& status);
  // The answer a claim decides without the upstream (a replay, 409, 422, 410), or
  // nullopt when it was acquired and the request is to be forwarded.
  std::optional<Reply> AnswerSettledClaim(const HttpRequest& request, const Result& claim,
                                          const std::string& tenant_shown) const;
  // Calls the upstream and, for a claimed key, completes or releases it.
  Reply Forward(const HttpRequest& request, const std::optional<Claimed>& claimed);
  // The fingerprint of `request` (method, target, body digest).
  std::string FingerprintOf(const HttpRequest& request) const;
  // The response to send for an upstream answer (its body moved in).
  HttpResponse Relay(UpstreamResponse&& response) const;
  // Logs, at most once an hour, that keys are global while clients authenticate.
  void WarnSharedKeys(const HttpRequest& request);

  Guard& guard_;
  const Upstream& upstream_;
  Metrics& metrics_;
  const ProxyOptions options_;
  std::atomic<int64_t> shared_keys_warned_ns_{std::numeric_limits<int64_t>::min()};
  std::unique_ptr<Threads> threads_;  // null without threads
};

}  // namespace idem::http
