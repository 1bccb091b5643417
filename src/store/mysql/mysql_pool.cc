#include "store/mysql/mysql_pool.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace idem::mysql {

ConnectionPool::~ConnectionPool() {
  absl::MutexLock lock(&mu_);
  idle_.clear();
}

absl::StatusOr<ConnectionPool::Lease> ConnectionPool::Acquire() {
  {
    absl::MutexLock lock(&mu_);
    // The wait is bounded by real time on purpose: it guards against a stalled
    // server, which no injected test clock would ever advance past.
    const absl::Time deadline = absl::Now() + absl::Milliseconds(options_.pool_wait_ms);
    if (!mu_.AwaitWithDeadline(absl::Condition(this, &ConnectionPool::CanAcquire), deadline)) {
      return absl::UnavailableError(
          absl::StrCat("mysql store ", options_.redacted_url, ": all ", options_.pool,
                       " connections stayed busy for ", options_.pool_wait_ms,
                       " ms (raise pool= or pool_wait_ms=, or look for long transactions)"));
    }
    if (!idle_.empty()) {
      std::unique_ptr<Connection> conn = std::move(idle_.back());
      idle_.pop_back();
      return Lease(this, std::move(conn), /*fresh=*/false);
    }
    ++open_;  // reserve the slot; the connection is made outside the lock
  }
  absl::StatusOr<std::unique_ptr<Connection>> conn = Connection::Open(options_);
  if (!conn.ok()) {
    absl::MutexLock lock(&mu_);
    --open_;
    return conn.status();
  }
  return Lease(this, *std::move(conn), /*fresh=*/true);
}

void ConnectionPool::Return(std::unique_ptr<Connection> conn) {
  if (conn->broken()) {
    conn.reset();  // closed outside the lock: mysql_close may touch the socket
    absl::MutexLock lock(&mu_);
    --open_;
    return;
  }
  absl::MutexLock lock(&mu_);
  idle_.push_back(std::move(conn));
}

void ConnectionPool::DropIdle() {
  std::vector<std::unique_ptr<Connection>> doomed;
  {
    absl::MutexLock lock(&mu_);
    doomed.swap(idle_);
    open_ -= static_cast<int>(doomed.size());
  }
}

absl::Status ConnectionPool::RunFirstUse(Lease* lease,
                                         const std::function<absl::Status(Connection&)>& first) {
  absl::Status s = first(**lease);
  for (int i = 0; i < options_.pool && !s.ok() && (*lease)->broken() && !lease->fresh(); ++i) {
    lease->Release();
    DropIdle();
    absl::StatusOr<Lease> other = Acquire();
    if (!other.ok()) return other.status();
    *lease = *std::move(other);
    s = first(**lease);
  }
  return s;
}

}  // namespace idem::mysql
