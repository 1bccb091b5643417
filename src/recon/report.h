// What a reconciliation run prints: the JSON line (byte-identical for the
// same inputs and window), the summary table for a person, and the self-contained
// HTML report (counts, an inline SVG chart of the differences by class and the
// first rows of each class; no script, no network fetch: a Content-Security-Policy
// of default-src 'none' says so to the browser).
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "recon/comparer.h"

namespace idem::recon {

struct ReportHeader {
  std::string source;
  std::optional<int64_t> from_us;
  std::optional<int64_t> to_us;
  std::vector<std::string> statements;  // file names, for the report's "where" column
};

// {"source":…,"from":…,"to":…,"upstream_rows":…,"local_rows":…,"matched":…,
//  "missing_local":…,"missing_upstream":…,"status_mismatch":…,"amount_mismatch":…,
//  "duplicate":…} without a newline; from/to are RFC 3339 UTC or null.
std::string JsonLine(const ReportHeader& header, const CompareResult& result);

// The table printed on stdout.
std::string SummaryTable(const ReportHeader& header, const CompareResult& result);

// The HTML page; `examples` rows per class at most.
std::string HtmlReport(const ReportHeader& header, const CompareResult& result,
                       size_t examples = 20);

}  // namespace idem::recon
