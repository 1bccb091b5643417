#include "http/api/store_health.h"

#include <memory>
#include <optional>
#include <string>

#include "idem/status.h"
#include "spdlog/spdlog.h"
#include "store/backend.h"

namespace idem::http {

void StoreHealth::Down(const absl::Status& cause) {
  refused_.fetch_add(1, std::memory_order_relaxed);
  if (down_.load(std::memory_order_relaxed)) return;
  absl::MutexLock lock(&mu_);
  if (down_.exchange(true)) return;  // another request logged it first
  since_ = clock_.Now();
  // The cause may name the store's host or file: the log is the operator's, the
  // 503 body says only "store unavailable", so a client never
  // learns where the store is.
  spdlog::warn("store unavailable: {} (answering 503 until it answers again)",
               std::string(cause.message()));
}

void StoreHealth::WriteFailed() { writes_failing_.store(true, std::memory_order_relaxed); }

void StoreHealth::Up(bool wrote) {
  // A read that succeeds while writes fail says nothing about writes: the outage
  // goes on (and is logged as over once, when a write succeeds).
  if (!wrote && writes_failing_.load(std::memory_order_relaxed)) return;
  writes_failing_.store(false, std::memory_order_relaxed);
  Recovered();
}

void StoreHealth::Recovered() {
  if (!down_.load(std::memory_order_relaxed)) return;
  absl::MutexLock lock(&mu_);
  if (!down_.exchange(false)) return;
  const int64_t refused = refused_.exchange(0);
  spdlog::info("store available again after {:.1f} s; {} request(s) were refused meanwhile",
               absl::ToDoubleSeconds(clock_.Now() - since_), refused);
}

absl::Status StoreHealth::Writable(const std::function<absl::Status()>& probe) {
  const bool failing = writes_failing_.load(std::memory_order_relaxed);
  if (!probe_mu_.TryLock()) {
    // Another caller is probing; until it knows better, the last answer stands.
    if (!failing) return absl::OkStatus();
    return absl::UnavailableError("the store's writes are being probed after a failed write");
  }
  const absl::Time now = clock_.Now();
  absl::Status status = failing ? last_probe_status_ : absl::OkStatus();
  // A probe is due once per interval, also while writes work: a disk that fills
  // while no request writes is found by the readiness check itself. A failed write
  // newer than a successful probe is decided by a new probe at once.
  if (now - last_probe_ >= kProbeInterval || (failing && last_probe_status_.ok())) {
    status = probe();
    last_probe_ = now;
    last_probe_status_ = status;
  }
  probe_mu_.Unlock();
  if (status.ok()) {
    Up(/*wrote=*/true);
  } else {
    WriteFailed();
  }
  return status;
}

absl::Status ProbeStoreWrite(Store& store, absl::Time now) {
  Record probe;
  probe.tenant = "";
  probe.biz_type = "idem.readiness";
  probe.key = "write-probe";
  probe.state = RecordState::kProcessing;
  probe.token = 1;
  probe.lease_until = now;
  probe.created_at = now;
  probe.updated_at = now;
  {
    IDEM_ASSIGN_OR_RETURN(std::unique_ptr<StoreTransaction> tx, store.Begin());
    IDEM_ASSIGN_OR_RETURN(std::optional<Record> left, Records(*tx).InsertOrLoad(probe));
    (void)left;  // a record an earlier probe left: the delete below writes
    IDEM_RETURN_IF_ERROR(tx->Commit());
  }
  IDEM_ASSIGN_OR_RETURN(std::unique_ptr<StoreTransaction> tx, store.Begin());
  IDEM_ASSIGN_OR_RETURN(std::optional<Record> written, Records(*tx).Load(probe.tenant, probe.key));
  if (!written.has_value()) {
    tx->Rollback();
    return absl::UnavailableError("the store lost the readiness probe's record");
  }
  IDEM_ASSIGN_OR_RETURN(bool deleted, Records(*tx).Retire(*written, now, std::nullopt));
  if (!deleted) {
    tx->Rollback();
    return absl::UnavailableError("the store did not delete the readiness probe's record");
  }
  return tx->Commit();
}

}  // namespace idem::http
