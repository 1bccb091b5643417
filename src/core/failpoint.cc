#include "idem/failpoint.h"

#include <csignal>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

#include "core/absl_compat.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"

namespace idem {
namespace internal {
std::atomic<bool> g_failpoints_armed{false};
}  // namespace internal

namespace {

absl::Mutex g_mu;
FailpointHook g_hook ABSL_GUARDED_BY(g_mu) = nullptr;
std::map<std::string, std::string, std::less<>>& Armed() ABSL_EXCLUSIVE_LOCKS_REQUIRED(g_mu) {
  static auto* armed = new std::map<std::string, std::string, std::less<>>();
  return *armed;
}

void ArmLocked(std::string_view name, std::string_view action) ABSL_EXCLUSIVE_LOCKS_REQUIRED(g_mu) {
  if (action.empty()) {
    Armed().erase(std::string(name));
  } else {
    Armed()[std::string(name)] = std::string(action);
  }
  internal::g_failpoints_armed.store(!Armed().empty() || g_hook != nullptr,
                                     std::memory_order_relaxed);
}

}  // namespace

void ArmFailpoint(std::string_view name, std::string_view action) {
  internal::LoadFailpointsFromEnvOnce();
  absl::MutexLock lock(&g_mu);
  ArmLocked(name, action);
}

void DisarmAllFailpoints() {
  internal::LoadFailpointsFromEnvOnce();
  absl::MutexLock lock(&g_mu);
  Armed().clear();
  internal::g_failpoints_armed.store(g_hook != nullptr, std::memory_order_relaxed);
}

void SetFailpointHook(FailpointHook hook) {
  internal::LoadFailpointsFromEnvOnce();
  absl::MutexLock lock(&g_mu);
  g_hook = hook;
  internal::g_failpoints_armed.store(!Armed().empty() || g_hook != nullptr,
                                     std::memory_order_relaxed);
}

namespace internal {

void LoadFailpointsFromEnvOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
#if !IDEM_FAILPOINTS_FROM_ENV
    return;  // a build without tests (the installed binary) ignores the variable
#endif
    const char* env = std::getenv("IDEM_FAILPOINTS");
    if (env == nullptr || *env == '\0') return;
    absl::MutexLock lock(&g_mu);
    for (absl::string_view item : absl::StrSplit(env, ',', absl::SkipEmpty())) {
      std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(item, '=');
      ArmLocked(SV(kv.first), kv.second.empty() ? std::string_view("kill") : SV(kv.second));
    }
  });
}

void HitFailpoint(const char* name) {
  std::string action;
  FailpointHook hook = nullptr;
  {
    absl::MutexLock lock(&g_mu);
    hook = g_hook;
  }
  // Outside the lock: a hook may block (the refund demo waits for its parent's
  // verdict) or never return (SIGKILL).
  if (hook != nullptr) hook(name);
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
  absl::MutexLock lock(&g_mu);
  auto it = Armed().find(std::string_view(name));
  return it != Armed().end() && it->second == "on";
}

}  // namespace internal
}  // namespace idem
