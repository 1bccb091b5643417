#include "idem/messaging/message_key.h"

#include <cctype>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/absl_compat.h"
#include "idem/key.h"
#include "nlohmann/json.hpp"

namespace idem::messaging {
namespace {

// "Kafka-Offset", "kafka_partition", "x-offset" → whether the name means the
// message's position in the log rather than anything about the event.
bool NamesPosition(std::string_view name) {
  std::string n;
  for (char c : name) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      n += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
  }
  for (std::string_view suffix : {"offset", "partition"}) {
    if (!n.ends_with(suffix)) continue;
    const std::string_view prefix = std::string_view(n).substr(0, n.size() - suffix.size());
    for (std::string_view p : {"", "kafka", "x", "xkafka", "msg", "message", "record"}) {
      if (prefix == p) return true;
    }
  }
  return false;
}

absl::Status PositionRefused(std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(
      AV(what),
      " names the message's position in the log (partition/offset), not the event: the same "
      "event produced twice, or re-read after a rebalance into another partition, would get "
      "a second key and run twice (a refund paid twice). Key on what identifies the event: "
      "a header such as event_id, a payload field, or a template such as "
      "{order_no}:{event_type}:{version}"));
}

// "order.no" or "/order/no" → {"order", "no"}.
absl::StatusOr<std::vector<std::string>> ParsePath(std::string_view path) {
  std::vector<std::string> out;
  if (path.starts_with("/")) {
    for (absl::string_view s : absl::StrSplit(AV(path.substr(1)), '/')) {
      // JSON pointer escapes (RFC 6901).
      std::string seg(s.data(), s.size());
      std::string unescaped;
      for (size_t i = 0; i < seg.size(); ++i) {
        if (seg[i] == '~' && i + 1 < seg.size() && (seg[i + 1] == '0' || seg[i + 1] == '1')) {
          unescaped += seg[i + 1] == '0' ? '~' : '/';
          ++i;
        } else {
          unescaped += seg[i];
        }
      }
      out.push_back(std::move(unescaped));
    }
  } else {
    for (absl::string_view s : absl::StrSplit(AV(path), '.')) out.emplace_back(s.data(), s.size());
  }
  for (const std::string& seg : out) {
    if (seg.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("field path '", AV(path), "' has an empty segment"));
    }
  }
  if (out.empty()) return absl::InvalidArgumentError("empty field path");
  if (NamesPosition(out.back())) return PositionRefused(absl::StrCat("field '", AV(path), "'"));
  return out;
}

}  // namespace

absl::StatusOr<MessageKey> MessageKey::Parse(Kind kind, std::string_view spec) {
  if (spec.empty()) return absl::InvalidArgumentError("the message key specification is empty");
  std::vector<Part> parts;
  switch (kind) {
    case Kind::kHeader:
      if (NamesPosition(spec)) return PositionRefused(absl::StrCat("header '", AV(spec), "'"));
      break;
    case Kind::kJsonField: {
      Part p{.field = true, .text = std::string(spec)};
      auto path = ParsePath(spec);
      if (!path.ok()) return path.status();
      p.path = *std::move(path);
      parts.push_back(std::move(p));
      break;
    }
    case Kind::kTemplate: {
      size_t at = 0;
      bool any_field = false;
      while (at < spec.size()) {
        const size_t open = spec.find('{', at);
        if (open == std::string_view::npos) {
          parts.push_back({.text = std::string(spec.substr(at))});
          break;
        }
        if (open > at) parts.push_back({.text = std::string(spec.substr(at, open - at))});
        const size_t close = spec.find('}', open);
        if (close == std::string_view::npos) {
          return absl::InvalidArgumentError(absl::StrCat(
              "template '", AV(spec), "': '{' at position ", open, " is never closed"));
        }
        const std::string_view name = spec.substr(open + 1, close - open - 1);
        if (name.empty()) {
          return absl::InvalidArgumentError(
              absl::StrCat("template '", AV(spec), "': empty field name '{}'"));
        }
        if (NamesPosition(name)) {
          return PositionRefused(absl::StrCat("template '", AV(spec), "' field {", AV(name), "}"));
        }
        auto path = ParsePath(name);
        if (!path.ok()) {
          return absl::InvalidArgumentError(
              absl::StrCat("template '", AV(spec), "': ", path.status().message()));
        }
        parts.push_back({.field = true, .text = std::string(name), .path = *std::move(path)});
        any_field = true;
        at = close + 1;
      }
      if (!any_field) {
        return absl::InvalidArgumentError(absl::StrCat(
            "template '", AV(spec),
            "' has no {field}: every message would get the same key and only the first would run"));
      }
      break;
    }
  }
  return MessageKey(kind, std::string(spec), std::move(parts));
}

