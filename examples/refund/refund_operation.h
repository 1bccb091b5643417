// The refund of docs/steps.md ("The incident") as an idem operation: three side
// effects, each once.
//
//   1. channel_reversal (external): POST /reversals at the payment channel with
//      the step's request_id; `query` asks GET /reversals?request_id= before any
//      re-send; `compensate` cancels the reversal.
//   2. ledger (local): one row in demo_refund_ledger, unique on (order_no,
//      biz_type) as in the incident's ledger; compensate deletes it.
//   3. notification (local): one message in demo_refund_inbox (no unique key, so
//      a duplicate would show).
//
//   idem::refund::ChannelClient channel = ...;
//   idem::refund::FaultInjector faults(0.2, seed);
//   idem::StepRunner runner(store);
//   runner.Register(idem::refund::RefundOperation(channel, &faults));
//   runner.Run({.type = "refund", .biz_key = idem::refund::BizKeyOf(order),
//               .input = idem::refund::EncodeOrder(order), .object_key = order.order_no});
//
// Thread safety: RefundOperation's steps may run on many threads at once (the
// channel client and FaultInjector are thread-safe).
#pragma once

#include <cstdint>
#include <mutex>
#include <random>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "idem/steps.h"
#include "idem/store.h"
#include "refund/channel_client.h"

namespace idem::refund {

inline constexpr std::string_view kRefundType = "refund";

struct Order {
  std::string run_id;    // groups one demo run's rows
  std::string order_no;  // e.g. "R-<run_id>-000007"
  int64_t amount = 0;    // cents
};

// The operation's input bytes (JSON) and back. DecodeOrder: kInvalidArgument
// naming the bad field.
std::string EncodeOrder(const Order& order);
absl::StatusOr<Order> DecodeOrder(std::string_view input);

// "refund:" + order_no: the business key of the refund (never a message offset).
std::string BizKeyOf(const Order& order);

// Creates the demo's ledger and inbox tables when missing.
absl::Status CreateDemoTables(Store& store);

// Injected faults of the local steps, as in the incident: with probability `rate`
// the ledger insert times out after it ran (rolled back), and the notification
// service is unavailable. Deterministic for a seed; thread-safe.
class FaultInjector {
 public:
  FaultInjector(double rate, uint64_t seed) : rate_(rate), rng_(seed) {}
  bool Fire();

 private:
  const double rate_;
  std::mutex mu_;
  std::mt19937_64 rng_;
};

// The retry policy of the demo's steps: 10 ms × 2ⁿ up to 200 ms, 5 attempts.
RetryPolicy DemoRetryPolicy();

// The refund operation type. `channel` and `faults` (null: no faults) must
// outlive the runner it is registered with.
OperationType RefundOperation(const ChannelClient& channel, FaultInjector* faults);

}  // namespace idem::refund
