// OpenStore: the one place where URL schemes meet backends. Backends are listed
// here explicitly (STYLE.md: no registration by static initializers).
#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "store/absl_compat.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "idem/status.h"
#include "idem/idem.h"
#include "store/memory/memory_store.h"
#include "store/sqlite/sqlite_store.h"
#include "store/store_url.h"
#if IDEM_HAVE_MYSQL
#include "store/mysql/mysql_store.h"
#endif
#if IDEM_HAVE_POSTGRES
#include "store/postgres/postgres_store.h"
#endif
#if IDEM_HAVE_ROCKSDB
#include "store/rocksdb/rocksdb_store.h"
#endif

namespace idem {
namespace {

// The answer for a scheme whose backend this build left out (the URL itself is
// not repeated: it may carry a password).
[[maybe_unused]] absl::Status NotCompiledIn(std::string_view backend, std::string_view option) {
  return absl::NotFoundError(absl::StrCat("the ", AV(backend),
                                          ":// store is not compiled into this build of idem "
                                          "(rebuild with -D",
                                          AV(option), "=ON)"));
}

absl::StatusOr<std::unique_ptr<Store>> OpenByScheme(std::string_view url, sql::SchemaMode mode,
                                                    const Clock* clock) {
  const size_t sep = url.find("://");
  if (sep == std::string_view::npos || sep == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "store URL '", AV(store::RedactUrl(url)), "' has no scheme; use memory://, sqlite://PATH, rocksdb://DIR, postgres://… or mysql://…"));
  }
  const std::string_view scheme = url.substr(0, sep);
  if (scheme == "memory") {
    if (url.size() != sep + 3) {
      return absl::InvalidArgumentError(absl::StrCat("memory:// takes nothing after '//': '", AV(store::RedactUrl(url)), "'"));
    }
    return NewMemoryStore();
  }
  if (scheme == "sqlite") return OpenSqliteStore(url, mode);
  if (scheme == "rocksdb") {
#if IDEM_HAVE_ROCKSDB
    return OpenRocksdbStore(url, mode, clock);
#else
    (void)clock;
    return NotCompiledIn("rocksdb", "IDEM_WITH_ROCKSDB");
#endif
  }
  if (scheme == "postgres" || scheme == "postgresql") {
#if IDEM_HAVE_POSTGRES
    return OpenPostgresStore(url, mode);
#else
    return NotCompiledIn("postgres", "IDEM_WITH_POSTGRES");
#endif
  }
  if (scheme == "mysql" || scheme == "mariadb") {
#if IDEM_HAVE_MYSQL
    return OpenMysqlStore(url, mode);
#else
    return NotCompiledIn("mysql", "IDEM_WITH_MYSQL");
#endif
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown store scheme '", AV(scheme), "' in '", AV(store::RedactUrl(url)), "'; use memory://, sqlite://PATH, rocksdb://DIR, postgres://… or mysql://…"));
}

// A store whose database was not reachable at open (StoreOptions::
// open_when_reachable): every call is a store fault until an open succeeds; the
// first call at least a second after the last try opens it, and from then on every
// call goes to the real store. Concurrent callers never wait for an open in
// progress: they get the fault at once.
class LateStore final : public StoreBackend {
 public:
  LateStore(std::string url, StoreOptions options, const absl::Status& first)
      : url_(std::move(url)),
        redacted_(store::RedactUrl(url_)),
        options_(options),
        last_error_(first),
        last_try_(absl::Now()) {
    options_.open_when_reachable = false;
  }

