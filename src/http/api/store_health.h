// StoreHealth: what `idem serve` knows of its store between requests, for /readyz,
// idem_store_up and the log.
//
// One log line per change of the store's state, not one per refused
// request: "store unavailable" with the cause when the first request meets a store
// fault, "store available again" with how long it was down and how many requests
// were refused when the next one is answered.
//
// Readiness follows writes, not only pings: a store can answer a read while it
// refuses every write (a full disk, a file system remounted read-only, a lost WAL
// write), and a ping is a read on most backends. The readiness check writes
// (ProbeStoreWrite, at most once per kProbeInterval), so a disk that fills while
// no request writes is found too; and once a claim, complete or fail failed because
// of the store (WriteFailed), the store is not ready until a write succeeds again:
// one by a request (Up), or the readiness check's probe.
//
// Thread safety: safe for concurrent use; the common case (the store up, nothing
// to log) is one relaxed atomic load.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "idem/clock.h"
#include "idem/store.h"

namespace idem::http {

class StoreHealth {
 public:
  // Writes are probed at most this often: /readyz polled by many load balancers
  // costs the store at most two small transactions per interval, and readiness
  // follows the store's writes within about this long, either way.
  static constexpr absl::Duration kProbeInterval = absl::Milliseconds(500);

  // `clock` must outlive this.
  explicit StoreHealth(const Clock& clock) : clock_(clock) {}

  // A request was refused because of the store (`cause`, logged on the change only).
  void Down(const absl::Status& cause);

  // A claim, complete or fail was refused because the store failed its write (the
  // caller also reports it with Down): the store is not ready until a write
  // succeeds. Lock-free.
  void WriteFailed();

  // A request that needed the store was answered by it; when it wrote (a claim,
  // complete or fail), writes work again.
  void Up(bool wrote);

  // Whether the store takes writes, for readiness: `probe` (a write:
  // ProbeStoreWrite) is run by one caller at a time, at most once per
  // kProbeInterval (the others get the last answer), so a disk that fills while no
  // request writes is found too; and at once when a request's write failed after
  // the last successful probe. A failed probe makes the store not ready until a
  // write succeeds; a successful one ends the outage. Blocks while the probe runs.
  absl::Status Writable(const std::function<absl::Status()>& probe);

  bool down() const { return down_.load(std::memory_order_relaxed); }
  bool writes_failing() const { return writes_failing_.load(std::memory_order_relaxed); }

 private:
  // Logs the end of an outage, once.
  void Recovered();

  const Clock& clock_;
  std::atomic<bool> down_{false};
  std::atomic<bool> writes_failing_{false};
  std::atomic<int64_t> refused_{0};
  absl::Mutex mu_;
  absl::Time since_ ABSL_GUARDED_BY(mu_);
  absl::Mutex probe_mu_;  // held while a probe runs; never with mu_
  absl::Time last_probe_ ABSL_GUARDED_BY(probe_mu_) = absl::InfinitePast();
  absl::Status last_probe_status_ ABSL_GUARDED_BY(probe_mu_);
};

// Writes one record and deletes it again, each in a transaction of its own, under
// the tenant "" (no request has it: tenant names are never empty), biz_type
// "idem.readiness", key "write-probe". Returns OK when a write reached the store
// (both committed), else the store's error. A record left by a probe whose delete
// failed is deleted by the next one. Blocks on the store.
absl::Status ProbeStoreWrite(Store& store, absl::Time now);

}  // namespace idem::http
