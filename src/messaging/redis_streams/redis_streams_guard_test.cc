// Entries claimed from another consumer (XAUTOCLAIM), with each message's effect
// run through the Guard on SQLite keyed on its event_id field: a consumer SIGKILLed
// with pending entries, and a slow live consumer whose entries a fast one claims.
// Entries are delivered twice; the effects table (no unique key, so a second effect
// would show) has one row per event.
//
// Needs IDEM_TEST_REDIS_URL (scripts/services.sh start DIR; source DIR/env.sh);
// FAILS without it, on purpose.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "idem/guard.h"
#include "idem/idem.h"
#include "idem/messaging/redis_streams.h"
#include "testing/redis_streams_test_util.h"
#include "testing/status_matchers.h"
#include "testing/temp_dir.h"
#include "testing/wait_until.h"

namespace idem::messaging {
namespace {

using ::idem::testing::StatusIs;
using std::chrono::milliseconds;
using ::testing::ElementsAre;

// The application's table of effects, in the SQLite store at `store_url`: no
// unique key, so a second effect of an event would show as a second row.
void CreateEffectsTable(const std::string& store_url) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, OpenStore(store_url));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<StoreTransaction> tx, store->Begin());
  ASSERT_OK(tx->Exec("CREATE TABLE effects (event_id TEXT NOT NULL, entry_id TEXT NOT NULL)"));
  ASSERT_OK(tx->Commit());
}

TEST_F(RedisStreamsTest, KilledConsumersPendingEntriesAreClaimedWithOneEffectEach) {
  testing::TempDir dir;
  const std::string store_url = "sqlite://" + dir.file("app.db");
  ASSERT_NO_FATAL_FAILURE(CreateEffectsTable(store_url));
  // Six events; e2 is produced twice (a producer retry): seven entries.
  std::vector<std::string> ids;
  for (const char* e : {"e0", "e1", "e2", "e2", "e3", "e4", "e5"}) ids.push_back(Add(e, "p"));

  // c1 reads all seven, runs the effects of the first four, and is SIGKILLed before
  // it acknowledges anything.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    absl::StatusOr<std::unique_ptr<RedisStreamsTransport>> t =
        RedisStreamsTransport::Open(Options("c1"));
    absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(store_url);
    if (!t.ok() || !store.ok()) _exit(10);
    absl::StatusOr<std::vector<Message>> batch = (*t)->Poll(10, milliseconds(2000));
    if (!batch.ok() || batch->size() != 7) _exit(11);
    Guard guard(**store);
    for (size_t i = 0; i < 4; ++i) {
      if (!Effect(guard, (*batch)[i]).ok()) _exit(12);
    }
    raise(SIGKILL);
    _exit(13);
  }
  int wstatus = 0;
  ASSERT_EQ(waitpid(child, &wstatus, 0), child);
  ASSERT_TRUE(WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGKILL)
      << "the consumer did not get to its kill (exit " << WEXITSTATUS(wstatus) << ")";
  EXPECT_EQ(admin_.PendingCount(stream_, "g"), 7);

  // c2 claims c1's entries once they are idle for claim_min_idle.
  RedisStreamsOptions o = Options("c2");
  o.claim_min_idle = absl::Milliseconds(200);
  o.claim_interval = absl::ZeroDuration();
  auto t = Open(o);
  ASSERT_NE(t, nullptr);
  int assigned = 0;
  t->SetRebalanceListener([&](const Rebalance& r) {
    if (r.kind == Rebalance::Kind::kAssigned) ++assigned;
  });
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, OpenStore(store_url));
  Guard guard(*store);
  std::vector<Message> got;
  std::map<Outcome, int> outcomes;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (got.size() < 7 && absl::Now() < deadline) {
    ASSERT_OK_AND_ASSIGN(std::vector<Message> batch, t->Poll(10, milliseconds(100)));
    for (const Message& m : batch) {
      ASSERT_OK_AND_ASSIGN(Outcome outcome, Effect(guard, m));
      ++outcomes[outcome];
    }
    ASSERT_OK(t->Commit(batch));  // after the effects committed
    got.insert(got.end(), batch.begin(), batch.end());
  }
  ASSERT_EQ(Ids(got), ids);
  for (const Message& m : got) EXPECT_EQ(m.deliveries, 2) << m.id;
  EXPECT_EQ(assigned, 2);  // joining, then the claim
  // c1 ran e0, e1 and e2 (its duplicate, the 4th entry, replayed there): all four
  // replay here; e3, e4 and e5 run here, once each.
  EXPECT_EQ(outcomes[Outcome::kReplayed], 4);
  EXPECT_EQ(outcomes[Outcome::kExecuted], 3);
  EXPECT_EQ(admin_.PendingCount(stream_, "g"), 0);

  ASSERT_OK_AND_ASSIGN(std::unique_ptr<StoreTransaction> tx, store->Begin());
  ASSERT_OK_AND_ASSIGN(Rows rows, tx->Query("SELECT event_id, COUNT(*) FROM effects "
                                            "GROUP BY event_id ORDER BY event_id"));
  ASSERT_OK(tx->Commit());
  std::vector<std::string> per_event;
  for (const auto& row : rows.rows) {
    per_event.push_back(row[0].as_text() + "=" + std::to_string(row[1].as_int()));
  }
  EXPECT_THAT(per_event, ElementsAre("e0=1", "e1=1", "e2=1", "e3=1", "e4=1", "e5=1"));
}

