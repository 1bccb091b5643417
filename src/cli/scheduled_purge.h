// The purge `idem serve --purge-every D` runs in the background: the same
// Purge() as `idem purge`, on the server's own store (the only way to purge a
// rocksdb:// directory, which the server holds), every D, on a thread of its own.
// Its counters are a section of /metrics:
//
//   idem_purge_runs_total{result="ok|error"}              counter
//   idem_purge_records_total{action="tombstoned|deleted|tombstone_dropped"}  counter
//   idem_purge_operations_deleted_total                   counter
//   idem_purge_last_success_timestamp_seconds             gauge (0 before the first)
//
// Thread safety: constructed and destroyed on main's thread; the destructor stops a
// run in progress between two batches and joins the thread. `store`, `metrics` and
// options.policy must outlive it.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "http/server/metrics.h"
#include "idem/retention.h"
#include "idem/store.h"

namespace idem::cli {

class ScheduledPurge {
 public:
  // Starts the thread; the first run is `every` from now. Adds the metrics section
  // (call before serving starts).
  ScheduledPurge(Store& store, PurgeOptions options, absl::Duration every, http::Metrics& metrics);
  ~ScheduledPurge();
  ScheduledPurge(const ScheduledPurge&) = delete;
  ScheduledPurge& operator=(const ScheduledPurge&) = delete;

 private:
  void Loop();
  std::string Render() const;

  Store& store_;
  PurgeOptions options_;
  const absl::Duration every_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<bool> stop_{false};  // stopping_, readable without the lock between batches
  std::atomic<uint64_t> runs_ok_{0}, runs_failed_{0};
  std::atomic<uint64_t> tombstoned_{0}, deleted_{0}, dropped_{0}, operations_{0};
  std::atomic<int64_t> last_success_unix_{0};
  std::thread thread_;  // last: started once everything above is ready
};

}  // namespace idem::cli
