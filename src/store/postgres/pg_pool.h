// A bounded pool of libpq connections for the postgres:// store. Not part of the
// public API.
//
// At most `max_size` connections exist at once; Acquire() waits up to `wait` for
// one to come free and then answers kUnavailable (fail closed rather than queue
// without bound). A connection that broke while leased (server restart,
// pg_terminate_backend, network) is closed instead of returned, and because such
// events usually take every session with them, the idle ones are closed too: the
// next Acquire() connects afresh, so the store recovers without a restart.
//
// Thread safety: safe for concurrent use. A Lease belongs to one thread at a time
// and must not outlive its Pool.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "store/postgres/pg_conn.h"

namespace idem::postgres {

class Pool {
 public:
  using Connect = std::function<absl::StatusOr<std::unique_ptr<Connection>>()>;

  // A connection on loan; goes back to the pool (or is closed when broken or left
  // inside a transaction) when the Lease is destroyed.
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& other) noexcept { *this = std::move(other); }
    Lease& operator=(Lease&& other) noexcept;
    ~Lease() { Release(); }

    Connection& operator*() const { return *conn_; }
    Connection* operator->() const { return conn_.get(); }
    explicit operator bool() const { return conn_ != nullptr; }

    // True when the connection had been used before (it may have died while idle);
    // false for one connected for this lease.
    bool reused() const { return reused_; }

    // Returns the connection now (as the destructor would).
    void Release();

   private:
    friend class Pool;
    Lease(Pool* pool, std::unique_ptr<Connection> conn, bool reused)
        : pool_(pool), conn_(std::move(conn)), reused_(reused) {}

    Pool* pool_ = nullptr;
    std::unique_ptr<Connection> conn_;
    bool reused_ = false;
  };

  // `connect` makes a new connection; it is called without the pool's lock held.
  Pool(Connect connect, int max_size, absl::Duration wait);
  ~Pool();

  // Adds an already open connection (the one the store opened to check the schema).
  void Seed(std::unique_ptr<Connection> conn);

  // Lends a connection: an idle one, or a new one while fewer than max_size exist.
  // Blocks up to `wait`. Errors: kUnavailable when none came free in time or the
  // server cannot be reached (as Connection::Open).
  absl::StatusOr<Lease> Acquire();

  // Closes every idle connection (they are suspected dead).
  void DropIdle();

 private:
  void Return(std::unique_ptr<Connection> conn);
  bool CanLend() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !idle_.empty() || open_ < max_size_;
  }

  const Connect connect_;
  const int max_size_;
  const absl::Duration wait_;
  absl::Mutex mu_;
  int open_ ABSL_GUARDED_BY(mu_) = 0;  // idle + lent + being connected
  std::vector<std::unique_ptr<Connection>> idle_ ABSL_GUARDED_BY(mu_);
};

}  // namespace idem::postgres
