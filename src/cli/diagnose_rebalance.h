// What `idem diagnose rebalance` computes: are a
// consumer group's rebalances caused by network jitter? Network jitter delays
// heartbeats, the coordinator kicks the consumer, the group rebalances and the
// messages in flight are delivered again. Lining up the rebalance times with the
// jitter windows tells whether that chain is at work (by default, when 80 % or more
// of the rebalances fall inside a jitter window it is), and the windows' P99
// duration gives consumer timeouts that ride such jitter out.
//
//   auto events = ParseEvents(text_of_events_file, "events.log");
//   auto windows = ParseJitterWindows(text_of_jitter_file, "jitter.txt");
//   RebalanceDiagnosis d = DiagnoseRebalances(*events, *windows, {});
//
// Inputs are text: an events file has one event per line, each starting with an
// RFC 3339 timestamp (the runner's rebalance log, or consumer log lines grepped for
// "rebalance"); a jitter file has one window per line, `START END`, both RFC 3339.
// In both, blank lines and lines starting with '#' are skipped, and so is a UTF-8
// byte order mark at the start.
//
// Thread safety: every function here is pure and safe to call concurrently.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace idem::diagnose {

// Parses the RFC 3339 date-time at the start of `text`:
// YYYY-MM-DD(T|t| )HH:MM:SS[.fraction](Z|z|+HH:MM|-HH:MM), e.g.
// "2024-06-18T10:00:05.250+08:00" (a leap second :60 counts as the next second).
// Sets `*length` to the number of characters it used. kInvalidArgument saying what
// is wrong (a missing offset, a month 13, ...) when `text` does not start with one.
absl::StatusOr<absl::Time> ParseRfc3339Prefix(std::string_view text, size_t* length);

struct Event {
  absl::Time at;
  int line = 0;  // 1-based line in its file
};

struct JitterWindow {
  absl::Time start;
  absl::Time end;  // >= start
  int line = 0;
  absl::Duration duration() const { return end - start; }
};

// The events of an events file's `text`; `file` names it in errors. Each line that
// is not blank or a '#' comment must start with an RFC 3339 timestamp, followed by
// the end of the line or a character that cannot continue it (a space, a tab,
// ',', ';', '|', ']', ...); the rest of the line is free text.
// kInvalidArgument "FILE:LINE: ..." for a line that does not, and "FILE:1: ..."
// when the file holds no event at all (empty, or only blank lines and comments).
absl::StatusOr<std::vector<Event>> ParseEvents(std::string_view text, std::string_view file);

// The windows of a jitter file's `text`: each line that is not blank or a '#'
// comment is `START END`, two RFC 3339 timestamps separated by spaces or tabs.
// kInvalidArgument "FILE:LINE: ..." for an unparseable timestamp, a missing END,
// anything after END, or END before START; "FILE:1: ..." for a file without windows.
absl::StatusOr<std::vector<JitterWindow>> ParseJitterWindows(std::string_view text,
                                                             std::string_view file);

// The nearest-rank 99th percentile of the windows' durations: the smallest
// duration that at least 99 % of the windows do not exceed (with fewer than 100
// windows, the longest). REQUIRES: `windows` is not empty.
absl::Duration P99Duration(const std::vector<JitterWindow>& windows);

// Consumer timeouts that survive a jitter of `jitter_p99`. The rule: the
// coordinator kicks a consumer it has not heard a heartbeat from for
// session.timeout.ms; a jitter of duration D can silence it for D plus up to one
// heartbeat.interval.ms, so surviving D needs session > D + heartbeat. With
// heartbeat = session / 3 (Kafka's guidance) that is session > 1.5 × D, and with
// 30 % headroom for spikes session = 1.95 × D, rounded up to a whole
// second and at least 6000 ms (the brokers' default group.min.session.timeout.ms);
// heartbeat = session / 3. A P99 of 15 s gives session 30000 ms, heartbeat 10000 ms.
struct TimeoutAdvice {
  int64_t session_timeout_ms = 0;
  int64_t heartbeat_interval_ms = 0;
  // Above the brokers' default group.max.session.timeout.ms (1800000): the brokers
  // refuse it unless that setting is raised.
  bool above_broker_max = false;
};
TimeoutAdvice SuggestTimeouts(absl::Duration jitter_p99);

// The rule of SuggestTimeouts, in prose for --help and the report.
inline constexpr std::string_view kTimeoutRule =
    "session.timeout.ms = 1.95 x the jitter windows' P99 duration, rounded up to a whole second "
    "and at least 6000 (survive a jitter of P99 plus one missed heartbeat with heartbeat = "
    "session/3, plus 30% headroom); heartbeat.interval.ms = session.timeout.ms / 3";

struct DiagnoseOptions {
  // An event this long after a window's end still counts as inside it: the
  // coordinator declares the consumer dead only session.timeout.ms after the last
  // heartbeat it heard, so a kick caused by a jitter may be logged after the jitter.
  absl::Duration slack = absl::ZeroDuration();
  // The share, in percent (0..100), at or above which jitter explains the rebalances.
  int threshold_percent = 80;
};

struct RebalanceDiagnosis {
  size_t events = 0;
  size_t inside = 0;               // events with start <= at <= end + slack for some window
  double share = 0;                // inside / events
  std::vector<int> outside_lines;  // lines of the events outside every window, in order
  size_t windows = 0;
  absl::Duration p99;
  absl::Duration longest;
  bool jitter_explains = false;  // inside >= threshold_percent % of events
  TimeoutAdvice advice;          // SuggestTimeouts(p99)
};

// Lines the events up with the windows (which may overlap and come in any order).
// REQUIRES: `events` and `windows` are not empty (ParseEvents and
// ParseJitterWindows never return empty lists).
RebalanceDiagnosis DiagnoseRebalances(const std::vector<Event>& events,
                                      const std::vector<JitterWindow>& windows,
                                      const DiagnoseOptions& options);

}  // namespace idem::diagnose
