#include "cli/scheduled_purge.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cli/retention_config.h"
#include "spdlog/spdlog.h"

namespace idem::cli {

ScheduledPurge::ScheduledPurge(Store& store, PurgeOptions options, absl::Duration every,
                               http::Metrics& metrics)
    : store_(store), options_(std::move(options)), every_(every) {
  options_.stop = [this] { return stop_.load(std::memory_order_relaxed); };
  metrics.AddSection([this] { return Render(); });
  thread_ = std::thread([this] { Loop(); });
}

ScheduledPurge::~ScheduledPurge() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  stop_.store(true, std::memory_order_relaxed);
  thread_.join();
}

void ScheduledPurge::Loop() {
  for (;;) {
    {
      // The wait is the CLI's, on real time: an interval between runs, cut short
      // by the destructor.
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping_), every_)) return;
    }
    const absl::Time started = absl::Now();
    absl::StatusOr<PurgeStats> stats = Purge(store_, options_);
    if (!stats.ok()) {
      runs_failed_.fetch_add(1, std::memory_order_relaxed);
      spdlog::warn("purge: {}; the next run is in {}", std::string(stats.status().message()),
                   absl::FormatDuration(every_));
      continue;
    }
    runs_ok_.fetch_add(1, std::memory_order_relaxed);
    tombstoned_.fetch_add(stats->tombstoned, std::memory_order_relaxed);
    deleted_.fetch_add(stats->deleted, std::memory_order_relaxed);
    dropped_.fetch_add(stats->tombstones_dropped, std::memory_order_relaxed);
    operations_.fetch_add(stats->operations_deleted, std::memory_order_relaxed);
    last_success_unix_.store(absl::ToUnixSeconds(absl::Now()), std::memory_order_relaxed);
    spdlog::info("purge: {} in {}", DescribePurge(*stats, /*dry_run=*/false),
                 absl::FormatDuration(absl::Now() - started));
  }
}

std::string ScheduledPurge::Render() const {
  auto load = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  return absl::StrCat(
      "# HELP idem_purge_runs_total Background purges (serve --purge-every) by result.\n"
      "# TYPE idem_purge_runs_total counter\n"
      "idem_purge_runs_total{result=\"ok\"} ",
      load(runs_ok_), "\n", "idem_purge_runs_total{result=\"error\"} ", load(runs_failed_), "\n",
      "# HELP idem_purge_records_total Records the background purge retired, by what it did.\n"
      "# TYPE idem_purge_records_total counter\n"
      "idem_purge_records_total{action=\"tombstoned\"} ",
      load(tombstoned_), "\n", "idem_purge_records_total{action=\"deleted\"} ", load(deleted_),
      "\n", "idem_purge_records_total{action=\"tombstone_dropped\"} ", load(dropped_), "\n",
      "# HELP idem_purge_operations_deleted_total Finished step operations purged.\n"
      "# TYPE idem_purge_operations_deleted_total counter\n"
      "idem_purge_operations_deleted_total ",
      load(operations_), "\n",
      "# HELP idem_purge_last_success_timestamp_seconds When the last purge finished (0: none "
      "yet).\n"
      "# TYPE idem_purge_last_success_timestamp_seconds gauge\n"
      "idem_purge_last_success_timestamp_seconds ",
      last_success_unix_.load(std::memory_order_relaxed), "\n");
}

}  // namespace idem::cli
