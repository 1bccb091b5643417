#include "store/memory/memory_store.h"

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "idem/status.h"
#include "store/backend.h"
#include "store/record_query.h"

namespace idem {
namespace {

using Key = std::pair<std::string, std::string>;  // (tenant, key)

class MemoryStore;

class MemoryTransaction final : public RecordTransaction {
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

  absl::StatusOr<bool> Retire(const Record& expected, absl::Time now,
                              std::optional<absl::Time> tombstone_until) override {
    std::optional<Record> existing = Find(expected.tenant, expected.key);
    if (!existing.has_value() || existing->token != expected.token ||
        existing->state != expected.state || existing->purged_at != expected.purged_at) {
      return false;
    }
    std::optional<Record>& slot = writes_[Key(expected.tenant, expected.key)];
    if (!tombstone_until.has_value()) {
      slot.reset();  // deleted at commit
      return true;
    }
    existing->result.clear();
    existing->error.clear();
    existing->purged_at = now;
    existing->updated_at = now;
    existing->expires_at = *tombstone_until;
    slot = std::move(existing);
    return true;
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
    next.expires_at = existing->expires_at;
    next.purged_at = existing->purged_at;
    writes_[Key(record.tenant, record.key)] = std::move(next);
    return true;
  }

  absl::StatusOr<std::optional<Record>> Load(std::string_view tenant,
                                             std::string_view key) override {
    return Find(tenant, key);
  }

  absl::Status Commit() override {
    if (done_) return absl::FailedPreconditionError("transaction already ended");
    for (auto& [k, v] : writes_) {
      if (v.has_value()) {
        records_[k] = *std::move(v);
      } else {
        records_.erase(k);
      }
    }
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
    if (auto it = writes_.find(k); it != writes_.end()) return it->second;  // nullopt: deleted
    if (auto it = records_.find(k); it != records_.end()) return it->second;
    return std::nullopt;
  }

  absl::Mutex& mu_;
  std::map<Key, Record>& records_;
  std::map<Key, std::optional<Record>> writes_;  // std::nullopt: deleted
  bool done_ = false;
};

class MemoryStore final : public StoreBackend {
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

  absl::StatusOr<std::vector<Record>> ListRecords(const RecordQuery& query) override {
    IDEM_RETURN_IF_ERROR(store::CheckRecordQuery(query));
    std::vector<Record> out;
    absl::MutexLock lock(&mu_);
    auto it = query.after.has_value() ? records_.upper_bound(*query.after)
              : query.tenant.has_value() ? records_.lower_bound(Key(*query.tenant, ""))
                                         : records_.begin();
    for (; it != records_.end() && static_cast<int>(out.size()) < query.limit; ++it) {
      const Record& r = it->second;
      if (query.tenant.has_value() && r.tenant > *query.tenant) break;  // past its keys
      if (!store::Matches(query, r)) continue;
      Record page = r;
      page.result.clear();
      page.error.clear();
      out.push_back(std::move(page));
    }
    return out;
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
