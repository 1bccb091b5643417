// What the Redis Streams tests share: a fixture with a stream of its own per test
// (deleted after it), the transport's options for it, and an effect run through the
// Guard. Test-only; included by the Redis Streams unit tests under src/ (one binary:
// redis_streams_test.cc and redis_streams_guard_test.cc).
#pragma once

#include <unistd.h>

#include <atomic>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "idem/guard.h"
#include "idem/idem.h"
#include "idem/messaging/redis_streams.h"
#include "testing/redis_admin.h"
#include "testing/status_matchers.h"

namespace idem::messaging {

inline std::string Unique(const std::string& what) {
  static std::atomic<int> n{0};
  return "idem-test:" + std::to_string(std::random_device{}() % 1000000) + ":" +
         std::to_string(getpid()) + ":" + std::to_string(n++) + ":" + what;
}

class RedisStreamsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(admin_.ok()) << "cannot reach IDEM_TEST_REDIS_URL";
    stream_ = Unique("stream");
  }
  void TearDown() override { admin_.Run({"DEL", stream_, stream_ + ":dead-letter"}); }

  RedisStreamsOptions Options(const std::string& consumer) {
    return {.url = testing::RedisUrl(),
            .stream = stream_,
            .group = "g",
            .consumer = consumer,
            .key_field = "event_id",
            .claim_min_idle = absl::Seconds(30)};
  }
  std::unique_ptr<RedisStreamsTransport> Open(RedisStreamsOptions o) {
    absl::StatusOr<std::unique_ptr<RedisStreamsTransport>> t =
        RedisStreamsTransport::Open(std::move(o));
    EXPECT_OK(t);
    return t.ok() ? *std::move(t) : nullptr;
  }
  std::string Add(const std::string& event_id, const std::string& payload) {
    return admin_.Run({"XADD", stream_, "*", "event_id", event_id, "type", "refund.requested",
                       "payload", payload});
  }
  static std::vector<std::string> Ids(const std::vector<Message>& batch) {
    std::vector<std::string> ids;
    for (const Message& m : batch) ids.push_back(m.id);
    return ids;
  }

  testing::RedisAdmin admin_;
  std::string stream_;
};

// The effect of one event: a row in the application's table, under the Guard keyed
// on the event id. The table has no unique key, so a second effect would show.
inline absl::StatusOr<Outcome> Effect(Guard& guard, const Message& m) {
  const std::string* event_id = m.Header("event_id");
  if (event_id == nullptr) return absl::InvalidArgumentError("no event_id");
  IDEM_ASSIGN_OR_RETURN(
      Result r, guard.Run({.biz_type = "stream-effect", .key = *event_id},
                          [&](Transaction& tx) -> absl::StatusOr<std::string> {
                            IDEM_RETURN_IF_ERROR(
                                tx.Exec("INSERT INTO effects (event_id, entry_id) VALUES (?, ?)",
                                        {Value(*event_id), Value(m.id)})
                                    .status());
                            return std::string("done");
                          }));
  return r.outcome;
}

}  // namespace idem::messaging
