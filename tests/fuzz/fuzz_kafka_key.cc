// Fuzzes the consumer runner's key configuration (idem/messaging/message_key.h): a tagged
// spec ("header:NAME", "field:PATH", "template:{a}:{b}") parsed and, when it
// parses, used to derive the key of a message.
//
// Input: the spec, a newline, then the message's JSON payload; the message also
// carries the header `event_id` with the payload's first line as its value.
// Properties: errors are kInvalidArgument with a message (a spec refused, a
// message that is poison for it); a key parsed back from its ToString() is the
// same key (kind, spec, and the key it derives); a derived key is non-empty for a
// header key.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz/fuzz_check.h"
#include "idem/messaging/message_key.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using idem::fuzz::Check;
  using idem::messaging::MessageKey;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nl = input.find('\n');
  const std::string_view spec = input.substr(0, nl);
  idem::messaging::Message message;
  message.source = "orders";
  message.partition = 3;
  message.offset = 42;
  if (nl != std::string_view::npos) message.payload = std::string(input.substr(nl + 1));
  message.headers.emplace_back("event_id",
                               std::string(std::string_view(message.payload).substr(
                                   0, message.payload.find('\n'))));

  absl::StatusOr<MessageKey> key = MessageKey::ParseTagged(spec);
  if (!key.ok()) {
    idem::fuzz::CheckBadInput(key.status(), "MessageKey::ParseTagged");
    return 0;
  }
  absl::StatusOr<MessageKey> again = MessageKey::ParseTagged(key->ToString());
  Check(again.ok(), "ToString() parses back", key->ToString());
  Check(again->kind() == key->kind() && again->spec() == key->spec(),
        "ToString() parses back to the same key", key->ToString());
  absl::StatusOr<std::string> derived = key->Derive(message);
  absl::StatusOr<std::string> derived_again = again->Derive(message);
  Check(derived.ok() == derived_again.ok() && (!derived.ok() || *derived == *derived_again),
        "the parsed-back key derives the same key");
  if (!derived.ok()) {
    idem::fuzz::CheckBadInput(derived.status(), "MessageKey::Derive");
    return 0;
  }
  if (key->kind() == MessageKey::Kind::kHeader) Check(!derived->empty(), "a header key is not empty");
  return 0;
}
