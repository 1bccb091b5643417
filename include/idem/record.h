// Record: the dedupe record of one key (SPEC §3), as the Store keeps it.
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

  bool operator==(const Record&) const = default;
};

}  // namespace idem
