#include "store/rocksdb/key_locks.h"

#include "absl/hash/hash.h"

namespace idem::rocksdbstore {

KeyLocks::Shard& KeyLocks::ShardOf(std::string_view key) {
  // The high bits: flat_hash_map uses the low ones inside the shard.
  const size_t h = absl::Hash<std::string_view>()(key);
  return shards_[(h >> 32) % kShards];
}

KeyLocks::Got KeyLocks::TryLock(std::string_view key, uint64_t owner) {
  Shard& shard = ShardOf(key);
  absl::MutexLock lock(&shard.mu);
  auto [it, inserted] = shard.owners.try_emplace(key, owner);
  return inserted || it->second == owner ? Got::kLocked : Got::kBusy;
}

KeyLocks::Got KeyLocks::Lock(std::string_view key, uint64_t owner, absl::Time deadline,
                             bool holds_others) {
  Shard& shard = ShardOf(key);
  absl::MutexLock lock(&shard.mu);
  for (;;) {
    auto [it, inserted] = shard.owners.try_emplace(key, owner);
    if (inserted || it->second == owner) return Got::kLocked;
    if (holds_others) {
      // Checked and marked under one mutex: of two owners that would each wait for
      // the other, the second to get here sees the first waiting, and gives up.
      absl::MutexLock waits(&waits_mu_);
      if (waiting_.contains(it->second)) return Got::kDie;
      waiting_.insert(owner);
    }
    ++shard.waiting;
    const bool timed_out = shard.unlocked.WaitWithDeadline(&shard.mu, deadline);
    --shard.waiting;
    if (holds_others) {
      absl::MutexLock waits(&waits_mu_);
      waiting_.erase(owner);
    }
    if (timed_out) {
      auto [again, free] = shard.owners.try_emplace(key, owner);
      if (free || again->second == owner) return Got::kLocked;
      return Got::kTimedOut;
    }
  }
}

void KeyLocks::Unlock(std::string_view key, uint64_t owner) {
  Shard& shard = ShardOf(key);
  absl::MutexLock lock(&shard.mu);
  auto it = shard.owners.find(key);
  if (it == shard.owners.end() || it->second != owner) return;
  shard.owners.erase(it);
  // One condition variable per shard: every waiter of the shard wakes and looks
  // again for its own key.
  if (shard.waiting > 0) shard.unlocked.SignalAll();
}

size_t KeyLocks::size() const {
  size_t n = 0;
  for (const Shard& shard : shards_) {
    absl::MutexLock lock(&shard.mu);
    n += shard.owners.size();
  }
  return n;
}

}  // namespace idem::rocksdbstore
