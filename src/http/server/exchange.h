// What every connection engine of the Server (server/connection.cc on Beast,
// lean/connection.cc on http_parser) does around one request the same way: the
// request id, the target's origin-form, the header checks made before routing,
// the answer to a connection past the cap, and the count and access-log line of
// each answer.
//
// Thread safety: pure functions, except RequestIdFrom's per-thread generator and
// CountAndLogAnswer, which calls the (thread-safe) Metrics and logger.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "http/server/handler.h"
#include "http/types.h"

namespace idem::http {

// A client's X-Request-Id when it is 1-128 of [A-Za-z0-9._:-] (it goes into logs
// and JSON unescaped); otherwise, and for "", a new one: 32 hex digits from a
// per-thread generator (unique, not secret).
std::string RequestIdFrom(std::string_view given);
// The same, into `out` (replacing what it held; its buffer is reused).
void SetRequestIdFrom(std::string& out, std::string_view given);

// The origin-form of a request target: an absolute-form one
// ("http://host:port/v1/claims?x", RFC 9112 §3.2.2, which a server MUST accept) has
// its scheme and authority dropped; others are returned as they are.
std::string OriginForm(std::string_view target);

// The answer to a header refused before it is routed, or nullopt: `hosts` Host
// fields (more than one: 400) and the first Transfer-Encoding value (a coding
// other than chunked: 501).
std::optional<HttpResponse> RefuseHeader(int hosts, std::string_view transfer_encoding);

// The whole answer, as bytes, to a connection past the cap (or met while out of
// descriptors): 503 problem+json, Retry-After: 1, Connection: close, with a
// request id of its own (the request is never read).
std::string BusyAnswer();

// Out of descriptors: answers the connections waiting in `listener`'s backlog
// (up to 256) with BusyAnswer and closes them, through the descriptor kept in
// reserve (`*spare_fd`, given up for one accept at a time and taken back after;
// nothing is done when it is -1). Each is counted in `metrics` as
// Refusal::kFdExhausted; returns how many.
int ShedBacklog(int listener, int* spare_fd, Metrics& metrics);

// Counts `reply` in the Handler's Metrics (its route, status, outcome and the
// latency since `started`) and writes its access-log line: one per answer, never
// the token or the body.
void CountAndLogAnswer(Metrics& metrics, const Reply& reply, std::string_view method,
                       std::string_view request_id, std::chrono::steady_clock::time_point started);

}  // namespace idem::http
