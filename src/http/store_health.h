// StoreHealth: one log line per change of the store's state (SPEC §3, §10), not one
// per refused request: "store unavailable" with the cause when the first request
// meets a store fault, "store available again" with how long it was down and how
// many requests were refused when the next one is answered.
//
// Thread safety: safe for concurrent use; the common case (the store up, nothing
// to log) is one relaxed atomic load.
#pragma once

#include <atomic>
#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "idem/clock.h"

namespace idem::http {

class StoreHealth {
 public:
  // `clock` must outlive this.
  explicit StoreHealth(const Clock& clock) : clock_(clock) {}

  // A request was refused because of the store (`cause`, logged on the change only).
  void Down(const absl::Status& cause);

  // A request that needed the store was answered by it.
  void Up();

  bool down() const { return down_.load(std::memory_order_relaxed); }

 private:
  const Clock& clock_;
  std::atomic<bool> down_{false};
  std::atomic<int64_t> refused_{0};
  absl::Mutex mu_;
  absl::Time since_ ABSL_GUARDED_BY(mu_);
};

}  // namespace idem::http
