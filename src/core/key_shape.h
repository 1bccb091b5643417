// Key shapes: keys that look made up on the spot instead of taken from
// the business request, so that a retry is likely to carry a new one: a random UUID,
// an epoch timestamp, a message's topic-partition-offset. `idem keys analyze` and
// `idem serve`'s idem_key_suspicious_shape_total count them (docs/keys.md).
//
//   KeyShape s = ClassifyKeyShape("550e8400-e29b-41d4-a716-446655440000");  // kUuid
//
// The checks are a heuristic on the key's bytes only, in one pass without regexes or
// allocation (idem serve runs them on every new key):
//   uuid                    the key, or its last part after ':' '/' '|' '#' or '=', is
//                           8-4-4-4-12 hex digits with dashes (any version: v4, v1, v7 …)
//   epoch_s / epoch_ms      the whole key is 10 / 13 decimal digits, a time between
//                           2000-01-01 and 2100-01-01 in seconds / milliseconds
//   topic_partition_offset  TOPIC S PARTITION S OFFSET with one separator S of '-' ':'
//                           '/' '@' '_' '.', TOPIC Kafka topic characters with a letter,
//                           PARTITION 0…999, OFFSET 1…19 digits, both without leading
//                           zeros ("orders-3-18842", "orders:3:18842")
// A business key such as "refund:ORD-2024-0001" or "R-20240618-000713" is none of
// them (a leading zero is no offset, eight digits are no partition).
//
// Thread safety: pure functions.
#pragma once

#include <array>
#include <cstddef>
#include <string_view>

namespace idem {

enum class KeyShape : unsigned char {
  kNone,
  kUuid,
  kEpochSeconds,
  kEpochMillis,
  kTopicPartitionOffset,
};

// The suspicious shapes, in the order reports list them (kNone left out).
inline constexpr std::array<KeyShape, 4> kSuspiciousShapes = {
    KeyShape::kUuid, KeyShape::kEpochSeconds, KeyShape::kEpochMillis,
    KeyShape::kTopicPartitionOffset};

// The index of `shape` in kSuspiciousShapes; kSuspiciousShapes.size() for kNone.
constexpr size_t KeyShapeIndex(KeyShape shape) {
  for (size_t i = 0; i < kSuspiciousShapes.size(); ++i) {
    if (kSuspiciousShapes[i] == shape) return i;
  }
  return kSuspiciousShapes.size();
}

// "none", "uuid", "epoch_s", "epoch_ms", "topic_partition_offset": the metric label
// and JSON name.
std::string_view KeyShapeName(KeyShape shape);

// The first matching shape of `key` in the order above, or kNone.
KeyShape ClassifyKeyShape(std::string_view key);

}  // namespace idem
