// WaitUntil: how a test waits for something another thread or process does
// (a claim starts waiting, a lease runs out, a server comes back): poll for the
// condition and fail only after a deadline far beyond what it should take, instead
// of sleeping a fixed time and asserting on the clock afterwards. A fixed sleep is
// either too short on a loaded 2-core CI machine (a flaky failure) or wasted time
// everywhere else.
//
// Thread safety: WaitUntil may be called from any thread; `condition` runs on the
// calling thread only.
#pragma once

#include <chrono>
#include <functional>
#include <thread>

namespace idem::testing {

// The default deadline: long enough that only a real failure reaches it.
inline constexpr std::chrono::milliseconds kGenerousDeadline = std::chrono::seconds(30);

// Calls `condition` every `every` until it returns true, for at most `timeout`.
// Returns true as soon as it holds, false when it did not hold in time (the caller
// asserts, with a message saying what did not happen). Blocks the calling thread.
inline bool WaitUntil(const std::function<bool()>& condition,
                      std::chrono::milliseconds timeout = kGenerousDeadline,
                      std::chrono::milliseconds every = std::chrono::milliseconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (condition()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(every);
  }
}

}  // namespace idem::testing
