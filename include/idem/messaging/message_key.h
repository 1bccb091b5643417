// MessageKey: how the consumer runner derives a message's idempotency key from the
// message itself: a header (`event_id`), a field of the JSON payload
// (`order.no` or `/order/no`), or a template over payload fields
// (`{order_no}:{event_type}:{version}`). Never from where the message sits in the
// log: a key on (topic, partition, offset) changes when the same event is produced
// twice or replayed into another partition (a double refund, say), so such a
// configuration is refused when it is parsed.
//
//   absl::StatusOr<MessageKey> key = MessageKey::Parse(MessageKey::Kind::kHeader, "event_id");
//   absl::StatusOr<std::string> k = key->Derive(message);
//
// Thread safety: an immutable value; Derive may be called concurrently.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "idem/messaging/transport.h"

namespace idem::messaging {

class MessageKey {
 public:
  enum class Kind { kHeader, kJsonField, kTemplate };

  // The default: the header `event_id`.
  MessageKey() : kind_(Kind::kHeader), spec_("event_id") {}

  // Parses `spec` as a key of `kind`. kInvalidArgument for an empty or malformed
  // spec (an unclosed `{` in a template, an empty field name) and for one that
  // refers to the message's position (a header or field named partition or offset,
  // `{partition}`/`{offset}` in a template), with the reason in the message.
  static absl::StatusOr<MessageKey> Parse(Kind kind, std::string_view spec);

  // Parses "header:NAME", "field:PATH" or "template:TEMPLATE" (the form a config
  // file or a flag gives). Errors as Parse.
  static absl::StatusOr<MessageKey> ParseTagged(std::string_view tagged);

  // The key of `message`. kInvalidArgument when the header is missing or empty, the
  // payload is not JSON (or not an object), a field is missing, null, or not a
  // string, number or boolean, or the key is one ValidateHeaderKey refuses (over 255
  // bytes, a control character such as CR, LF or NUL, a space at either end;
  // never cut down to one it accepts): the message is poison for this configuration
  // and belongs in the dead-letter topic with that reason.
  absl::StatusOr<std::string> Derive(const Message& message) const;

  Kind kind() const { return kind_; }
  const std::string& spec() const { return spec_; }
  // "header:event_id", "field:order.no", "template:{order_no}:{version}".
  std::string ToString() const;

 private:
  struct Part {
    bool field = false;           // a payload field, else literal text
    std::string text;             // the literal, or the field path as written
    std::vector<std::string> path;  // the field's path segments
  };
  // `key`, or Derive's kInvalidArgument for one ValidateHeaderKey refuses.
  absl::StatusOr<std::string> Checked(std::string key) const;
  MessageKey(Kind kind, std::string spec, std::vector<Part> parts)
      : kind_(kind), spec_(std::move(spec)), parts_(std::move(parts)) {}

  Kind kind_;
  std::string spec_;
  std::vector<Part> parts_;  // kJsonField: one field; kTemplate: the pieces in order
};

}  // namespace idem::messaging
