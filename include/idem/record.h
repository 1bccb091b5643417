// Record: the dedupe record of one key, as the Store keeps it, with its
// retention: when it may be purged (expires_at) and, once purged, its
// tombstone (purged_at set).
//
// Thread safety: plain value.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/time/time.h"

namespace idem {

// PROCESSING(0) -> SUCCEEDED(1) | FAILED(2). kReleased(3) is internal: a key
// released after a retryable failure behaves as absent, and the row is kept only so
// that fencing tokens keep growing over the key's whole life.
enum class RecordState : int {
  kProcessing = 0,
  kSucceeded = 1,
  kFailed = 2,
  kReleased = 3,
};

// Returns "PROCESSING", "SUCCEEDED", "FAILED" or "RELEASED".
std::string_view RecordStateName(RecordState state);

struct Record {
  std::string tenant;
  std::string biz_type;
  std::string key;          // opaque bytes
  std::string fingerprint;  // empty when the claim carried none
  RecordState state = RecordState::kProcessing;
  int64_t token = 0;  // fencing token; grows on every (re)acquisition
  absl::Time lease_until = absl::InfinitePast();
  std::string result;  // SUCCEEDED: the first result, byte for byte
  std::string error;   // FAILED: the cached failure, byte for byte
  absl::Time created_at = absl::InfinitePast();
  absl::Time updated_at = absl::InfinitePast();
  // When the record may be purged: the claim's time plus its biz_type's
  // retention TTL, set once at the first claim and kept by every later write.
  // absl::InfiniteFuture(): kept for ever (no retention was configured for the
  // biz_type, or the record predates expires_at). For a tombstone: when the
  // tombstone itself goes.
  absl::Time expires_at = absl::InfiniteFuture();
  // absl::InfinitePast() for a live record. Set: the record was purged after its
  // retention and this is its tombstone: key, biz_type, fingerprint, token and the
  // state it ended in are kept, result and error are gone. A claim of the key meets
  // it as Outcome::kExpired instead of running again.
  absl::Time purged_at = absl::InfinitePast();

  // True for a tombstone (purged_at is set).
  bool purged() const { return purged_at != absl::InfinitePast(); }

  bool operator==(const Record&) const = default;
};

}  // namespace idem
