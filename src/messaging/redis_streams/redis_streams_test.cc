// RedisStreamsTransport against a real redis-server: field mapping, commit (XACK),
// redelivery of what was not committed, dead-lettering after max deliveries and of
// deleted entries, and the connection going away (kUnavailable, then recovery,
// nothing lost). Claims with effects through the Guard: redis_streams_guard_test.cc.
//
// Needs IDEM_TEST_REDIS_URL (scripts/services.sh start DIR; source DIR/env.sh);
// FAILS without it, on purpose. Each test uses streams of its own.
#include "idem/messaging/redis_streams.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "idem/guard.h"
#include "idem/idem.h"
#include "testing/fault_proxy.h"
#include "testing/redis_admin.h"
#include "testing/redis_streams_test_util.h"
#include "testing/status_matchers.h"
#include "testing/temp_dir.h"
#include "testing/wait_until.h"

namespace idem::messaging {
namespace {

using ::idem::testing::StatusIs;
using std::chrono::milliseconds;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::Pair;

TEST_F(RedisStreamsTest, PollMapsFieldsAndCommitAcknowledges) {
  auto t = Open(Options("c1"));
  ASSERT_NE(t, nullptr);
  std::vector<Rebalance> seen;
  t->SetRebalanceListener([&](const Rebalance& r) { seen.push_back(r); });
  const std::string id1 = Add("e1", R"({"order_no":"R-1"})");
  const std::string id2 = Add("e2", "two");
  const std::string id3 = Add("e3", "three");
  ASSERT_OK_AND_ASSIGN(std::vector<Message> batch, t->Poll(10, milliseconds(1000)));
  ASSERT_THAT(Ids(batch), ElementsAre(id1, id2, id3));
  const Message& m = batch[0];
  EXPECT_EQ(m.source, stream_);
  EXPECT_EQ(m.partition, -1);
  EXPECT_EQ(m.offset, -1);
  EXPECT_EQ(m.payload, R"({"order_no":"R-1"})");
  EXPECT_EQ(m.key, "e1");
  EXPECT_THAT(m.headers, ElementsAre(Pair("event_id", "e1"), Pair("type", "refund.requested")));
  ASSERT_NE(m.Header("event_id"), nullptr);
  EXPECT_EQ(m.deliveries, 1);
  EXPECT_EQ(m.timestamp_ms, std::stoll(id1.substr(0, id1.find('-'))));
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].kind, Rebalance::Kind::kAssigned);
  EXPECT_THAT(seen[0].partitions, ElementsAre(stream_));
  EXPECT_EQ(t->name(), "redis-streams");

  EXPECT_EQ(admin_.PendingCount(stream_, "g"), 3);
  ASSERT_OK(t->Commit({batch[0], batch[1]}));
  EXPECT_EQ(admin_.PendingCount(stream_, "g"), 1);
  // Nothing new, the rest is not idle long enough to be claimed: an empty batch.
  ASSERT_OK_AND_ASSIGN(batch, t->Poll(10, milliseconds(50)));
  EXPECT_TRUE(batch.empty());
  ASSERT_OK(t->Commit({}));  // nothing to acknowledge: no I/O, no error
}

TEST_F(RedisStreamsTest, WhatWasNotCommittedIsDeliveredAgain) {
  const std::string id1 = Add("e1", "one");
  const std::string id2 = Add("e2", "two");
  {
    auto t = Open(Options("c1"));
    ASSERT_NE(t, nullptr);
    ASSERT_OK_AND_ASSIGN(std::vector<Message> batch, t->Poll(10, milliseconds(1000)));
    ASSERT_THAT(Ids(batch), ElementsAre(id1, id2));
    ASSERT_OK(t->Commit({batch[0]}));
  }  // gone without committing e2
  // The same consumer, restarted, resumes its own pending entry first.
  auto t = Open(Options("c1"));
  ASSERT_NE(t, nullptr);
  ASSERT_OK_AND_ASSIGN(std::vector<Message> batch, t->Poll(10, milliseconds(1000)));
  ASSERT_THAT(Ids(batch), ElementsAre(id2));
  EXPECT_EQ(batch[0].deliveries, 2);
  EXPECT_EQ(batch[0].payload, "two");

  // In one process: not committed and idle past claim_min_idle → delivered again.
  RedisStreamsOptions o = Options("c2");
  o.claim_min_idle = absl::Milliseconds(100);
  o.claim_interval = absl::ZeroDuration();
  auto t2 = Open(o);
  ASSERT_NE(t2, nullptr);
  const std::string id3 = Add("e3", "three");
  ASSERT_OK_AND_ASSIGN(batch, t2->Poll(10, milliseconds(1000)));
  ASSERT_THAT(Ids(batch), ElementsAre(id3));  // e2 is c1's and not idle yet
  // Time passes on Redis's clock: both entries idle past claim_min_idle.
  std::this_thread::sleep_for(milliseconds(150));
  ASSERT_OK_AND_ASSIGN(batch, t2->Poll(10, milliseconds(1000)));
  ASSERT_THAT(Ids(batch), ElementsAre(id2, id3));  // both idle: claimed, in id order
  EXPECT_EQ(batch[0].deliveries, 3);
  EXPECT_EQ(batch[1].deliveries, 2);
  ASSERT_OK(t2->Commit(batch));
  EXPECT_EQ(admin_.PendingCount(stream_, "g"), 0);
}

