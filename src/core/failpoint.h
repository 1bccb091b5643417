// Failpoints: named places where a crash can land, for the crash and chaos tests.
// Internal: not installed, and armable only in a build made for the tests.
//
// IDEM_FAILPOINT("guard.after_claim") marks such a place. In a build with the CMake
// option IDEM_FAILPOINTS (on when the tests are built, off otherwise, so off for the
// installed and packaged library) a failpoint is armed either by the environment
// variable IDEM_FAILPOINTS="name=action[,name=action]", read once at the first
// failpoint the process passes, or by ArmFailpoint(). Actions: `kill` (SIGKILL the
// process at that point), `abort` (std::abort); `kill@N` / `abort@N` fire on the
// Nth hit and let the earlier ones pass; `on` does nothing at an IDEM_FAILPOINT
// and makes IDEM_FAILPOINT_ON(name) true. The disarmed cost is one relaxed atomic
// load.
//
// IDEM_FAILPOINT_ON("guard.finish.skip_token_check") is a seeded bug: true only
// while that failpoint is armed with `on`, so a test can make a branch misbehave
// and show that a checker catches it (tests/chaos).
//
// Without the option there is no way to arm anything: ArmFailpoint() and
// DisarmAllFailpoints() are not defined (a call does not link), the variable is not
// read, and IDEM_FAILPOINT_ON is always false. Only the hook remains: the refund
// demo (`idem demo`, also in the package) pauses its runner at each failpoint
// through it, from its own process.
//
// Thread safety: safe for concurrent use.
#pragma once

#include <atomic>
#include <string_view>

namespace idem {

// Arms failpoint `name` with `action` ("kill", "abort", "kill@N", "abort@N", "on");
// an empty action disarms it. Defined only in builds with IDEM_FAILPOINTS.
void ArmFailpoint(std::string_view name, std::string_view action);

// Disarms every failpoint (the hook stays). Defined only in builds with
// IDEM_FAILPOINTS.
void DisarmAllFailpoints();

// A function called with the name of every failpoint the process passes, before
// any armed action; it may block or end the process. Used by the refund demo to
// let a parent process decide when to SIGKILL its runner. Null removes it.
using FailpointHook = void (*)(const char* name);
void SetFailpointHook(FailpointHook hook);

namespace internal {
// True while a failpoint may do something (armed, a hook set, or, in a build with
// IDEM_FAILPOINTS, the environment not read yet).
extern std::atomic<bool> g_failpoints_active;
void HitFailpoint(const char* name);
bool FailpointOn(const char* name);
}  // namespace internal

}  // namespace idem

#define IDEM_FAILPOINT(name)                                                    \
  do {                                                                          \
    if (::idem::internal::g_failpoints_active.load(std::memory_order_relaxed)) \
      ::idem::internal::HitFailpoint(name);                                     \
  } while (0)

// True while failpoint `name` is armed with the action `on` (see above); always
// false without IDEM_FAILPOINTS.
#define IDEM_FAILPOINT_ON(name)                                              \
  (::idem::internal::g_failpoints_active.load(std::memory_order_relaxed) && \
   ::idem::internal::FailpointOn(name))
