// TSan builds only (IDEM_TSAN=ON): happens-before edges for Debian's absl::Mutex.
//
// Debian's libabsl_synchronization.so is not built with -fsanitize=thread, so
// ThreadSanitizer cannot see that two critical sections of one absl::Mutex are
// ordered: absl's lock word is an atomic in uninstrumented code. Every access to
// mutex-guarded data from two threads then looks like a race.
//
// This file is a shared library every executable of a TSan build loads before
// libabsl_synchronization.so. It defines the out-of-line lock, unlock and wait
// entry points of absl::Mutex and absl::CondVar, so the dynamic linker binds calls
// (ours and absl's own) here; each calls absl's definition, found with
// dlsym(RTLD_NEXT), and tells TSan what it did:
//   acquire (Lock, ReaderLock, a TryLock that succeeded, the LockWhen family)
//     -> __tsan_acquire(mutex) after absl returns;
//   release (Unlock, ReaderUnlock) -> __tsan_release(mutex) before absl runs;
//   CondVar::Wait*: the mutex is released and reacquired inside absl -> release
//     before, acquire after;
//   the Condition family (LockWhen*, Await*): see below, polled here.
// A reader's release orders it before later readers as well as writers: that can
// hide a race between two readers (which only read) but never invents one.
// Notification (tests use it): Notify -> release before absl runs; a
//   WaitForNotification* that returns notified -> acquire after. absl takes its mutex
//   only when it has to wait: one found already notified reads an atomic flag in
//   uninstrumented code, and TSan saw no order at all (tests/http/api_test.cc).
// BlockingCounter and Barrier are not wrapped: idem does not use them.
//
// If libabsl's names change (another inline namespace, another signature), dlsym
// finds nothing and the process stops at its first lock with a message naming the
// symbol: a TSan run that silently lost its annotations would report false races.
#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <cstdio>
#include <algorithm>
#include <cstdlib>

#include "absl/base/options.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace {

#define IDEM_STR2(x) #x
#define IDEM_STR(x) IDEM_STR2(x)
constexpr const char kNs[] = IDEM_STR(ABSL_OPTION_INLINE_NAMESPACE_NAME);

// "_ZN4absl" <len><inline namespace> <rest>: the Itanium mangling of
// absl::<ns>::<rest> ("_ZNK4absl..." with `prefix` "_ZNK": a const member function).
template <typename Fn>
Fn Real(const char* rest, const char* prefix = "_ZN") {
  char name[256];
  std::snprintf(name, sizeof name, "%s4absl%zu%s%s", prefix, sizeof kNs - 1, kNs, rest);
  void* fn = dlsym(RTLD_NEXT, name);
  if (fn == nullptr) {
    std::fprintf(stderr,
                 "tests/tsan/absl_sync_shim.cc: %s is not in libabsl_synchronization.so; "
                 "update the shim for this absl\n",
                 name);
    std::abort();
  }
  return reinterpret_cast<Fn>(fn);
}

using MutexFn = void (*)(absl::Mutex*);
using MutexTryFn = bool (*)(absl::Mutex*);
using CondWaitFn = void (*)(absl::CondVar*, absl::Mutex*);
using CondWaitTimeoutFn = bool (*)(absl::CondVar*, absl::Mutex*, absl::Duration);
using CondWaitDeadlineFn = bool (*)(absl::CondVar*, absl::Mutex*, absl::Time);
using NotifyFn = void (*)(absl::Notification*);
using NotificationWaitFn = void (*)(const absl::Notification*);
using NotificationWaitTimeoutFn = bool (*)(const absl::Notification*, absl::Duration);
using NotificationWaitDeadlineFn = bool (*)(const absl::Notification*, absl::Time);

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

void Mutex::Lock() {
  static const MutexFn real = Real<MutexFn>("5Mutex4LockEv");
  real(this);
  __tsan_acquire(this);
}

void Mutex::ReaderLock() {
  static const MutexFn real = Real<MutexFn>("5Mutex10ReaderLockEv");
  real(this);
  __tsan_acquire(this);
}

bool Mutex::TryLock() {
  static const MutexTryFn real = Real<MutexTryFn>("5Mutex7TryLockEv");
  const bool locked = real(this);
  if (locked) __tsan_acquire(this);
  return locked;
}

bool Mutex::ReaderTryLock() {
  static const MutexTryFn real = Real<MutexTryFn>("5Mutex13ReaderTryLockEv");
  const bool locked = real(this);
  if (locked) __tsan_acquire(this);
  return locked;
}

void Mutex::Unlock() {
  static const MutexFn real = Real<MutexFn>("5Mutex6UnlockEv");
  __tsan_release(this);
  real(this);
}

void Mutex::ReaderUnlock() {
  static const MutexFn real = Real<MutexFn>("5Mutex12ReaderUnlockEv");
  __tsan_release(this);
  real(this);
}

