// ChannelClient: the C++ client of the fake payment channel (refund/fake_channel.h),
// the external "reverse a payment" HTTP API of the refund demo.
//
//   absl::StatusOr<ChannelClient> client = ChannelClient::FromUrl("http://127.0.0.1:7071");
//   absl::StatusOr<std::string> id = client->Reverse("refund-42", "order-7", 1999);
//
// Every call opens one TCP connection, sends one request and reads one answer, all
// bounded by the per-call `timeout` (connect, send and receive together). The
// channel never deduplicates: each Reverse() that reaches it makes a new reversal,
// so an ambiguous failure (kDeadlineExceeded, or kUnavailable for a connection
// closed without an answer) may or may not have moved money. Lookup() tells which.
//
// Thread safety: a ChannelClient is safe for concurrent use; calls share no state
// (each has its own connection and I/O context). It is cheap to copy.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "nlohmann/json_fwd.hpp"

namespace idem::refund {

// `j` as compact JSON text. Strings that came in as percent-encoded bytes need not
// be UTF-8: invalid bytes become U+FFFD instead of an exception.
std::string DumpJson(const nlohmann::json& j);

// One reversal as the channel reports it.
struct Reversal {
  std::string id;          // "rv-1", "rv-2", ... in creation order
  std::string request_id;  // the caller's request id; not unique (no dedupe)
  std::string order_no;
  int64_t amount = 0;  // cents, > 0
  bool cancelled = false;
};

// What the channel has done since it started (GET /stats).
struct ChannelStats {
  int64_t reversals = 0;  // reversals made, cancelled ones included
  int64_t cancelled = 0;
  // order_no -> active (not cancelled) reversals, for every order that ever had a
  // reversal (0 once all of an order's reversals are cancelled).
  std::map<std::string, int64_t> by_order;
  // Injected faults by kind (see FakeChannelOptions::fault_rate).
  int64_t timeout_faults = 0;  // reversal made, answer delayed past the client's timeout
  int64_t lost_faults = 0;     // reversal made, connection closed without an answer
  int64_t busy_faults = 0;     // 503 "channel busy", nothing made
};

class ChannelClient {
 public:
  static constexpr absl::Duration kDefaultTimeout = absl::Milliseconds(500);

  // A client for the channel at `host`:`port`. `host` is an IP address or a name
  // (resolved on each call). Does not connect.
  ChannelClient(std::string host, uint16_t port, absl::Duration timeout = kDefaultTimeout);

  // A client for `base_url`, "http://HOST:PORT" (an optional trailing "/"; port 80
  // when omitted; "[v6]" hosts in brackets). Returns kInvalidArgument for anything
  // else (another scheme, a path, a missing host, a port outside 1-65535) or a
  // timeout that is not positive. Does not connect.
  static absl::StatusOr<ChannelClient> FromUrl(std::string_view base_url,
                                               absl::Duration timeout = kDefaultTimeout);

  // POST /reversals: asks the channel to reverse `amount` cents of `order_no`.
  // Blocks for at most the timeout. Returns the new reversal's id ("rv-N") on 201.
  // Errors:
  //  - kDeadlineExceeded: the request was sent (or being sent) and no answer came
  //    in time; the reversal may have been made;
  //  - kUnavailable: the channel could not be reached (nothing was sent, nothing
  //    made), or it answered 5xx (e.g. 503 "channel busy": nothing made), or it
  //    closed the connection without an answer (the reversal may have been made);
  //    the message says which;
  //  - kInvalidArgument: the channel rejected the request (4xx), with its reason,
  //    e.g. a field that is missing, empty or not a positive amount;
  //  - kInternal: the channel's answer was not what the protocol says.
  absl::StatusOr<std::string> Reverse(std::string_view request_id, std::string_view order_no,
                                      int64_t amount) const;

  // GET /reversals?request_id=...: every reversal made for `request_id`, cancelled
  // ones included, in creation order; empty when there is none. Blocks for at most
  // the timeout. Errors: kDeadlineExceeded, kUnavailable, kInvalidArgument,
  // kInternal as for Reverse() (a lookup changes nothing, so any of them can be
  // retried).
  absl::StatusOr<std::vector<Reversal>> Lookup(std::string_view request_id) const;

  // GET /reversals?order_no=...: every reversal of `order_no`, like Lookup().
  absl::StatusOr<std::vector<Reversal>> LookupOrder(std::string_view order_no) const;

  // POST /reversals/cancel: cancels every reversal of `request_id` that is not
  // cancelled yet and returns how many it cancelled (0 when there was none: that is
  // success). Blocks for at most the timeout. Errors as for Reverse(); after
  // kDeadlineExceeded the cancel may have happened, and repeating it is harmless.
  absl::StatusOr<int> Cancel(std::string_view request_id) const;

  // GET /stats: the channel's counters. Blocks for at most the timeout. Errors as
  // for Lookup().
  absl::StatusOr<ChannelStats> Stats() const;

  const std::string& host() const { return host_; }
  uint16_t port() const { return port_; }
  absl::Duration timeout() const { return timeout_; }

 private:
  struct Reply {
    int status = 0;
    std::string body;
  };

  // Sends one request and reads its answer. `what` ("POST /reversals") and
  // `context` (" (request_id=...)") only shape error messages.
  absl::StatusOr<Reply> Call(bool post, const std::string& target, const std::string& body,
                             std::string_view what, std::string_view context) const;
  absl::StatusOr<std::vector<Reversal>> List(std::string_view param, std::string_view value) const;

  std::string host_;
  uint16_t port_;
  absl::Duration timeout_;
};

}  // namespace idem::refund