  absl::StatusOr<std::unique_ptr<StoreTransaction>> Begin() override {
    IDEM_ASSIGN_OR_RETURN(StoreBackend * s, Inner());
    return s->Begin();
  }
  // Only once opened (opening blocks).
  absl::StatusOr<std::unique_ptr<RecordTransaction>> BeginNonBlocking() override {
    StoreBackend* s = ready_.load(std::memory_order_acquire);
    if (s == nullptr) return nullptr;
    return s->BeginNonBlocking();
  }
  absl::StatusOr<std::unique_ptr<RecordTransaction>> RenewNonBlocking(
      std::unique_ptr<RecordTransaction> ended) override {
    StoreBackend* s = ready_.load(std::memory_order_acquire);
    if (s == nullptr) return nullptr;
    return s->RenewNonBlocking(std::move(ended));
  }
  bool non_blocking() const override {
    StoreBackend* s = ready_.load(std::memory_order_acquire);
    return s != nullptr && s->non_blocking();
  }
  absl::StatusOr<std::optional<Record>> Get(std::string_view tenant,
                                            std::string_view key) override {
    IDEM_ASSIGN_OR_RETURN(StoreBackend * s, Inner());
    return s->Get(tenant, key);
  }
  absl::StatusOr<std::vector<Record>> ListRecords(const RecordQuery& query) override {
    IDEM_ASSIGN_OR_RETURN(StoreBackend * s, Inner());
    return s->ListRecords(query);
  }
  absl::StatusOr<std::optional<Record>> LookupDecided(std::string_view tenant,
                                                      std::string_view key) override {
    StoreBackend* s = ready_.load(std::memory_order_acquire);  // advisory: never opens
    if (s == nullptr) return std::nullopt;
    return s->LookupDecided(tenant, key);
  }
  absl::Status Ping() override {
    IDEM_ASSIGN_OR_RETURN(StoreBackend * s, Inner());
    return s->Ping();
  }
  // Before the store opens there is nothing to subscribe to: the subscription is
  // made when it opens, and lives in the handle returned now.
  std::shared_ptr<void> SubscribeFinished(
      std::function<void(std::string_view, std::string_view)> finished) override {
    auto relay = std::make_shared<Relay>();
    relay->finished = std::move(finished);
    absl::MutexLock lock(&mu_);
    if (inner_ != nullptr) {
      relay->subscription = Backend(*inner_).SubscribeFinished(relay->finished);
    } else {
      relays_.push_back(relay);
    }
    return relay;
  }
  const SqlDialect* sql_dialect() const override {
    StoreBackend* s = ready_.load(std::memory_order_acquire);
    return s != nullptr ? s->sql_dialect() : nullptr;
  }
  bool SupportsSql() const override {
    StoreBackend* s = ready_.load(std::memory_order_acquire);
    return s != nullptr && s->SupportsSql();
  }
  absl::StatusOr<SchemaInfo> DescribeSchema() override {
    IDEM_ASSIGN_OR_RETURN(StoreBackend * s, Inner());
    return s->DescribeSchema();
  }
  bool read_only() const override { return options_.read_only; }
  std::string_view url() const override {
    StoreBackend* s = ready_.load(std::memory_order_acquire);
    return s != nullptr ? s->url() : std::string_view(redacted_);
  }

 private:
  absl::StatusOr<StoreBackend*> Inner() {
    if (StoreBackend* s = ready_.load(std::memory_order_acquire); s != nullptr) return s;
    {
      absl::MutexLock lock(&mu_);
      if (inner_ != nullptr) return &Backend(*inner_);
      if (opening_ || absl::Now() - last_try_ < absl::Seconds(1)) return Fault();
      opening_ = true;
      last_try_ = absl::Now();
    }
    absl::StatusOr<std::unique_ptr<Store>> opened = OpenStore(url_, options_);
    absl::MutexLock lock(&mu_);
    opening_ = false;
    if (!opened.ok()) {
      last_error_ = opened.status();
      return Fault();
    }
    inner_ = *std::move(opened);
    for (const std::weak_ptr<Relay>& weak : relays_) {
      if (std::shared_ptr<Relay> relay = weak.lock()) {
        relay->subscription = Backend(*inner_).SubscribeFinished(relay->finished);
      }
    }
    relays_.clear();
    ready_.store(&Backend(*inner_), std::memory_order_release);
    return &Backend(*inner_);
  }

  absl::Status Fault() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return StoreFaultError(absl::StrCat("the store ", redacted_,
                                        " has not been reachable since idem started: ",
                                        last_error_.message()));
  }

  // A SubscribeFinished made before the store opened.
  struct Relay {
    std::function<void(std::string_view, std::string_view)> finished;
    std::shared_ptr<void> subscription;  // the opened store's
  };

  const std::string url_;
  const std::string redacted_;
  StoreOptions options_;
  std::atomic<StoreBackend*> ready_{nullptr};  // inner_.get() once opened
  absl::Mutex mu_;
  std::unique_ptr<Store> inner_ ABSL_GUARDED_BY(mu_);
  bool opening_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status last_error_ ABSL_GUARDED_BY(mu_);
  absl::Time last_try_ ABSL_GUARDED_BY(mu_);
  std::vector<std::weak_ptr<Relay>> relays_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<std::unique_ptr<Store>> OpenStore(std::string_view url,
                                                 const StoreOptions& options) {
  absl::StatusOr<std::unique_ptr<Store>> store = OpenByScheme(url, {.read_only = options.read_only, .require_schema = options.require_schema, .create = options.create_schema},
                   options.clock != nullptr ? options.clock : Clock::Real());
  // Drivers may quote the URL they were given (libpq does, on a malformed URI):
  // no message leaves here with a secret of the URL in it.
  if (!store.ok()) {
    absl::Status redacted = store::RedactSecretsIn(store.status(), url);
    const std::string_view scheme = url.substr(0, url.find("://"));
    const bool server = scheme == "postgres" || scheme == "postgresql" || scheme == "mysql" ||
                        scheme == "mariadb";
    if (options.open_when_reachable && server &&
        redacted.code() == absl::StatusCode::kUnavailable) {
      return std::make_unique<LateStore>(std::string(url), options, redacted);
    }
    return redacted;
  }
  return store;
}

std::string RedactStoreUrl(std::string_view url) { return store::RedactUrl(url); }

absl::Status RedactStoreSecrets(const absl::Status& status, std::string_view url) {
  return store::RedactSecretsIn(status, url);
}

absl::StatusOr<std::string> StoreUrlWithPassword(std::string_view url, std::string_view password) {
  return store::WithPassword(url, password);
}

}  // namespace idem
