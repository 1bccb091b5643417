// Times of statement and ledger rows: RFC 3339 ("2024-06-18T10:00:00Z",
// "2024-06-18T18:00:00.25+08:00") or "YYYY-MM-DD HH:MM:SS[.ffffff]" without an
// offset, read in a given zone (--tz). PostgreSQL's text form of timestamptz
// ("2024-06-18 02:00:00+00") is RFC 3339 with a space and an hour-only offset and is
// accepted too.
//
// Thread safety: pure functions; a TimeZone is immutable.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace idem::recon {

// "UTC", an IANA name ("Asia/Shanghai", from the system's tzdata) or a fixed offset
// ("+08:00", "-0530"). kInvalidArgument for anything else.
absl::StatusOr<absl::TimeZone> ParseTimeZone(std::string_view name);

// `text` as microseconds since the Unix epoch; a time without an offset is civil
// time in `tz` (in a DST overlap, the earlier instant). kInvalidArgument naming the
// text for anything else.
absl::StatusOr<int64_t> ParseTimeUs(std::string_view text, const absl::TimeZone& tz);

// `us` as RFC 3339 in UTC: "2024-06-18T10:00:00Z", with ".ffffff" only when not whole
// seconds.
std::string FormatTimeUs(int64_t us);

// "5m", "90s", "1h30m", "2d" (days are 24 h) as a positive duration; "0s" when
// allow_zero. kInvalidArgument otherwise.
absl::StatusOr<absl::Duration> ParseDurationFlag(std::string_view text, bool allow_zero);

}  // namespace idem::recon
