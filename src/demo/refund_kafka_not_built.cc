// `idem demo refund --transport kafka` in a build without idem::messaging
// (IDEM_WITH_KAFKA=OFF, or AUTO without librdkafka-dev): the demo's other transports
// work, this one says it was not compiled in.
#include <map>
#include <string>

#include "absl/status/status.h"
#include "demo/demo_internal.h"
#include "demo/refund_demo.h"

namespace idem::refund {
namespace {

absl::Status KafkaNotBuilt() {
  return absl::FailedPreconditionError(
      "--transport kafka: Kafka is not compiled into this build of idem (rebuild with "
      "librdkafka-dev and -DIDEM_WITH_KAFKA=ON)");
}

}  // namespace

absl::Status RunRefundConsumer(const ConsumerOptions&) { return KafkaNotBuilt(); }

namespace internal {

absl::Status RunOverKafka(const DemoOptions&, const std::string&, const std::string&,
                          const std::string&, const std::string&, DemoReport&) {
  return KafkaNotBuilt();
}

absl::StatusOr<std::map<std::string, std::string>> NaiveStatuses(Store&, const std::string&) {
  return KafkaNotBuilt();
}

}  // namespace internal
}  // namespace idem::refund
