// KeyWatch: Notify wakes the watchers of its key only, once; a
// dropped handle is never woken; a Notify between a waiter's read and its Watch
// (seen through the epoch) wakes it at once, so no completion is missed. Read
// shares one store read of a key among the polls within its window, never across a
// Notify, never a failed one.
#include "http/api/key_watch.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "testing/wait_until.h"

namespace idem::http {
namespace {

TEST(KeyWatchTest, NotifyWakesTheWatchersOfThatKeyOnceAndOnlyThose) {
  KeyWatch watch;
  int a = 0, b = 0, other_tenant = 0;
  KeyWatch::Handle ha1 = watch.Watch("t", "a", watch.Epoch(), [&] { ++a; });
  KeyWatch::Handle ha2 = watch.Watch("t", "a", watch.Epoch(), [&] { ++a; });
  KeyWatch::Handle hb = watch.Watch("t", "b", watch.Epoch(), [&] { ++b; });
  KeyWatch::Handle hx = watch.Watch("u", "a", watch.Epoch(), [&] { ++other_tenant; });
  EXPECT_EQ(watch.watching(), 4u);
  watch.Notify("t", "a");
  EXPECT_EQ(a, 2);
  EXPECT_EQ(b, 0);
  EXPECT_EQ(other_tenant, 0);
  watch.Notify("t", "a");  // woken once only
  EXPECT_EQ(a, 2);
  EXPECT_EQ(watch.watching(), 2u);
  ha1.reset();
  ha2.reset();
  hb.reset();
  hx.reset();
  EXPECT_EQ(watch.watching(), 0u);
}

TEST(KeyWatchTest, TenantAndKeyBoundariesDoNotCollide) {
  KeyWatch watch;
  int woken = 0;
  KeyWatch::Handle h = watch.Watch("ab", "c", watch.Epoch(), [&] { ++woken; });
  watch.Notify("a", "bc");
  EXPECT_EQ(woken, 0);
  watch.Notify("ab", "c");
  EXPECT_EQ(woken, 1);
}

TEST(KeyWatchTest, ADroppedHandleIsNeverWoken) {
  KeyWatch watch;
  int woken = 0;
  KeyWatch::Handle h = watch.Watch("t", "k", watch.Epoch(), [&] { ++woken; });
  h.reset();
  watch.Notify("t", "k");
  EXPECT_EQ(woken, 0);
}

TEST(KeyWatchTest, ANotifySinceTheReadWakesAtOnce) {
  KeyWatch watch;
  const uint64_t seen = watch.Epoch();  // the waiter reads its record here ...
  watch.Notify("t", "k");               // ... the holder completes ...
  int woken = 0;
  KeyWatch::Handle h = watch.Watch("t", "k", seen, [&] { ++woken; });  // ... then it watches
  EXPECT_EQ(woken, 1);
  EXPECT_EQ(h, nullptr);
  EXPECT_EQ(watch.watching(), 0u);
}

TEST(KeyWatchTest, ConcurrentWatchersAndNotifiersMissNothing) {
  KeyWatch watch;
  constexpr int kWatchers = 200;
  std::atomic<int> woken{0};
  std::vector<KeyWatch::Handle> handles(kWatchers);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      for (int j = i; j < kWatchers; j += 4) {
        handles[j] = watch.Watch("t", "hot", watch.Epoch(), [&] { ++woken; });
      }
    });
  }
  for (auto& t : threads) t.join();
  threads.clear();
  for (int i = 0; i < 4; ++i) threads.emplace_back([&] { watch.Notify("t", "hot"); });
  for (auto& t : threads) t.join();
  EXPECT_EQ(woken.load(), kWatchers);
  handles.clear();
  EXPECT_EQ(watch.watching(), 0u);
}

Record Processing(std::string key) {
  Record r;
  r.key = std::move(key);
  r.state = RecordState::kProcessing;
  return r;
}

