// Metrics: the Prometheus counters of `idem serve`, rendered by GET /metrics in the
// text exposition format (version 0.0.4):
//
//   idem_http_requests_total{route="/v1/claims",status="201"}  answers sent
//   idem_outcomes_total{outcome="acquired"}                    guard outcomes answered
//   idem_store_errors_total                                    store calls that failed
//   idem_claim_waits_total                                     claims that waited (wait_ms)
//   idem_fail_open_total{biz_type="feed_like"}                 claims let through unrecorded
//                                                              while the store was down
//                                                              (--fail-open; UNSAFE)
//
// Thread safety: safe for concurrent use.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "http/route.h"
#include "idem/steps.h"

namespace idem::http {

class Metrics {
 public:
  // Counts one answer on `route` with HTTP `status`, and `outcome` when not empty.
  void CountRequest(Route route, int status, std::string_view outcome = {});

  // Counts one failed store call (unavailable, internal, ...).
  void CountStoreError();

  // Counts one claim that met a live lease and started waiting.
  void CountWait();

  // Counts one claim of a fail-open biz_type answered "acquired" without a record
  // because the store was unavailable. Only configured biz_types reach this, so the
  // label's cardinality is bounded by the configuration.
  void CountFailOpen(std::string_view biz_type);
  // Exports idem_fail_open_total{biz_type} at 0 before the first count, so alerts can
  // use increase() from the start.
  void DeclareFailOpen(std::string_view biz_type);

  // Adds `section` (more exposition text, e.g. the step worker's counters) to the
  // end of every Render(). Set it before serving; it must be thread-safe.
  void AddSection(std::function<std::string()> section);

  // Returns the exposition text.
  std::string Render() const;

  // For tests: the current value of a counter.
  uint64_t requests(std::string_view route, int status) const;
  uint64_t outcomes(std::string_view outcome) const;
  uint64_t store_errors() const;
  uint64_t fail_open(std::string_view biz_type) const;

 private:
  mutable absl::Mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, uint64_t, std::less<>> outcomes_ ABSL_GUARDED_BY(mu_);
  uint64_t store_errors_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t waits_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, uint64_t, std::less<>> fail_open_ ABSL_GUARDED_BY(mu_);
  std::vector<std::function<std::string()>> sections_ ABSL_GUARDED_BY(mu_);
};

// The exposition text of a step runner's counters and its worker's passes:
//   idem_steps_total{event="succeeded|retried|unknown|queried|compensated"}
//   idem_operations_finished_total{status="SUCCESS|COMPENSATED|COMPENSATION_REQUIRED"}
//   idem_step_worker_passes_total, idem_step_worker_resumed_total
std::string RenderStepMetrics(const StepStats& stats, int64_t worker_passes,
                              int64_t worker_resumed);

}  // namespace idem::http
