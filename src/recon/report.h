// What a reconciliation run prints: the JSON line (byte-identical for the
// same inputs and window), the summary table for a person, and the self-contained
// HTML report (counts, an inline SVG chart of the differences by class and the
// first rows of each class; no script, no network fetch: a Content-Security-Policy
// of default-src 'none' says so to the browser).
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "recon/comparer.h"
#include "recon/dispositions.h"
#include "recon/tables.h"

namespace idem::recon {

struct ReportHeader {
  std::string source;
  std::optional<int64_t> from_us;
  std::optional<int64_t> to_us;
  std::vector<std::string> statements;  // file names, for the report's "where" column
};

// {"source":…,"from":…,"to":…,"upstream_rows":…,"local_rows":…,"matched":…,
//  "missing_local":…,"missing_upstream":…,"status_mismatch":…,"amount_mismatch":…,
//  "duplicate":…} without a newline; from/to are RFC 3339 UTC or null. When
// `failures` is not empty a last member "failed_actions" lists them:
// [{"ticket":ID,"key":…,"class":…,"action":…,"http_status":N or null,
//   "response":FIRST BYTES or null,"error":…}].
std::string JsonLine(const ReportHeader& header, const CompareResult& result,
                     const std::vector<ActionFailure>& failures = {});

// One line for a replay or re-push not done: "replay of KEY (CLASS, ticket ID): HTTP
// 401: FIRST BYTES" or "…: ERROR" when no answer refused it.
std::string FailureText(const ActionFailure& failure);

// The ids of the tickets of the rows HtmlReport shows (the first `examples` of each
// class), to look them up in the store.
std::vector<std::string> ReportedTicketIds(const std::string& source, const CompareResult& result,
                                           size_t examples = 20);

// The table printed on stdout.
std::string SummaryTable(const ReportHeader& header, const CompareResult& result);

// The HTML page; `examples` rows per class at most, each with its ticket from
// `tickets` (by id; its state, a closing note, the answer that refused a replay),
// "no ticket" when it has none there, nothing when `tickets` is null (a dry run).
std::string HtmlReport(const ReportHeader& header, const CompareResult& result,
                       const std::map<std::string, Ticket>* tickets = nullptr,
                       size_t examples = 20);

}  // namespace idem::recon
