#include "refund/refund_kafka.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "idem/messaging/message_key.h"
#include "idem/messaging/runner.h"
#include "idem/status.h"
#include "nlohmann/json.hpp"

namespace idem::refund {

std::string EncodeRefundMessage(const Order& o) {
  return nlohmann::json{
      {"order_no", o.order_no}, {"action", "refund"}, {"amount", o.amount}, {"run_id", o.run_id}}
      .dump();
}

absl::StatusOr<Order> DecodeRefundMessage(const messaging::Message& m) {
  const nlohmann::json j = nlohmann::json::parse(m.payload, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("order_no") || !j["order_no"].is_string() ||
      !j.contains("amount") || !j["amount"].is_number_integer() || !j.contains("run_id") ||
      !j["run_id"].is_string()) {
    return absl::InvalidArgumentError("not a refund order (order_no, amount, run_id)");
  }
  return Order{.run_id = j["run_id"].get<std::string>(),
               .order_no = j["order_no"].get<std::string>(),
               .amount = j["amount"].get<int64_t>()};
}

absl::Status ConsumeRefunds(messaging::Transport& transport, Store& store, Store& records,
                            const ChannelClient& channel, FaultInjector* faults,
                            const StepRunnerOptions& step_options) {
  StepRunner steps(store, step_options);
  IDEM_RETURN_IF_ERROR(steps.Register(RefundOperation(channel, faults)));
  messaging::RunnerOptions ro;
  IDEM_ASSIGN_OR_RETURN(ro.key, messaging::MessageKey::Parse(
                                    messaging::MessageKey::Kind::kTemplate, kRefundMessageKey));
  ro.biz_type = "refund-message";
  ro.max_batch = 20;
  ro.retry.initial_delay = absl::Milliseconds(20);
  ro.retry.max_delay = absl::Milliseconds(200);
  auto handler = [&](const messaging::Message& m, Transaction&) -> absl::StatusOr<std::string> {
    IDEM_ASSIGN_OR_RETURN(Order order, DecodeRefundMessage(m));
    IDEM_ASSIGN_OR_RETURN(OperationState op, steps.Run({.type = std::string(kRefundType),
                                                        .biz_key = BizKeyOf(order),
                                                        .input = EncodeOrder(order),
                                                        .object_key = order.order_no}));
    if (op.busy || op.status == OperationStatus::kPending ||
        op.status == OperationStatus::kCompensating) {
      // A killed consumer's lease, or a retry wait: the batch runs again later.
      return absl::UnavailableError(absl::StrCat("refund ", order.order_no, " not final yet"));
    }
    return std::string(OperationStatusName(op.status));
  };
  IDEM_ASSIGN_OR_RETURN(std::unique_ptr<messaging::Runner> runner,
                        messaging::Runner::Create(transport, records, handler, std::move(ro)));
  return runner->Run();
}

}  // namespace idem::refund
