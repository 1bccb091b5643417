// The step-machine operation types the `idem` binary itself can run: the refund
// example's (examples/refund), against the payment channel at a given URL.
// Applications run their own types inside their own process with idem::Worker;
// `idem worker` and `idem serve --refund-channel` resume the built-in ones.
#pragma once

#include <memory>
#include <optional>
#include <string_view>

#include "absl/status/statusor.h"
#include "idem/steps.h"
#include "refund/channel_client.h"

namespace idem::cli {

class BuiltinOperations {
 public:
  // kInvalidArgument for a malformed channel URL ("http://HOST:PORT").
  static absl::StatusOr<std::unique_ptr<BuiltinOperations>> Create(
      std::string_view refund_channel_url);

  // Registers every built-in type on `runner`, which must not outlive this.
  absl::Status RegisterWith(StepRunner& runner) const;

 private:
  explicit BuiltinOperations(refund::ChannelClient channel) : channel_(std::move(channel)) {}
  refund::ChannelClient channel_;
};

}  // namespace idem::cli
