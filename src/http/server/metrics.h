// Metrics: the Prometheus series of `idem serve`, rendered by GET /metrics in the
// text exposition format (version 0.0.4). The contract (names, labels, types):
//
//   idem_http_requests_total{route,status}            counter    answers sent
//   idem_http_requests_by_class_total{route,class}    counter    the same by status class,
//                                                                class="2xx|3xx|4xx|5xx"
//   idem_http_request_duration_seconds{route}         histogram  from a request's header read
//                                                                to its answer handed to the
//                                                                socket (_bucket{le}, _sum,
//                                                                _count; kLatencyBounds)
//   idem_outcomes_total{outcome}                      counter    guard outcomes answered
//   idem_store_errors_total                           counter    store calls that failed
//   idem_claim_waits_total                            counter    claims that waited (wait_ms)
//   idem_claim_polls_total                            counter    record reads by waiting claims
//   idem_batch_items_total{op}                        counter    items of POST /v1/claims/batch
//                                                                decided, op="claim|complete|
//                                                                fail|invalid" (their outcomes
//                                                                count in idem_outcomes_total)
//   idem_http_pool_requests_total                     counter    requests the network threads
//                                                                handed to the worker pool
//   idem_fail_open_total{biz_type}                    counter    claims let through unrecorded
//                                                                while the store was down
//                                                                (--fail-open; UNSAFE)
//   idem_http_connections_open                        gauge      connections being served
//   idem_http_connections_refused_total{reason}       counter    connections answered 503 and
//                                                                closed unserved, reason=
//                                                                "max_connections|fd_exhausted"
//   idem_build_info{version}                          gauge      always 1
//   idem_store_up                                     gauge      1/0 (RenderStoreUp; the Api's
//                                                                readiness check per scrape)
//   idem_recon_last_success_timestamp_seconds{source} gauge      from the store's
//                                                                recon_watermark (a section
//                                                                idem serve adds; recon/tables.h)
//   idem_recon_open_tickets{source,class}             gauge      recon_ticket rows not done
//   idem_store_write_batch_records                    histogram  records per durable write of
//                                                                the store (a section idem
//                                                                serve adds: StoreBackend::
//                                                                RenderMetrics; rocksdb:// only)
//   idem_key_*_total{tenant[,biz_type][,shape]}       counter    key health: the Api's
//                                                                KeyHealthTracker
//                                                                (http/key_health.h), 16
//                                                                biz_types per tenant, shown
//                                                                only behind a token
//   idem_biz_types_without_retention                  gauge      biz_types whose new records
//                                                                never expire: the Api's
//                                                                RetentionWatch
//                                                                (http/api/retention_watch.h)
//
// `route` is one of the route templates of route.h ("/v1/records/{biz_type}/{key}",
// "other" for every unrouted target), `outcome` one of a fixed list (an unknown name
// counts as "other"), `biz_type` one declared before serving (for idem_key_*: one of
// the first 16 a tenant's clients sent, "other" after, and only when /metrics needs a
// token): no label takes an unbounded set of
// values a client chose, so the number of series is bounded. The per-route series appear
// once their route has answered; outcomes, refusals and fail-open biz_types are
// exported at 0 from the start, so alerts can use increase() at once.
//
// Counting (CountRequest and every other Count*/Connection* call) takes no lock and
// allocates nothing: each series is a relaxed std::atomic in a table fixed at
// construction, indexed by Route, status code and bucket. Render() reads them one by
// one, so a scrape racing with requests may see one request in one series and not
// yet in another; each series only grows.
//
// Thread safety: safe for concurrent use, except that DeclareFailOpen() and
// AddSection() must be called before counting and rendering start.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "http/server/route.h"
#include "idem/steps.h"

namespace idem::http {

// The upper bounds (le) of idem_http_request_duration_seconds' buckets, 0.5 ms to
// 10 s; a last bucket, +Inf, takes the rest.
inline constexpr std::array<std::chrono::nanoseconds, 14> kLatencyBounds = {
    std::chrono::microseconds(500), std::chrono::milliseconds(1),   std::chrono::microseconds(2500),
    std::chrono::milliseconds(5),   std::chrono::milliseconds(10),  std::chrono::milliseconds(25),
    std::chrono::milliseconds(50),  std::chrono::milliseconds(100), std::chrono::milliseconds(250),
    std::chrono::milliseconds(500), std::chrono::seconds(1),        std::chrono::milliseconds(2500),
    std::chrono::seconds(5),        std::chrono::seconds(10),
};

// Why the server closed a connection without serving it (idem_http_connections_
// refused_total{reason}).
enum class Refusal : uint8_t {
  kMaxConnections,  // --max-connections were open
  kFdExhausted,     // the process was out of file descriptors (EMFILE/ENFILE)
};

// What idem_build_info reports.
struct BuildInfo {
  std::string version = "unknown";  // the project version, as `idem --version` prints it
};

class Metrics {
 public:
  explicit Metrics(BuildInfo build = {});

  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // Counts one answer on `route` with HTTP `status` (100-599; others count as 500),
  // `outcome` when not empty, and `latency` (from the request's header to its answer;
  // negative counts as 0). No lock, no allocation.
  void CountRequest(Route route, int status, std::string_view outcome,
                    std::chrono::nanoseconds latency);

