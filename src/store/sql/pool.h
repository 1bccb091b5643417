// A bounded pool of database connections, for the postgres:// and mysql://
// stores and the sqlite:// store's writer and readers. Not part of the public API.
//
// At most `max_size` connections exist at once; Acquire() waits up to `wait` for
// one to come free and then answers kUnavailable, so a stalled database turns into
// fail-closed errors instead of an unbounded queue of threads. The wait is real
// time on purpose: it guards against a stalled server, which no injected test
// clock would ever advance past. Connections are made lazily, outside the lock. A
// connection that is not Reusable() when it comes back (broken: server restart,
// killed session, network, timeout; or left inside a transaction) is closed, and
// because such events usually take every session with them, the idle ones are
// closed too when it broke: the next Acquire() connects afresh, so the store
// recovers without a restart.
//
// `Conn` has `bool broken() const` and `bool Reusable()` (may be returned idle).
//
// Thread safety: safe for concurrent use. A Lease belongs to one thread at a time
// and must not outlive its Pool.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace idem::sql {

template <typename Conn>
class Pool {
 public:
  using Connect = std::function<absl::StatusOr<std::unique_ptr<Conn>>()>;

  // A connection on loan; goes back to the pool when the Lease is destroyed.
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& other) noexcept { *this = std::move(other); }
    Lease& operator=(Lease&& other) noexcept {
      if (this != &other) {
        Release();
        pool_ = std::exchange(other.pool_, nullptr);
        conn_ = std::move(other.conn_);
        reused_ = other.reused_;
      }
      return *this;
    }
    ~Lease() { Release(); }

    Conn& operator*() const { return *conn_; }
    Conn* operator->() const { return conn_.get(); }
    explicit operator bool() const { return conn_ != nullptr; }

    // True when the connection had been used before (it may have died while idle);
    // false for one connected for this lease, whose failures are the server's
    // answer now.
    bool reused() const { return reused_; }

    // Returns the connection now (as the destructor would).
    void Release() {
      if (conn_ != nullptr && pool_ != nullptr) pool_->Return(std::move(conn_));
      conn_.reset();
      pool_ = nullptr;
    }

   private:
    friend class Pool;
    Lease(Pool* pool, std::unique_ptr<Conn> conn, bool reused)
        : pool_(pool), conn_(std::move(conn)), reused_(reused) {}

    Pool* pool_ = nullptr;
    std::unique_ptr<Conn> conn_;
    bool reused_ = false;
  };

  // `connect` makes a new connection (called without the lock held); `busy` is
  // the message of an Acquire that waited in vain (it names the URL parameters
  // that raise the limits).
  Pool(Connect connect, int max_size, absl::Duration wait, std::string busy)
      : connect_(std::move(connect)), max_size_(max_size), wait_(wait), busy_(std::move(busy)) {}
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  // Adds an already open connection (one the store opened to check the schema).
  void Seed(std::unique_ptr<Conn> conn) {
    absl::MutexLock lock(&mu_);
    ++open_;
    idle_.push_back(std::move(conn));
  }

  // Lends an idle connection, or a new one while fewer than max_size exist.
  // Blocks up to `wait`. Errors: kUnavailable when none came free in time; the
  // errors of `connect` when a new one cannot be made.
  absl::StatusOr<Lease> Acquire() {
    {
      absl::MutexLock lock(&mu_);
      if (!mu_.AwaitWithTimeout(absl::Condition(this, &Pool::CanLend), wait_)) {
        return absl::UnavailableError(busy_);
      }
      if (!idle_.empty()) {
        std::unique_ptr<Conn> conn = std::move(idle_.back());
        idle_.pop_back();
        return Lease(this, std::move(conn), /*reused=*/true);
      }
      ++open_;  // reserve the slot while connecting outside the lock
    }
    absl::StatusOr<std::unique_ptr<Conn>> conn = connect_();
    if (!conn.ok()) {
      absl::MutexLock lock(&mu_);
      --open_;
      return conn.status();
    }
    return Lease(this, *std::move(conn), /*reused=*/false);
  }

  // Runs `first` on *lease, the first use of a pooled connection. One that sat
  // idle across a server restart or a kill fails with a connection error before
  // anything happened on the server, so `first` runs again on another connection,
  // up to max_size times; a failure on a connection made just now is the server's
  // real answer. Returns `first`'s last status, *lease holding the connection it
  // ran on; or the error of acquiring a replacement, *lease then empty.
  absl::Status RunFirstUse(Lease* lease, const std::function<absl::Status(Conn&)>& first) {
    absl::Status s = first(**lease);
    for (int i = 0; i < max_size_ && !s.ok() && (*lease)->broken() && lease->reused(); ++i) {
      lease->Release();  // broken: the idle ones go with it
      absl::StatusOr<Lease> other = Acquire();
      if (!other.ok()) return other.status();
      *lease = *std::move(other);
      s = first(**lease);
    }
    return s;
  }

  // Runs `first` on a pooled connection (Acquire, then RunFirstUse: one that
  // died while idle is replaced). Returns `first`'s last status, or Acquire's.
  absl::Status Run(const std::function<absl::Status(Conn&)>& first) {
    absl::StatusOr<Lease> lease = Acquire();
    if (!lease.ok()) return lease.status();
    return RunFirstUse(&*lease, first);
  }

 private:
  void Return(std::unique_ptr<Conn> conn) {
    const bool keep = conn->Reusable();
    const bool broken = conn->broken();
    std::vector<std::unique_ptr<Conn>> doomed;
    {
      absl::MutexLock lock(&mu_);
      if (keep) {
        idle_.push_back(std::move(conn));
        return;
      }
      --open_;
      if (broken) {
        open_ -= static_cast<int>(idle_.size());
        doomed.swap(idle_);
      }
    }
    // Closing may block on the socket; not under the lock.
    conn.reset();
    doomed.clear();
  }

  bool CanLend() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !idle_.empty() || open_ < max_size_;
  }

  const Connect connect_;
  const int max_size_;
  const absl::Duration wait_;
  const std::string busy_;
  absl::Mutex mu_;
  int open_ ABSL_GUARDED_BY(mu_) = 0;  // idle + lent + being connected
  std::vector<std::unique_ptr<Conn>> idle_ ABSL_GUARDED_BY(mu_);
};

}  // namespace idem::sql