absl::StatusOr<MessageKey> MessageKey::ParseTagged(std::string_view tagged) {
  const size_t colon = tagged.find(':');
  const std::string_view tag = tagged.substr(0, colon);
  const std::string_view rest = colon == std::string_view::npos ? "" : tagged.substr(colon + 1);
  if (tag == "header") return Parse(Kind::kHeader, rest);
  if (tag == "field") return Parse(Kind::kJsonField, rest);
  if (tag == "template") return Parse(Kind::kTemplate, rest);
  return absl::InvalidArgumentError(absl::StrCat(
      "message key '", AV(tagged), "': expected header:NAME, field:PATH or template:TEMPLATE"));
}

std::string MessageKey::ToString() const {
  switch (kind_) {
    case Kind::kHeader:
      return absl::StrCat("header:", spec_);
    case Kind::kJsonField:
      return absl::StrCat("field:", spec_);
    case Kind::kTemplate:
      return absl::StrCat("template:", spec_);
  }
  return spec_;
}

absl::StatusOr<std::string> MessageKey::Derive(const Message& message) const {
  if (kind_ == Kind::kHeader) {
    const std::string* v = message.Header(spec_);
    if (v == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("no header '", spec_, "' to key on"));
    }
    if (v->empty()) return absl::InvalidArgumentError(absl::StrCat("header '", spec_, "' is empty"));
    return Checked(*v);
  }
  nlohmann::json doc = nlohmann::json::parse(message.payload, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) {
    return absl::InvalidArgumentError("the payload is not JSON, so no field can be keyed on");
  }
  if (!doc.is_object()) return absl::InvalidArgumentError("the payload is not a JSON object");
  std::string key;
  for (const Part& part : parts_) {
    if (!part.field) {
      key += part.text;
      continue;
    }
    const nlohmann::json* node = &doc;
    for (const std::string& seg : part.path) {
      if (!node->is_object()) {
        node = nullptr;
        break;
      }
      auto it = node->find(seg);
      node = it == node->end() ? nullptr : &*it;
      if (node == nullptr) break;
    }
    if (node == nullptr || node->is_null()) {
      return absl::InvalidArgumentError(absl::StrCat("payload field '", part.text, "' is missing"));
    }
    if (node->is_string()) {
      const std::string& s = node->get_ref<const std::string&>();
      if (s.empty()) {
        return absl::InvalidArgumentError(absl::StrCat("payload field '", part.text, "' is empty"));
      }
      key += s;
    } else if (node->is_number() || node->is_boolean()) {
      key += node->dump();
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "payload field '", part.text, "' is an object or array, not a value to key on"));
    }
  }
  return Checked(std::move(key));
}

absl::StatusOr<std::string> MessageKey::Checked(std::string key) const {
  // The key becomes an Idempotency-Key header (the bridge) and a log field: a CR or
  // LF in it would add header lines or a second request to what is sent.
  if (absl::Status s = ValidateHeaderKey(key); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("the key from ", ToString(), " is refused: ",
                                                   s.message()));
  }
  return key;
}

}  // namespace idem::messaging
