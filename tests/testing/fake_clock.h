// FakeClock: a Clock that moves only when a test says so.
//
// Thread safety: safe for concurrent use.
#pragma once

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "idem/clock.h"

namespace idem::testing {

class FakeClock final : public Clock {
 public:
  // Starts at 2026-01-01T00:00:00Z (never at the epoch, which stores use as "none").
  FakeClock() : now_(absl::FromUnixSeconds(1767225600)) {}
  explicit FakeClock(absl::Time start) : now_(start) {}

  absl::Time Now() const override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  // Sleeping on a fake clock advances it; the time slept is also recorded.
  void SleepFor(absl::Duration d) const override {
    absl::MutexLock lock(&mu_);
    now_ += d;
    slept_ += d;
  }
  absl::Duration slept() const {
    absl::MutexLock lock(&mu_);
    return slept_;
  }

  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }
  void Set(absl::Time t) {
    absl::MutexLock lock(&mu_);
    now_ = t;
  }

 private:
  mutable absl::Mutex mu_;
  mutable absl::Time now_ ABSL_GUARDED_BY(mu_);
  mutable absl::Duration slept_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
};

}  // namespace idem::testing
