#include "store/postgres/pg_pool.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace idem::postgres {

Pool::Lease& Pool::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    Release();
    pool_ = std::exchange(other.pool_, nullptr);
    conn_ = std::move(other.conn_);
    reused_ = other.reused_;
  }
  return *this;
}

void Pool::Lease::Release() {
  if (conn_ != nullptr && pool_ != nullptr) pool_->Return(std::move(conn_));
  conn_.reset();
  pool_ = nullptr;
}

Pool::Pool(Connect connect, int max_size, absl::Duration wait)
    : connect_(std::move(connect)), max_size_(max_size), wait_(wait) {}

Pool::~Pool() {
  std::vector<std::unique_ptr<Connection>> idle;
  {
    absl::MutexLock lock(&mu_);
    idle.swap(idle_);
  }
}

void Pool::Seed(std::unique_ptr<Connection> conn) {
  absl::MutexLock lock(&mu_);
  ++open_;
  idle_.push_back(std::move(conn));
}

absl::StatusOr<Pool::Lease> Pool::Acquire() {
  mu_.Lock();
  if (!mu_.AwaitWithTimeout(absl::Condition(this, &Pool::CanLend), wait_)) {
    mu_.Unlock();
    return absl::UnavailableError(
        absl::StrCat("postgres: all ", max_size_, " pooled connections stayed busy for ",
                     absl::FormatDuration(wait_), " (raise pool= or pool_timeout_ms=)"));
  }
  if (!idle_.empty()) {
    std::unique_ptr<Connection> conn = std::move(idle_.back());
    idle_.pop_back();
    mu_.Unlock();
    return Lease(this, std::move(conn), /*reused=*/true);
  }
  ++open_;  // reserve the slot while connecting outside the lock
  mu_.Unlock();
  absl::StatusOr<std::unique_ptr<Connection>> conn = connect_();
  if (!conn.ok()) {
    absl::MutexLock lock(&mu_);
    --open_;
    return conn.status();
  }
  return Lease(this, *std::move(conn), /*reused=*/false);
}

void Pool::Return(std::unique_ptr<Connection> conn) {
  // A connection left inside a transaction (its owner could not roll back) is in
  // an unknown state; closing it makes the server roll back.
  // A deferred BEGIN that never went out opened nothing on the server.
  conn->DropDeferred();
  const bool keep = !conn->broken() && conn->transaction_status() == PQTRANS_IDLE;
  std::vector<std::unique_ptr<Connection>> doomed;
  {
    absl::MutexLock lock(&mu_);
    if (keep) {
      idle_.push_back(std::move(conn));
      return;
    }
    --open_;
    if (conn->broken()) {
      open_ -= static_cast<int>(idle_.size());
      doomed.swap(idle_);
    }
  }
  // PQfinish may block on the socket; not under the lock.
  conn.reset();
  doomed.clear();
}

void Pool::DropIdle() {
  std::vector<std::unique_ptr<Connection>> doomed;
  {
    absl::MutexLock lock(&mu_);
    open_ -= static_cast<int>(idle_.size());
    doomed.swap(idle_);
  }
}

}  // namespace idem::postgres
