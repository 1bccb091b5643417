// LruCache: the in-process tier (L1) of the cache decorator: at most `max_entries`
// records and at most `max_bytes` bytes (each entry charged by ChargedBytes), least
// recently used evicted first, each with an expiry.
//
// Thread safety: safe for concurrent use (one mutex; every call is O(1) amortized and
// never blocks on I/O).
#pragma once

#include <cstddef>
#include <list>
#include <optional>
#include <string>
#include <unordered_map>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "idem/record.h"

namespace idem::cache {

class LruCache {
 public:
  // REQUIRES: max_entries > 0 and max_bytes > 0.
  LruCache(size_t max_entries, size_t max_bytes);

  // What an entry of `record` under `key` costs in memory: its strings' bytes, the
  // key twice (the list entry and the index), and the list and index nodes.
  static size_t ChargedBytes(const std::string& key, const Record& record);

  // The record under `key` unless absent or expired at `now` (an expired one is
  // dropped). Marks it most recently used.
  std::optional<Record> Get(const std::string& key, absl::Time now);

  // Stores `record` under `key` until `expires`, evicting least recently used
  // entries until both bounds hold. An entry that alone is over max_bytes is not
  // stored (and drops what `key` held). Returns whether it was stored.
  bool Put(const std::string& key, Record record, absl::Time expires);

  void Erase(const std::string& key);

  size_t size() const;
  // The bytes charged for the entries held now (at most max_bytes()).
  size_t bytes() const;
  size_t capacity() const { return max_entries_; }
  size_t max_bytes() const { return max_bytes_; }

 private:
  struct Entry {
    std::string key;
    Record record;
    absl::Time expires;
    size_t charge = 0;
  };
  using List = std::list<Entry>;

  void EraseLocked(List::iterator it) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t max_entries_;
  const size_t max_bytes_;
  mutable absl::Mutex mu_;
  List lru_ ABSL_GUARDED_BY(mu_);  // front: most recently used
  std::unordered_map<std::string, List::iterator> index_ ABSL_GUARDED_BY(mu_);
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace idem::cache
