#include "recon/fields.h"

#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "core/absl_compat.h"
#include "core/utf8.h"
#include "idem/key.h"
#include "recon/decimal.h"
#include "recon/recon_time.h"

namespace idem::recon {
namespace {

std::string Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return std::string(s);
}

}  // namespace

absl::StatusOr<ColumnMap> ParseColumnMap(std::string_view text) {
  ColumnMap map;
  for (absl::string_view part : absl::StrSplit(AV(text), ',', absl::SkipWhitespace())) {
    const size_t eq = part.find('=');
    if (eq == absl::string_view::npos) {
      return absl::InvalidArgumentError("--map: '" + std::string(part) + "' is not FIELD=COLUMN");
    }
    const std::string field = Trim(SV(part.substr(0, eq)));
    const std::string column = Trim(SV(part.substr(eq + 1)));
    int index = -1;
    for (int i = 0; i < kFieldCount; ++i) {
      if (kFieldNames[i] == field) index = i;
    }
    if (index < 0) {
      return absl::InvalidArgumentError("--map: unknown field '" + field +
                                        "' (fields: key, amount, currency, status, time)");
    }
    if (column.empty()) return absl::InvalidArgumentError("--map: no column for " + field);
    if (map.columns[index].has_value()) {
      return absl::InvalidArgumentError("--map: " + field + " is mapped twice");
    }
    map.columns[index] = column;
  }
  if (!map.has(Field::kKey)) {
    return absl::InvalidArgumentError("--map needs key=COLUMN (the idempotency key's column)");
  }
  return map;
}

absl::StatusOr<StatusRules> ParseStatusRules(std::string_view status_map,
                                             std::string_view intermediate) {
  StatusRules rules;
  for (absl::string_view part : absl::StrSplit(AV(status_map), ',', absl::SkipWhitespace())) {
    const size_t eq = part.find('=');
    const std::string from = eq == absl::string_view::npos ? "" : Trim(SV(part.substr(0, eq)));
    const std::string to = eq == absl::string_view::npos ? "" : Trim(SV(part.substr(eq + 1)));
    if (from.empty() || to.empty()) {
      return absl::InvalidArgumentError("--status-map: '" + std::string(part) +
                                        "' is not UPSTREAM=LOCAL");
    }
    if (!rules.map.emplace(from, to).second) {
      return absl::InvalidArgumentError("--status-map: " + from + " is mapped twice");
    }
  }
  for (absl::string_view part : absl::StrSplit(AV(intermediate), ',', absl::SkipWhitespace())) {
    rules.intermediate.insert(Trim(SV(part)));
  }
  return rules;
}

Normalizer::Normalizer(Side side, const ColumnMap& compared, int scale, absl::TimeZone tz,
                       const StatusRules& rules)
    : side_(side), compared_(compared), scale_(scale), tz_(tz), rules_(rules) {
  for (const auto& [from, to] : rules_.map) local_known_.insert(to);
  for (const std::string& s : rules_.intermediate) local_known_.insert(s);
}

absl::Status Normalizer::Normalize(const std::array<std::string_view, kFieldCount>& raw,
                                   Row* row) const {
  for (int i = 0; i < kFieldCount; ++i) {
    if (compared_.columns[i].has_value() && !IsUtf8(raw[i])) {
      return absl::InvalidArgumentError("invalid UTF-8 in " + std::string(kFieldNames[i]));
    }
  }
  // The key is sent as an Idempotency-Key header by a replay and shown in tickets,
  // reports and messages: it is refused here, where it enters, not cut down (a key
  // "K-1\r\n…" cut at the CR would be another row's key).
  if (absl::Status s = ValidateHeaderKey(raw[0]); !s.ok()) return s;
  row->key.assign(raw[0]);
  if (compares(Field::kAmount)) {
    absl::StatusOr<std::string> amount = ParseDecimal(raw[1], scale_);
    if (!amount.ok()) return amount.status();
    row->amount = *std::move(amount);
  } else {
    row->amount.clear();
  }
  row->currency = compares(Field::kCurrency) ? Trim(raw[2]) : std::string();
  if (compares(Field::kStatus)) {
    row->status = Trim(raw[3]);
    if (!rules_.map.empty()) {
      const bool known = side_ == Side::kUpstream ? rules_.map.contains(row->status)
                                                  : local_known_.contains(row->status);
      if (!known) {
        return absl::InvalidArgumentError(
            "unknown status '" + EscapeControl(row->status, 60) + "' (" +
            (side_ == Side::kUpstream ? "not a key of --status-map"
                                      : "neither a value of --status-map nor --intermediate") +
            ")");
      }
    }
  } else {
    row->status.clear();
  }
  if (compares(Field::kTime)) {
    absl::StatusOr<int64_t> t = ParseTimeUs(raw[4], tz_);
    if (!t.ok()) return t.status();
    row->time_us = *t;
    row->has_time = true;
  } else {
    row->time_us = 0;
    row->has_time = false;
  }
  return absl::OkStatus();
}

}  // namespace idem::recon
