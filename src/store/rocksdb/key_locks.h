// KeyLocks: the per-key locks of a rocksdb:// store's transactions, in memory. The
// process owns its directory (RocksDB's LOCK file admits one process), so the only
// transactions that can meet on a key are this process's, and a table of the keys
// they hold is the whole lock manager: no TransactionDB, no GetForUpdate.
//
// A key is locked from a transaction's first read or write of it until its writes
// are durable (or the transaction ends without writing): a transaction that wants
// the key meanwhile waits, so it reads the record after the write it waited for,
// never a record that is not yet synced. An entry exists only while its key is
// locked, so the table holds as many entries as there are transactions in flight
// (bounded by the server's connections and workers), whatever the store holds.
//
// Exact per key (the shards are only to spread the mutexes): two keys never share
// a lock. Deadlock cannot happen: a transaction that holds keys and wants one whose
// holder is itself waiting is told to retry (kDie) instead of waiting, and every
// cycle of waits would need such a wait to close it; a transaction holding nothing
// (nobody can wait for it) may always wait. The Guard's transactions hold one key,
// so they never meet kDie; purge's and a batch's hold several.
//
//   KeyLocks locks;
//   const uint64_t me = locks.NewOwner();
//   if (locks.Lock(key, me, deadline, /*holds_others=*/false) == KeyLocks::Got::kLocked) {
//     ...;  // the key stays locked until
//     locks.Unlock(key, me);
//   }
//
// The table keeps `key` as a view: the owner's string must stay in place and
// unchanged until its Unlock.
//
// Thread safety: safe for concurrent use.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace idem::rocksdbstore {

class KeyLocks {
 public:
  // What Lock and TryLock got.
  enum class Got {
    kLocked,    // the caller holds the key now (or held it already)
    kBusy,      // TryLock: another owner holds it at this instant; nothing done
    kTimedOut,  // Lock: another owner held it until the deadline
    kDie,       // Lock: waiting could close a cycle; the caller retries its transaction
  };

  KeyLocks() = default;
  KeyLocks(const KeyLocks&) = delete;
  KeyLocks& operator=(const KeyLocks&) = delete;

  // A new owner id, for one transaction.
  uint64_t NewOwner() { return next_owner_.fetch_add(1, std::memory_order_relaxed); }

  // Locks `key` for `owner` without waiting: kLocked or kBusy. Does not block
  // beyond a shard's mutex.
  Got TryLock(std::string_view key, uint64_t owner);

  // Locks `key` for `owner`, waiting for its holder until `deadline`: kLocked,
  // kTimedOut, or (when `holds_others`: the owner holds other keys) kDie when the
  // holder is waiting for a key itself. Blocks.
  Got Lock(std::string_view key, uint64_t owner, absl::Time deadline, bool holds_others);

  // Releases `key`, which `owner` holds, and wakes the owners waiting for it.
  void Unlock(std::string_view key, uint64_t owner);

  // How many keys are locked now (tests: the table is empty when nothing is in flight).
  size_t size() const;

 private:
  static constexpr size_t kShards = 64;
  struct Shard {
    mutable absl::Mutex mu;
    absl::CondVar unlocked;
    absl::flat_hash_map<std::string_view, uint64_t> owners ABSL_GUARDED_BY(mu);
    int waiting ABSL_GUARDED_BY(mu) = 0;
  };

  Shard& ShardOf(std::string_view key);

  std::atomic<uint64_t> next_owner_{1};
  // The owners that wait for a key while holding others; only a wait touches it.
  // Taken inside a shard's mutex, never the other way round.
  absl::Mutex waits_mu_;
  absl::flat_hash_set<uint64_t> waiting_ ABSL_GUARDED_BY(waits_mu_);
  std::array<Shard, kShards> shards_;
};

}  // namespace idem::rocksdbstore