TEST(KeyWatchTest, PollsWithinTheWindowShareOneReadOfTheirKey) {
  KeyWatch watch;
  int reads = 0;
  auto read = [&]() -> KeyWatch::RecordRead {
    ++reads;
    return std::optional<Record>(Processing("k"));
  };
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  const absl::Duration fresh = absl::Milliseconds(15);
  KeyWatch::SharedRead a = watch.Read("t", "k", t0, fresh, read);
  KeyWatch::SharedRead b = watch.Read("t", "k", t0 + absl::Milliseconds(14), fresh, read);
  EXPECT_EQ(reads, 1);
  EXPECT_EQ(a.value, b.value);  // the same read
  ASSERT_TRUE(b.value->ok());
  EXPECT_EQ((**b.value)->key, "k");
  watch.Read("t", "other", t0, fresh, read);  // another key reads for itself
  watch.Read("u", "k", t0, fresh, read);      // and so does another tenant's
  EXPECT_EQ(reads, 3);
  watch.Read("t", "k", t0 + absl::Milliseconds(15), fresh, read);  // the window is over
  EXPECT_EQ(reads, 4);
  watch.Read("t", "k", t0 + absl::Milliseconds(14), fresh, read);  // a clock stepped back
  EXPECT_EQ(reads, 5);
}

TEST(KeyWatchTest, ANotifyDropsTheSharedReadOfItsKeyOnly) {
  KeyWatch watch;
  int reads = 0;
  auto read = [&]() -> KeyWatch::RecordRead {
    ++reads;
    return std::optional<Record>();
  };
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  const absl::Duration fresh = absl::Seconds(10);
  watch.Read("t", "k", t0, fresh, read);
  watch.Read("t", "j", t0, fresh, read);
  const uint64_t before = watch.Epoch();
  watch.Notify("t", "k");  // completed through this process: the read is stale
  KeyWatch::SharedRead k = watch.Read("t", "k", t0, fresh, read);
  EXPECT_EQ(reads, 3);
  EXPECT_GT(k.epoch, before);  // taken before this read, after the Notify
  watch.Read("t", "j", t0, fresh, read);
  EXPECT_EQ(reads, 3);
}

TEST(KeyWatchTest, AFailedReadIsNeverShared) {
  KeyWatch watch;
  int reads = 0;
  auto down = [&]() -> KeyWatch::RecordRead {
    ++reads;
    return absl::UnavailableError("database is locked");
  };
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  KeyWatch::SharedRead a = watch.Read("t", "k", t0, absl::Seconds(1), down);
  EXPECT_EQ(a.value->status().code(), absl::StatusCode::kUnavailable);
  watch.Read("t", "k", t0, absl::Seconds(1), down);
  EXPECT_EQ(reads, 2);
  EXPECT_EQ(watch.reads_kept(), 0u);
}

// 64 waiters whose polls meet one slow read wait for it instead of reading too,
// and a read that a Notify overtakes hands its callers the epoch from before it, so
// their Watch wakes at once.
TEST(KeyWatchTest, ConcurrentPollsJoinTheReadInFlight) {
  KeyWatch watch;
  std::atomic<int> reads{0}, calling{0};
  absl::Notification release;
  auto slow = [&]() -> KeyWatch::RecordRead {
    ++reads;
    release.WaitForNotification();
    return std::optional<Record>(Processing("hot"));
  };
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  const uint64_t start = watch.Epoch();
  std::vector<uint64_t> epochs(64);
  std::vector<std::thread> threads;
  for (int i = 0; i < 64; ++i) {
    threads.emplace_back([&, i] {
      ++calling;
      epochs[i] = watch.Read("t", "hot", t0, absl::Seconds(1), slow).epoch;
    });
  }
  // Every thread has called Read while the first read is held.
  const bool all_called =
      idem::testing::WaitUntil([&] { return reads.load() > 0 && calling.load() == 64; });
  release.Notify();
  for (auto& t : threads) t.join();
  ASSERT_TRUE(all_called) << "the threads did not all reach Read";
  // Threads scheduled after the read ended use it too; none read a second time.
  EXPECT_EQ(reads.load(), 1);
  for (uint64_t e : epochs) EXPECT_EQ(e, start);
  int woken = 0;
  watch.Notify("t", "unrelated");
  KeyWatch::Handle h = watch.Watch("t", "hot", epochs[0], [&] { ++woken; });
  EXPECT_EQ(woken, 1);  // a Notify since the shared read: re-poll at once
}

TEST(KeyWatchTest, StaleSharedReadsAreDroppedSoTheMapStaysSmall) {
  KeyWatch watch;
  auto read = []() -> KeyWatch::RecordRead { return std::optional<Record>(); };
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  for (int i = 0; i < 1000; ++i) {
    watch.Read("t", "k" + std::to_string(i), t0 + absl::Milliseconds(20 * i),
               absl::Milliseconds(15), read);
  }
  EXPECT_LE(watch.reads_kept(), 64u);
}

}  // namespace
}  // namespace idem::http