// Two live consumers: a slow one, and a fast one that claims the slow one's entries
// once they are idle for 60 ms. Both process some entries (nothing is revoked);
// the guard makes the second run a replay: one effect per event.
TEST_F(RedisStreamsTest, ASlowConsumersEntriesClaimedByALiveOneStillOneEffectEach) {
  testing::TempDir dir;
  const std::string store_url = "sqlite://" + dir.file("app.db");
  ASSERT_NO_FATAL_FAILURE(CreateEffectsTable(store_url));
  constexpr int kEvents = 30;
  for (int i = 0; i < kEvents; ++i) Add("e" + std::to_string(i), "p");

  std::atomic<bool> stop{false};
  std::atomic<int> executed{0};
  std::atomic<int> replayed{0};
  std::atomic<bool> slow_has_batch{false};
  auto consume = [&](RedisStreamsOptions o, milliseconds per_message,
                     std::atomic<bool>* took_batch) {
    absl::StatusOr<std::unique_ptr<RedisStreamsTransport>> t =
        RedisStreamsTransport::Open(std::move(o));
    absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(store_url);
    ASSERT_OK(t);
    ASSERT_OK(store);
    Guard guard(**store);
    while (!stop) {
      absl::StatusOr<std::vector<Message>> batch = (*t)->Poll(5, milliseconds(20));
      ASSERT_OK(batch);
      if (took_batch != nullptr && !batch->empty()) *took_batch = true;
      bool all_done = true;
      for (const Message& m : *batch) {
        std::this_thread::sleep_for(per_message);  // the consumer's pace
        absl::StatusOr<Outcome> outcome = Effect(guard, m);
        if (!outcome.ok()) {  // e.g. the database busy: leave the batch pending
          EXPECT_THAT(outcome.status(), StatusIs(absl::StatusCode::kUnavailable));
          all_done = false;
          break;
        }
        ++(*outcome == Outcome::kExecuted ? executed : replayed);
      }
      if (all_done) ASSERT_OK((*t)->Commit(*batch));
    }
  };
  RedisStreamsOptions slow = Options("slow");
  slow.claim_min_idle = absl::Seconds(30);
  RedisStreamsOptions fast = Options("fast");
  fast.claim_min_idle = absl::Milliseconds(60);
  fast.claim_interval = absl::ZeroDuration();
  std::thread slow_thread(consume, slow, milliseconds(40), &slow_has_batch);
  // The slow one takes the first batch.
  EXPECT_TRUE(testing::WaitUntil([&] { return slow_has_batch.load(); }));
  std::thread fast_thread(consume, fast, milliseconds(0), nullptr);
  EXPECT_TRUE(testing::WaitUntil([&] {
    return executed == kEvents && admin_.PendingCount(stream_, "g") == 0 &&
           admin_.Run({"XINFO", "GROUPS", stream_}).find(" lag 0") != std::string::npos;
  }, std::chrono::seconds(20), milliseconds(20)));
  stop = true;
  slow_thread.join();
  fast_thread.join();
  EXPECT_EQ(executed, kEvents);
  EXPECT_GT(replayed, 0) << "the fast consumer never claimed the slow one's entries";
  EXPECT_EQ(admin_.PendingCount(stream_, "g"), 0);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, OpenStore(store_url));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<StoreTransaction> tx, store->Begin());
  ASSERT_OK_AND_ASSIGN(Rows rows,
                       tx->Query("SELECT COUNT(*), COUNT(DISTINCT event_id) FROM effects"));
  ASSERT_OK(tx->Commit());
  EXPECT_EQ(rows.rows[0][0].as_int(), kEvents);
  EXPECT_EQ(rows.rows[0][1].as_int(), kEvents);
}

}  // namespace
}  // namespace idem::messaging
