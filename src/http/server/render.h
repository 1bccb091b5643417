// Renders one HTTP/1.x response (status line, header, body) into a byte string that
// the connection writes with one async_write: the answer of a duplicate is a few
// hundred bytes, and building it as a Beast message (one allocation per header
// field, a serializer of buffer views) cost a quarter of the duplicate path's
// instructions (callgrind of `idem serve`).
//
// Thread safety: a pure function.
#pragma once

#include <string>
#include <string_view>

#include "http/types.h"

namespace idem::http {

struct RenderOptions {
  unsigned version = 11;    // 10 or 11, the request's
  bool keep_alive = true;   // false: the connection closes after this answer
  bool head = false;        // HEAD: the header of the GET answer, Content-Length included
  std::string_view request_id;  // X-Request-Id, and the problem body's "request_id"
};

// Replaces `out` (its capacity is kept, so one string per connection serves every
// answer on it) with `response` as bytes on the wire: "Server: idem" unless the
// response has a Server header, its content_type as Content-Type (replacing any
// such header), X-Request-Id, Content-Length (except for 1xx, 204 and 304) and the
// Connection header `options` call for. Headers named Content-Length,
// Transfer-Encoding or Connection in `response.headers` are the server's to write
// and are left out, as is any header whose name or value holds CR or LF. A
// problem+json body gets `"request_id":"…"` as its last member.
void RenderResponse(const HttpResponse& response, const RenderOptions& options,
                    std::string& out);
// The same bytes appended to `out` (the lean server's write buffer gathers every
// answer of a loop turn for one write).
void AppendResponse(const HttpResponse& response, const RenderOptions& options,
                    std::string& out);

}  // namespace idem::http
