// The refund over Kafka with idem::messaging: the orders arrive as messages, and a
// redelivery (a crash before the offset commit, a rebalance) must not refund twice.
// The consumer keys each message by its business key ("{order_no}:{action}", never
// its offset) with the Runner of idem/messaging/runner.h, and runs each order's
// refund as a StepRunner operation (refund_operation.h), which finds a redelivered
// order by its biz_key and runs no step twice.
//
//   auto transport = idem::messaging::KafkaTransport::Create(
//       {.brokers = "localhost:9092", .group = "refunds", .topics = {"refunds"}});
//   idem::refund::ConsumeRefunds(**transport, *store, *records, channel, &faults, {});
//
// A producer writes EncodeRefundMessage(order) with the order_no as the Kafka key.
//
// Thread safety: ConsumeRefunds runs on the calling thread until the transport
// fails; the arguments must outlive it.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "idem/messaging/transport.h"
#include "idem/steps.h"
#include "idem/store.h"
#include "refund/channel_client.h"
#include "refund/refund_operation.h"

namespace idem::refund {

// The message key template of a refund message: its business key.
inline constexpr char kRefundMessageKey[] = "{order_no}:{action}";

// The payload of an order's message: {"action":"refund","amount":…,"order_no":…,
// "run_id":…} (JSON).
std::string EncodeRefundMessage(const Order& order);

// The order a message carries. kInvalidArgument (a poison message) when the payload
// is not a refund order.
absl::StatusOr<Order> DecodeRefundMessage(const messaging::Message& message);

// Consumes refund messages from `transport` until it fails: idem's Runner keyed by
// kRefundMessageKey, its message records in `records`, each order's refund run as a
// StepRunner operation on `store` (with `step_options`; `faults` may be null). A
// refund not final yet (a lease held by a killed consumer, a retry wait) leaves its
// batch to be delivered again.
absl::Status ConsumeRefunds(messaging::Transport& transport, Store& store, Store& records,
                            const ChannelClient& channel, FaultInjector* faults,
                            const StepRunnerOptions& step_options);

}  // namespace idem::refund
