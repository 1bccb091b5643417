#include "cli/diagnose_rebalance.h"

#include <algorithm>
#include <cctype>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/absl_compat.h"

namespace idem::diagnose {
namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// Reads exactly `n` digits at text[*pos]; false when there are fewer.
bool Digits(std::string_view text, size_t* pos, int n, int* out) {
  int v = 0;
  for (int i = 0; i < n; ++i) {
    if (*pos >= text.size() || !IsDigit(text[*pos])) return false;
    v = v * 10 + (text[*pos] - '0');
    ++*pos;
  }
  *out = v;
  return true;
}

bool Expect(std::string_view text, size_t* pos, char c) {
  if (*pos >= text.size() || text[*pos] != c) return false;
  ++*pos;
  return true;
}

bool IsLeap(int y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

int DaysIn(int y, int m) {
  static constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return m == 2 && IsLeap(y) ? 29 : kDays[m - 1];
}

absl::Status Bad(std::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat(AV(why),
                   " (want an RFC 3339 timestamp such as 2024-06-18T10:00:05Z or "
                   "2024-06-18T18:00:05.250+08:00)"));
}

// The first field of `line`, at most 40 bytes, with control bytes shown as '?', to
// quote in an error without letting a byte of the file garble the message.
std::string Excerpt(std::string_view line) {
  size_t end = 0;
  while (end < line.size() && line[end] != ' ' && line[end] != '\t') ++end;
  std::string out(line.substr(0, std::min<size_t>(end, 40)));
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  if (end > 40) out += "...";
  return out;
}

// A character that may follow an event's timestamp: anything that cannot be read
// as its continuation (more digits, a longer offset, a unit).
bool EndsTimestamp(char c) {
  return !(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == ':' || c == '+' ||
           c == '-');
}

// Calls `fn(line_number, line)` for every line of `text` that is not blank or a
// '#' comment (a trailing '\r' is dropped); stops at the first error it returns.
template <typename Fn>
absl::Status ForEachLine(std::string_view text, Fn fn) {
  // A UTF-8 byte order mark (editors on Windows write one) is not part of line 1.
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);
  int number = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = text.substr(start, nl - start);
    start = nl + 1;
    ++number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    size_t first = line.find_first_not_of(" \t");
    if (first == std::string_view::npos || line[first] == '#') continue;
    if (absl::Status s = fn(number, line); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status AtLine(std::string_view file, int line, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(AV(file), ":", line, ": ", AV(what)));
}

}  // namespace

