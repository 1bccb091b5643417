#include "recon/recon_time.h"

#include <cstdint>
#include <string>

#include "absl/time/civil_time.h"
#include "core/absl_compat.h"
#include "idem/key.h"

namespace idem::recon {
namespace {

// Reads exactly `n` digits at `*p` into `*out`.
bool Digits(std::string_view s, size_t* p, size_t n, int* out) {
  if (*p + n > s.size()) return false;
  int v = 0;
  for (size_t i = 0; i < n; ++i) {
    const char c = s[*p + i];
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *p += n;
  *out = v;
  return true;
}

// "+08:00", "+0800", "+08", "Z" at the end of a time; seconds east of UTC.
bool Offset(std::string_view s, size_t* p, int* seconds) {
  if (*p < s.size() && (s[*p] == 'Z' || s[*p] == 'z')) {
    ++*p;
    *seconds = 0;
    return true;
  }
  if (*p >= s.size() || (s[*p] != '+' && s[*p] != '-')) return false;
  const int sign = s[*p] == '-' ? -1 : 1;
  ++*p;
  int h = 0, m = 0;
  if (!Digits(s, p, 2, &h)) return false;
  if (*p < s.size() && s[*p] == ':') ++*p;
  if (*p < s.size() && !Digits(s, p, 2, &m)) return false;
  if (h > 23 || m > 59) return false;
  *seconds = sign * (h * 3600 + m * 60);
  return true;
}

}  // namespace

absl::StatusOr<absl::TimeZone> ParseTimeZone(std::string_view name) {
  if (name == "UTC" || name == "Z") return absl::UTCTimeZone();
  if (!name.empty() && (name[0] == '+' || name[0] == '-')) {
    size_t p = 0;
    int seconds = 0;
    if (Offset(name, &p, &seconds) && p == name.size()) return absl::FixedTimeZone(seconds);
  } else {
    absl::TimeZone tz;
    if (absl::LoadTimeZone(std::string(name), &tz)) return tz;
  }
  return absl::InvalidArgumentError("unknown time zone '" + std::string(name) +
                                    "' (use UTC, an IANA name like Asia/Shanghai or an offset "
                                    "like +08:00)");
}

absl::StatusOr<int64_t> ParseTimeUs(std::string_view text, const absl::TimeZone& tz) {
  std::string_view s = text;
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  auto bad = [&] {
    return absl::InvalidArgumentError(
        "malformed time '" + EscapeControl(text, 40) +
        "' (RFC 3339 like 2024-06-18T10:00:00Z or YYYY-MM-DD HH:MM:SS is expected)");
  };
  size_t p = 0;
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, se = 0;
  if (!Digits(s, &p, 4, &y) || p >= s.size() || s[p++] != '-' || !Digits(s, &p, 2, &mo) ||
      p >= s.size() || s[p++] != '-' || !Digits(s, &p, 2, &d)) {
    return bad();
  }
  if (p >= s.size() || (s[p] != 'T' && s[p] != 't' && s[p] != ' ')) return bad();
  ++p;
  if (!Digits(s, &p, 2, &h) || p >= s.size() || s[p++] != ':' || !Digits(s, &p, 2, &mi) ||
      p >= s.size() || s[p++] != ':' || !Digits(s, &p, 2, &se)) {
    return bad();
  }
  int64_t micros = 0;
  if (p < s.size() && s[p] == '.') {
    ++p;
    int n = 0;
    while (p < s.size() && s[p] >= '0' && s[p] <= '9') {
      if (n < 6) micros = micros * 10 + (s[p] - '0');
      ++n;
      ++p;
    }
    if (n == 0) return bad();
    for (int i = n; i < 6; ++i) micros *= 10;
  }
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || se > 60) return bad();
  const absl::CivilSecond civil(y, mo, d, h, mi, se == 60 ? 59 : se);
  if (civil.year() != y || civil.month() != mo || civil.day() != d) return bad();  // Feb 30
  absl::Time t;
  if (p == s.size()) {
    t = absl::FromCivil(civil, tz);
  } else {
    int offset = 0;
    if (!Offset(s, &p, &offset) || p != s.size()) return bad();
    t = absl::FromCivil(civil, absl::FixedTimeZone(offset));
  }
  return absl::ToUnixMicros(t) + micros;
}

std::string FormatTimeUs(int64_t us) {
  const absl::Time t = absl::FromUnixMicros(us);
  const char* format = us % 1000000 == 0 ? "%Y-%m-%dT%H:%M:%SZ" : "%Y-%m-%dT%H:%M:%E6SZ";
  return std::string(SV(absl::FormatTime(format, t, absl::UTCTimeZone())));
}

absl::StatusOr<absl::Duration> ParseDurationFlag(std::string_view text, bool allow_zero) {
  // absl::ParseDuration knows h/m/s but not days; "2d" and "1d12h" are common here.
  std::string s(text);
  absl::Duration days = absl::ZeroDuration();
  const size_t dpos = s.find('d');
  if (dpos != std::string::npos) {
    int n = 0;
    const std::string head = s.substr(0, dpos);
    for (char c : head) {
      if (c < '0' || c > '9' || n > 100000)
        return absl::InvalidArgumentError("malformed duration '" + s + "'");
      n = n * 10 + (c - '0');
    }
    if (head.empty()) return absl::InvalidArgumentError("malformed duration '" + s + "'");
    days = absl::Hours(24) * n;
    s = s.substr(dpos + 1);
  }
  absl::Duration rest = absl::ZeroDuration();
  if (!s.empty() && !absl::ParseDuration(s, &rest)) {
    return absl::InvalidArgumentError("malformed duration '" + std::string(text) +
                                      "' (like 5m, 90s, 1h30m, 2d)");
  }
  const absl::Duration d = days + rest;
  if (d < absl::ZeroDuration() || (d == absl::ZeroDuration() && !allow_zero)) {
    return absl::InvalidArgumentError("duration '" + std::string(text) + "' must be positive");
  }
  return d;
}

}  // namespace idem::recon
