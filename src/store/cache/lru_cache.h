// LruCache: the in-process tier (L1) of the cache decorator: at most `capacity`
// records by entry count, least recently used evicted first, each with an expiry.
//
// Thread safety: safe for concurrent use (one mutex; every call is O(1) and never
// blocks on I/O).
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
  // REQUIRES: capacity > 0.
  explicit LruCache(size_t capacity);

  // The record under `key` unless absent or expired at `now` (an expired one is
  // dropped). Marks it most recently used.
  std::optional<Record> Get(const std::string& key, absl::Time now);

  // Stores `record` under `key` until `expires`, evicting the least recently used
  // entry when full.
  void Put(const std::string& key, Record record, absl::Time expires);

  void Erase(const std::string& key);

  size_t size() const;
  size_t capacity() const { return capacity_; }

 private:
  struct Entry {
    std::string key;
    Record record;
    absl::Time expires;
  };
  using List = std::list<Entry>;

  const size_t capacity_;
  mutable absl::Mutex mu_;
  List lru_ ABSL_GUARDED_BY(mu_);  // front: most recently used
  std::unordered_map<std::string, List::iterator> index_ ABSL_GUARDED_BY(mu_);
};

}  // namespace idem::cache