absl::StatusOr<absl::Time> ParseRfc3339Prefix(std::string_view text, size_t* length) {
  size_t pos = 0;
  int year, month, day, hour, minute, second;
  if (!Digits(text, &pos, 4, &year) || !Expect(text, &pos, '-') || !Digits(text, &pos, 2, &month) ||
      !Expect(text, &pos, '-') || !Digits(text, &pos, 2, &day)) {
    return Bad("no date YYYY-MM-DD");
  }
  if (month < 1 || month > 12) return Bad(absl::StrCat("month ", month, " is not 1..12"));
  if (day < 1 || day > DaysIn(year, month)) {
    return Bad(absl::StrCat("day ", day, " is not in ", year, "-", month < 10 ? "0" : "", month));
  }
  if (pos >= text.size() || (text[pos] != 'T' && text[pos] != 't' && text[pos] != ' ')) {
    return Bad("no time after the date (YYYY-MM-DDTHH:MM:SS)");
  }
  ++pos;
  if (!Digits(text, &pos, 2, &hour) || !Expect(text, &pos, ':') ||
      !Digits(text, &pos, 2, &minute) || !Expect(text, &pos, ':') ||
      !Digits(text, &pos, 2, &second)) {
    return Bad("no time HH:MM:SS after the date");
  }
  if (hour > 23 || minute > 59 || second > 60) {
    return Bad(absl::StrCat("time ", hour, ":", minute, ":", second, " is out of range"));
  }
  absl::Duration fraction = absl::ZeroDuration();
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    const size_t digits_start = pos;
    int64_t nanos = 0;
    int64_t scale = 100000000;
    while (pos < text.size() && IsDigit(text[pos])) {
      nanos += (text[pos] - '0') * scale;  // digits past nanoseconds are dropped
      scale /= 10;
      ++pos;
    }
    if (pos == digits_start) return Bad("no digits after the '.' of the seconds");
    fraction = absl::Nanoseconds(nanos);
  }
  absl::Duration offset = absl::ZeroDuration();
  if (pos < text.size() && (text[pos] == 'Z' || text[pos] == 'z')) {
    ++pos;
  } else if (pos < text.size() && (text[pos] == '+' || text[pos] == '-')) {
    const bool minus = text[pos] == '-';
    ++pos;
    int oh, om;
    if (!Digits(text, &pos, 2, &oh) || !Expect(text, &pos, ':') || !Digits(text, &pos, 2, &om)) {
      return Bad("the UTC offset is not +HH:MM or -HH:MM");
    }
    if (oh > 23 || om > 59) return Bad("the UTC offset is out of range");
    offset = absl::Hours(oh) + absl::Minutes(om);
    if (minus) offset = -offset;
  } else {
    return Bad("no UTC offset (Z, +HH:MM or -HH:MM) after the time");
  }
  // CivilSecond normalizes a leap second (:60) to the next minute's :00.
  const absl::Time local = absl::FromCivil(
      absl::CivilSecond(year, month, day, hour, minute, second), absl::UTCTimeZone());
  *length = pos;
  return local - offset + fraction;
}

