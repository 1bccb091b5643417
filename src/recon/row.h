// The rows reconciliation compares, and the seam every source of them implements
// (STYLE.md: one interface per seam). A StatementReader yields the rows of one side
// (the upstream statement, or the local ledger) already normalised: the key as
// bytes, the amount as a canonical exact decimal (recon/decimal.h), the time as
// microseconds since the Unix epoch (recon/recon_time.h), and where each row came
// from, so an error or a report can name the file and line.
//
// Thread safety: a StatementReader is used by one thread at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace idem::recon {

// Which side a row is from.
enum class Side : uint8_t { kUpstream = 0, kLocal = 1 };

struct Row {
  std::string key;
  std::string amount;    // canonical decimal ("12.5", "-3", "0"); "" when not compared
  std::string currency;  // "" when not compared
  std::string status;    // "" when not compared
  int64_t time_us = 0;   // microseconds since the epoch; 0 when has_time is false
  bool has_time = false;
  uint32_t source = 0;  // which input of its side (the n-th --statement file)
  int64_t line = 0;     // line of the file (1 = the header), or row number of the ledger
};

class StatementReader {
 public:
  virtual ~StatementReader() = default;

  // Reads the next row into `*row`. Returns true for a row, false at the end.
  // Errors: kInvalidArgument for bad input, with a message that starts with the
  // place ("statement.csv:17: …", "ledger row 12 (key …): …"); kUnavailable when the
  // file or database cannot be read. Blocks on I/O.
  virtual absl::StatusOr<bool> Next(Row* row) = 0;

  // Reads every row (the ones Next() has not yielded yet), handing each to `each`,
  // until the end or the first error, the reader's (as Next's) or `each`'s. The
  // Row is the reader's scratch: `each` may take its contents. The default calls
  // Next(); a reader that reads faster by being pushed to overrides it.
  virtual absl::Status ReadAll(const std::function<absl::Status(Row&)>& each) {
    Row row;
    while (true) {
      absl::StatusOr<bool> got = Next(&row);
      if (!got.ok()) return got.status();
      if (!*got) return absl::OkStatus();
      absl::Status s = each(row);
      if (!s.ok()) return s;
    }
  }

  // What this reader reads, for messages ("statement.csv", "the ledger").
  virtual std::string_view name() const = 0;
};

}  // namespace idem::recon
