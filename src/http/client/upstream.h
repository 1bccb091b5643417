// Upstream: the HTTP/1.1 client of idem, to one origin given as
// http://HOST[:PORT][/BASE]: `idem proxy` forwards requests with it, `idem recon`
// delivers dispositions, the Kafka bridge's HTTP sink and `idem keys analyze
// --server` send theirs. Each request gets its own connection (no
// reuse: a POST sent on a stale keep-alive connection could not be retried safely),
// and one deadline covers resolving, connecting, writing and reading.
//
//   absl::StatusOr<UpstreamUrl> url = ParseUpstreamUrl("http://127.0.0.1:8080/api");
//   Upstream upstream(*url, {.timeout = absl::Seconds(30)});
//   absl::StatusOr<UpstreamResponse> r = upstream.Send(request, "/v1/charges");
//
// Thread safety: Send may be called concurrently (each call has its own I/O).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "http/client/upstream_response.h"
#include "http/types.h"

namespace idem::http {

struct UpstreamUrl {
  std::string host;       // a name or an IP address (IPv6 without brackets)
  uint16_t port = 80;
  std::string authority;  // for the Host header: "host:port", "[v6]:port"
  std::string base_path;  // prepended to every target; "" or "/api" (no trailing '/')
};

// http://HOST[:PORT][/BASE]; kInvalidArgument naming what is wrong (https is not
// spoken here: put the proxy next to its upstream, or TLS in a sidecar).
absl::StatusOr<UpstreamUrl> ParseUpstreamUrl(std::string_view url);

struct UpstreamOptions {
  absl::Duration timeout = absl::Seconds(30);  // from the request's arrival to its answer
  size_t max_response_bytes = 8 << 20;         // a larger answer's body is refused
};

// The hop-by-hop headers of RFC 9110 §7.6.1 (Connection, Keep-Alive, TE, Trailer,
// Transfer-Encoding, Upgrade, Proxy-*) and those `connection` (a Connection header's
// value) names: a proxy does not forward them. Case-insensitive.
bool IsHopByHop(std::string_view name, std::string_view connection);

class Upstream {
 public:
  Upstream(UpstreamUrl url, UpstreamOptions options);

  // Sends `request` (method, headers without the hop-by-hop ones and Host, body) to
  // base_path + `target`, with X-Request-Id = request.request_id, and reads the
  // answer (UpstreamResponseReader). Errors, all meaning "no usable answer":
  // kUnavailable (the name does not resolve, the connection is refused or breaks,
  // the answer is not HTTP), kDeadlineExceeded (no whole answer within the timeout
  // of request.received, or of now when it is not set; nothing is sent when that
  // time has already passed), kResourceExhausted (the answer's body is over the
  // limit: its Content-Length, before the body is read, or as it streams),
  // kInvalidArgument, before anything is sent, naming the header whose name is not a
  // token or whose value holds CR, LF or NUL (or a method that is not a token, a
  // target with a space, CR, LF or NUL): whoever the caller, no value adds a header
  // line or a second request to what is sent. Blocks.
  absl::StatusOr<UpstreamResponse> Send(const HttpRequest& request, std::string_view target) const;

  // The bytes Send would write for `request` (head and body), without connecting.
  // Errors: Send's kInvalidArgument.
  absl::StatusOr<std::string> RequestBytes(const HttpRequest& request,
                                           std::string_view target) const;

  const UpstreamUrl& url() const { return url_; }

 private:
  const UpstreamUrl url_;
  const UpstreamOptions options_;
};

}  // namespace idem::http
