// KeyWatch (issue 11 §3): Notify wakes the watchers of its key only, once; a
// dropped handle is never woken; a Notify between a waiter's read and its Watch
// (seen through the epoch) wakes it at once, so no completion is missed.
#include "http/key_watch.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

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

}  // namespace
}  // namespace idem::http
