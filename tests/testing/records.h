// Records for store tests that drive StoreTransaction directly.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "absl/time/time.h"
#include "idem/record.h"

namespace idem::testing {

// A fresh claim of `key` (tenant "default", PROCESSING at `token`, a 30 s lease),
// at a fixed time with a microsecond part, so a store that rounds times shows.
inline Record ClaimRecord(std::string key, int64_t token = 1, std::string biz_type = "refund") {
  const absl::Time now = absl::FromUnixMicros(1700000000123456);
  return Record{.tenant = "default",
                .biz_type = std::move(biz_type),
                .key = std::move(key),
                .fingerprint = "fp",
                .state = RecordState::kProcessing,
                .token = token,
                .lease_until = now + absl::Seconds(30),
                .created_at = now,
                .updated_at = now};
}

}  // namespace idem::testing
