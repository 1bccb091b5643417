// Fuzzes the statement readers of `idem recon` (recon/statement_readers.h): CSV
// (RFC 4180 with a delimiter, BOM, CRLF, quoted newlines) and JSONL, through the
// Normalizer that checks keys, amounts, times and statuses.
//
// Input: one byte of settings (bit 0: JSONL, else CSV; bits 1-2: the delimiter
// , ; TAB |; bit 3: a status map), one byte for the amount scale (0..18), then the
// file's bytes. Properties: the reader never fails with anything but
// kInvalidArgument "FILE:LINE: ..." (the file is readable: never kUnavailable);
// rows come in increasing lines (after the header for CSV), each with a non-empty
// UTF-8 key, an amount in canonical form (ParseDecimal at scale 0 keeps it), a
// status the status map allows; the end is sticky (Next after false is false).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "core/utf8.h"
#include "core/absl_compat.h"
#include "fuzz/fuzz_check.h"
#include "recon/decimal.h"
#include "recon/fields.h"
#include "recon/statement_readers.h"


extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using idem::fuzz::Check;
  namespace recon = idem::recon;
  if (size < 2) return 0;
  const uint8_t settings = data[0];
  const int scale = data[1] % (recon::kMaxScale + 1);
  const std::string& path = idem::fuzz::ScratchFile("statement");
  idem::fuzz::WriteFile(path, data + 2, size - 2);

  static const recon::ColumnMap map =
      *recon::ParseColumnMap("key=id,amount=amt,currency=cur,status=st,time=ts");
  static const recon::StatusRules plain;
  static const recon::StatusRules mapped =
      *recon::ParseStatusRules("SUCCESS=PAID,REFUND=REFUNDED", "PENDING");
  const recon::StatusRules& rules = (settings & 8) != 0 ? mapped : plain;
  const recon::Normalizer normalizer(recon::Side::kUpstream, map, scale, absl::UTCTimeZone(),
                                     rules);
  static constexpr char kDelimiters[] = {',', ';', '\t', '|'};
  const recon::StatementOptions options{
      .format = (settings & 1) != 0 ? recon::StatementFormat::kJsonl : recon::StatementFormat::kCsv,
      .delimiter = kDelimiters[(settings >> 1) & 3]};
  absl::StatusOr<std::unique_ptr<recon::StatementReader>> reader =
      recon::OpenStatement(path, 0, map, options, normalizer);
  Check(reader.ok(), "a readable statement opens", idem::SV(reader.status().message()));

  recon::Row row;
  int64_t last_line = options.format == recon::StatementFormat::kCsv ? 1 : 0;
  while (true) {
    absl::StatusOr<bool> got = (*reader)->Next(&row);
    if (!got.ok()) {
      idem::fuzz::CheckBadInput(got.status(), "StatementReader::Next");
      Check(absl::StartsWith(got.status().message(), path + ":"), "an error names FILE:LINE",
            idem::SV(got.status().message()));
      return 0;
    }
    if (!*got) break;
    Check(row.line > last_line, "rows come in increasing lines");
    last_line = row.line;
    Check(!row.key.empty() && idem::IsUtf8(row.key), "a row's key is non-empty UTF-8", row.key);
    absl::StatusOr<std::string> canonical = recon::ParseDecimal(row.amount, 0);
    Check(canonical.ok() && *canonical == row.amount, "a row's amount is canonical", row.amount);
    if (!rules.map.empty()) {
      Check(rules.map.contains(row.status), "a row's status is one the map allows", row.status);
    }
  }
  absl::StatusOr<bool> again = (*reader)->Next(&row);
  Check(again.ok() && !*again, "the end of a statement is sticky");
  return 0;
}
