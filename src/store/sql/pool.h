// A bounded pool of database connections, for the postgres:// and mysql://
// stores and the sqlite:// store's writer and readers. Not part of the public API.
//
// At most `max_size` connections exist at once; Acquire() waits up to `wait` for
// one to come free and then answers kUnavailable, so a stalled database turns into
// fail-closed errors instead of an unbounded queue of threads. A pool made with a
// `call_timeout` gives each store call one deadline (now + call_timeout, from
// CallDeadline()) that bounds everything the call waits for together: a free
// connection, a new connection, the replacement of a stale one, and (for a Conn
// with `set_deadline(absl::Time)`) every answer of the server; no part starts
// afresh, so the parts never add up past it. The waits are real time on purpose:
// they guard against a stalled server, which no injected test clock would ever
// advance past. Connections are made lazily, outside the lock. A
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

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace idem::sql {

// Hands `deadline` to a connection that bounds its I/O by one (set_deadline).
template <typename Conn>
void SetCallDeadline(Conn& conn, absl::Time deadline) {
  if constexpr (requires { conn.set_deadline(deadline); }) conn.set_deadline(deadline);
}

template <typename Conn>
class Pool {
 public:
  // Makes a connection; gives up (kUnavailable) when `deadline` passes first.
  using Connect = std::function<absl::StatusOr<std::unique_ptr<Conn>>(absl::Time deadline)>;
  // Makes a connection that needs no deadline (a local file).
  using ConnectNow = std::function<absl::StatusOr<std::unique_ptr<Conn>>()>;

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
        deadline_ = other.deadline_;
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

    // The deadline of the store call the connection serves now; a transaction
    // starts each of its calls with a new one (Pool::CallDeadline()).
    absl::Time deadline() const { return deadline_; }
    void set_deadline(absl::Time deadline) {
      deadline_ = deadline;
      if (conn_ != nullptr) SetCallDeadline(*conn_, deadline);
    }

    // Returns the connection now (as the destructor would).
    void Release() {
      if (conn_ != nullptr && pool_ != nullptr) pool_->Return(std::move(conn_));
      conn_.reset();
      pool_ = nullptr;
    }

   private:
    friend class Pool;
    Lease(Pool* pool, std::unique_ptr<Conn> conn, bool reused, absl::Time deadline)
        : pool_(pool), conn_(std::move(conn)), reused_(reused) {
      set_deadline(deadline);
    }

    Pool* pool_ = nullptr;
    std::unique_ptr<Conn> conn_;
    bool reused_ = false;
    absl::Time deadline_ = absl::InfiniteFuture();
  };

  // `connect` makes a new connection (called without the lock held); `busy` is
  // the message of an Acquire that waited in vain (it names the URL parameters
  // that raise the limits); `call_timeout` is the time one store call may take
  // (InfiniteDuration: no bound but `wait`).
  Pool(Connect connect, int max_size, absl::Duration wait, std::string busy,
       absl::Duration call_timeout)
      : connect_(std::move(connect)),
        max_size_(max_size),
        wait_(wait),
        busy_(std::move(busy)),
        call_timeout_(call_timeout) {}
  Pool(ConnectNow connect, int max_size, absl::Duration wait, std::string busy)
      : Pool([c = std::move(connect)](absl::Time) { return c(); }, max_size, wait,
             std::move(busy), absl::InfiniteDuration()) {}
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  // Adds an already open connection (one the store opened to check the schema).
  void Seed(std::unique_ptr<Conn> conn) {
    absl::MutexLock lock(&mu_);
    ++open_;
    idle_.push_back(std::move(conn));
  }

  // The deadline of a store call that starts now.
  absl::Time CallDeadline() const { return absl::Now() + call_timeout_; }

  // Lends an idle connection, or a new one while fewer than max_size exist, for a
  // store call that must end by `deadline` (default: CallDeadline()). Blocks up
  // to `wait`, and never past `deadline`. Errors: kUnavailable when none came free
  // in time or the deadline passed; the errors of `connect` when a new one cannot
  // be made.
  absl::StatusOr<Lease> Acquire() { return Acquire(CallDeadline()); }
  absl::StatusOr<Lease> Acquire(absl::Time deadline) {
    {
      absl::MutexLock lock(&mu_);
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) return absl::UnavailableError(TimedOut());
      if (!mu_.AwaitWithTimeout(absl::Condition(this, &Pool::CanLend), std::min(wait_, left))) {
        return absl::UnavailableError(left < wait_ ? TimedOut() : busy_);
      }
      if (!idle_.empty()) {
        std::unique_ptr<Conn> conn = std::move(idle_.back());
        idle_.pop_back();
        return Lease(this, std::move(conn), /*reused=*/true, deadline);
      }
      ++open_;  // reserve the slot while connecting outside the lock
    }
    absl::StatusOr<std::unique_ptr<Conn>> conn = connect_(deadline);
    if (!conn.ok()) {
      absl::MutexLock lock(&mu_);
      --open_;
      return conn.status();
    }
    return Lease(this, *std::move(conn), /*reused=*/false, deadline);
  }

  // Runs `first` on *lease, the first use of a pooled connection. One that sat
  // idle across a server restart or a kill fails with a connection error before
  // anything happened on the server, so `first` runs again on another connection,
  // up to max_size times; a failure on a connection made just now is the server's
  // real answer. Within the lease's deadline only: a connection that failed by
  // waiting it out (a server that stopped answering) is the call's answer.
  // Returns `first`'s last status, *lease holding the connection it ran on; or
  // the error of acquiring a replacement, *lease then empty.
  absl::Status RunFirstUse(Lease* lease, const std::function<absl::Status(Conn&)>& first) {
    absl::Status s = first(**lease);
    const absl::Time deadline = lease->deadline();
    for (int i = 0; i < max_size_ && !s.ok() && (*lease)->broken() && lease->reused() &&
                    absl::Now() < deadline;
         ++i) {
      lease->Release();  // broken: the idle ones go with it
      absl::StatusOr<Lease> other = Acquire(deadline);
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

  std::string TimedOut() const {
    return absl::StrCat("the store call's time (", absl::FormatDuration(call_timeout_),
                        ") ran out waiting for a database connection");
  }

  bool CanLend() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !idle_.empty() || open_ < max_size_;
  }

  const Connect connect_;
  const int max_size_;
  const absl::Duration wait_;
  const std::string busy_;
  const absl::Duration call_timeout_;
  absl::Mutex mu_;
  int open_ ABSL_GUARDED_BY(mu_) = 0;  // idle + lent + being connected
  std::vector<std::unique_ptr<Conn>> idle_ ABSL_GUARDED_BY(mu_);
};

}  // namespace idem::sql