TEST_F(RedisStreamsTest, DeadLettersAfterMaxDeliveries) {
  RedisStreamsOptions o = Options("c1");
  o.max_deliveries = 2;
  o.claim_min_idle = absl::ZeroDuration();
  o.claim_interval = absl::ZeroDuration();
  auto t = Open(o);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dead_letter_stream(), stream_ + ":dead-letter");
  const std::string id = Add("poison", "kills its consumer");
  // Delivered twice (new, then claimed) and never committed...
  for (int delivery = 1; delivery <= 2; ++delivery) {
    ASSERT_OK_AND_ASSIGN(std::vector<Message> batch, t->Poll(10, milliseconds(1000)));
    ASSERT_THAT(Ids(batch), ElementsAre(id));
    EXPECT_EQ(batch[0].deliveries, delivery);
  }
  // ...the third delivery goes to the dead-letter stream instead, and is acknowledged.
  ASSERT_OK_AND_ASSIGN(std::vector<Message> batch, t->Poll(10, milliseconds(50)));
  EXPECT_TRUE(batch.empty());
  EXPECT_EQ(admin_.PendingCount(stream_, "g"), 0);
  auto dead = admin_.Range(stream_ + ":dead-letter");
  ASSERT_EQ(dead.size(), 1u);
  std::map<std::string, std::string>& f = dead[0].second;
  EXPECT_EQ(f["event_id"], "poison");
  EXPECT_EQ(f["type"], "refund.requested");
  EXPECT_EQ(f["payload"], "kills its consumer");
  EXPECT_EQ(f["idem-reason"], "delivered 3 times, more than max_deliveries 2");
  EXPECT_EQ(f["idem-original-stream"], stream_);
  EXPECT_EQ(f["idem-original-id"], id);
  EXPECT_EQ(f["idem-deliveries"], "3");
}

