#include "http/store_health.h"

#include <string>

#include "spdlog/spdlog.h"

namespace idem::http {

void StoreHealth::Down(const absl::Status& cause) {
  refused_.fetch_add(1, std::memory_order_relaxed);
  if (down_.load(std::memory_order_relaxed)) return;
  absl::MutexLock lock(&mu_);
  if (down_.exchange(true)) return;  // another request logged it first
  since_ = clock_.Now();
  // The cause may name the store's host or file: the log is the operator's, the
  // 503 body says only "store unavailable" (issue 10 keeps it so).
  spdlog::warn("store unavailable: {} (answering 503 until it answers again)",
               std::string(cause.message()));
}

void StoreHealth::Up() {
  if (!down_.load(std::memory_order_relaxed)) return;
  absl::MutexLock lock(&mu_);
  if (!down_.exchange(false)) return;
  const int64_t refused = refused_.exchange(0);
  spdlog::info("store available again after {:.1f} s; {} request(s) were refused meanwhile",
               absl::ToDoubleSeconds(clock_.Now() - since_), refused);
}

}  // namespace idem::http
