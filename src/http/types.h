// The socket-free request/response values every HTTP role shares: the server
// (server/server.h) converts them to and from Beast messages for its Handlers (the
// API, the proxy), and the client (client/upstream.h) sends and receives them.
//
// Thread safety: plain values.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace idem::http {

struct HttpRequest {
  std::string method;         // "GET", "POST", ...
  std::string target;         // origin-form: "/v1/records/refund/R-1?x=y"
  std::string authorization;  // the Authorization header; empty when absent
  std::string body;
  // The client's X-Request-Id when it is a sane token, else one made up; echoed in
  // the answer's X-Request-Id and in every problem body (`request_id`).
  std::string request_id;
  // When the server had the request's header (its clock); deadlines that cover the
  // whole request (the proxy's --upstream-timeout) count from here. Unset (the
  // epoch) for a request made in process: such deadlines count from their start.
  std::chrono::steady_clock::time_point received{};
  // Every header as received, in order; filled only for a Handler that wants them
  // (Handler::wants_headers).
  std::vector<std::pair<std::string, std::string>> headers;
  // The Cookie header (the first; empty when absent): the operator console's session.
  std::string cookie;
};

struct HttpResponse {
  int status = 200;
  // A string literal ("": no Content-Type header); a view, so that a response makes
  // no allocation for it.
  std::string_view content_type = "application/json";
  // Extra headers (Retry-After, Idempotent-Replayed, WWW-Authenticate, Allow, ...).
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;

  // Returns the value of header `name` (case-sensitive), or "" when absent.
  std::string_view Header(std::string_view name) const {
    for (const auto& [k, v] : headers) {
      if (k == name) return v;
    }
    return {};
  }
};

}  // namespace idem::http