absl::StatusOr<std::vector<Event>> ParseEvents(std::string_view text, std::string_view file) {
  std::vector<Event> events;
  absl::Status s = ForEachLine(text, [&](int number, std::string_view line) -> absl::Status {
    size_t used = 0;
    absl::StatusOr<absl::Time> at = ParseRfc3339Prefix(line, &used);
    if (!at.ok()) {
      return AtLine(file, number,
                    absl::StrCat("'", Excerpt(line),
                                 "' does not start with a timestamp: ", at.status().message()));
    }
    if (used < line.size() && !EndsTimestamp(line[used])) {
      return AtLine(file, number,
                    absl::StrCat("'", Excerpt(line), "': the timestamp does not end at ",
                                 "character ", used + 1, " (follow it with a space)"));
    }
    events.push_back({*at, number});
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  if (events.empty()) {
    return AtLine(file, 1,
                  text.empty() ? "the file is empty: no events"
                               : "no events (only blank lines and comments)");
  }
  return events;
}

absl::StatusOr<std::vector<JitterWindow>> ParseJitterWindows(std::string_view text,
                                                             std::string_view file) {
  std::vector<JitterWindow> windows;
  absl::Status s = ForEachLine(text, [&](int number, std::string_view line) -> absl::Status {
    const size_t first = line.find_first_not_of(" \t");
    std::string_view rest = line.substr(first);
    size_t used = 0;
    absl::StatusOr<absl::Time> start = ParseRfc3339Prefix(rest, &used);
    if (!start.ok()) {
      return AtLine(file, number,
                    absl::StrCat("START '", Excerpt(rest), "': ", start.status().message()));
    }
    rest.remove_prefix(used);
    const size_t gap = rest.find_first_not_of(" \t");
    if (gap == 0 || gap == std::string_view::npos) {
      return AtLine(file, number,
                    gap == 0 ? "START must be followed by a space and END"
                             : "no END: a window is a line 'START END'");
    }
    rest.remove_prefix(gap);
    absl::StatusOr<absl::Time> end = ParseRfc3339Prefix(rest, &used);
    if (!end.ok()) {
      return AtLine(file, number,
                    absl::StrCat("END '", Excerpt(rest), "': ", end.status().message()));
    }
    rest.remove_prefix(used);
    if (rest.find_first_not_of(" \t") != std::string_view::npos) {
      return AtLine(file, number,
                    absl::StrCat("unexpected text after END: '",
                                 Excerpt(rest.substr(rest.find_first_not_of(" \t"))),
                                 "' (a window is a line 'START END')"));
    }
    if (*end < *start) {
      return AtLine(
          file, number,
          absl::StrCat("END is before START (by ", absl::FormatDuration(*start - *end), ")"));
    }
    windows.push_back({*start, *end, number});
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  if (windows.empty()) {
    return AtLine(file, 1,
                  text.empty() ? "the file is empty: no jitter windows"
                               : "no jitter windows (only blank lines and comments)");
  }
  return windows;
}

absl::Duration P99Duration(const std::vector<JitterWindow>& windows) {
  std::vector<absl::Duration> d;
  d.reserve(windows.size());
  for (const JitterWindow& w : windows) d.push_back(w.duration());
  std::sort(d.begin(), d.end());
  // Nearest rank: ceil(0.99 n), 1-based.
  const size_t rank = (99 * d.size() + 99) / 100;
  return d[std::max<size_t>(rank, 1) - 1];
}

TimeoutAdvice SuggestTimeouts(absl::Duration jitter_p99) {
  constexpr int64_t kBrokerMinSessionMs = 6000;
  constexpr int64_t kBrokerMaxSessionMs = 1800000;
  const int64_t p99_ms = absl::ToInt64Milliseconds(absl::Ceil(jitter_p99, absl::Milliseconds(1)));
  // 1.95 × P99 in whole milliseconds (rounded up), then up to a whole second.
  int64_t session = (p99_ms * 195 + 99) / 100;
  session = (session + 999) / 1000 * 1000;
  session = std::max(session, kBrokerMinSessionMs);
  TimeoutAdvice a;
  a.session_timeout_ms = session;
  a.heartbeat_interval_ms = session / 3;
  a.above_broker_max = session > kBrokerMaxSessionMs;
  return a;
}

RebalanceDiagnosis DiagnoseRebalances(const std::vector<Event>& events,
                                      const std::vector<JitterWindow>& windows,
                                      const DiagnoseOptions& options) {
  // Merge the windows (widened by the slack) into disjoint, sorted intervals, so
  // each event is one binary search.
  std::vector<std::pair<absl::Time, absl::Time>> spans;
  spans.reserve(windows.size());
  for (const JitterWindow& w : windows) spans.emplace_back(w.start, w.end + options.slack);
  std::sort(spans.begin(), spans.end());
  std::vector<std::pair<absl::Time, absl::Time>> merged;
  for (const auto& span : spans) {
    if (!merged.empty() && span.first <= merged.back().second) {
      merged.back().second = std::max(merged.back().second, span.second);
    } else {
      merged.push_back(span);
    }
  }
  RebalanceDiagnosis d;
  d.events = events.size();
  d.windows = windows.size();
  for (const Event& e : events) {
    // The last span starting at or before the event.
    auto it = std::upper_bound(merged.begin(), merged.end(), e.at,
                               [](absl::Time t, const auto& span) { return t < span.first; });
    if (it != merged.begin() && e.at <= std::prev(it)->second) {
      ++d.inside;
    } else {
      d.outside_lines.push_back(e.line);
    }
  }
  d.share = d.events == 0 ? 0 : static_cast<double>(d.inside) / static_cast<double>(d.events);
  d.p99 = P99Duration(windows);
  for (const JitterWindow& w : windows) d.longest = std::max(d.longest, w.duration());
  d.jitter_explains = d.inside * 100 >= static_cast<size_t>(options.threshold_percent) * d.events;
  d.advice = SuggestTimeouts(d.p99);
  return d;
}

}  // namespace idem::diagnose
