#include "store/redis/redis_client.h"

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <algorithm>
#include <initializer_list>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "store/absl_compat.h"
#include "idem/status.h"
#include "store/store_url.h"

namespace idem::redis {
namespace {

timeval AsTimeval(absl::Duration d) {
  if (d < absl::ZeroDuration()) d = absl::ZeroDuration();
  return absl::ToTimeval(d);
}

// A reply owned for the length of one call.
struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

// Runs one command on `c`. On an I/O error or timeout hiredis leaves `c` unusable,
// so the caller must drop it (reported as kUnavailable with `drop` = true).
absl::StatusOr<ReplyPtr> Command(redisContext* c, std::initializer_list<std::string_view> args,
                                 bool& drop) {
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (std::string_view a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  void* raw = redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data());
  if (raw == nullptr) {
    drop = true;
    return absl::UnavailableError(absl::StrCat("redis: ", c->errstr[0] ? c->errstr : "no reply"));
  }
  ReplyPtr reply(static_cast<redisReply*>(raw));
  if (reply->type == REDIS_REPLY_ERROR) {
    // The connection is fine; the command was refused (e.g. OOM, READONLY replica).
    return absl::UnavailableError(
        absl::StrCat("redis: ", absl::string_view(reply->str, reply->len)));
  }
  return reply;
}

}  // namespace

absl::StatusOr<RedisAddress> ParseRedisUrl(std::string_view url) {
  IDEM_ASSIGN_OR_RETURN(store::StoreUrl u, store::ParseStoreUrl(url, "redis"));
  IDEM_RETURN_IF_ERROR(u.OnlyParams({}));
  if (u.host.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("redis URL '", u.redacted, "' has no host"));
  }
  RedisAddress a;
  a.host = u.host;
  a.port = u.port.value_or(6379);
  // redis://:password@host (AUTH password) and redis://password@host both name it.
  a.password = u.password.has_value() ? *u.password : u.user;
  if (!u.path.empty()) {
    IDEM_ASSIGN_OR_RETURN(a.db, store::ParseIntParam("redis", "db (the path)", u.path, 0, 1 << 20));
  }
  return a;
}

void RedisClient::ContextDeleter::operator()(redisContext* c) const { redisFree(c); }

RedisClient::RedisClient(RedisAddress address, RedisClientOptions options)
    : address_(std::move(address)), options_(options) {}

RedisClient::~RedisClient() = default;

absl::StatusOr<RedisClient::ContextPtr> RedisClient::Connect() {
  ContextPtr c(redisConnectWithTimeout(address_.host.c_str(), address_.port,
                                       AsTimeval(options_.connect_timeout)));
  if (c == nullptr) return absl::UnavailableError("redis: cannot allocate a context");
  if (c->err != 0) {
    return absl::UnavailableError(
        absl::StrCat("redis: connect to ", address_.host, ":", address_.port, ": ", c->errstr));
  }
  if (redisSetTimeout(c.get(), AsTimeval(options_.command_timeout)) != REDIS_OK) {
    return absl::UnavailableError("redis: cannot set the command timeout");
  }
  bool drop = false;
  if (!address_.password.empty()) {
    IDEM_RETURN_IF_ERROR(Command(c.get(), {"AUTH", address_.password}, drop).status());
  }
  if (address_.db != 0) {
    const std::string db = std::to_string(address_.db);
    IDEM_RETURN_IF_ERROR(Command(c.get(), {"SELECT", db}, drop).status());
  }
  return c;
}

absl::StatusOr<RedisClient::ContextPtr> RedisClient::Acquire() {
  {
    absl::MutexLock lock(&mu_);
    if (!idle_.empty()) {
      ContextPtr c = std::move(idle_.back());
      idle_.pop_back();
      return c;
    }
  }
  // Connect outside the lock: a slow connect must not hold up the other threads.
  return Connect();
}

void RedisClient::Release(ContextPtr c) {
  absl::MutexLock lock(&mu_);
  if (static_cast<int>(idle_.size()) < options_.pool_size) idle_.push_back(std::move(c));
}

absl::StatusOr<std::optional<std::string>> RedisClient::Get(std::string_view key) {
  IDEM_ASSIGN_OR_RETURN(ContextPtr c, Acquire());
  bool drop = false;
  absl::StatusOr<ReplyPtr> reply = Command(c.get(), {"GET", key}, drop);
  if (!drop) Release(std::move(c));
  if (!reply.ok()) return reply.status();
  if ((*reply)->type == REDIS_REPLY_NIL) return std::nullopt;
  if ((*reply)->type != REDIS_REPLY_STRING) {
    return absl::UnavailableError("redis: GET answered something other than a string");
  }
  return std::string((*reply)->str, (*reply)->len);
}

absl::Status RedisClient::SetPx(std::string_view key, std::string_view value, absl::Duration ttl) {
  const std::string px = std::to_string(std::max<int64_t>(1, absl::ToInt64Milliseconds(ttl)));
  IDEM_ASSIGN_OR_RETURN(ContextPtr c, Acquire());
  bool drop = false;
  absl::StatusOr<ReplyPtr> reply = Command(c.get(), {"SET", key, value, "PX", px}, drop);
  if (!drop) Release(std::move(c));
  return reply.status();
}

}  // namespace idem::redis
