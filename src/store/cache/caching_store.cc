#include "store/cache/caching_store.h"

#include <cstdio>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "store/absl_compat.h"
#include "idem/status.h"
#include "store/record_codec.h"
#if IDEM_HAVE_REDIS
#include "store/redis/redis_client.h"
#endif

namespace idem {
namespace cache {
namespace {

// store::RecordKey(tenant, key), written into a buffer this thread reuses: a lookup
// or an erase by name allocates nothing. Valid until the thread's next call.
const std::string& CacheNameInBuffer(std::string_view tenant, std::string_view key) {
  thread_local std::string buffer;
  buffer.clear();
  store::AppendRecordKey(buffer, tenant, key);
  return buffer;
}

// Tombstones are not cached: a claim meeting one goes to the database.
bool IsFinal(const Record& r) {
  return (r.state == RecordState::kSucceeded || r.state == RecordState::kFailed) && !r.purged();
}

// Wraps the inner transaction to learn which final records it saw or wrote. The
// tiers are filled only after the inner transaction has ended: a write only once
// its Commit succeeded (a rolled-back write must never be answered), a read of an
// already-final record at any end (it was committed before this transaction began).
// Filling after the end also keeps Redis round trips out of the database's locks.
class CachingTransaction final : public RecordTransaction,
                                 private RecordTransaction::CommitDone {
 public:
  CachingTransaction(CachingStore& store, std::unique_ptr<RecordTransaction> inner)
      : store_(store), inner_(std::move(inner)) {}

  // CachingStore::RenewNonBlocking: whether this is one of `store`'s, and its
  // inner transaction to renew; then Renew begins it again with that (ended, so
  // written_ and read_ are empty; their buffers stay).
  bool Of(const CachingStore& store) const { return &store == &store_; }
  std::unique_ptr<RecordTransaction> TakeInner() { return std::move(inner_); }
  void Renew(std::unique_ptr<RecordTransaction> inner) {
    inner_ = std::move(inner);
    committed_ = nullptr;
  }

  ~CachingTransaction() override {
    if (inner_ == nullptr) return;
    inner_.reset();  // rolls back if still open, as the inner destructor promises
    FillReads();
  }

  absl::StatusOr<int64_t> Exec(std::string_view sql, absl::Span<const Value> params) override {
    return inner_->Exec(sql, params);
  }
  absl::StatusOr<Rows> Query(std::string_view sql, absl::Span<const Value> params) override {
    return inner_->Query(sql, params);
  }
  absl::Status QueryPages(std::string_view sql, absl::Span<const Value> params, size_t page_rows,
                          const std::function<absl::Status(Rows&)>& page) override {
    return inner_->QueryPages(sql, params, page_rows, page);
  }
  absl::StatusOr<std::vector<int64_t>> ExecMany(absl::Span<const Statement> statements) override {
    return inner_->ExecMany(statements);
  }

  absl::StatusOr<std::optional<Record>> InsertOrLoad(const Record& record) override {
    return Claimed(record, inner_->InsertOrLoad(record));
  }

  // Forwarded, so the inner store can send the claim and the statement together.
  absl::StatusOr<std::optional<Record>> InsertOrLoadThen(
      const Record& record, const Statement& next,
      std::optional<absl::StatusOr<int64_t>>* next_result) override {
    return Claimed(record, inner_->InsertOrLoadThen(record, next, next_result));
  }

  // Forwarded, so the inner store can send a batch's claims together.
  absl::StatusOr<std::vector<std::optional<Record>>> InsertOrLoadMany(
      absl::Span<const Record> records) override {
    absl::StatusOr<std::vector<std::optional<Record>>> r = inner_->InsertOrLoadMany(records);
    if (r.ok()) {
      for (size_t i = 0; i < records.size() && i < r->size(); ++i) Saw(records[i], (*r)[i]);
    }
    return r;
  }

  absl::StatusOr<std::optional<Record>> Claimed(const Record& record,
                                                absl::StatusOr<std::optional<Record>> r) {
    if (r.ok()) Saw(record, *r);
    return r;
  }

  // The store's answer `answer` to claiming `record`: it inserted it, or read that.
  void Saw(const Record& record, const std::optional<Record>& answer) {
    if (!answer.has_value()) {
      Wrote(record);
    } else {
      Read(*answer);
    }
  }

  absl::StatusOr<bool> Replace(const Record& record, int64_t expected_token,
                               RecordState expected_state) override {
    absl::StatusOr<bool> r = inner_->Replace(record, expected_token, expected_state);
    if (r.ok() && *r) Wrote(record);
    return r;
  }

  // Forwarded, so the inner store can send a batch's result writes together.
  absl::StatusOr<std::vector<bool>> ReplaceMany(
      absl::Span<const Replacement> replacements) override {
    absl::StatusOr<std::vector<bool>> r = inner_->ReplaceMany(replacements);
    if (r.ok()) {
      for (size_t i = 0; i < replacements.size() && i < r->size(); ++i) {
        if ((*r)[i]) Wrote(replacements[i].record);
      }
    }
    return r;
  }

  absl::StatusOr<KeyLock> TryLock(std::string_view tenant, std::string_view key) override {
    return inner_->TryLock(tenant, key);
  }

  // Forwarded: the reads it saves are the inner store's.
  void Prefetch(absl::Span<const std::pair<std::string_view, std::string_view>> keys) override {
    inner_->Prefetch(keys);
  }

  absl::StatusOr<std::optional<Record>> Load(std::string_view tenant,
                                             std::string_view key) override {
    absl::StatusOr<std::optional<Record>> r = inner_->Load(tenant, key);
    if (r.ok() && r->has_value()) Read(**r);
    return r;
  }

  // A purged record leaves L1 once the purge commits (Redis keeps it until its
  // TTL, which must be below the retention: include/idem/cache.h).
  absl::StatusOr<bool> Retire(const Record& expected, absl::Time now,
                              std::optional<absl::Time> tombstone_until) override {
    absl::StatusOr<bool> r = inner_->Retire(expected, now, tombstone_until);
    if (r.ok() && *r) {
      Record gone = expected;
      gone.purged_at = now;  // never final: Ended() forgets it
      Wrote(gone);
    }
    return r;
  }

  absl::Status Commit() override {
    absl::Status s = inner_->Commit();
    Ended(s.ok());
    return s;
  }

  // Forwarded, so the inner store can write the result and commit in one round
  // trip; the tiers are filled as by Commit(), only once it committed.
  absl::StatusOr<bool> ReplaceAndCommit(const Record& record, int64_t expected_token,
                                        RecordState expected_state) override {
    absl::StatusOr<bool> moved = inner_->ReplaceAndCommit(record, expected_token, expected_state);
    if (moved.ok() && *moved) Wrote(record);
    Ended(moved.ok() && *moved);  // the transaction has ended either way
    return moved;
  }

  // The tiers learn what it wrote once the inner commit is durable (L1 only: see
  // CachingStore::BeginNonBlocking), before `done` hears of it.
  void CommitAsync(RecordTransaction::CommitDone& done) override {
    committed_ = &done;
    inner_->CommitAsync(*this);
  }

  void Rollback() override {
    inner_->Rollback();
    Ended(/*committed=*/false);
  }

 private:
  // The inner transaction's CommitAsync has ended.
  void Committed(absl::Status status) override {
    Ended(status.ok());
    committed_->Committed(std::move(status));  // may destroy *this: nothing after it
  }

  // The transaction has ended. When it committed, the tiers learn what it wrote
  // (final records are filled, the others forgotten); either way what it read
  // final before it is filled.
  void Ended(bool committed) {
    for (size_t i = 0; i < written_count_; ++i) {
      Record& record = written_[i];
      if (!committed) {
        break;
      } else if (IsFinal(record)) {
        store_.Fill(record);
      } else {
        store_.Forget(record.tenant, record.key);
      }
    }
    // The records' buffers serve the next transaction (CachingStore::RenewNonBlocking),
    // unless a large result or error grew them.
    for (size_t i = 0; i < written_count_; ++i) {
      if (written_[i].result.capacity() + written_[i].error.capacity() > kKeptRecordBytes) {
        written_[i] = Record();
      }
    }
    written_count_ = 0;
    written_index_.clear();
    FillReads();
  }

  // A write supersedes what this transaction read of the same key.
  void Wrote(const Record& record) {
    std::erase_if(
        read_, [&](const Record& r) { return r.tenant == record.tenant && r.key == record.key; });
    if (Record* earlier = Written(record.tenant, record.key)) {
      *earlier = record;  // the last write wins
      return;
    }
    if (written_count_ == written_.size()) written_.emplace_back();
    written_[written_count_] = record;  // into the buffers an earlier one left
    ++written_count_;
    if (written_count_ > kScannedWrites) {
      if (written_index_.empty()) {
        for (size_t i = 0; i + 1 < written_count_; ++i) {
          written_index_[store::RecordKey(written_[i].tenant, written_[i].key)] = i;
        }
      }
      written_index_[store::RecordKey(record.tenant, record.key)] = written_count_ - 1;
    }
  }
  // What this transaction wrote of (tenant, key), or null.
  Record* Written(std::string_view tenant, std::string_view key) {
    if (written_count_ > kScannedWrites) {
      auto it = written_index_.find(store::RecordKey(tenant, key));
      return it != written_index_.end() ? &written_[it->second] : nullptr;
    }
    for (size_t i = 0; i < written_count_; ++i) {
      if (written_[i].tenant == tenant && written_[i].key == key) return &written_[i];
    }
    return nullptr;
  }
  // A record this transaction wrote is not committed yet, so a read of it must not
  // be cached; only records final before this transaction are.
  void Read(const Record& record) {
    if (IsFinal(record) && Written(record.tenant, record.key) == nullptr) {
      read_.push_back(record);
    }
  }
  void FillReads() {
    for (const Record& r : read_) store_.Fill(r);
    read_.clear();
  }

  CachingStore& store_;
  std::unique_ptr<RecordTransaction> inner_;
  // The records written, the last write of each key (written_[0, written_count_);
  // the elements after are buffers kept for the next writes). Found by scanning up
  // to kScannedWrites of them, by written_index_ (by store::RecordKey) past that.
  static constexpr size_t kScannedWrites = 16;
  static constexpr size_t kKeptRecordBytes = 4 << 10;
  std::vector<Record> written_;
  size_t written_count_ = 0;
  std::map<std::string, size_t> written_index_;
  std::vector<Record> read_;
  RecordTransaction::CommitDone* committed_ = nullptr;  // CommitAsync's `done`
};

}  // namespace

CachingStore::CachingStore(std::unique_ptr<Store> inner, CacheOptions options,
                           std::unique_ptr<cache::SharedTier> redis)
    : inner_(std::move(inner)),
      options_(std::move(options)),
      l1_(options_.l1_entries > 0 && options_.l1_bytes > 0
              ? std::make_unique<LruCache>(options_.l1_entries, options_.l1_bytes)
              : nullptr),
      redis_(std::move(redis)) {}

absl::StatusOr<std::unique_ptr<CachingStore>> CachingStore::Make(std::unique_ptr<Store> inner,
                                                                 CacheOptions options) {
  if (inner == nullptr) return absl::InvalidArgumentError("NewCachingStore: inner store is null");
  if (options.clock == nullptr) options.clock = Clock::Real();
  if (options.ttl <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("NewCachingStore: ttl must be positive");
  }
  if (options.max_entry_bytes == 0) {
    return absl::InvalidArgumentError("NewCachingStore: max_entry_bytes must be positive");
  }
  std::unique_ptr<cache::SharedTier> redis;
  if (!options.redis_url.empty()) {
#if !IDEM_HAVE_REDIS
    return absl::NotFoundError(
        "NewCachingStore: the Redis tier is not compiled into this build (IDEM_WITH_REDIS=OFF)");
#else
    IDEM_ASSIGN_OR_RETURN(redis::RedisAddress address, redis::ParseRedisUrl(options.redis_url));
    redis = std::make_unique<redis::RedisClient>(
        std::move(address),
        redis::RedisClientOptions{.connect_timeout = options.redis_connect_timeout,
                                  .command_timeout = options.redis_command_timeout,
                                  .pool_size = options.redis_pool_size});
#endif
  }
  return std::unique_ptr<CachingStore>(
      new CachingStore(std::move(inner), std::move(options), std::move(redis)));
}

absl::StatusOr<std::unique_ptr<StoreTransaction>> CachingStore::Begin() {
  IDEM_ASSIGN_OR_RETURN(std::unique_ptr<RecordTransaction> tx, BeginRecords(*inner_));
  return std::unique_ptr<StoreTransaction>(new CachingTransaction(*this, std::move(tx)));
}

absl::StatusOr<std::unique_ptr<RecordTransaction>> CachingStore::BeginNonBlocking() {
  if (!non_blocking()) return nullptr;
  IDEM_ASSIGN_OR_RETURN(std::unique_ptr<RecordTransaction> tx, Backend(*inner_).BeginNonBlocking());
  if (tx == nullptr) return nullptr;
  return std::unique_ptr<RecordTransaction>(new CachingTransaction(*this, std::move(tx)));
}

absl::StatusOr<std::unique_ptr<RecordTransaction>> CachingStore::RenewNonBlocking(
    std::unique_ptr<RecordTransaction> ended) {
  if (!non_blocking()) return nullptr;
  auto* renewed = dynamic_cast<CachingTransaction*>(ended.get());
  if (renewed == nullptr || !renewed->Of(*this)) return BeginNonBlocking();
  IDEM_ASSIGN_OR_RETURN(std::unique_ptr<RecordTransaction> inner,
                        Backend(*inner_).RenewNonBlocking(renewed->TakeInner()));
  if (inner == nullptr) return nullptr;
  renewed->Renew(std::move(inner));
  return ended;
}

absl::StatusOr<std::optional<Record>> CachingStore::Get(std::string_view tenant,
                                                        std::string_view key) {
  absl::StatusOr<std::optional<Record>> r = inner_->Get(tenant, key);
  if (r.ok() && r->has_value()) Fill(**r);
  return r;
}

absl::StatusOr<std::vector<Record>> CachingStore::ListRecords(const RecordQuery& query) {
  return inner_->ListRecords(query);
}

absl::StatusOr<std::optional<Record>> CachingStore::LookupDecided(std::string_view tenant,
                                                                  std::string_view key) {
  const absl::Time now = options_.clock->Now();
  const std::string name = store::RecordKey(tenant, key);
  // Defends against a tier handing back another key's or a non-final record.
  auto usable = [&](const Record& r) { return IsFinal(r) && r.tenant == tenant && r.key == key; };
  if (l1_ != nullptr) {
    if (std::optional<Record> r = l1_->Get(name, now); r.has_value() && usable(*r)) {
      l1_hits_.fetch_add(1, std::memory_order_relaxed);
      return r;
    }
  }
  if (redis_ != nullptr && RedisUsable(now)) {
    absl::StatusOr<std::optional<std::string>> bytes =
        redis_->Get(absl::StrCat(options_.redis_key_prefix, name));
    if (!bytes.ok()) {
      OnRedisError(bytes.status());
    } else if (bytes->has_value()) {
      absl::StatusOr<Record> r = store::DecodeRecord(**bytes);
      if (r.ok() && usable(*r)) {
        l2_hits_.fetch_add(1, std::memory_order_relaxed);
        if (l1_ != nullptr && Fits(name, *r)) l1_->Put(name, *r, now + options_.ttl);
        return std::optional<Record>(*std::move(r));
      }
      OnRedisError(absl::DataLossError(
          absl::StrCat("redis: unreadable cache entry for tenant '", AV(tenant), "'")));
    }
  }
  misses_.fetch_add(1, std::memory_order_relaxed);
  return Backend(*inner_).LookupDecided(tenant, key);
}

std::optional<Record> CachingStore::PeekDecided(std::string_view tenant, std::string_view key) {
  if (l1_ == nullptr) return std::nullopt;
  std::optional<Record> r = l1_->Get(CacheNameInBuffer(tenant, key), options_.clock->Now());
  if (!r.has_value() || !IsFinal(*r) || r->tenant != tenant || r->key != key) return std::nullopt;
  l1_hits_.fetch_add(1, std::memory_order_relaxed);
  return r;
}

bool CachingStore::Fits(const std::string& name, const Record& record) {
  if (LruCache::ChargedBytes(name, record) <= options_.max_entry_bytes) return true;
  too_large_.fetch_add(1, std::memory_order_relaxed);
  return false;
}

void CachingStore::Fill(const Record& record) {
  if (!IsFinal(record)) return;
  const absl::Time now = options_.clock->Now();
  const std::string name = store::RecordKey(record.tenant, record.key);
  if (!Fits(name, record)) {
    // What a tier held under the key stays right (a final record never changes),
    // but L1 gives the room back at once.
    if (l1_ != nullptr) l1_->Erase(name);
    return;
  }
  if (l1_ != nullptr) l1_->Put(name, record, now + options_.ttl);
  if (redis_ != nullptr && RedisUsable(now)) {
    absl::Status s = redis_->SetPx(absl::StrCat(options_.redis_key_prefix, name),
                                   store::EncodeRecord(record), options_.ttl);
    if (!s.ok()) OnRedisError(s);
  }
  fills_.fetch_add(1, std::memory_order_relaxed);
}

void CachingStore::Forget(std::string_view tenant, std::string_view key) {
  if (l1_ != nullptr) l1_->Erase(CacheNameInBuffer(tenant, key));
}

bool CachingStore::RedisUsable(absl::Time now) const {
  const int64_t until = redis_down_until_micros_.load(std::memory_order_relaxed);
  return until == 0 || absl::ToUnixMicros(now) >= until;
}

void CachingStore::OnRedisError(const absl::Status& status) {
  redis_errors_.fetch_add(1, std::memory_order_relaxed);
  const absl::Time now = options_.clock->Now();
  redis_down_until_micros_.store(absl::ToUnixMicros(now + options_.redis_retry_after),
                                 std::memory_order_relaxed);
  std::string message;
  {
    absl::MutexLock lock(&log_mu_);
    ++unlogged_errors_;
    if (now - last_log_ < options_.log_interval) return;
    message = absl::StrCat(
        "idem cache: Redis tier unavailable (", unlogged_errors_,
        " error(s) since the last report; answering from the database): ", status.ToString());
    last_log_ = now;
    unlogged_errors_ = 0;
  }
  if (options_.log) {
    options_.log(SV(message));
  } else {
    std::fprintf(stderr, "%s\n", message.c_str());
  }
}

CacheStats CachingStore::stats() const {
  return CacheStats{.l1_hits = l1_hits_.load(std::memory_order_relaxed),
                    .l2_hits = l2_hits_.load(std::memory_order_relaxed),
                    .misses = misses_.load(std::memory_order_relaxed),
                    .redis_errors = redis_errors_.load(std::memory_order_relaxed),
                    .fills = fills_.load(std::memory_order_relaxed),
                    .too_large = too_large_.load(std::memory_order_relaxed),
                    .l1_entries = l1_ != nullptr ? l1_->size() : 0,
                    .l1_bytes = l1_ != nullptr ? l1_->bytes() : 0};
}

}  // namespace cache

absl::StatusOr<std::unique_ptr<Store>> NewCachingStore(std::unique_ptr<Store> inner,
                                                       CacheOptions options) {
  IDEM_ASSIGN_OR_RETURN(std::unique_ptr<cache::CachingStore> store,
                        cache::CachingStore::Make(std::move(inner), std::move(options)));
  return std::unique_ptr<Store>(std::move(store));
}

std::optional<CacheStats> GetCacheStats(const Store& store) {
  const auto* caching = dynamic_cast<const cache::CachingStore*>(&store);
  if (caching == nullptr) return std::nullopt;
  return caching->stats();
}

}  // namespace idem
