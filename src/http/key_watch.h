// KeyWatch: in-process wake-ups for claims that wait (wait_ms) on a key another
// request holds. When the holder completes or fails the key through this process,
// Notify wakes every waiter on it, which then re-polls at once instead of at its
// next timer (which backs off to a few hundred milliseconds). Holders in other
// processes are seen by the waiters' polls (plain reads, see Api::Poll).
//
//   KeyWatch::Handle h = watch.Watch("acme", "R-1", seen_epoch, [] { /* re-poll */ });
//   ...
//   watch.Notify("acme", "R-1");  // after a complete or fail of (acme, R-1)
//
// A waiter reads the record, then registers; a Notify between the two would be
// lost, so Watch is given the epoch (Epoch()) taken before the read and wakes at
// once if any Notify happened since (at worst an early re-poll).
//
// Thread safety: safe for concurrent use. A wake-up runs on the notifying thread
// (or the watching one), without the lock held; it must be quick (post, don't
// work). The KeyWatch must outlive every Handle.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace idem::http {

class KeyWatch {
 public:
  // Dropping it ends the watch (a wake-up not yet run is not run).
  using Handle = std::shared_ptr<void>;

  // The number of Notify calls so far.
  uint64_t Epoch() const { return epoch_.load(std::memory_order_acquire); }

  // Calls `wake` once, at the next Notify of (tenant, key), or at once when a Notify
  // of any key happened after `seen_epoch`.
  Handle Watch(std::string_view tenant, std::string_view key, uint64_t seen_epoch,
               std::function<void()> wake);

  // Wakes every watcher of (tenant, key).
  void Notify(std::string_view tenant, std::string_view key);

  // For tests: how many watches are registered.
  size_t watching() const;

 private:
  struct Watcher {
    std::function<void()> wake;
    bool active = true;  // guarded by mu_
  };
  class Subscription;

  static std::string Id(std::string_view tenant, std::string_view key);
  void Remove(const std::string& id, std::list<Watcher>::iterator it);

  mutable absl::Mutex mu_;
  std::unordered_map<std::string, std::list<Watcher>> watchers_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> epoch_{0};
};

}  // namespace idem::http
