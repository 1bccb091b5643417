// ChannelBook: the fake payment channel's state (its reversals and fault counters)
// and its routes, without the HTTP transport. FakeChannelServer (fake_channel.h,
// which documents the routes and the fault table) passes each request's method,
// target and body to Handle() and carries out the ChannelReply it returns. Internal
// to the refund example; tests use the server over HTTP.
//
// Thread safety: a ChannelBook is safe for concurrent use. Each request is handled
// under one lock, so the fault draws follow the order in which requests arrive.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "refund/channel_client.h"

namespace idem::refund {

// What the transport must do besides answering.
enum class ChannelFault {
  kNone,
  kTimeout,  // send the answer only after the response delay
  kLost,     // close the connection without an answer
};

struct ChannelReply {
  // {"error": message}.
  static ChannelReply Error(int status, std::string message);

  int status = 200;
  std::string body;  // JSON
  ChannelFault fault = ChannelFault::kNone;
};

class ChannelBook {
 public:
  // REQUIRES: 0 <= fault_rate <= 1.
  ChannelBook(double fault_rate, uint64_t seed);

  // Runs one request: `target` is the path with its query. Never fails: bad input
  // is a 4xx reply. Does not block beyond the lock.
  ChannelReply Handle(std::string_view method, std::string_view target, const std::string& body);

 private:
  ChannelReply Create(const std::string& body);
  ChannelReply List(std::string_view query);
  ChannelReply Cancel(const std::string& body);
  ChannelReply Stats();
  // A uniform draw in [0,1).
  double Draw() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const double fault_rate_;
  absl::Mutex mu_;
  std::mt19937_64 rng_ ABSL_GUARDED_BY(mu_);
  std::vector<Reversal> reversals_ ABSL_GUARDED_BY(mu_);  // in creation order
  int64_t timeout_faults_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t lost_faults_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t busy_faults_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace idem::refund
