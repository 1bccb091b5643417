// What the Kafka paths share about a message they could not handle: where it was
// (for logs) and the headers its dead-letter copy carries. Internal to src/messaging.
//
// Thread safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "idem/messaging/transport.h"

namespace idem::messaging {

// "topic[partition]@offset" (Kafka) or "stream/id" (Redis Streams).
inline std::string Where(const Message& m) {
  if (!m.id.empty()) return absl::StrCat(m.source, "/", m.id);
  return absl::StrCat(m.source, "[", m.partition, "]@", m.offset);
}

// The message's own headers followed by idem-dlq-reason, -topic, -partition,
// -offset and -group: why it was dead-lettered and where it came from.
inline std::vector<std::pair<std::string, std::string>> DeadLetterHeaders(
    const Message& m, std::string_view reason, std::string_view group) {
  std::vector<std::pair<std::string, std::string>> h = m.headers;
  h.emplace_back("idem-dlq-reason", std::string(reason));
  h.emplace_back("idem-dlq-topic", m.source);
  h.emplace_back("idem-dlq-partition", absl::StrCat(m.partition));
  h.emplace_back("idem-dlq-offset", absl::StrCat(m.offset));
  h.emplace_back("idem-dlq-group", std::string(group));
  return h;
}

}  // namespace idem::messaging
