// The parser, the aligner and the timeout rule of `idem diagnose rebalance`, with
// answers worked out by hand.
#include "cli/diagnose_rebalance.h"

#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace idem::diagnose {
namespace {

using ::idem::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

absl::Time Utc(int y, int mo, int d, int h, int mi, int s) {
  return absl::FromCivil(absl::CivilSecond(y, mo, d, h, mi, s), absl::UTCTimeZone());
}

absl::StatusOr<absl::Time> Parse(std::string_view text, size_t* used = nullptr) {
  size_t n = 0;
  absl::StatusOr<absl::Time> t = ParseRfc3339Prefix(text, &n);
  if (used != nullptr) *used = n;
  return t;
}

std::string Message(const absl::Status& s) { return std::string(s.message()); }

TEST(Rfc3339Test, ReadsUtcOffsetsFractionsAndSeparators) {
  size_t used = 0;
  ASSERT_OK_AND_ASSIGN(absl::Time t, Parse("2024-06-18T10:00:05Z rebalance", &used));
  EXPECT_EQ(t, Utc(2024, 6, 18, 10, 0, 5));
  EXPECT_EQ(used, 20u);
  // +08:00 is eight hours ahead of UTC: 18:00 there is 10:00 UTC.
  ASSERT_OK_AND_ASSIGN(t, Parse("2024-06-18T18:00:05.250+08:00", &used));
  EXPECT_EQ(t, Utc(2024, 6, 18, 10, 0, 5) + absl::Milliseconds(250));
  EXPECT_EQ(used, 29u);
  ASSERT_OK_AND_ASSIGN(t, Parse("2024-06-18 04:30:05-05:30"));
  EXPECT_EQ(t, Utc(2024, 6, 18, 10, 0, 5));
  ASSERT_OK_AND_ASSIGN(t, Parse("2024-06-18t10:00:05.123456789z"));
  EXPECT_EQ(t, Utc(2024, 6, 18, 10, 0, 5) + absl::Nanoseconds(123456789));
  // A leap second is the next minute's first second; Feb 29 of a leap year is a day.
  ASSERT_OK_AND_ASSIGN(t, Parse("2016-12-31T23:59:60Z"));
  EXPECT_EQ(t, Utc(2017, 1, 1, 0, 0, 0));
  ASSERT_OK_AND_ASSIGN(t, Parse("2024-02-29T00:00:00Z"));
  EXPECT_EQ(t, Utc(2024, 2, 29, 0, 0, 0));
}

TEST(Rfc3339Test, SaysWhatIsWrong) {
  EXPECT_THAT(Parse("2024-06-18T10:00:05").status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Message(Parse("2024-06-18T10:00:05").status()), HasSubstr("no UTC offset"));
  EXPECT_THAT(Message(Parse("2024-13-18T10:00:05Z").status()), HasSubstr("month 13"));
  EXPECT_THAT(Message(Parse("2023-02-29T10:00:05Z").status()), HasSubstr("day 29"));
  EXPECT_THAT(Message(Parse("2024-06-18T24:00:05Z").status()), HasSubstr("out of range"));
  EXPECT_THAT(Message(Parse("2024-06-18").status()), HasSubstr("no time"));
  EXPECT_THAT(Message(Parse("2024-06-18T10:00Z").status()), HasSubstr("HH:MM:SS"));
  EXPECT_THAT(Message(Parse("2024-06-18T10:00:05.Z").status()), HasSubstr("no digits"));
  EXPECT_THAT(Message(Parse("2024-06-18T10:00:05+0800").status()), HasSubstr("+HH:MM"));
  EXPECT_THAT(Message(Parse("Jun 18 10:00:05").status()), HasSubstr("no date"));
  EXPECT_THAT(Message(Parse("").status()), HasSubstr("no date"));
}

// What absl formats as RFC 3339, in any offset and with any fraction, reads back
// as the same instant (a fixed seed: the same cases every run).
TEST(Rfc3339Test, ReadsBackWhatAbslFormats) {
  std::mt19937_64 rng(12);
  for (int i = 0; i < 2000; ++i) {
    const absl::Time t =
        absl::FromUnixNanos(static_cast<int64_t>(rng() % 4102444800000000000ull));  // < 2100
    const absl::TimeZone zone = absl::FixedTimeZone(static_cast<int>(rng() % 1681) * 60 - 50400);
    const std::string text = absl::FormatTime(absl::RFC3339_full, t, zone);
    size_t used = 0;
    absl::StatusOr<absl::Time> back = Parse(text, &used);
    ASSERT_TRUE(back.ok()) << text << ": " << back.status();
    EXPECT_EQ(*back, t) << text;
    EXPECT_EQ(used, text.size()) << text;
  }
}

TEST(ParseEventsTest, OneEventPerLineSkippingBlanksAndComments) {
  ASSERT_OK_AND_ASSIGN(std::vector<Event> events,
                       ParseEvents("# consumer log, grepped\n"
                                   "2024-06-18T10:00:05Z [rebalance] revoked orders[0]\r\n"
                                   "\n"
                                   "   \n"
                                   "2024-06-18T10:00:07.5Z,assigned\n"
                                   "2024-06-18T10:00:09Z",
                                   "events.log"));
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].at, Utc(2024, 6, 18, 10, 0, 5));
  EXPECT_EQ(events[0].line, 2);
  EXPECT_EQ(events[1].at, Utc(2024, 6, 18, 10, 0, 7) + absl::Milliseconds(500));
  EXPECT_EQ(events[1].line, 5);
  EXPECT_EQ(events[2].line, 6);
  // A byte order mark before line 1 is not part of it.
  ASSERT_OK_AND_ASSIGN(events, ParseEvents("\xEF\xBB\xBF"
                                           "2024-06-18T10:00:05Z x\n",
                                           "bom.log"));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].line, 1);
}

