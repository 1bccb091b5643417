// SharedTier: the cache decorator's L2, a key/value store that several processes
// share (Redis: src/store/redis). An interface so that the decorator builds without
// the Redis client (IDEM_WITH_REDIS=OFF) and tests can put a fake behind it.
//
// Thread safety: implementations are safe for concurrent use.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace idem::cache {

class SharedTier {
 public:
  virtual ~SharedTier() = default;

  // The value stored under `key`, or std::nullopt when there is none. kUnavailable
  // when the tier cannot be reached or does not answer in time. Blocks briefly.
  virtual absl::StatusOr<std::optional<std::string>> Get(std::string_view key) = 0;

  // Stores `value` under `key` for `ttl`. Errors as Get(). Both are binary-safe.
  virtual absl::Status SetPx(std::string_view key, std::string_view value, absl::Duration ttl) = 0;
};

}  // namespace idem::cache
