// Failpoints: named places where a crash can land, for the crash tests.
//
// IDEM_FAILPOINT("guard.after_claim") does nothing unless the failpoint is armed,
// either by the environment variable IDEM_FAILPOINTS="name=action[,name=action]"
// read once at first use (only in builds with IDEM_FAILPOINTS_FROM_ENV, on when the
// tests are built and off otherwise, so an installed binary ignores it), or by
// ArmFailpoint(). Actions: `kill` (SIGKILL the
// process at that point), `abort` (std::abort); `kill@N` / `abort@N` fire on the
// Nth hit and let the earlier ones pass; `on` does nothing at an IDEM_FAILPOINT
// and makes IDEM_FAILPOINT_ON(name) true. The disarmed cost is one relaxed
// atomic load.
//
// IDEM_FAILPOINT_ON("guard.finish.skip_token_check") is a seeded bug: true only
// while that failpoint is armed with `on`, so a test can make a branch misbehave
// and show that a checker catches it (tests/chaos). An installed binary cannot arm
// one from the environment.
//
// Thread safety: safe for concurrent use.
#pragma once

#include <atomic>
#include <string_view>

namespace idem {

// Arms failpoint `name` with `action` ("kill", "abort", "kill@N", "abort@N"); an
// empty action disarms it.
void ArmFailpoint(std::string_view name, std::string_view action);

// Disarms every failpoint (the hook stays).
void DisarmAllFailpoints();

// A function called with the name of every failpoint the process passes, before
// any armed action; it may block or end the process. Used by the refund demo to
// let a parent process decide when to SIGKILL its runner. Null removes it.
using FailpointHook = void (*)(const char* name);
void SetFailpointHook(FailpointHook hook);

namespace internal {
extern std::atomic<bool> g_failpoints_armed;
void HitFailpoint(const char* name);
bool FailpointOn(const char* name);
void LoadFailpointsFromEnvOnce();
}  // namespace internal

}  // namespace idem

#define IDEM_FAILPOINT(name)                                                   \
  do {                                                                         \
    ::idem::internal::LoadFailpointsFromEnvOnce();                             \
    if (::idem::internal::g_failpoints_armed.load(std::memory_order_relaxed)) \
      ::idem::internal::HitFailpoint(name);                                    \
  } while (0)

// True while failpoint `name` is armed with the action `on` (see above).
#define IDEM_FAILPOINT_ON(name)                                                \
  (::idem::internal::LoadFailpointsFromEnvOnce(),                              \
   ::idem::internal::g_failpoints_armed.load(std::memory_order_relaxed) &&     \
       ::idem::internal::FailpointOn(name))
