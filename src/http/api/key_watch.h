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
// Read() shares one store read of a key among the waiters that poll it within a
// short window (the polls of 1,000 waiters on one key cost the store one read per
// window instead of 1,000). Notify forgets the key's shared read, so a
// poll after a complete or fail through this process never sees the record from
// before it; a poll that joins a read begun earlier gets that read's epoch, so a
// Notify since makes its Watch wake at once.
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
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "idem/store.h"

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

  using RecordRead = absl::StatusOr<std::optional<Record>>;
  struct SharedRead {
    std::shared_ptr<const RecordRead> value;
    uint64_t epoch = 0;  // Epoch() before the read began: hand it to Watch
  };

  // The record of (tenant, key) from a read begun within `fresh` before `now`, or
  // from `read` (run by this caller, without any lock held) when there is none; a
  // caller that meets a read of the key in flight waits for it. A failed read is
  // handed to the callers that waited for it but never kept. Blocks while `read`
  // (or the read in flight) runs.
  SharedRead Read(std::string_view tenant, std::string_view key, absl::Time now,
                  absl::Duration fresh, const std::function<RecordRead()>& read);

  // For tests: how many keys have a shared read kept (or in flight).
  size_t reads_kept() const;

 private:
  struct Watcher {
    std::function<void()> wake;
    bool active = true;  // guarded by mu_
  };
  class Subscription;

  struct Kept {
    bool in_flight = true;
    uint64_t generation = 0;  // which read; a Notify drops the key, so a later one differs
    absl::Time read_at;
    SharedRead read;
  };

  static std::string Id(std::string_view tenant, std::string_view key);
  void Remove(const std::string& id, std::list<Watcher>::iterator it);
  void DropStaleReads(absl::Time now, absl::Duration fresh) ABSL_EXCLUSIVE_LOCKS_REQUIRED(reads_mu_);

  mutable absl::Mutex mu_;
  std::unordered_map<std::string, std::list<Watcher>> watchers_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> epoch_{0};

  // Never held with mu_ (Notify takes them one after the other).
  mutable absl::Mutex reads_mu_;
  absl::CondVar read_done_;
  std::unordered_map<std::string, Kept> reads_ ABSL_GUARDED_BY(reads_mu_);
  uint64_t generations_ ABSL_GUARDED_BY(reads_mu_) = 0;
  size_t drop_stale_at_ ABSL_GUARDED_BY(reads_mu_) = 64;
};

}  // namespace idem::http