  // Counts one failed store call (unavailable, internal, ...).
  void CountStoreError();

  // Counts one item of a batch (POST /v1/claims/batch) answered: `op` is the call it
  // named (kClaims, kComplete or kFail; any other route counts as "invalid", an item
  // refused before its call was known), `outcome` its guard outcome when not empty.
  // The batch itself is counted by CountRequest, with no outcome.
  void CountBatchItem(Route op, std::string_view outcome);

  // Counts one claim that met a live lease and started waiting.
  void CountWait();

  // Counts one store read by a waiting claim (Api::Poll).
  void CountPoll();

  // Counts one request (or a waiting claim's read) handed to the worker pool
  // instead of being answered on the network thread that read it.
  void CountPoolRequest();

  // Counts one claim of a fail-open biz_type answered "acquired" without a record
  // because the store was unavailable. REQUIRES: DeclareFailOpen(biz_type) was called
  // (Api's constructor does it for ApiOptions::fail_open); an undeclared biz_type is
  // not counted, so the label's cardinality is bounded by the configuration.
  void CountFailOpen(std::string_view biz_type);
  // Exports idem_fail_open_total{biz_type} at 0 before the first count. Call before
  // serving.
  void DeclareFailOpen(std::string_view biz_type);

  // The server's connections: one accepted and being served, one gone, one closed
  // unserved for `why`.
  void ConnectionOpened();
  void ConnectionClosed();
  void CountRefused(Refusal why);

  // Adds `section` (more exposition text, e.g. the step worker's counters) to the
  // end of every Render(). Set it before serving; it must be thread-safe.
  void AddSection(std::function<std::string()> section);

  // Returns the exposition text. Locks and allocates; never blocks on I/O.
  std::string Render() const;

  // For tests: the current value of a series. `route` is a route template
  // (RouteNamed); `status_class` is 2 for 2xx and so on.
  uint64_t requests(std::string_view route, int status) const;
  uint64_t requests_by_class(std::string_view route, int status_class) const;
  uint64_t latency_count(std::string_view route) const;
  uint64_t outcomes(std::string_view outcome) const;
  uint64_t store_errors() const;
  uint64_t batch_items(Route op) const;
  uint64_t fail_open(std::string_view biz_type) const;
  int64_t connections_open() const;
  uint64_t refused(Refusal why) const;

 private:
  static constexpr int kMinStatus = 100;
  static constexpr int kMaxStatus = 599;
  static constexpr size_t kStatusSlots = kMaxStatus - kMinStatus + 1;
  static constexpr size_t kBuckets = kLatencyBounds.size() + 1;  // the last one is +Inf
  static constexpr size_t kOutcomeSlots = 20;  // the 19 outcomes the API and proxy name, "other"

  // One route's series. Latency buckets hold their own count (not cumulative); Render
  // adds them up.
  struct RouteSeries {
    std::array<std::atomic<uint64_t>, kStatusSlots> by_status{};
    std::array<std::atomic<uint64_t>, kBuckets> latency{};
    std::atomic<uint64_t> latency_sum_ns{0};
  };

  // The parts of Render(), each appending its families to `out`: HTTP answers by route
  // (counts, classes and, for the routes in `answered`, latencies), then the guard's.
  void AppendRequestSeries(std::string* out) const;
  void AppendLatencySeries(const std::array<bool, kRouteCount>& answered,
                           const std::array<std::string, kRouteCount>& route_labels,
                           std::string* out) const;
  void AppendGuardSeries(std::string* out) const;

  const BuildInfo build_;
  std::array<RouteSeries, kRouteCount> routes_{};
  std::array<std::atomic<uint64_t>, kOutcomeSlots> outcomes_{};
  std::atomic<uint64_t> store_errors_{0};
  std::atomic<uint64_t> waits_{0};
  std::atomic<uint64_t> polls_{0};
  std::array<std::atomic<uint64_t>, 4> batch_items_{};  // claim, complete, fail, invalid
  std::atomic<uint64_t> pool_requests_{0};
  std::atomic<int64_t> connections_open_{0};
  std::array<std::atomic<uint64_t>, 2> refused_{};
  mutable absl::Mutex mu_;
  // Keys fixed before serving (DeclareFailOpen), so CountFailOpen finds its counter
  // without the lock; mu_ orders declarations with Render().
  std::map<std::string, std::atomic<uint64_t>, std::less<>> fail_open_;
  std::vector<std::function<std::string()>> sections_ ABSL_GUARDED_BY(mu_);
};

// A label value escaped for the exposition text (\\, \" and \n): values are route
// templates and names the server bounds (biz_types), escaped anyway so the text stays
// parseable.
std::string EscapeLabel(std::string_view value);

// The exposition text of idem_store_up: 1 when `up`, else 0.
std::string RenderStoreUp(bool up);

// The exposition text of a step runner's counters and its worker's passes:
//   idem_steps_total{event="succeeded|retried|unknown|queried|compensated"}
//   idem_operations_finished_total{status="SUCCESS|COMPENSATED|COMPENSATION_REQUIRED"}
//   idem_step_worker_passes_total, idem_step_worker_resumed_total
std::string RenderStepMetrics(const StepStats& stats, int64_t worker_passes,
                              int64_t worker_resumed);

}  // namespace idem::http