TEST(ParseEventsTest, BadLinesAndEmptyFilesNameFileAndLine) {
  absl::Status s =
      ParseEvents("2024-06-18T10:00:05Z ok\nJun 18 10:00:06 kicked\n", "ev.log").status();
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Message(s), HasSubstr("ev.log:2: 'Jun' does not start with a timestamp"));
  s = ParseEvents("2024-06-18T10:00:05Zrebalance\n", "ev.log").status();
  EXPECT_THAT(Message(s), HasSubstr("ev.log:1:"));
  EXPECT_THAT(Message(s), HasSubstr("does not end at character 21"));
  s = ParseEvents("", "ev.log").status();
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(Message(s), "ev.log:1: the file is empty: no events");
  EXPECT_EQ(Message(ParseEvents("# nothing\n\n", "ev.log").status()),
            "ev.log:1: no events (only blank lines and comments)");
  // A control byte of the file does not reach the message.
  s = ParseEvents("\x1b[2J 10:00\n", "ev.log").status();
  EXPECT_THAT(Message(s), HasSubstr("'?[2J'"));
}

TEST(ParseJitterWindowsTest, StartEndPairs) {
  ASSERT_OK_AND_ASSIGN(std::vector<JitterWindow> w,
                       ParseJitterWindows("# from the network team's dashboard\n"
                                          "2024-06-18T10:00:00Z 2024-06-18T10:00:15Z\n"
                                          "\t2024-06-18T18:10:00+08:00\t2024-06-18T10:10:00.5Z  \n",
                                          "jitter.txt"));
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0].duration(), absl::Seconds(15));
  EXPECT_EQ(w[0].line, 2);
  EXPECT_EQ(w[1].start, Utc(2024, 6, 18, 10, 10, 0));
  EXPECT_EQ(w[1].duration(), absl::Milliseconds(500));
  EXPECT_EQ(w[1].line, 3);
}