TEST_F(RedisStreamsTest, DeadLetterByTheRunner) {
  auto t = Open(Options("c1"));
  ASSERT_NE(t, nullptr);
  admin_.Run({"XADD", stream_, "*", "payload", "no event id here"});
  const std::string good = Add("e1", "fine");
  ASSERT_OK_AND_ASSIGN(std::vector<Message> batch, t->Poll(10, milliseconds(1000)));
  ASSERT_EQ(batch.size(), 2u);
  ASSERT_OK(t->DeadLetter(batch[0], "no event_id field: cannot derive the key"));
  EXPECT_EQ(admin_.PendingCount(stream_, "g"), 1);  // only the good one
  ASSERT_OK(t->Commit(batch));                      // with the rest, harmlessly
  EXPECT_EQ(admin_.PendingCount(stream_, "g"), 0);
  auto dead = admin_.Range(stream_ + ":dead-letter");
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].second["idem-reason"], "no event_id field: cannot derive the key");
  EXPECT_EQ(dead[0].second["idem-original-id"], batch[0].id);
  EXPECT_EQ(dead[0].second["payload"], "no event id here");
  Message other = batch[1];
  other.source = "another-stream";
  EXPECT_THAT(t->DeadLetter(other, "x"), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(RedisStreamsTest, EntriesDeletedWhilePendingAreDeadLetteredNotDropped) {
  const std::string kept = Add("e1", "one");
  const std::string gone_mine = Add("e2", "two");
  const std::string gone_claimed = Add("e3", "three");
  {
    auto t = Open(Options("c1"));
    ASSERT_NE(t, nullptr);
    ASSERT_OK_AND_ASSIGN(std::vector<Message> batch, t->Poll(10, milliseconds(1000)));
    ASSERT_EQ(batch.size(), 3u);
  }  // c1 stops with all three pending; two are deleted from the stream
  EXPECT_EQ(admin_.Run({"XDEL", stream_, gone_mine, gone_claimed}), "2");
  // c1 restarted reads its pending list: the deleted entry comes back without fields.
  RedisStreamsOptions o = Options("c1");
  o.claim_interval = absl::ZeroDuration();
  auto t = Open(o);
  ASSERT_NE(t, nullptr);
  ASSERT_OK_AND_ASSIGN(std::vector<Message> batch, t->Poll(2, milliseconds(1000)));
  ASSERT_THAT(Ids(batch), ElementsAre(kept));
  ASSERT_OK(t->Commit(batch));
  // c2 claims what is left (XAUTOCLAIM reports the deleted entry apart).
  o = Options("c2");
  o.claim_min_idle = absl::ZeroDuration();
  o.claim_interval = absl::ZeroDuration();
  auto t2 = Open(o);
  ASSERT_NE(t2, nullptr);
  ASSERT_OK_AND_ASSIGN(batch, t2->Poll(10, milliseconds(50)));
  EXPECT_TRUE(batch.empty());
  EXPECT_EQ(admin_.PendingCount(stream_, "g"), 0);
  auto dead = admin_.Range(stream_ + ":dead-letter");
  ASSERT_EQ(dead.size(), 2u);
  std::vector<std::string> dead_ids;
  for (auto& [id, fields] : dead) {
    EXPECT_EQ(fields["idem-reason"], "deleted from the stream before it was acknowledged");
    dead_ids.push_back(fields["idem-original-id"]);
  }
  EXPECT_THAT(dead_ids, ::testing::UnorderedElementsAre(gone_mine, gone_claimed));
}

TEST_F(RedisStreamsTest, KilledConnectionIsUnavailableThenReconnects) {
  const std::string consumer = Unique("killed-conn");  // its connection is found by name
  auto t = Open(Options(consumer));
  ASSERT_NE(t, nullptr);
  const std::string id1 = Add("e1", "one");
  ASSERT_OK_AND_ASSIGN(std::vector<Message> batch, t->Poll(10, milliseconds(1000)));
  ASSERT_THAT(Ids(batch), ElementsAre(id1));
  // The server drops the transport's connection (found by its client name).
  std::string list = admin_.Run({"CLIENT", "LIST"});
  const size_t at = list.find("name=idem-streams:" + consumer + " ");
  ASSERT_NE(at, std::string::npos) << list;
  const size_t line = list.rfind('\n', at);
  const size_t id_at = list.find("id=", line == std::string::npos ? 0 : line);
  const std::string client_id = list.substr(id_at + 3, list.find(' ', id_at) - id_at - 3);
  EXPECT_EQ(admin_.Run({"CLIENT", "KILL", "ID", client_id}), "1");
  EXPECT_THAT(t->Commit(batch), StatusIs(absl::StatusCode::kUnavailable));
  // Next call reconnects; the uncommitted entry comes back (its own pending list).
  ASSERT_OK_AND_ASSIGN(batch, t->Poll(10, milliseconds(1000)));
  ASSERT_THAT(Ids(batch), ElementsAre(id1));
  EXPECT_EQ(batch[0].deliveries, 2);
  ASSERT_OK(t->Commit(batch));
  EXPECT_EQ(admin_.PendingCount(stream_, "g"), 0);
}

TEST_F(RedisStreamsTest, ServerGoneIsUnavailableThenRecoversWithoutLoss) {
  std::unique_ptr<testing::FaultProxy> proxy = testing::FaultProxy::Start(admin_.port());
  ASSERT_NE(proxy, nullptr);
  RedisStreamsOptions o = Options("c1");
  o.url = "redis://127.0.0.1:" + std::to_string(proxy->port());
  o.command_timeout = absl::Milliseconds(300);
  o.connect_timeout = absl::Milliseconds(300);
  auto t = Open(o);
  ASSERT_NE(t, nullptr);
  const std::string id1 = Add("e1", "one");
  ASSERT_OK_AND_ASSIGN(std::vector<Message> batch, t->Poll(10, milliseconds(1000)));
  ASSERT_THAT(Ids(batch), ElementsAre(id1));

  proxy->SetMode(testing::FaultProxy::Mode::kReset);  // connections reset, new ones too
  // The proxy applies a mode change to open connections within 50 ms; until then
  // it would still forward.
  ASSERT_TRUE(testing::WaitUntil([&] { return proxy->open() == 0; }))
      << "the proxy did not reset its connections";
  EXPECT_THAT(t->Commit(batch), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(t->Poll(10, milliseconds(100)).status(), StatusIs(absl::StatusCode::kUnavailable));
  proxy->SetMode(testing::FaultProxy::Mode::kBlackhole);  // silent: the timeouts decide
  const absl::Time start = absl::Now();
  EXPECT_THAT(t->Poll(10, milliseconds(100)).status(), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));

  const std::string id2 = Add("e2", "two");  // produced while the consumer is cut off
  proxy->SetMode(testing::FaultProxy::Mode::kPass);
  std::vector<std::string> got;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (got.size() < 2 && absl::Now() < deadline) {
    absl::StatusOr<std::vector<Message>> b = t->Poll(10, milliseconds(200));
    if (!b.ok()) {
      EXPECT_THAT(b.status(), StatusIs(absl::StatusCode::kUnavailable));
      continue;
    }
    ASSERT_OK(t->Commit(*b));
    for (const Message& m : *b) got.push_back(m.id);
  }
  EXPECT_THAT(got, ElementsAre(id1, id2));  // the uncommitted one again, then the new one
  EXPECT_EQ(admin_.PendingCount(stream_, "g"), 0);
}

// A server restarted without persistence (or a stream deleted by hand) has lost the
// group: one kUnavailable, then the group is created again.
TEST_F(RedisStreamsTest, LostGroupIsCreatedAgain) {
  auto t = Open(Options("c1"));
  ASSERT_NE(t, nullptr);
  ASSERT_OK_AND_ASSIGN(std::vector<Message> batch, t->Poll(10, milliseconds(10)));
  EXPECT_TRUE(batch.empty());
  EXPECT_EQ(admin_.Run({"DEL", stream_}), "1");
  absl::Status lost = t->Poll(10, milliseconds(10)).status();
  EXPECT_THAT(lost, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(std::string(lost.message()), HasSubstr("NOGROUP"));
  ASSERT_OK_AND_ASSIGN(batch, t->Poll(10, milliseconds(10)));
  EXPECT_TRUE(batch.empty());
  const std::string id = Add("e1", "after");
  ASSERT_OK_AND_ASSIGN(batch, t->Poll(10, milliseconds(1000)));
  EXPECT_THAT(Ids(batch), ElementsAre(id));
}

TEST_F(RedisStreamsTest, NoPasswordInErrors) {
  std::unique_ptr<testing::FaultProxy> proxy = testing::FaultProxy::Start(admin_.port());
  ASSERT_NE(proxy, nullptr);
  proxy->SetMode(testing::FaultProxy::Mode::kReset);
  RedisStreamsOptions o = Options("c1");
  o.url = "redis://:s3cret-pw@127.0.0.1:" + std::to_string(proxy->port());
  absl::Status s = RedisStreamsTransport::Open(o).status();
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(std::string(s.message()), Not(HasSubstr("s3cret")));
  // The real server has no password: AUTH is refused, a configuration error.
  proxy->SetMode(testing::FaultProxy::Mode::kPass);
  s = RedisStreamsTransport::Open(o).status();
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(std::string(s.message()), HasSubstr("authentication refused"));
  EXPECT_THAT(std::string(s.message()), Not(HasSubstr("s3cret")));
  o.url = "redis://:s3cret-pw@127.0.0.1:1/x";
  s = RedisStreamsTransport::Open(o).status();
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(s.message()), Not(HasSubstr("s3cret")));
}

TEST_F(RedisStreamsTest, AKeyOfAnotherTypeIsFatal) {
  admin_.Run({"SET", stream_, "not a stream"});
  EXPECT_THAT(RedisStreamsTransport::Open(Options("c1")).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  RedisStreamsOptions o = Options("c1");
  o.group.clear();
  EXPECT_THAT(RedisStreamsTransport::Open(o).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace idem::messaging
