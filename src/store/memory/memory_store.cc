#include "store/memory/memory_store.h"

#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "absl/synchronization/mutex.h"

namespace idem {
namespace {

using Key = std::pair<std::string, std::string>;  // (tenant, key)

class MemoryStore;

class MemoryTransaction final : public StoreTransaction {
 public:
  MemoryTransaction(absl::Mutex& mu, std::map<Key, Record>& records)
      ABSL_EXCLUSIVE_LOCK_FUNCTION(mu)
      : mu_(mu), records_(records) {
    mu_.Lock();
  }
  ~MemoryTransaction() override { Rollback(); }

  absl::StatusOr<int64_t> Exec(std::string_view, absl::Span<const Value>) override {
    return absl::UnimplementedError("memory:// has no SQL; use sqlite:// for business writes");
  }
  absl::StatusOr<Rows> Query(std::string_view, absl::Span<const Value>) override {
    return absl::UnimplementedError("memory:// has no SQL; use sqlite:// for business writes");
  }

  absl::StatusOr<std::optional<Record>> InsertOrLoad(const Record& record) override {
    if (auto existing = Find(record.tenant, record.key); existing.has_value()) return existing;
    writes_[Key(record.tenant, record.key)] = record;
    return std::nullopt;
  }

  absl::StatusOr<bool> Replace(const Record& record, int64_t expected_token,
                               RecordState expected_state) override {
    std::optional<Record> existing = Find(record.tenant, record.key);
    if (!existing.has_value() || existing->token != expected_token ||
        existing->state != expected_state) {
      return false;
    }
    Record next = record;
    next.created_at = existing->created_at;
    writes_[Key(record.tenant, record.key)] = std::move(next);
    return true;
  }

  absl::StatusOr<std::optional<Record>> Load(std::string_view tenant,
                                             std::string_view key) override {
    return Find(tenant, key);
  }

  absl::Status Commit() override {
    if (done_) return absl::FailedPreconditionError("transaction already ended");
    for (auto& [k, v] : writes_) records_[k] = std::move(v);
    writes_.clear();
    done_ = true;
    mu_.Unlock();
    return absl::OkStatus();
  }

  void Rollback() override {
    if (done_) return;
    writes_.clear();
    done_ = true;
    mu_.Unlock();
  }

 private:
  std::optional<Record> Find(std::string_view tenant, std::string_view key) {
    Key k{std::string(tenant), std::string(key)};
    if (auto it = writes_.find(k); it != writes_.end()) return it->second;
    if (auto it = records_.find(k); it != records_.end()) return it->second;
    return std::nullopt;
  }

  absl::Mutex& mu_;
  std::map<Key, Record>& records_;
  std::map<Key, Record> writes_;
  bool done_ = false;
};

class MemoryStore final : public Store {
 public:
  absl::StatusOr<std::unique_ptr<StoreTransaction>> Begin() override {
    return std::make_unique<MemoryTransaction>(mu_, records_);
  }

  absl::StatusOr<std::optional<Record>> Get(std::string_view tenant,
                                            std::string_view key) override {
    absl::MutexLock lock(&mu_);
    auto it = records_.find(Key(std::string(tenant), std::string(key)));
    if (it == records_.end()) return std::nullopt;
    return it->second;
  }

  absl::Status Ping() override { return absl::OkStatus(); }
  bool SupportsSql() const override { return false; }
  std::string_view url() const override { return "memory://"; }

 private:
  absl::Mutex mu_;
  std::map<Key, Record> records_;  // guarded by mu_ (held by a transaction)
};

}  // namespace

std::unique_ptr<Store> NewMemoryStore() { return std::make_unique<MemoryStore>(); }

}  // namespace idem