TEST(ParseJitterWindowsTest, BadWindowsNameFileAndLine) {
  auto message = [](std::string_view text) {
    return Message(ParseJitterWindows(text, "j.txt").status());
  };
  EXPECT_THAT(message("2024-06-18T10:00:15Z 2024-06-18T10:00:00Z\n"),
              HasSubstr("j.txt:1: END is before START (by 15s)"));
  EXPECT_THAT(message("2024-06-18T10:00:00Z 2024-06-18T10:00:01Z\n2024-06-18T10:00:00Z\n"),
              HasSubstr("j.txt:2: no END"));
  EXPECT_THAT(message("2024-06-18T10:00:00Z 2024-06-18T10:00:01Z 3s\n"),
              HasSubstr("j.txt:1: unexpected text after END: '3s'"));
  EXPECT_THAT(message("2024-06-18T10:00:00Z 10:00:01\n"), HasSubstr("j.txt:1: END '10:00:01'"));
  EXPECT_THAT(message("yesterday 2024-06-18T10:00:01Z\n"), HasSubstr("j.txt:1: START 'yesterday'"));
  EXPECT_EQ(message(""), "j.txt:1: the file is empty: no jitter windows");
  EXPECT_THAT(ParseJitterWindows("", "j.txt").status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

std::vector<JitterWindow> WindowsOfSeconds(const std::vector<int>& seconds) {
  std::vector<JitterWindow> w;
  const absl::Time t0 = Utc(2024, 6, 18, 0, 0, 0);
  for (size_t i = 0; i < seconds.size(); ++i) {
    const absl::Time start = t0 + absl::Hours(static_cast<int64_t>(i));
    w.push_back({start, start + absl::Seconds(seconds[i]), static_cast<int>(i + 1)});
  }
  return w;
}

TEST(P99Test, NearestRank) {
  EXPECT_EQ(P99Duration(WindowsOfSeconds({7})), absl::Seconds(7));
  // Fewer than 100 windows: the longest.
  EXPECT_EQ(P99Duration(WindowsOfSeconds({3, 15, 1, 9})), absl::Seconds(15));
  // 200 windows of 1..200 s: rank ceil(0.99 × 200) = 198.
  std::vector<int> s;
  for (int i = 200; i >= 1; --i) s.push_back(i);
  EXPECT_EQ(P99Duration(WindowsOfSeconds(s)), absl::Seconds(198));
  // 101 windows: rank ceil(99.99) = 100, so one outlier is left out.
  s.assign(100, 2);
  s.push_back(600);
  EXPECT_EQ(P99Duration(WindowsOfSeconds(s)), absl::Seconds(2));
}

TEST(SuggestTimeoutsTest, TheRule) {
  // Heartbeat 10 s, session 30 s, from a P99 of 15 s.
  TimeoutAdvice a = SuggestTimeouts(absl::Seconds(15));
  EXPECT_EQ(a.session_timeout_ms, 30000);
  EXPECT_EQ(a.heartbeat_interval_ms, 10000);
  EXPECT_FALSE(a.above_broker_max);
  // 1.95 × 4.2 s = 8.19 s → 9 s; heartbeat 3 s. The session still outlasts P99 plus
  // one heartbeat (4.2 + 3 = 7.2 s).
  a = SuggestTimeouts(absl::Milliseconds(4200));
  EXPECT_EQ(a.session_timeout_ms, 9000);
  EXPECT_EQ(a.heartbeat_interval_ms, 3000);
  // Short jitter: the brokers' minimum session.
  a = SuggestTimeouts(absl::Milliseconds(300));
  EXPECT_EQ(a.session_timeout_ms, 6000);
  EXPECT_EQ(a.heartbeat_interval_ms, 2000);
  a = SuggestTimeouts(absl::ZeroDuration());
  EXPECT_EQ(a.session_timeout_ms, 6000);
  // 20 min of jitter: 39 min of session, above what brokers allow by default.
  a = SuggestTimeouts(absl::Minutes(20));
  EXPECT_EQ(a.session_timeout_ms, 2340000);
  EXPECT_EQ(a.heartbeat_interval_ms, 780000);
  EXPECT_TRUE(a.above_broker_max);
}

std::vector<Event> EventsAt(const std::vector<absl::Time>& at) {
  std::vector<Event> e;
  for (size_t i = 0; i < at.size(); ++i) e.push_back({at[i], static_cast<int>(i + 1)});
  return e;
}

TEST(DiagnoseRebalancesTest, CountsEventsInsideWindowsInclusive) {
  const absl::Time t = Utc(2024, 6, 18, 10, 0, 0);
  // Two overlapping windows and one apart, out of order.
  std::vector<JitterWindow> w = {{t + absl::Seconds(100), t + absl::Seconds(110), 1},
                                 {t, t + absl::Seconds(10), 2},
                                 {t + absl::Seconds(5), t + absl::Seconds(20), 3}};
  std::vector<Event> e =
      EventsAt({t,                       // a window's start: inside
                t + absl::Seconds(15),   // only the overlapping one
                t + absl::Seconds(20),   // its end: inside
                t + absl::Seconds(21),   // outside
                t - absl::Seconds(1),    // before all: outside
                t + absl::Seconds(105),  // inside
                t + absl::Seconds(200),  // after all: outside
                t + absl::Seconds(8), t + absl::Seconds(101), t + absl::Seconds(110)});
  RebalanceDiagnosis d = DiagnoseRebalances(e, w, {});
  EXPECT_EQ(d.events, 10u);
  EXPECT_EQ(d.inside, 7u);
  EXPECT_DOUBLE_EQ(d.share, 0.7);
  EXPECT_THAT(d.outside_lines, ElementsAre(4, 5, 7));
  EXPECT_EQ(d.windows, 3u);
  EXPECT_EQ(d.p99, absl::Seconds(15));
  EXPECT_EQ(d.longest, absl::Seconds(15));
  EXPECT_FALSE(d.jitter_explains);  // 70 % < 80 %
  EXPECT_EQ(d.advice.session_timeout_ms, 30000);

  // A slack of 1 s takes in the event 1 s after the window (not the one before).
  d = DiagnoseRebalances(e, w, {.slack = absl::Seconds(1)});
  EXPECT_EQ(d.inside, 8u);
  EXPECT_THAT(d.outside_lines, ElementsAre(5, 7));
  EXPECT_TRUE(d.jitter_explains);  // exactly 80 %
  d = DiagnoseRebalances(e, w, {.slack = absl::Seconds(1), .threshold_percent = 81});
  EXPECT_FALSE(d.jitter_explains);
}

}  // namespace
}  // namespace idem::diagnose
