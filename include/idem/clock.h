// Clock: the only source of "now" for idem's library code. Leases, TTLs and
// backoff read time through a Clock so tests can drive it (see
// tests/testing/fake_clock.h).
//
// Get the real one with `idem::Clock::Real()`; it lives for the whole program.
//
// Thread safety: implementations must be safe for concurrent use.
#pragma once

#include "absl/time/time.h"

namespace idem {

class Clock {
 public:
  virtual ~Clock() = default;

  // Returns the current time. Never blocks.
  virtual absl::Time Now() const = 0;

  // Blocks for `d` of this clock's time (a fake clock advances instead), so that
  // backoff and polling in library code stay deterministic under test.
  virtual void SleepFor(absl::Duration d) const;

  // Returns the process-wide wall clock (absl::Now()). Never null; not owned.
  static const Clock* Real();
};

}  // namespace idem
