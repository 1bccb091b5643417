#include "demo/builtin_operations.h"

#include "refund/refund_operation.h"

namespace idem::cli {

absl::StatusOr<std::unique_ptr<BuiltinOperations>> BuiltinOperations::Create(
    std::string_view refund_channel_url) {
  absl::StatusOr<refund::ChannelClient> channel =
      refund::ChannelClient::FromUrl(refund_channel_url);
  if (!channel.ok()) return channel.status();
  return std::unique_ptr<BuiltinOperations>(new BuiltinOperations(*std::move(channel)));
}

absl::Status BuiltinOperations::RegisterWith(StepRunner& runner) const {
  return runner.Register(refund::RefundOperation(channel_, /*faults=*/nullptr));
}

}  // namespace idem::cli
