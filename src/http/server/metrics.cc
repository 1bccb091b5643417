#include "http/server/metrics.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/absl_compat.h"

namespace idem::http {
namespace {

// The outcomes the API answers with (api/api.cc, api/claims.cc, proxy/proxy.cc); the last slot,
// "other", takes any other name so that a new outcome cannot add label values unnoticed.
constexpr std::array<std::string_view, 19> kOutcomeNames = {
    "acquired",    "replayed",   "cached_failure",
    "in_progress", "key_reused", "fingerprint_mismatch",
    "lease_lost",  "not_found",  "conflict",
    "unavailable", "degraded",   "completed",
    "released",    "failed",     "expired",
    // and those of the proxy (proxy.cc)
    "executed",    "missing_key", "invalid_key", "missing_client",
};
constexpr std::string_view kOtherOutcome = "other";

constexpr std::array<std::string_view, 4> kBatchOpNames = {"claim", "complete", "fail", "invalid"};

size_t BatchOpSlot(Route op) {
  switch (op) {
    case Route::kClaims:
      return 0;
    case Route::kComplete:
      return 1;
    case Route::kFail:
      return 2;
    default:
      return 3;
  }
}

constexpr std::array<std::string_view, 2> kRefusalNames = {"max_connections", "fd_exhausted"};

size_t OutcomeSlot(std::string_view outcome) {
  for (size_t i = 0; i < kOutcomeNames.size(); ++i) {
    if (kOutcomeNames[i] == outcome) return i;
  }
  return kOutcomeNames.size();
}

// Exact decimal seconds of `ns` ("1.000250000"): a double printed by StrCat keeps
// six digits only, which a long-running _sum outgrows.
std::string Seconds(uint64_t ns) {
  std::string frac = absl::StrCat(ns % 1000000000);
  return absl::StrCat(ns / 1000000000, ".", std::string(9 - frac.size(), '0'), frac);
}

uint64_t Load(const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); }
void Add(std::atomic<uint64_t>& a) { a.fetch_add(1, std::memory_order_relaxed); }

}  // namespace