// The Condition family is not forwarded: absl evaluates a waiter's Condition inside
// its own code (in Await, and in another thread's Unlock), after the release this
// shim could annotate and before the real one, so TSan would see those reads race
// with the next holder's writes. Here a Condition is evaluated only by the waiter,
// with the mutex held through the annotated calls above, and a false one is polled:
// unlock, sleep 50 us doubling to 1 ms, lock, evaluate again. absl then never holds
// a Condition, so no Unlock evaluates one. Slower wake-ups, same semantics.
namespace {

// Waits with `mu` held (exclusively or, when `reader`, shared) until `cond` holds or
// `deadline` passes; returns whether it holds. `mu` is held on return.
bool PollCondition(absl::Mutex& mu, const absl::Condition& cond, absl::Time deadline,
                   bool reader) {
  absl::Duration pause = absl::Microseconds(50);
  while (!cond.Eval()) {
    const absl::Time now = absl::Now();
    if (now >= deadline) return false;
    reader ? mu.ReaderUnlock() : mu.Unlock();
    absl::SleepFor(std::min(pause, deadline - now));
    pause = std::min(pause * 2, absl::Milliseconds(1));
    reader ? mu.ReaderLock() : mu.Lock();
  }
  return true;
}

}  // namespace

void Mutex::LockWhen(const Condition& cond) {
  Lock();
  PollCondition(*this, cond, absl::InfiniteFuture(), false);
}

void Mutex::ReaderLockWhen(const Condition& cond) {
  ReaderLock();
  PollCondition(*this, cond, absl::InfiniteFuture(), true);
}

// The timed LockWhen variants hold the mutex on return whatever they return.
bool Mutex::LockWhenWithTimeout(const Condition& cond, absl::Duration timeout) {
  Lock();
  return PollCondition(*this, cond, absl::Now() + timeout, false);
}

bool Mutex::LockWhenWithDeadline(const Condition& cond, absl::Time deadline) {
  Lock();
  return PollCondition(*this, cond, deadline, false);
}

bool Mutex::ReaderLockWhenWithTimeout(const Condition& cond, absl::Duration timeout) {
  ReaderLock();
  return PollCondition(*this, cond, absl::Now() + timeout, true);
}

bool Mutex::ReaderLockWhenWithDeadline(const Condition& cond, absl::Time deadline) {
  ReaderLock();
  return PollCondition(*this, cond, deadline, true);
}

// Await is called with the mutex held exclusively (absl requires it of a writer;
// a reader's Await is not used by idem and would be polled as a writer's here).
void Mutex::Await(const Condition& cond) {
  PollCondition(*this, cond, absl::InfiniteFuture(), false);
}

bool Mutex::AwaitWithTimeout(const Condition& cond, absl::Duration timeout) {
  return PollCondition(*this, cond, absl::Now() + timeout, false);
}

bool Mutex::AwaitWithDeadline(const Condition& cond, absl::Time deadline) {
  return PollCondition(*this, cond, deadline, false);
}

void CondVar::Wait(Mutex* mu) {
  static const CondWaitFn real = Real<CondWaitFn>("7CondVar4WaitEPNS0_5MutexE");
  __tsan_release(mu);
  real(this, mu);
  __tsan_acquire(mu);
}

bool CondVar::WaitWithTimeout(Mutex* mu, absl::Duration timeout) {
  static const CondWaitTimeoutFn real =
      Real<CondWaitTimeoutFn>("7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  __tsan_release(mu);
  const bool timed_out = real(this, mu, timeout);
  __tsan_acquire(mu);
  return timed_out;
}

bool CondVar::WaitWithDeadline(Mutex* mu, absl::Time deadline) {
  static const CondWaitDeadlineFn real =
      Real<CondWaitDeadlineFn>("7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  __tsan_release(mu);
  const bool timed_out = real(this, mu, deadline);
  __tsan_acquire(mu);
  return timed_out;
}

void Notification::Notify() {
  static const NotifyFn real = Real<NotifyFn>("12Notification6NotifyEv");
  __tsan_release(this);
  real(this);
}

namespace {

// A wait that returned notified saw everything before Notify(); returns `notified`.
bool AcquireIfNotified(const Notification* n, bool notified) {
  if (notified) __tsan_acquire(const_cast<Notification*>(n));
  return notified;
}

}  // namespace

void Notification::WaitForNotification() const {
  static const NotificationWaitFn real =
      Real<NotificationWaitFn>("12Notification19WaitForNotificationEv", "_ZNK");
  real(this);
  AcquireIfNotified(this, true);
}

bool Notification::WaitForNotificationWithTimeout(absl::Duration timeout) const {
  static const NotificationWaitTimeoutFn real = Real<NotificationWaitTimeoutFn>(
      "12Notification30WaitForNotificationWithTimeoutENS0_8DurationE", "_ZNK");
  return AcquireIfNotified(this, real(this, timeout));
}

bool Notification::WaitForNotificationWithDeadline(absl::Time deadline) const {
  static const NotificationWaitDeadlineFn real = Real<NotificationWaitDeadlineFn>(
      "12Notification31WaitForNotificationWithDeadlineENS0_4TimeE", "_ZNK");
  return AcquireIfNotified(this, real(this, deadline));
}

ABSL_NAMESPACE_END
}  // namespace absl
