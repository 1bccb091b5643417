// The two tables reconciliation writes, in idem's store (the one `idem serve`
// uses, so its /metrics can export the last success):
//
//   recon_ticket(source, key, class, severity, action, state, detail, payload,
//                attempts, last_error, run_id, created_at, updated_at)
//       unique on (source, key, class): one row per difference ever found, so a
//       rerun adds none. `action` is what was decided (ticket, replay, repush); a
//       replay or re-push is `pending` until its POST succeeded, then `done`; a
//       ticket is `open` for a person.
//   recon_watermark(source, upto, last_success_at, run_id)
//       one row per source: how far the last successful run got and when it ended.
//
// Times are Unix microseconds (BIGINT). The tables are created on the first write
// (CREATE TABLE IF NOT EXISTS), never by a dry run or a read.
//
// Thread safety: functions; the Store is safe for concurrent use.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "idem/store.h"

namespace idem::recon {

struct Watermark {
  std::string source;
  int64_t upto_us = 0;
  int64_t last_success_at_us = 0;
  std::string run_id;
};

struct Ticket {
  std::string source;
  std::string key;
  std::string cls;       // kClassNames
  std::string severity;  // "high" or "normal"
  std::string action;    // "ticket", "replay", "repush"
  std::string state;     // "open", "pending", "done"
  std::string detail;
  std::string payload;  // the JSON body a replay or re-push sends
  int64_t attempts = 0;
  std::string last_error;
  std::string run_id;
  int64_t created_at_us = 0;
};

// Creates the tables where missing. kUnavailable for the store's faults;
// kInvalidArgument for a store without SQL.
absl::Status EnsureTables(Store& store);

// The watermark of `source`, or std::nullopt when there is none (or no table).
absl::StatusOr<std::optional<Watermark>> ReadWatermark(Store& store, std::string_view source);

// Every source's watermark, by source; empty when the table does not exist.
absl::StatusOr<std::vector<Watermark>> ReadWatermarks(Store& store);

// Records a successful run: upto becomes max(stored upto, w.upto_us).
absl::Status WriteWatermark(Store& store, const Watermark& w);

// Inserts each of `tickets` unless its (source, key, class) is there, in
// transactions of up to 500 rows. Returns how many were new.
absl::StatusOr<int64_t> InsertTickets(Store& store, const std::vector<Ticket>& tickets);

// The rows of `source` with state pending (replays and re-pushes not yet done), by key.
absl::StatusOr<std::vector<Ticket>> PendingActions(Store& store, std::string_view source);

// Sets the state of one row after an attempt: attempts + 1, last_error, updated_at.
absl::Status RecordAttempt(Store& store, const Ticket& t, std::string_view state,
                           std::string_view last_error, int64_t now_us);

// How many rows of `source` there are (tests, status).
absl::StatusOr<int64_t> CountTickets(Store& store, std::string_view source);

}  // namespace idem::recon

namespace idem::recon {

// The exposition text of idem_recon_last_success_timestamp_seconds{source} (a
// gauge: the Unix time of each source's last successful run) from `store`'s
// recon_watermark, and idem_recon_open_tickets{source,class} (rows of recon_ticket
// not done); only the first HELP and TYPE lines when the table is missing or the
// store has no SQL or does not answer. For `idem serve`'s /metrics. Blocks on two
// queries.
std::string RenderReconMetrics(Store& store);

}  // namespace idem::recon
