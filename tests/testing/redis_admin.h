// Test helpers for code that talks to the test redis-server: its URL (failing the
// test, never skipping, when IDEM_TEST_REDIS_URL is not set) and a plain hiredis
// connection to set up and check what the code under test did. Header-only.
//
// Thread safety: a RedisAdmin is used by one thread at a time. Test-only.
#pragma once

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "store/redis/redis_client.h"

namespace idem::testing {

// IDEM_TEST_REDIS_URL, or a URL that cannot connect after failing the test.
inline std::string RedisUrl() {
  const char* url = std::getenv("IDEM_TEST_REDIS_URL");
  if (url == nullptr || *url == '\0') {
    ADD_FAILURE() << "IDEM_TEST_REDIS_URL is not set: scripts/services.sh start DIR, then "
                     "source DIR/env.sh";
    return "redis://IDEM_TEST_REDIS_URL-is-not-set.invalid:1";
  }
  return url;
}

// A plain connection for setting up and checking, beside the code under test's.
class RedisAdmin {
 public:
  RedisAdmin() {
    absl::StatusOr<redis::RedisAddress> a = redis::ParseRedisUrl(RedisUrl());
    if (!a.ok()) return;
    port_ = a->port;
    timeval tv{2, 0};
    c_ = redisConnectWithTimeout(a->host.c_str(), a->port, tv);
  }
  ~RedisAdmin() {
    if (c_ != nullptr) redisFree(c_);
  }
  bool ok() const { return c_ != nullptr && c_->err == 0; }
  int port() const { return port_; }

  // Runs a command; the reply as text: strings, integers, nil as "(nil)", arrays
  // flattened with spaces.
  std::string Run(const std::vector<std::string>& args) {
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (const std::string& s : args) {
      argv.push_back(s.data());
      lens.push_back(s.size());
    }
    auto* r = static_cast<redisReply*>(
        redisCommandArgv(c_, static_cast<int>(argv.size()), argv.data(), lens.data()));
    if (r == nullptr) return "(no reply)";
    std::string out = Flatten(r);
    freeReplyObject(r);
    return out;
  }

  // The stream's entries: id → fields.
  std::vector<std::pair<std::string, std::map<std::string, std::string>>> Range(
      const std::string& stream) {
    auto* r = static_cast<redisReply*>(redisCommand(c_, "XRANGE %s - +", stream.c_str()));
    std::vector<std::pair<std::string, std::map<std::string, std::string>>> out;
    if (r == nullptr) return out;
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; ++i) {
      const redisReply* e = r->element[i];
      std::map<std::string, std::string> fields;
      for (size_t j = 0; j + 1 < e->element[1]->elements; j += 2) {
        fields[e->element[1]->element[j]->str] = e->element[1]->element[j + 1]->str;
      }
      out.emplace_back(e->element[0]->str, std::move(fields));
    }
    freeReplyObject(r);
    return out;
  }

  int64_t PendingCount(const std::string& stream, const std::string& group) {
    auto* r =
        static_cast<redisReply*>(redisCommand(c_, "XPENDING %s %s", stream.c_str(), group.c_str()));
    int64_t n = -1;
    if (r != nullptr && r->type == REDIS_REPLY_ARRAY && r->elements > 0) n = r->element[0]->integer;
    if (r != nullptr) freeReplyObject(r);
    return n;
  }

 private:
  static std::string Flatten(const redisReply* r) {
    switch (r->type) {
      case REDIS_REPLY_INTEGER:
        return std::to_string(r->integer);
      case REDIS_REPLY_NIL:
        return "(nil)";
      case REDIS_REPLY_ARRAY: {
        std::string out;
        for (size_t i = 0; i < r->elements; ++i) out += (i ? " " : "") + Flatten(r->element[i]);
        return out;
      }
      default:
        return std::string(r->str, r->len);
    }
  }
  redisContext* c_ = nullptr;
  int port_ = 0;
};

}  // namespace idem::testing
