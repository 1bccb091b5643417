// A bounded pool of MySQL connections for the mysql:// store. Not part of the
// public API.
//
// At most `options.pool` connections exist at once; Acquire waits up to
// `options.pool_wait_ms` for one to come free and then answers kUnavailable, so a
// stalled database turns into fail-closed errors instead of an unbounded queue of
// threads. Connections are made lazily; a connection that reported a lost-connection
// error is closed on return and its slot is free for a new one, which is how the
// store recovers after a server restart or a KILL without restarting idem.
//
// Thread safety: safe for concurrent use. The pool must outlive every Lease.
#pragma once

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "store/mysql/mysql_conn.h"
#include "store/mysql/mysql_url.h"

namespace idem::mysql {

class ConnectionPool {
 public:
  // Owns one connection until destroyed or Release()d, then hands it back.
  class Lease {
   public:
    Lease() = default;
    Lease(ConnectionPool* pool, std::unique_ptr<Connection> conn, bool fresh)
        : pool_(pool), conn_(std::move(conn)), fresh_(fresh) {}
    Lease(Lease&& other) noexcept { *this = std::move(other); }
    Lease& operator=(Lease&& other) noexcept {
      Release();
      pool_ = std::exchange(other.pool_, nullptr);
      conn_ = std::move(other.conn_);
      fresh_ = other.fresh_;
      return *this;
    }
    ~Lease() { Release(); }

    Connection* operator->() const { return conn_.get(); }
    Connection& operator*() const { return *conn_; }
    explicit operator bool() const { return conn_ != nullptr; }
    // True when the connection was made for this lease (not reused from idle):
    // a failure on it is the server's answer now, not a stale socket.
    bool fresh() const { return fresh_; }

    // Returns the connection to the pool (or closes it, if broken) now.
    void Release() {
      if (pool_ != nullptr && conn_ != nullptr) pool_->Return(std::move(conn_));
      conn_.reset();
      pool_ = nullptr;
    }

   private:
    ConnectionPool* pool_ = nullptr;
    std::unique_ptr<Connection> conn_;
    bool fresh_ = false;
  };

  explicit ConnectionPool(MysqlOptions options) : options_(std::move(options)) {}
  ~ConnectionPool();
  ConnectionPool(const ConnectionPool&) = delete;
  ConnectionPool& operator=(const ConnectionPool&) = delete;

  // Returns an idle connection, or a new one while fewer than `pool` exist, else
  // waits for one up to pool_wait_ms. Errors: kUnavailable when none came free in
  // time; the errors of Connection::Open when a new one cannot be made. Blocks.
  absl::StatusOr<Lease> Acquire();

  // Closes every idle connection (e.g. after one of them showed the server restarted).
  void DropIdle();

  // Runs `first` on *lease, the first use of a pooled connection. One that sat
  // idle across a server restart or a KILL fails with a connection error before
  // anything happened on the server, so `first` runs again on another connection
  // (the other idle ones are likely stale too and are closed), up to `pool` times;
  // a failure on a connection made just now is the server's real answer. Returns
  // `first`'s last status, *lease holding the connection it ran on; or the error
  // of acquiring a replacement, *lease then empty.
  absl::Status RunFirstUse(Lease* lease, const std::function<absl::Status(Connection&)>& first);

  const MysqlOptions& options() const { return options_; }

 private:
  void Return(std::unique_ptr<Connection> conn);
  bool CanAcquire() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !idle_.empty() || open_ < options_.pool;
  }

  const MysqlOptions options_;
  absl::Mutex mu_;
  std::vector<std::unique_ptr<Connection>> idle_ ABSL_GUARDED_BY(mu_);
  int open_ ABSL_GUARDED_BY(mu_) = 0;  // idle + leased + being made
};

}  // namespace idem::mysql
