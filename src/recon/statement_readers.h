// The upstream statement's readers: CSV (RFC 4180: a header row, a
// configurable delimiter, quoted fields with "" inside, a UTF-8 BOM, CRLF or LF
// line ends, quoted newlines) and JSONL (one JSON object per line; numbers are
// read as their exact text, never as doubles). Columns are found by the header's
// (or the members') names through a ColumnMap.
//
// Bad input is kInvalidArgument "FILE:LINE: what": a missing mapped column (at the
// header, line 1), a row with another number of fields than the header (a
// truncated last line says so), an unterminated quote, invalid UTF-8, a key that
// could not be sent as a header (empty, over 255 bytes, a control character such
// as CR, LF or NUL, a space at either end: refused, never cut down), a
// malformed amount or time, an unknown status, a record (or JSONL line) over 1 MiB.
// The file is read in 1 MiB blocks: memory does not grow with its size, nor with
// the length of a line.
//
// Thread safety: a reader is used by one thread at a time.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "recon/fields.h"
#include "recon/row.h"

namespace idem::recon {

enum class StatementFormat { kCsv, kJsonl };

struct StatementOptions {
  StatementFormat format = StatementFormat::kCsv;
  char delimiter = ',';  // CSV only
};

// Opens `path` (its rows get Row::source = `source`). kUnavailable when the file
// cannot be opened; a missing mapped CSV column is found at the first Next().
// `normalizer` must outlive the reader.
absl::StatusOr<std::unique_ptr<StatementReader>> OpenStatement(const std::string& path,
                                                               uint32_t source,
                                                               const ColumnMap& map,
                                                               const StatementOptions& options,
                                                               const Normalizer& normalizer);

}  // namespace idem::recon
