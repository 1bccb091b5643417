#include "core/failpoint.h"

#include <csignal>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

#include "core/absl_compat.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"

// src/core/CMakeLists.txt defines it as 0 or 1 from the CMake option IDEM_FAILPOINTS,
// for this file alone (the rest of idem_core is compiled alike with it on or off).
#if !defined(IDEM_FAILPOINTS_ENABLED)
#error "IDEM_FAILPOINTS_ENABLED must be defined (0 or 1) for failpoint.cc"
#endif

namespace idem {
namespace internal {
// With the option on it starts true, so that the first failpoint passed reads the
// environment (HitFailpoint, FailpointOn); without it only a hook sets it.
std::atomic<bool> g_failpoints_active{IDEM_FAILPOINTS_ENABLED != 0};
}  // namespace internal

namespace {
absl::Mutex g_mu;
FailpointHook g_hook ABSL_GUARDED_BY(g_mu) = nullptr;

FailpointHook CurrentHook() {
  absl::MutexLock lock(&g_mu);
  return g_hook;
}
}  // namespace

#if IDEM_FAILPOINTS_ENABLED

namespace {

std::map<std::string, std::string, std::less<>>& Armed() ABSL_EXCLUSIVE_LOCKS_REQUIRED(g_mu) {
  static auto* armed = new std::map<std::string, std::string, std::less<>>();
  return *armed;
}

void UpdateActiveLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(g_mu) {
  internal::g_failpoints_active.store(!Armed().empty() || g_hook != nullptr,
                                      std::memory_order_relaxed);
}

void ArmLocked(std::string_view name, std::string_view action) ABSL_EXCLUSIVE_LOCKS_REQUIRED(g_mu) {
  if (action.empty()) {
    Armed().erase(std::string(name));
  } else {
    Armed()[std::string(name)] = std::string(action);
  }
  UpdateActiveLocked();
}

// Read at the first failpoint call, not at start-up: a test may set the variable in
// a child process before it passes one.
void LoadFailpointsFromEnvOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    const char* env = std::getenv("IDEM_FAILPOINTS");
    absl::MutexLock lock(&g_mu);
    if (env != nullptr) {
      for (absl::string_view item : absl::StrSplit(env, ',', absl::SkipEmpty())) {
        std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(item, '=');
        ArmLocked(SV(kv.first), kv.second.empty() ? std::string_view("kill") : SV(kv.second));
      }
    }
    UpdateActiveLocked();
  });
}

}  // namespace

void ArmFailpoint(std::string_view name, std::string_view action) {
  LoadFailpointsFromEnvOnce();
  absl::MutexLock lock(&g_mu);
  ArmLocked(name, action);
}

void DisarmAllFailpoints() {
  LoadFailpointsFromEnvOnce();
  absl::MutexLock lock(&g_mu);
  Armed().clear();
  UpdateActiveLocked();
}

void SetFailpointHook(FailpointHook hook) {
  LoadFailpointsFromEnvOnce();
  absl::MutexLock lock(&g_mu);
  g_hook = hook;
  UpdateActiveLocked();
}

namespace internal {

void HitFailpoint(const char* name) {
  LoadFailpointsFromEnvOnce();
  // Outside the lock: a hook may block (the refund demo waits for its parent's
  // verdict) or never return (SIGKILL).
  if (FailpointHook hook = CurrentHook(); hook != nullptr) hook(name);
  std::string action;
  {
    absl::MutexLock lock(&g_mu);
    auto it = Armed().find(std::string_view(name));
    if (it == Armed().end()) return;
    // "kill@N": pass N-1 times, fire on the Nth hit.
    if (size_t at = it->second.find('@'); at != std::string::npos) {
      int remaining = std::atoi(it->second.c_str() + at + 1);
      if (remaining > 1) {
        it->second = absl::StrCat(it->second.substr(0, at), "@", remaining - 1);
        return;
      }
      it->second.resize(at);
    }
    action = it->second;
  }
  if (action == "on") return;  // a seeded bug, read by IDEM_FAILPOINT_ON only
  if (action == "kill") {
    std::raise(SIGKILL);
  }
  std::abort();
}

bool FailpointOn(const char* name) {
  LoadFailpointsFromEnvOnce();
  absl::MutexLock lock(&g_mu);
  auto it = Armed().find(std::string_view(name));
  return it != Armed().end() && it->second == "on";
}

}  // namespace internal

#else  // !IDEM_FAILPOINTS_ENABLED: nothing can be armed, only the hook is called

void SetFailpointHook(FailpointHook hook) {
  absl::MutexLock lock(&g_mu);
  g_hook = hook;
  internal::g_failpoints_active.store(hook != nullptr, std::memory_order_relaxed);
}

namespace internal {

void HitFailpoint(const char* name) {
  if (FailpointHook hook = CurrentHook(); hook != nullptr) hook(name);
}

bool FailpointOn(const char*) { return false; }

}  // namespace internal

#endif  // IDEM_FAILPOINTS_ENABLED

}  // namespace idem
