// Fuzzes the input readers of `idem diagnose rebalance` (src/cli/diagnose_rebalance.h): the
// events file, the jitter file and the RFC 3339 timestamps in both, then the
// diagnosis over what they parsed.
//
// Input: the events file's text, a line "%%", the jitter file's text (no "%%":
// both files are the whole input). Properties: errors are kInvalidArgument
// "FILE:LINE: ..." with the file's name; parsed lines are 1-based, increasing and
// within the file; a window never ends before it starts; a timestamp parsed by
// ParseRfc3339Prefix, formatted back (RFC 3339, UTC) parses to the same time
// using all of it; the diagnosis counts at most its events, its share is in
// [0, 1] and its outside lines are lines of events.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "cli/diagnose_rebalance.h"
#include "core/absl_compat.h"
#include "fuzz/fuzz_check.h"

namespace idem::fuzz {
namespace {

int Lines(std::string_view text) {
  int n = 1;
  for (char c : text) n += c == '\n';
  return n;
}

void CheckError(const absl::Status& s, std::string_view file) {
  CheckBadInput(s, file);
  Check(absl::StartsWith(s.message(), std::string(file) + ":"), "an error starts with FILE:",
        idem::SV(s.message()));
}

void CheckTimestamps(std::string_view text) {
  size_t length = 0;
  absl::StatusOr<absl::Time> t = diagnose::ParseRfc3339Prefix(text, &length);
  if (!t.ok()) {
    CheckBadInput(t.status(), "ParseRfc3339Prefix");
    return;
  }
  Check(length > 0 && length <= text.size(), "a timestamp's length is within the text");
  const std::string back = absl::FormatTime("%4Y-%m-%dT%H:%M:%E*SZ", *t, absl::UTCTimeZone());
  size_t back_length = 0;
  absl::StatusOr<absl::Time> again = diagnose::ParseRfc3339Prefix(back, &back_length);
  // Years outside 0000..9999 (an offset past midnight of 0000-01-01) have no
  // RFC 3339 form; everything else must round-trip.
  const absl::CivilYear year = absl::ToCivilYear(*t, absl::UTCTimeZone());
  if (year.year() < 0 || year.year() > 9999) return;
  Check(again.ok(), "a formatted timestamp parses", back);
  Check(*again == *t && back_length == back.size(), "a timestamp round-trips", back);
}

}  // namespace
}  // namespace idem::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using idem::fuzz::Check;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t split = input.find("\n%%\n");
  const std::string_view events_text = input.substr(0, split);
  const std::string_view jitter_text =
      split == std::string_view::npos ? std::string_view() : input.substr(split + 4);
  idem::fuzz::CheckTimestamps(events_text);
  idem::fuzz::CheckTimestamps(jitter_text);

  absl::StatusOr<std::vector<idem::diagnose::Event>> events =
      idem::diagnose::ParseEvents(events_text, "events.log");
  if (!events.ok()) {
    idem::fuzz::CheckError(events.status(), "events.log");
  } else {
    Check(!events->empty(), "ParseEvents never returns an empty list");
    int last = 0;
    for (const auto& e : *events) {
      Check(e.line > last && e.line <= idem::fuzz::Lines(events_text), "event lines increase");
      last = e.line;
    }
  }
  absl::StatusOr<std::vector<idem::diagnose::JitterWindow>> windows =
      idem::diagnose::ParseJitterWindows(jitter_text, "jitter.txt");
  if (!windows.ok()) {
    idem::fuzz::CheckError(windows.status(), "jitter.txt");
  } else {
    Check(!windows->empty(), "ParseJitterWindows never returns an empty list");
    int last = 0;
    for (const auto& w : *windows) {
      Check(w.end >= w.start, "a window ends at or after its start");
      Check(w.line > last && w.line <= idem::fuzz::Lines(jitter_text), "window lines increase");
      last = w.line;
    }
    const absl::Duration p99 = idem::diagnose::P99Duration(*windows);
    Check(p99 >= absl::ZeroDuration(), "the P99 is not negative");
    const idem::diagnose::TimeoutAdvice advice = idem::diagnose::SuggestTimeouts(p99);
    Check(advice.session_timeout_ms >= 6000 &&
              advice.heartbeat_interval_ms * 3 <= advice.session_timeout_ms,
          "the advice is at least 6000 ms with heartbeat = session / 3");
  }
  if (!events.ok() || !windows.ok()) return 0;
  const idem::diagnose::RebalanceDiagnosis d =
      idem::diagnose::DiagnoseRebalances(*events, *windows, {.slack = absl::Seconds(data[0] % 8)});
  Check(d.events == events->size() && d.inside <= d.events, "inside <= events");
  Check(d.share >= 0 && d.share <= 1, "the share is in [0, 1]");
  Check(d.outside_lines.size() == d.events - d.inside, "outside lines are the events not inside");
  Check(d.windows == windows->size() && d.longest >= d.p99, "the longest window >= the P99");
  return 0;
}
