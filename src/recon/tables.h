// The two tables reconciliation writes, in idem's store (the one `idem serve`
// uses, so its /metrics can export the last success):
//
//   recon_ticket(source, key, class, severity, action, state, detail, payload,
//                attempts, last_error, run_id, created_at, updated_at, id,
//                http_status, response, note, closed_at)
//       unique on (source, key, class): one row per difference ever found, so a
//       rerun adds none. `action` is what was decided (ticket, replay, repush); a
//       replay or re-push is `pending` until its POST succeeded, then `done`; a
//       ticket is `open` for a person, who closes it (`closed`, with a note and
//       closed_at); a pending replay or re-push may be closed too (it is then no
//       longer sent). `id` is TicketId(source, class, key); http_status and
//       response are the status and the first bytes of the body (control
//       characters escaped) of the last answer that refused the POST (0 and "" when
//       none did).
//   recon_watermark(source, upto, last_success_at, run_id)
//       one row per source: how far the last successful run got and when it ended.
//
// Times are Unix microseconds (BIGINT; closed_at 0 while open). The tables are
// created on the first write (CREATE TABLE IF NOT EXISTS), never by a dry run or a
// read; a recon_ticket of an earlier version gets the columns it lacks then
// (ALTER TABLE … ADD COLUMN, ids filled in).
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
  // Filled in by the reads (ListTickets, FindTicket); InsertTickets sets id itself.
  std::string id;
  int64_t updated_at_us = 0;
  int64_t http_status = 0;  // of the last answer that refused the POST; 0 none
  std::string response;     // the first kResponseExcerptBytes of its body, escaped
  std::string note;         // why a person closed it
  int64_t closed_at_us = 0;
};

// How much of a refusing answer's body a ticket keeps (before escaping), and the
// longest note a person may close a ticket with.
inline constexpr size_t kResponseExcerptBytes = 200;
inline constexpr size_t kMaxNoteBytes = 2000;

// The id of the ticket of (source, class, key): 12 lowercase hex digits of the
// SHA-256 of the three, so the same difference has the same id in every store and
// run.
std::string TicketId(std::string_view source, std::string_view cls, std::string_view key);

// What an attempt to send a replay or re-push ended with (RecordAttempt).
struct Attempt {
  std::string state;        // "done" or "pending"
  std::string last_error;   // "" when done
  int64_t http_status = 0;  // of a refusing answer, 0 for none
  std::string response;     // its body's first bytes, escaped
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

// Records an attempt on one row: state, attempts + 1, last_error, http_status,
// response, updated_at.
absl::Status RecordAttempt(Store& store, const Ticket& t, const Attempt& attempt, int64_t now_us);

// kFailedPrecondition naming the store when it has no recon_ticket table (no recon
// run has recorded anything there): the check of the commands that only read it.
absl::Status CheckTicketTable(Store& store);

// The tickets of `store` (of `source` when not empty), open and pending ones only
// unless `all`, by source, class and key; at most `limit`, *more set when there
// were others. Reads an earlier version's table too (without the newer columns).
absl::StatusOr<std::vector<Ticket>> ListTickets(Store& store, std::string_view source, bool all,
                                                size_t limit, bool* more);

// The ticket with id `id`, or std::nullopt. kFailedPrecondition on a table of an
// earlier version, without ids (EnsureTables upgrades it).
absl::StatusOr<std::optional<Ticket>> FindTicket(Store& store, std::string_view id);

// The tickets with these ids (those that exist), for the report; as FindTicket.
absl::StatusOr<std::vector<Ticket>> FindTickets(Store& store, const std::vector<std::string>& ids);

// Closes the ticket `id` with `note` (1 to kMaxNoteBytes bytes of text without
// control characters but LF and TAB) at now_us: kInvalidArgument for a bad note,
// kNotFound for no such ticket, kFailedPrecondition when it is closed already or
// done (its replay or re-push was accepted). Upgrades a table of an earlier version
// first (EnsureTables). Returns the closed ticket.
absl::StatusOr<Ticket> CloseTicket(Store& store, std::string_view id, std::string_view note,
                                   int64_t now_us);

// Per source and class: the tickets not settled (open, or pending replays and
// re-pushes) and those the source's last successful run found first (its run_id),
// by source, then class. Empty when there is no ticket table.
struct ClassCount {
  std::string source, cls;
  int64_t unsettled = 0;
  int64_t found_by_last_run = 0;
};
absl::StatusOr<std::vector<ClassCount>> CountByClass(Store& store);

// How many rows of `source` there are (tests, status).
absl::StatusOr<int64_t> CountTickets(Store& store, std::string_view source);

}  // namespace idem::recon

namespace idem::recon {

// The exposition text of idem_recon_last_success_timestamp_seconds{source} (a
// gauge: the Unix time of each source's last successful run) from `store`'s
// recon_watermark, and idem_recon_open_tickets{source,class} (rows of recon_ticket
// open or pending: neither done nor closed); only the first HELP and TYPE lines when the table is
// missing or the store has no SQL or does not answer. For `idem serve`'s /metrics. Blocks on two
// queries.
std::string RenderReconMetrics(Store& store);

}  // namespace idem::recon
