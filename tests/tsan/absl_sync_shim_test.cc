// The absl::Mutex shim of TSan builds (absl_sync_shim.cc): data handed between
// threads under every kind of absl lock and wait is NOT reported as a race (the shim
// tells TSan what the locks order), and a real race still IS (the shim hides
// nothing: the run keeps its teeth). Built and run in build-tsan only
// (scripts/sanitize.sh tsan); TSAN_OPTIONS there has halt_on_error=1, so a report
// fails the process with TSan's exit code 66.
#include <atomic>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "testing/wait_until.h"

namespace {

constexpr int kThreads = 4;
constexpr int kRounds = 200;

// A plain (non-atomic) counter bumped under Lock/Unlock by several threads.
TEST(TsanShim, LockAndUnlockOrderTheirCriticalSections) {
  absl::Mutex mu;
  long counter = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kRounds; ++i) {
        absl::MutexLock lock(&mu);
        ++counter;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(counter, kThreads * kRounds);
}

// Readers see what a writer wrote under ReaderLock; TryLock that succeeds orders too.
TEST(TsanShim, ReaderLocksAndTryLockOrderTheirCriticalSections) {
  absl::Mutex mu;
  long value = 0;
  long seen = 0;
  std::thread writer([&] {
    for (int i = 1; i <= kRounds; ++i) {
      while (!mu.TryLock()) std::this_thread::yield();
      value = i;
      mu.Unlock();
    }
  });
  std::thread reader([&] {
    for (int i = 0; i < kRounds; ++i) {
      absl::ReaderMutexLock lock(&mu);
      if (value > seen) seen = value;
    }
  });
  writer.join();
  reader.join();
  absl::MutexLock lock(&mu);
  EXPECT_EQ(value, kRounds);
  EXPECT_LE(seen, kRounds);
}

// A hand-off through a Condition (LockWhen, Await, AwaitWithTimeout): the waiter
// reads the payload the producer wrote before making the condition true.
TEST(TsanShim, ConditionWaitsSeeWhatTheProducerWrote) {
  absl::Mutex mu;
  bool ready = false;
  std::vector<long> payload;
  std::thread producer([&] {
    absl::SleepFor(absl::Milliseconds(5));  // most often, the waiter blocks first
    absl::MutexLock lock(&mu);
    payload.assign(100, 7);
    ready = true;
  });
  {
    mu.LockWhen(absl::Condition(&ready));
    EXPECT_EQ(payload.size(), 100u);
    mu.Unlock();
  }
  producer.join();

  bool again = false;
  std::thread second([&] {
    absl::SleepFor(absl::Milliseconds(5));  // most often, the waiter blocks first
    absl::MutexLock lock(&mu);
    payload.push_back(8);
    again = true;
  });
  {
    absl::MutexLock lock(&mu);
    EXPECT_TRUE(mu.AwaitWithTimeout(absl::Condition(&again), absl::Seconds(30)));
    EXPECT_EQ(payload.back(), 8);
    // A condition that never holds times out with the mutex held.
    bool never = false;
    EXPECT_FALSE(mu.AwaitWithTimeout(absl::Condition(&never), absl::Milliseconds(20)));
    payload.push_back(9);
  }
  second.join();
}

// A hand-off through a CondVar.
TEST(TsanShim, CondVarWaitsSeeWhatTheSignallerWrote) {
  absl::Mutex mu;
  absl::CondVar cv;
  bool ready = false;
  std::string message;
  std::thread signaller([&] {
    absl::MutexLock lock(&mu);
    message = "written before the signal";
    ready = true;
    cv.Signal();
  });
  {
    absl::MutexLock lock(&mu);
    while (!ready) cv.WaitWithTimeout(&mu, absl::Seconds(30));
    EXPECT_EQ(message, "written before the signal");
  }
  signaller.join();
}

// A hand-off through absl::Notification, with the notifier still running: waited for
// (the notifier is held back until the wait started), and found already notified,
// where absl reads its flag without taking the mutex (a race was reported there in
// tests/http/api_test.cc before the shim wrapped Notification).
TEST(TsanShim, NotificationWaitsSeeWhatTheNotifierWrote) {
  enum Wait { kPlain, kTimeout, kDeadline };
  for (bool already_notified : {false, true}) {
    for (Wait wait : {kPlain, kTimeout, kDeadline}) {
      std::vector<long> payload;
      absl::Notification done;
      std::atomic<bool> go{already_notified}, finish{false}, notify_returned{false};
      std::thread notifier([&] {
        while (!go.load()) std::this_thread::yield();
        payload.assign(100, 7);
        done.Notify();
        // Relaxed: tells the waiter when to look, orders nothing for TSan.
        notify_returned.store(true, std::memory_order_relaxed);
        while (!finish.load()) std::this_thread::yield();  // alive past the wait
      });
      if (already_notified) {
        EXPECT_TRUE(idem::testing::WaitUntil(
            [&] { return notify_returned.load(std::memory_order_relaxed); }));
      } else {
        go = true;
      }
      bool notified = true;
      switch (wait) {
        case kPlain:
          done.WaitForNotification();
          break;
        case kTimeout:
          notified = done.WaitForNotificationWithTimeout(absl::Seconds(30));
          break;
        case kDeadline:
          notified = done.WaitForNotificationWithDeadline(absl::Now() + absl::Seconds(30));
          break;
      }
      EXPECT_TRUE(notified);
      EXPECT_EQ(payload.size(), 100u);
      finish = true;
      notifier.join();
    }
  }
}

// Two threads write one plain variable with no lock: TSan must report it.
void RaceWithoutALock() {
  long unguarded = 0;
  std::thread a([&] {
    for (int i = 0; i < kRounds; ++i) unguarded = unguarded + 1;
  });
  std::thread b([&] {
    for (int i = 0; i < kRounds; ++i) unguarded = unguarded + 1;
  });
  a.join();
  b.join();
  std::exit(unguarded > 0 ? 0 : 1);
}

// Each thread holds a DIFFERENT mutex: no order between them, still a race.
void RaceUnderTwoMutexes() {
  absl::Mutex mu_a, mu_b;
  long shared = 0;
  std::thread a([&] {
    for (int i = 0; i < kRounds; ++i) {
      absl::MutexLock lock(&mu_a);
      ++shared;
    }
  });
  std::thread b([&] {
    for (int i = 0; i < kRounds; ++i) {
      absl::MutexLock lock(&mu_b);
      ++shared;
    }
  });
  a.join();
  b.join();
  std::exit(shared > 0 ? 0 : 1);
}

TEST(TsanShimDeathTest, ARealRaceIsStillReported) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(RaceWithoutALock(), testing::ExitedWithCode(66), "ThreadSanitizer: data race");
  EXPECT_EXIT(RaceUnderTwoMutexes(), testing::ExitedWithCode(66), "ThreadSanitizer: data race");
}

}  // namespace
