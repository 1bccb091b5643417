// librdkafka error codes as the Transport's status codes, shared by the Kafka
// transport and the transactional processor. Internal to src/messaging.
#pragma once

#include <string_view>

#include "absl/status/status.h"

namespace idem::messaging {

// Retriable and transport errors kUnavailable, a lost generation or membership
// kAborted (the partitions are someone else's now: do not retry the same commit), a
// fatal error kFailedPrecondition, the rest kInternal; `context` starts the message.
absl::Status KafkaStatus(int rd_kafka_resp_err, std::string_view context);

}  // namespace idem::messaging
