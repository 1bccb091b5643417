#include "core/key_shape.h"

#include <cstdint>

namespace idem {
namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsHex(char c) { return IsDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
bool IsLetter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

bool IsUuid(std::string_view s) {
  if (s.size() != 36) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? s[i] != '-' : !IsHex(s[i])) return false;
  }
  return true;
}

KeyShape Epoch(std::string_view s) {
  if (s.size() != 10 && s.size() != 13) return KeyShape::kNone;
  uint64_t v = 0;
  for (char c : s) {
    if (!IsDigit(c)) return KeyShape::kNone;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  // 2000-01-01T00:00:00Z and 2100-01-01T00:00:00Z.
  constexpr uint64_t kFrom = 946684800, kTo = 4102444800;
  if (s.size() == 10) return v >= kFrom && v < kTo ? KeyShape::kEpochSeconds : KeyShape::kNone;
  return v >= kFrom * 1000 && v < kTo * 1000 ? KeyShape::kEpochMillis : KeyShape::kNone;
}

bool IsSeparator(char c) {
  return c == '-' || c == ':' || c == '/' || c == '@' || c == '_' || c == '.';
}

// The run of digits that ends at `end` (exclusive) in `s`: its start.
size_t DigitsBefore(std::string_view s, size_t end) {
  while (end > 0 && IsDigit(s[end - 1])) --end;
  return end;
}

// One backward pass from the end: most keys fail at their last byte.
bool IsTopicPartitionOffset(std::string_view s) {
  const size_t offset = DigitsBefore(s, s.size());
  const size_t offset_len = s.size() - offset;
  if (offset_len == 0 || offset_len > 19 || (offset_len > 1 && s[offset] == '0')) return false;
  if (offset < 2 || !IsSeparator(s[offset - 1])) return false;
  const char sep = s[offset - 1];
  const size_t partition = DigitsBefore(s, offset - 1);
  const size_t partition_len = offset - 1 - partition;
  if (partition_len == 0 || partition_len > 3 || (partition_len > 1 && s[partition] == '0')) {
    return false;
  }
  if (partition < 2 || s[partition - 1] != sep) return false;
  // Kafka's topic names: [a-zA-Z0-9._-], at most 249; one letter at least, so a
  // date or a number with dashes is not a topic.
  const std::string_view topic = s.substr(0, partition - 1);
  if (topic.size() > 249) return false;
  bool letter = false;
  for (char c : topic) {
    if (IsLetter(c)) {
      letter = true;
    } else if (!IsDigit(c) && c != '.' && c != '_' && c != '-') {
      return false;
    }
  }
  return letter;
}

}  // namespace

std::string_view KeyShapeName(KeyShape shape) {
  switch (shape) {
    case KeyShape::kNone:
      return "none";
    case KeyShape::kUuid:
      return "uuid";
    case KeyShape::kEpochSeconds:
      return "epoch_s";
    case KeyShape::kEpochMillis:
      return "epoch_ms";
    case KeyShape::kTopicPartitionOffset:
      return "topic_partition_offset";
  }
  return "none";
}

KeyShape ClassifyKeyShape(std::string_view key) {
  if (key.size() >= 36) {
    // A UUID after a namespace prefix ("refund:<uuid>") is as fresh on every retry.
    const std::string_view tail = key.substr(key.size() - 36);
    if (IsUuid(tail) && (key.size() == 36 || std::string_view(":/|#=").find(key[key.size() - 37]) !=
                                                 std::string_view::npos)) {
      return KeyShape::kUuid;
    }
  }
  if (KeyShape e = Epoch(key); e != KeyShape::kNone) return e;
  if (IsTopicPartitionOffset(key)) return KeyShape::kTopicPartitionOffset;
  return KeyShape::kNone;
}

}  // namespace idem
