#include "store/cache/lru_cache.h"

#include <iterator>
#include <utility>

namespace idem::cache {
namespace {

// A list node (two links) holding an Entry, and an index node (a link, the cached
// hash, the key string and the iterator) plus its bucket pointer: what one entry
// costs beyond its strings' bytes, whatever the standard library's exact layout.
constexpr size_t kEntryOverhead = 2 * sizeof(void*) + sizeof(std::string) + sizeof(Record) +
                                  sizeof(absl::Time) + sizeof(size_t) + 3 * sizeof(void*) +
                                  sizeof(size_t) + sizeof(std::string) + sizeof(void*);

}  // namespace

LruCache::LruCache(size_t max_entries, size_t max_bytes)
    : max_entries_(max_entries), max_bytes_(max_bytes) {}

size_t LruCache::ChargedBytes(const std::string& key, const Record& record) {
  return kEntryOverhead + 2 * key.size() + record.tenant.size() + record.biz_type.size() +
         record.key.size() + record.fingerprint.size() + record.result.size() +
         record.error.size();
}

std::optional<Record> LruCache::Get(const std::string& key, absl::Time now) {
  absl::MutexLock lock(&mu_);
  auto it = index_.find(key);
  if (it == index_.end()) return std::nullopt;
  if (it->second->expires <= now) {
    EraseLocked(it->second);
    return std::nullopt;
  }
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->record;
}

bool LruCache::Put(const std::string& key, Record record, absl::Time expires) {
  const size_t charge = ChargedBytes(key, record);
  absl::MutexLock lock(&mu_);
  if (auto it = index_.find(key); it != index_.end()) EraseLocked(it->second);
  if (charge > max_bytes_) return false;
  while (!lru_.empty() && (lru_.size() >= max_entries_ || bytes_ + charge > max_bytes_)) {
    EraseLocked(std::prev(lru_.end()));
  }
  lru_.push_front(Entry{key, std::move(record), expires, charge});
  index_.emplace(key, lru_.begin());
  bytes_ += charge;
  return true;
}

void LruCache::Erase(const std::string& key) {
  absl::MutexLock lock(&mu_);
  if (auto it = index_.find(key); it != index_.end()) EraseLocked(it->second);
}

void LruCache::EraseLocked(List::iterator it) {
  bytes_ -= it->charge;
  index_.erase(it->key);
  lru_.erase(it);
}

size_t LruCache::size() const {
  absl::MutexLock lock(&mu_);
  return lru_.size();
}

size_t LruCache::bytes() const {
  absl::MutexLock lock(&mu_);
  return bytes_;
}

}  // namespace idem::cache