std::string EscapeLabel(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

Metrics::Metrics(BuildInfo build) : build_(std::move(build)) {
  static_assert(kOutcomeNames.size() + 1 == kOutcomeSlots);
  static_assert(kRefusalNames.size() == std::tuple_size_v<decltype(refused_)>);
  static_assert(kBatchOpNames.size() == std::tuple_size_v<decltype(batch_items_)>);
}

void Metrics::CountRequest(Route route, int status, std::string_view outcome,
                           std::chrono::nanoseconds latency) {
  RouteSeries& series = routes_[static_cast<size_t>(route)];
  if (status < kMinStatus || status > kMaxStatus) status = 500;
  Add(series.by_status[static_cast<size_t>(status - kMinStatus)]);
  const auto ns = std::max(latency, std::chrono::nanoseconds(0));
  // The first bucket whose bound is >= the latency (Prometheus' le is inclusive).
  const size_t bucket = static_cast<size_t>(
      std::lower_bound(kLatencyBounds.begin(), kLatencyBounds.end(), ns) - kLatencyBounds.begin());
  Add(series.latency[bucket]);
  series.latency_sum_ns.fetch_add(static_cast<uint64_t>(ns.count()), std::memory_order_relaxed);
  if (!outcome.empty()) Add(outcomes_[OutcomeSlot(outcome)]);
}

void Metrics::CountStoreError() { Add(store_errors_); }

void Metrics::CountBatchItem(Route op, std::string_view outcome) {
  Add(batch_items_[BatchOpSlot(op)]);
  if (!outcome.empty()) Add(outcomes_[OutcomeSlot(outcome)]);
}

void Metrics::CountWait() { Add(waits_); }

void Metrics::CountPoll() { Add(polls_); }

void Metrics::CountPoolRequest() { Add(pool_requests_); }

void Metrics::CountFailOpen(std::string_view biz_type) {
  if (auto it = fail_open_.find(biz_type); it != fail_open_.end()) Add(it->second);
}

void Metrics::DeclareFailOpen(std::string_view biz_type) {
  absl::MutexLock lock(&mu_);
  fail_open_.try_emplace(std::string(biz_type), 0);
}

void Metrics::ConnectionOpened() { connections_open_.fetch_add(1, std::memory_order_relaxed); }

void Metrics::ConnectionClosed() { connections_open_.fetch_sub(1, std::memory_order_relaxed); }

void Metrics::CountRefused(Refusal why) { Add(refused_[static_cast<size_t>(why)]); }

void Metrics::AppendRequestSeries(std::string* out) const {
  // One snapshot of each route's status counts: the by-class series and whether the
  // route is shown at all come from the same numbers.
  std::vector<std::array<uint64_t, kStatusSlots>> statuses(kRouteCount);
  std::array<bool, kRouteCount> answered{};
  std::array<std::string, kRouteCount> route_labels;
  for (size_t r = 0; r < kRouteCount; ++r) {
    route_labels[r] = EscapeLabel(kRouteNames[r]);
    for (size_t s = 0; s < kStatusSlots; ++s) {
      statuses[r][s] = Load(routes_[r].by_status[s]);
      answered[r] = answered[r] || statuses[r][s] > 0;
    }
  }
  // First: docs/openapi.yaml's /metrics schema expects the body to open with it.
  absl::StrAppend(out,
                  "# HELP idem_http_requests_total HTTP answers sent, by route and status.\n"
                  "# TYPE idem_http_requests_total counter\n");
  for (size_t r = 0; r < kRouteCount; ++r) {
    const std::string& route = route_labels[r];
    for (size_t s = 0; s < kStatusSlots; ++s) {
      if (statuses[r][s] == 0) continue;
      absl::StrAppend(out, "idem_http_requests_total{route=\"", route, "\",status=\"",
                      kMinStatus + static_cast<int>(s), "\"} ", statuses[r][s], "\n");
    }
  }
  absl::StrAppend(out,
                  "# HELP idem_http_requests_by_class_total HTTP answers sent, by route and "
                  "status class.\n"
                  "# TYPE idem_http_requests_by_class_total counter\n");
  for (size_t r = 0; r < kRouteCount; ++r) {
    if (!answered[r]) continue;
    const std::string& route = route_labels[r];
    for (int c = 2; c <= 5; ++c) {
      uint64_t n = 0;
      for (int s = c * 100; s < c * 100 + 100; ++s) n += statuses[r][s - kMinStatus];
      absl::StrAppend(out, "idem_http_requests_by_class_total{route=\"", route, "\",class=\"", c,
                      "xx\"} ", n, "\n");
    }
  }
  AppendLatencySeries(answered, route_labels, out);
}

void Metrics::AppendLatencySeries(const std::array<bool, kRouteCount>& answered,
                                  const std::array<std::string, kRouteCount>& route_labels,
                                  std::string* out) const {
  absl::StrAppend(out,
                  "# HELP idem_http_request_duration_seconds Time from a request's header to "
                  "its answer, by route.\n"
                  "# TYPE idem_http_request_duration_seconds histogram\n");
  for (size_t r = 0; r < kRouteCount; ++r) {
    if (!answered[r]) continue;
    const std::string& route = route_labels[r];
    const RouteSeries& series = routes_[r];
    uint64_t cumulative = 0;
    for (size_t b = 0; b < kBuckets; ++b) {
      cumulative += Load(series.latency[b]);
      const std::string le =
          b < kLatencyBounds.size()
              ? absl::StrCat(std::chrono::duration<double>(kLatencyBounds[b]).count())
              : "+Inf";
      absl::StrAppend(out, "idem_http_request_duration_seconds_bucket{route=\"", route, "\",le=\"",
                      le, "\"} ", cumulative, "\n");
    }
    absl::StrAppend(out, "idem_http_request_duration_seconds_sum{route=\"", route, "\"} ",
                    Seconds(Load(series.latency_sum_ns)), "\n",
                    "idem_http_request_duration_seconds_count{route=\"", route, "\"} ", cumulative,
                    "\n");
  }
}

void Metrics::AppendGuardSeries(std::string* out) const {
  absl::StrAppend(out,
                  "# HELP idem_outcomes_total Guard outcomes answered, by outcome.\n"
                  "# TYPE idem_outcomes_total counter\n");
  for (size_t i = 0; i < kOutcomeSlots; ++i) {
    const uint64_t n = Load(outcomes_[i]);
    const bool other = i == kOutcomeNames.size();
    if (other && n == 0) continue;
    absl::StrAppend(out, "idem_outcomes_total{outcome=\"",
                    AV(other ? kOtherOutcome : kOutcomeNames[i]), "\"} ", n, "\n");
  }
  absl::StrAppend(
      out,
      "# HELP idem_store_errors_total Store calls that failed.\n"
      "# TYPE idem_store_errors_total counter\n"
      "idem_store_errors_total ",
      Load(store_errors_), "\n",
      "# HELP idem_claim_waits_total Claims that met a live lease and waited.\n"
      "# TYPE idem_claim_waits_total counter\n"
      "idem_claim_waits_total ",
      Load(waits_), "\n",
      "# HELP idem_claim_polls_total Store reads by claims that wait (the waiters on one key "
      "share a read).\n"
      "# TYPE idem_claim_polls_total counter\n"
      "idem_claim_polls_total ",
      Load(polls_), "\n",
      "# HELP idem_batch_items_total Items of POST /v1/claims/batch answered, by the call "
      "they named (invalid: refused before it was known).\n"
      "# TYPE idem_batch_items_total counter\n");
  for (size_t i = 0; i < kBatchOpNames.size(); ++i) {
    absl::StrAppend(out, "idem_batch_items_total{op=\"", AV(kBatchOpNames[i]), "\"} ",
                    Load(batch_items_[i]), "\n");
  }
  absl::StrAppend(out,
                  "# HELP idem_http_pool_requests_total Requests the network threads handed to "
                  "the worker pool: all on a store whose calls block (sqlite, postgres, mysql) and "
                  "every request idem proxy forwards; on rocksdb:// a key another transaction "
                  "holds, a waiting claim's read, and what is not a claim, complete or fail.\n"
                  "# TYPE idem_http_pool_requests_total counter\n"
                  "idem_http_pool_requests_total ",
                  Load(pool_requests_), "\n");
}

std::string Metrics::Render() const {
  std::string out;
  AppendRequestSeries(&out);
  AppendGuardSeries(&out);
  absl::MutexLock lock(&mu_);
  absl::StrAppend(&out,
                  "# HELP idem_fail_open_total Claims of fail-open biz_types answered without a "
                  "record while the store was down (duplicates may have passed).\n"
                  "# TYPE idem_fail_open_total counter\n");
  for (const auto& [biz_type, n] : fail_open_) {
    absl::StrAppend(&out, "idem_fail_open_total{biz_type=\"", EscapeLabel(biz_type), "\"} ",
                    Load(n), "\n");
  }
  absl::StrAppend(&out,
                  "# HELP idem_http_connections_open Connections being served.\n"
                  "# TYPE idem_http_connections_open gauge\n"
                  "idem_http_connections_open ",
                  connections_open_.load(std::memory_order_relaxed), "\n",
                  "# HELP idem_http_connections_refused_total Connections answered 503 and "
                  "closed without being served.\n"
                  "# TYPE idem_http_connections_refused_total counter\n");
  for (size_t i = 0; i < kRefusalNames.size(); ++i) {
    absl::StrAppend(&out, "idem_http_connections_refused_total{reason=\"", AV(kRefusalNames[i]),
                    "\"} ", Load(refused_[i]), "\n");
  }
  absl::StrAppend(&out,
                  "# HELP idem_build_info The idem build serving; always 1.\n"
                  "# TYPE idem_build_info gauge\n"
                  "idem_build_info{version=\"",
                  EscapeLabel(build_.version), "\"} 1\n");
  for (const auto& section : sections_) out += section();
  return out;
}

void Metrics::AddSection(std::function<std::string()> section) {
  absl::MutexLock lock(&mu_);
  sections_.push_back(std::move(section));
}

uint64_t Metrics::batch_items(Route op) const { return Load(batch_items_[BatchOpSlot(op)]); }

uint64_t Metrics::requests(std::string_view route, int status) const {
  if (status < kMinStatus || status > kMaxStatus) return 0;
  return Load(routes_[static_cast<size_t>(RouteNamed(route))]
                  .by_status[static_cast<size_t>(status - kMinStatus)]);
}

uint64_t Metrics::requests_by_class(std::string_view route, int status_class) const {
  uint64_t n = 0;
  for (int s = status_class * 100; s < status_class * 100 + 100; ++s) n += requests(route, s);
  return n;
}

uint64_t Metrics::latency_count(std::string_view route) const {
  uint64_t n = 0;
  for (const auto& bucket : routes_[static_cast<size_t>(RouteNamed(route))].latency) {
    n += Load(bucket);
  }
  return n;
}

uint64_t Metrics::outcomes(std::string_view outcome) const {
  return Load(outcomes_[outcome == kOtherOutcome ? kOutcomeNames.size() : OutcomeSlot(outcome)]);
}

uint64_t Metrics::store_errors() const { return Load(store_errors_); }

uint64_t Metrics::fail_open(std::string_view biz_type) const {
  absl::MutexLock lock(&mu_);
  auto it = fail_open_.find(biz_type);
  return it == fail_open_.end() ? 0 : Load(it->second);
}

int64_t Metrics::connections_open() const {
  return connections_open_.load(std::memory_order_relaxed);
}

uint64_t Metrics::refused(Refusal why) const { return Load(refused_[static_cast<size_t>(why)]); }

std::string RenderStoreUp(bool up) {
  return absl::StrCat(
      "# HELP idem_store_up Whether the store answered and took writes during this scrape.\n"
      "# TYPE idem_store_up gauge\n"
      "idem_store_up ",
      up ? 1 : 0, "\n");
}

std::string RenderStepMetrics(const StepStats& stats, int64_t worker_passes,
                              int64_t worker_resumed) {
  std::string out =
      "# HELP idem_steps_total Step-machine events: steps done, attempts retried, outcomes "
      "not observed, queries before a re-send, steps undone.\n"
      "# TYPE idem_steps_total counter\n";
  const std::pair<const char*, int64_t> events[] = {{"succeeded", stats.steps_succeeded},
                                                    {"retried", stats.step_retries},
                                                    {"unknown", stats.steps_unknown},
                                                    {"queried", stats.queries},
                                                    {"compensated", stats.compensations}};
  for (const auto& [name, n] : events) {
    absl::StrAppend(&out, "idem_steps_total{event=\"", name, "\"} ", n, "\n");
  }
  absl::StrAppend(&out,
                  "# HELP idem_operations_finished_total Step operations that reached a final "
                  "status.\n"
                  "# TYPE idem_operations_finished_total counter\n"
                  "idem_operations_finished_total{status=\"SUCCESS\"} ",
                  stats.operations_succeeded, "\n",
                  "idem_operations_finished_total{status=\"COMPENSATED\"} ",
                  stats.operations_compensated, "\n",
                  "idem_operations_finished_total{status=\"COMPENSATION_REQUIRED\"} ",
                  stats.operations_compensation_required, "\n");
  absl::StrAppend(&out,
                  "# HELP idem_step_worker_passes_total Passes of the step worker.\n"
                  "# TYPE idem_step_worker_passes_total counter\n"
                  "idem_step_worker_passes_total ",
                  worker_passes, "\n",
                  "# HELP idem_step_worker_resumed_total Operations the step worker resumed.\n"
                  "# TYPE idem_step_worker_resumed_total counter\n"
                  "idem_step_worker_resumed_total ",
                  worker_resumed, "\n");
  return out;
}

}  // namespace idem::http
