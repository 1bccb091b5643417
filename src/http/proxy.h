// Proxy: `idem proxy`, the Idempotency-Key header semantics (IETF
// draft-ietf-httpapi-idempotency-key-header, SPEC §11) in front of any HTTP API.
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
// answers).
//
// Thread safety: safe for concurrent use (Handler).
#pragma once

#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "http/handler.h"
#include "http/metrics.h"
#include "http/upstream.h"
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
};

// The key of an Idempotency-Key value: an RFC 8941 sf-string (parameters after it
// are ignored) or a bare token of visible ASCII without separators. kInvalidArgument
// naming what is wrong.
absl::StatusOr<std::string> ParseIdempotencyKey(std::string_view value);

class Proxy : public Handler {
 public:
  // `guard`, `upstream` and `metrics` must outlive the Proxy.
  Proxy(Guard& guard, const Upstream& upstream, Metrics& metrics, ProxyOptions options);

  Reply Handle(const HttpRequest& request) override;
  Reply Poll(const WaitingClaim& waiting) override;  // never waits: 500
  std::optional<Reply> BeforeBody(std::string_view target,
                                  std::string_view authorization) const override;
  bool wants_headers() const override { return true; }
  Metrics& metrics() override { return metrics_; }

 private:
  Reply PassThrough(const HttpRequest& request);
  Reply Guarded(const HttpRequest& request, std::string key);
  // The fingerprint of `request` (method, target, body digest).
  std::string FingerprintOf(const HttpRequest& request) const;
  // The response to send and the bytes to store for an upstream answer.
  HttpResponse Relay(const UpstreamResponse& response) const;

  Guard& guard_;
  const Upstream& upstream_;
  Metrics& metrics_;
  const ProxyOptions options_;
};

}  // namespace idem::http
