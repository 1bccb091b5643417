#include "http/metrics.h"

#include "absl/strings/str_cat.h"

namespace idem::http {
namespace {

// Label values are route templates and outcome names chosen by the server, but
// escape anyway so the exposition stays parseable.
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

}  // namespace

void Metrics::CountRequest(Route route, int status, std::string_view outcome) {
  absl::MutexLock lock(&mu_);
  ++requests_[{std::string(RouteName(route)), status}];
  if (!outcome.empty()) {
    auto it = outcomes_.find(outcome);
    if (it == outcomes_.end()) it = outcomes_.emplace(std::string(outcome), 0).first;
    ++it->second;
  }
}

void Metrics::CountStoreError() {
  absl::MutexLock lock(&mu_);
  ++store_errors_;
}

void Metrics::CountWait() {
  absl::MutexLock lock(&mu_);
  ++waits_;
}

void Metrics::CountFailOpen(std::string_view biz_type) {
  absl::MutexLock lock(&mu_);
  auto it = fail_open_.find(biz_type);
  if (it == fail_open_.end()) it = fail_open_.emplace(std::string(biz_type), 0).first;
  ++it->second;
}

void Metrics::DeclareFailOpen(std::string_view biz_type) {
  absl::MutexLock lock(&mu_);
  if (fail_open_.find(biz_type) == fail_open_.end()) fail_open_.emplace(std::string(biz_type), 0);
}

std::string Metrics::Render() const {
  absl::MutexLock lock(&mu_);
  std::string out;
  absl::StrAppend(&out,
                  "# HELP idem_http_requests_total HTTP answers sent, by route and status.\n"
                  "# TYPE idem_http_requests_total counter\n");
  for (const auto& [k, n] : requests_) {
    absl::StrAppend(&out, "idem_http_requests_total{route=\"", EscapeLabel(k.first), "\",status=\"",
                    k.second, "\"} ", n, "\n");
  }
  absl::StrAppend(&out,
                  "# HELP idem_outcomes_total Guard outcomes answered, by outcome.\n"
                  "# TYPE idem_outcomes_total counter\n");
  for (const auto& [k, n] : outcomes_) {
    absl::StrAppend(&out, "idem_outcomes_total{outcome=\"", EscapeLabel(k), "\"} ", n, "\n");
  }
  absl::StrAppend(&out,
                  "# HELP idem_store_errors_total Store calls that failed.\n"
                  "# TYPE idem_store_errors_total counter\n"
                  "idem_store_errors_total ",
                  store_errors_, "\n",
                  "# HELP idem_claim_waits_total Claims that met a live lease and waited.\n"
                  "# TYPE idem_claim_waits_total counter\n"
                  "idem_claim_waits_total ",
                  waits_, "\n");
  absl::StrAppend(&out,
                  "# HELP idem_fail_open_total Claims of fail-open biz_types answered without a "
                  "record while the store was down (duplicates may have passed).\n"
                  "# TYPE idem_fail_open_total counter\n");
  for (const auto& [k, n] : fail_open_) {
    absl::StrAppend(&out, "idem_fail_open_total{biz_type=\"", EscapeLabel(k), "\"} ", n, "\n");
  }
  for (const auto& section : sections_) out += section();
  return out;
}

void Metrics::AddSection(std::function<std::string()> section) {
  absl::MutexLock lock(&mu_);
  sections_.push_back(std::move(section));
}

uint64_t Metrics::requests(std::string_view route, int status) const {
  absl::MutexLock lock(&mu_);
  auto it = requests_.find({std::string(route), status});
  return it == requests_.end() ? 0 : it->second;
}

uint64_t Metrics::outcomes(std::string_view outcome) const {
  absl::MutexLock lock(&mu_);
  auto it = outcomes_.find(outcome);
  return it == outcomes_.end() ? 0 : it->second;
}

uint64_t Metrics::fail_open(std::string_view biz_type) const {
  absl::MutexLock lock(&mu_);
  auto it = fail_open_.find(biz_type);
  return it == fail_open_.end() ? 0 : it->second;
}

uint64_t Metrics::store_errors() const {
  absl::MutexLock lock(&mu_);
  return store_errors_;
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
