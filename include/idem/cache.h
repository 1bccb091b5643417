// Cache tiers in front of a Store: an in-process LRU (L1) and an
// optional Redis tier (L2) that answer duplicates whose outcome the database has
// already decided, without a database transaction.
//
//   auto db = idem::OpenStore("sqlite://./idem.db");
//   auto store = idem::NewCachingStore(*std::move(db),
//                                      {.redis_url = "redis://127.0.0.1:6379"});
//   idem::Guard guard(**store);  // duplicates of finished keys skip the database
//
// Only final records (SUCCEEDED, FAILED) are ever cached: they never change, so a
// cached answer is the database's answer. PROCESSING records, leases and released
// keys always go to the database. Losing a tier (Redis down, slow, flushed, a TTL
// expiring, L1 eviction) is a miss, never an error and never a second execution:
// the database's unique constraint still decides. Records purged from the
// database by retention may still be answered from a cache until `ttl`;
// keep `ttl` below the retention period.
//
// Thread safety: the returned Store is safe for concurrent use, like any Store.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "idem/clock.h"
#include "idem/store.h"

namespace idem {

struct CacheOptions {
  // L1: at most this many records in process (least recently used evicted first).
  // 0 disables L1.
  size_t l1_entries = 100000;
  // L1: at most this many bytes in process, whatever the records' sizes: each is
  // charged its tenant, biz_type, key (twice: entry and index), fingerprint, result
  // and error, plus a fixed per-entry overhead of about 300 bytes. 0 disables L1.
  // The default, 64 MiB, fits a small machine (a 512 MB container) and holds about
  // 150,000 typical records of a few hundred bytes, more than l1_entries.
  size_t l1_bytes = size_t{64} << 20;
  // A record charged more than this is cached in no tier (its duplicates are answered
  // by the database): a few large results cannot push every small one out of L1,
  // nor fill Redis. Must be positive. The default, 256 KiB, is 1/256 of l1_bytes.
  size_t max_entry_bytes = size_t{256} << 10;
  // L2: "redis://host:port" (optionally "redis://host:port/DB"); empty disables it.
  std::string redis_url;
  // How long a record stays cached in either tier.
  absl::Duration ttl = absl::Hours(24);
  // Redis connect and command timeouts: a slow Redis costs at most this per call.
  absl::Duration redis_connect_timeout = absl::Milliseconds(50);
  absl::Duration redis_command_timeout = absl::Milliseconds(50);
  // After a Redis error, Redis is not asked again for this long (every lookup is a
  // miss meanwhile), so a dead Redis does not cost a timeout per request.
  absl::Duration redis_retry_after = absl::Seconds(1);
  // Redis connections kept open for reuse.
  int redis_pool_size = 8;
  // Prefix of every Redis key. Deployments sharing a Redis between different
  // databases must use distinct prefixes.
  std::string redis_key_prefix = "idem:v1:";
  // Redis errors are reported through `log` at most once per `log_interval`
  // (with the count since the last report). Null: written to stderr.
  std::function<void(std::string_view message)> log;
  absl::Duration log_interval = absl::Seconds(10);
  const Clock* clock = Clock::Real();  // not owned; must outlive the store
};

// Counters since the store was made, for metrics. Monotonic.
struct CacheStats {
  uint64_t l1_hits = 0;       // duplicates answered from L1
  uint64_t l2_hits = 0;       // answered from Redis
  uint64_t misses = 0;        // neither tier knew the key (the database decides)
  uint64_t redis_errors = 0;  // Redis unreachable, slow, or an unreadable value
  uint64_t fills = 0;         // final records written into the tiers
  uint64_t too_large = 0;     // final records not cached: over max_entry_bytes
  uint64_t l1_entries = 0;    // records in L1 now (not monotonic)
  uint64_t l1_bytes = 0;      // bytes charged for them (not monotonic; <= l1_bytes)
};

// Wraps `inner` with the cache tiers. The Redis tier connects lazily, so an
// unreachable Redis is not an error here. Returns kInvalidArgument for a malformed
// `redis_url`, a null `inner`, a ttl or max_entry_bytes that is not positive. Takes ownership of `inner`. Does not block.
absl::StatusOr<std::unique_ptr<Store>> NewCachingStore(std::unique_ptr<Store> inner,
                                                       CacheOptions options = {});

// The counters of a store made by NewCachingStore, or std::nullopt for any other
// store. Thread-safe; does not block.
std::optional<CacheStats> GetCacheStats(const Store& store);

}  // namespace idem
