#include "store/cache/lru_cache.h"

#include <utility>

namespace idem::cache {

LruCache::LruCache(size_t capacity) : capacity_(capacity) {}

std::optional<Record> LruCache::Get(const std::string& key, absl::Time now) {
  absl::MutexLock lock(&mu_);
  auto it = index_.find(key);
  if (it == index_.end()) return std::nullopt;
  if (it->second->expires <= now) {
    lru_.erase(it->second);
    index_.erase(it);
    return std::nullopt;
  }
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->record;
}

void LruCache::Put(const std::string& key, Record record, absl::Time expires) {
  absl::MutexLock lock(&mu_);
  if (auto it = index_.find(key); it != index_.end()) {
    it->second->record = std::move(record);
    it->second->expires = expires;
    lru_.splice(lru_.begin(), lru_, it->second);
    return;
  }
  while (!lru_.empty() && lru_.size() >= capacity_) {
    index_.erase(lru_.back().key);
    lru_.pop_back();
  }
  lru_.push_front(Entry{key, std::move(record), expires});
  index_.emplace(key, lru_.begin());
}

void LruCache::Erase(const std::string& key) {
  absl::MutexLock lock(&mu_);
  if (auto it = index_.find(key); it != index_.end()) {
    lru_.erase(it->second);
    index_.erase(it);
  }
}

size_t LruCache::size() const {
  absl::MutexLock lock(&mu_);
  return lru_.size();
}

}  // namespace idem::cache
