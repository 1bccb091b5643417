// What is compared, and how a side's raw text fields become a Row (recon/row.h).
//
//   --map key=out_trade_no,amount=total_fee,currency=fee_type,status=trade_state,time=trade_time
//
// names the statement's columns (CSV header names, JSONL member names) for the
// five fields; only `key` is required, and a field left out is compared on neither
// side. The ledger query names its columns after the fields themselves (… AS key,
// … AS amount, …).
//
// Thread safety: immutable after construction; Normalize is const.
#pragma once

#include <array>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "recon/row.h"

namespace idem::recon {

enum class Field : uint8_t { kKey = 0, kAmount, kCurrency, kStatus, kTime };
inline constexpr int kFieldCount = 5;
inline constexpr std::array<std::string_view, kFieldCount> kFieldNames = {
    "key", "amount", "currency", "status", "time"};

// The statement's column for each field; std::nullopt: not compared.
struct ColumnMap {
  std::array<std::optional<std::string>, kFieldCount> columns;
  bool has(Field f) const { return columns[static_cast<int>(f)].has_value(); }
  const std::string& column(Field f) const { return *columns[static_cast<int>(f)]; }
};

// "key=out_trade_no,amount=total_fee,…". kInvalidArgument for an unknown field, a
// field twice, an empty column name or no key.
absl::StatusOr<ColumnMap> ParseColumnMap(std::string_view text);

// --status-map SUCCESS=PAID,REFUND=REFUNDED and --intermediate PENDING,PROCESSING.
// With a map, every upstream status must be one of its keys and every local status
// one of its values or an intermediate one (else the row is bad input: an unknown
// status). Without one, statuses are compared as they are.
struct StatusRules {
  std::map<std::string, std::string, std::less<>> map;  // upstream → the local equivalent
  std::set<std::string, std::less<>> intermediate;      // local states stuck in between
};

// Parses the two flags. kInvalidArgument for a malformed list.
absl::StatusOr<StatusRules> ParseStatusRules(std::string_view status_map,
                                             std::string_view intermediate);

// Turns one side's raw fields into a Row: checks UTF-8 and the key (ValidateHeaderKey:
// at most 255 bytes, no control character, no space at either end, since a
// replay sends it as a header), makes the amount canonical at `scale`, parses the
// time in `tz`, checks the status against `rules`.
class Normalizer {
 public:
  // `rules` must outlive the Normalizer.
  Normalizer(Side side, const ColumnMap& compared, int scale, absl::TimeZone tz,
             const StatusRules& rules);

  // `raw[f]` is the text of field f (ignored for fields not compared). Fills `*row`
  // (key, amount, currency, status, time; not source and line). Errors:
  // kInvalidArgument with a message that does not name the place (the reader adds it).
  absl::Status Normalize(const std::array<std::string_view, kFieldCount>& raw, Row* row) const;

  bool compares(Field f) const { return compared_.has(f); }

 private:
  const Side side_;
  const ColumnMap compared_;
  const int scale_;
  const absl::TimeZone tz_;
  const StatusRules& rules_;
  std::set<std::string, std::less<>> local_known_;  // the map's values and intermediates
};

}  // namespace idem::recon
