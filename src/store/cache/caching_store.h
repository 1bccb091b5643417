// CachingStore: the Store decorator behind idem::NewCachingStore (include/idem/
// cache.h). It answers Store::LookupDecided from an in-process LRU (L1) and an
// optional Redis tier (L2), and fills both with final records only: those a
// transaction reads (InsertOrLoad/Load/Get) and those a transaction writes, once
// its Commit has succeeded. Everything else passes through to the inner store,
// which alone decides.
//
// Thread safety: safe for concurrent use. A transaction it returns belongs to one
// thread at a time and must not outlive the store.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "idem/cache.h"
#include "idem/store.h"
#include "store/backend.h"
#include "store/cache/lru_cache.h"
#include "store/shared_tier.h"

namespace idem::cache {

class CachingStore final : public StoreBackend {
 public:
  // See NewCachingStore().
  static absl::StatusOr<std::unique_ptr<CachingStore>> Make(std::unique_ptr<Store> inner,
                                                            CacheOptions options);

  absl::StatusOr<std::unique_ptr<StoreTransaction>> Begin() override;
  // The inner store's, when the tiers are L1 only: a Redis tier's fills are round
  // trips, which the store's writer thread (where a CommitAsync ends) must not make.
  absl::StatusOr<std::unique_ptr<RecordTransaction>> BeginNonBlocking() override;
  absl::StatusOr<std::unique_ptr<RecordTransaction>> RenewNonBlocking(
      std::unique_ptr<RecordTransaction> ended) override;
  std::string RenderMetrics() const override { return Backend(*inner_).RenderMetrics(); }
  bool non_blocking() const override {
    return redis_ == nullptr && Backend(*inner_).non_blocking();
  }
  absl::StatusOr<std::optional<Record>> Get(std::string_view tenant, std::string_view key) override;
  absl::StatusOr<std::vector<Record>> ListRecords(const RecordQuery& query) override;
  absl::StatusOr<std::optional<Record>> LookupDecided(std::string_view tenant,
                                                      std::string_view key) override;
  // L1 only (no Redis, no inner store).
  std::optional<Record> PeekDecided(std::string_view tenant, std::string_view key) override;
  absl::Status Ping() override { return inner_->Ping(); }
  std::shared_ptr<void> SubscribeFinished(
      std::function<void(std::string_view, std::string_view)> finished) override {
    return Backend(*inner_).SubscribeFinished(std::move(finished));
  }
  const SqlDialect* sql_dialect() const override { return Backend(*inner_).sql_dialect(); }
  absl::StatusOr<SchemaInfo> DescribeSchema() override { return Backend(*inner_).DescribeSchema(); }
  bool read_only() const override { return Backend(*inner_).read_only(); }
  std::string_view url() const override { return inner_->url(); }

  CacheStats stats() const;

  // Puts `record` into every tier if it is final and within max_entry_bytes;
  // ignores any other. Redis errors are counted and logged, never returned. Blocks
  // up to the Redis timeouts.
  void Fill(const Record& record);

  // Drops (tenant, key) from L1: a committed write left it non-final, which the
  // state machine forbids for a final record, so this is only a safety net.
  void Forget(std::string_view tenant, std::string_view key);

 private:
  CachingStore(std::unique_ptr<Store> inner, CacheOptions options,
               std::unique_ptr<cache::SharedTier> redis);

  // Whether `record` under `name` is within max_entry_bytes (else counted).
  bool Fits(const std::string& name, const Record& record);
  // Whether Redis may be asked now (not within redis_retry_after of an error).
  bool RedisUsable(absl::Time now) const;
  void OnRedisError(const absl::Status& status);

  const std::unique_ptr<Store> inner_;
  const CacheOptions options_;
  const std::unique_ptr<LruCache> l1_;               // null: L1 disabled
  const std::unique_ptr<cache::SharedTier> redis_;  // null: L2 disabled

  std::atomic<uint64_t> l1_hits_{0};
  std::atomic<uint64_t> l2_hits_{0};
  std::atomic<uint64_t> misses_{0};
  std::atomic<uint64_t> redis_errors_{0};
  std::atomic<uint64_t> fills_{0};
  std::atomic<uint64_t> too_large_{0};
  std::atomic<int64_t> redis_down_until_micros_{0};  // Unix micros; 0: usable

  absl::Mutex log_mu_;
  absl::Time last_log_ ABSL_GUARDED_BY(log_mu_) = absl::InfinitePast();
  uint64_t unlogged_errors_ ABSL_GUARDED_BY(log_mu_) = 0;
};

}  // namespace idem::cache
