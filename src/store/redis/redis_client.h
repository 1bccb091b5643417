// RedisClient: the few Redis commands the cache tier needs (GET, SET PX), over
// hiredis with short connect and command timeouts and a small pool of reused
// connections. Redis here is a cache, never a source of truth: every failure is a
// plain kUnavailable that the caller counts as a miss.
//
// URL: redis://[:password@]host[:port][/db] (port 6379, db 0 by default).
//
// Thread safety: safe for concurrent use; each call takes a pooled connection for
// its duration, so calls on different threads run in parallel.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "store/shared_tier.h"

struct redisContext;  // hiredis; kept out of every header a user includes

namespace idem::redis {

struct RedisAddress {
  std::string host;
  int port = 6379;
  int db = 0;
  std::string password;  // empty: no AUTH
};

// Parses `url`. kInvalidArgument when it is not redis://host[:port][/db].
absl::StatusOr<RedisAddress> ParseRedisUrl(std::string_view url);

struct RedisClientOptions {
  absl::Duration connect_timeout = absl::Milliseconds(50);
  absl::Duration command_timeout = absl::Milliseconds(50);
  int pool_size = 8;  // idle connections kept; more may be open at once under load
};

class RedisClient : public cache::SharedTier {
 public:
  RedisClient(RedisAddress address, RedisClientOptions options);
  ~RedisClient() override;
  RedisClient(const RedisClient&) = delete;
  RedisClient& operator=(const RedisClient&) = delete;

  // GET key: the value, or std::nullopt when the key is absent. kUnavailable when
  // Redis cannot be reached or does not answer within the timeouts. Blocks at most
  // connect_timeout + command_timeout.
  absl::StatusOr<std::optional<std::string>> Get(std::string_view key) override;

  // SET key value PX ttl. Errors as Get(). Both strings are binary-safe.
  absl::Status SetPx(std::string_view key, std::string_view value, absl::Duration ttl) override;

 private:
  struct ContextDeleter {
    void operator()(redisContext* c) const;
  };
  using ContextPtr = std::unique_ptr<redisContext, ContextDeleter>;

  absl::StatusOr<ContextPtr> Acquire();
  absl::StatusOr<ContextPtr> Connect();
  // Keeps `c` for reuse unless the pool is full (then it is closed).
  void Release(ContextPtr c);

  const RedisAddress address_;
  const RedisClientOptions options_;
  absl::Mutex mu_;
  std::vector<ContextPtr> idle_ ABSL_GUARDED_BY(mu_);
};

}  // namespace idem::redis
