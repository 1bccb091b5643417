#include "idem/ttl.h"

#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace idem {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr absl::Duration Days(int64_t n) { return absl::Hours(24 * n); }

// --- DeriveTtl ---------------------------------------------------------------

TEST(DeriveTtlTest, SeedRefundPipelineIsNinetyDays) {
  // A refund pipeline: max(10m, T+30, T+3) + 60 days = 90 days.
  TtlInputs in{.redelivery_window = absl::Minutes(10),
               .recon_cycle = Days(30),
               .confirm_window = Days(3),
               .safety_margin = Days(60)};
  absl::StatusOr<TtlDerivation> d = DeriveTtl(in);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->total, Days(90));
  EXPECT_EQ(d->dominant, TtlWindow::kReconCycle);
  EXPECT_EQ(d->dominant_window, Days(30));
  EXPECT_EQ(d->safety_margin, Days(60));
  EXPECT_EQ(d->inputs.redelivery_window, absl::Minutes(10));
  EXPECT_EQ(d->inputs.recon_cycle, Days(30));
  EXPECT_EQ(d->inputs.confirm_window, Days(3));
  EXPECT_EQ(d->inputs.safety_margin, Days(60));
}

TEST(DeriveTtlTest, ItIsMaxPlusMarginNotASum) {
  // A longer channel clearing cycle (T+7) does not change the TTL while the
  // reconciliation cycle (T+30) still dominates.
  absl::StatusOr<TtlDerivation> d = DeriveTtl({.redelivery_window = absl::Minutes(10),
                                               .recon_cycle = Days(30),
                                               .confirm_window = Days(7),
                                               .safety_margin = Days(60)});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->total, Days(90));
}

TEST(DeriveTtlTest, EachWindowCanDominate) {
  absl::StatusOr<TtlDerivation> d = DeriveTtl(
      {.redelivery_window = Days(40), .recon_cycle = Days(30), .confirm_window = Days(3)});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->dominant, TtlWindow::kRedelivery);
  EXPECT_EQ(d->total, Days(40));

  d = DeriveTtl({.redelivery_window = absl::Minutes(10),
                 .recon_cycle = Days(1),
                 .confirm_window = Days(3),
                 .safety_margin = absl::Hours(12)});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->dominant, TtlWindow::kConfirmWindow);
  EXPECT_EQ(d->dominant_window, Days(3));
  EXPECT_EQ(d->total, Days(3) + absl::Hours(12));
}

TEST(DeriveTtlTest, TieNamesTheEarliestWindow) {
  absl::StatusOr<TtlDerivation> d =
      DeriveTtl({.redelivery_window = Days(1), .recon_cycle = Days(3), .confirm_window = Days(3)});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->dominant, TtlWindow::kReconCycle);

  d = DeriveTtl({});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->dominant, TtlWindow::kRedelivery);
  EXPECT_EQ(d->total, absl::ZeroDuration());
}

TEST(DeriveTtlTest, RejectsNegativeAndInfiniteTerms) {
  absl::StatusOr<TtlDerivation> d = DeriveTtl({.recon_cycle = -absl::Seconds(1)});
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(d.status().message()),
              HasSubstr("reconciliation cycle must not be negative"));

  d = DeriveTtl({.safety_margin = -Days(1)});
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(d.status().message()), HasSubstr("safety margin"));

  d = DeriveTtl({.confirm_window = absl::InfiniteDuration()});
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(d.status().message()),
              HasSubstr("downstream confirmation window must be finite"));

  d = DeriveTtl({.redelivery_window = kMaxTtlDuration + absl::Seconds(1)});
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(d.status().message()), HasSubstr("exceeds the maximum"));
}

TEST(DeriveTtlTest, RejectsTotalOverflow) {
  absl::StatusOr<TtlDerivation> d =
      DeriveTtl({.recon_cycle = kMaxTtlDuration, .safety_margin = absl::Milliseconds(1)});
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(d.status().message()), HasSubstr("TTL overflow"));

  d = DeriveTtl({.recon_cycle = kMaxTtlDuration});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->total, kMaxTtlDuration);
}

// --- CheckConfiguredTtl ------------------------------------------------------

TEST(CheckConfiguredTtlTest, RefusesBelowDerivedNamingBothValues) {
  absl::StatusOr<TtlDerivation> d = DeriveTtl({.redelivery_window = absl::Minutes(10),
                                               .recon_cycle = Days(30),
                                               .confirm_window = Days(3),
                                               .safety_margin = Days(60)});
  ASSERT_TRUE(d.ok());
  absl::Status s = CheckConfiguredTtl(Days(30), *d);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            "configured TTL 30d is below the derived TTL 90d (reconciliation cycle 30d + safety "
            "margin 60d); a record purged that early lets a late duplicate through");

  // One millisecond short is still short.
  s = CheckConfiguredTtl(Days(90) - absl::Milliseconds(1), *d);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("configured TTL 89d23h59m59s999ms"));
}

TEST(CheckConfiguredTtlTest, AcceptsEqualOrLonger) {
  absl::StatusOr<TtlDerivation> d = DeriveTtl({.recon_cycle = Days(30), .safety_margin = Days(60)});
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(CheckConfiguredTtl(Days(90), *d).ok());
  EXPECT_TRUE(CheckConfiguredTtl(Days(120), *d).ok());
}

// --- ParseTtlDuration --------------------------------------------------------

TEST(ParseTtlDurationTest, ReadsEveryUnit) {
  EXPECT_EQ(*ParseTtlDuration("10m", "--x"), absl::Minutes(10));
  EXPECT_EQ(*ParseTtlDuration("30d", "--x"), Days(30));
  EXPECT_EQ(*ParseTtlDuration("3d", "--x"), Days(3));
  EXPECT_EQ(*ParseTtlDuration("60d", "--x"), Days(60));
  EXPECT_EQ(*ParseTtlDuration("12h", "--x"), absl::Hours(12));
  EXPECT_EQ(*ParseTtlDuration("45s", "--x"), absl::Seconds(45));
  EXPECT_EQ(*ParseTtlDuration("500ms", "--x"), absl::Milliseconds(500));
  EXPECT_EQ(*ParseTtlDuration("0s", "--x"), absl::ZeroDuration());
  EXPECT_EQ(*ParseTtlDuration("0d", "--x"), absl::ZeroDuration());
  EXPECT_EQ(*ParseTtlDuration("007m", "--x"), absl::Minutes(7));
}

TEST(ParseTtlDurationTest, ReadsCombinations) {
  EXPECT_EQ(*ParseTtlDuration("1d12h", "--x"), absl::Hours(36));
  EXPECT_EQ(*ParseTtlDuration("1h30m", "--x"), absl::Minutes(90));
  EXPECT_EQ(*ParseTtlDuration("1d2h3m4s5ms", "--x"),
            Days(1) + absl::Hours(2) + absl::Minutes(3) + absl::Seconds(4) + absl::Milliseconds(5));
  EXPECT_EQ(*ParseTtlDuration("90m", "--x"), absl::Minutes(90));  // no carrying required
  EXPECT_EQ(*ParseTtlDuration("1m1ms", "--x"), absl::Minutes(1) + absl::Milliseconds(1));
}

struct BadCase {
  const char* text;
  const char* why;
};

class ParseTtlDurationBadTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(ParseTtlDurationBadTest, IsInvalidArgumentNamingFlagAndValue) {
  absl::StatusOr<absl::Duration> d = ParseTtlDuration(GetParam().text, "--margin");
  ASSERT_FALSE(d.ok()) << GetParam().text << " parsed as " << FormatTtlDuration(*d);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(d.status().message()),
              AllOf(HasSubstr(std::string("--margin: invalid duration \"") + GetParam().text),
                    HasSubstr(GetParam().why)));
}

INSTANTIATE_TEST_SUITE_P(
    Bad, ParseTtlDurationBadTest,
    ::testing::Values(BadCase{"", "empty"}, BadCase{"-5d", "negative"}, BadCase{"-0s", "negative"},
                      BadCase{"+5d", "sign"}, BadCase{"5", "missing unit after 5"},
                      BadCase{"1d12", "missing unit after 12"}, BadCase{"5y", "unknown unit \"y\""},
                      BadCase{"5D", "unknown unit \"D\""}, BadCase{"5sec", "unknown unit \"sec\""},
                      BadCase{"5us", "unknown unit \"us\""}, BadCase{"d", "expected a number"},
                      BadCase{"ms", "expected a number"}, BadCase{"1.5d", "fractions"},
                      BadCase{"1,5d", "fractions"}, BadCase{"1d 12h", "spaces"},
                      BadCase{" 1d", "spaces"}, BadCase{"1d ", "spaces"},
                      BadCase{"12h1d", "out of order"}, BadCase{"5m5m", "repeated"},
                      BadCase{"abc", "expected a number"}, BadCase{"10m!", "expected a number"},
                      BadCase{"106752d", "too large"},
                      BadCase{"99999999999999999999d", "too large"},
                      BadCase{"9223372036854775807ms", "too large"},
                      BadCase{"106751d23h47m16s855ms", "too large"}));

TEST(ParseTtlDurationTest, AcceptsTheMaximum) {
  // 2^63 - 1 ns = 106751d23h47m16s854ms775us807ns; the largest whole-ms value below it.
  absl::StatusOr<absl::Duration> d = ParseTtlDuration("106751d23h47m16s854ms", "--x");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_LE(*d, kMaxTtlDuration);
  EXPECT_GT(*d, kMaxTtlDuration - absl::Milliseconds(1));
}

TEST(ParseTtlDurationTest, OmitsFlagPrefixWhenNoneGiven) {
  EXPECT_EQ(ParseTtlDuration("x", "").status().message(),
            "invalid duration \"x\": expected a number at \"x\"; expected <number><unit>... with "
            "units d, h, m, s, ms");
}

TEST(ParseTtlDurationTest, EscapesControlBytesInMessages) {
  absl::StatusOr<absl::Duration> d = ParseTtlDuration("5\n", "--x");
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(std::string(d.status().message()), HasSubstr("\"5\\n\""));
  EXPECT_EQ(d.status().message().find('\n'), std::string::npos);
}

// --- FormatTtlDuration / FormatTtlDays ---------------------------------------

TEST(FormatTtlDurationTest, LargestUnitsFirstSkippingZeros) {
  EXPECT_EQ(FormatTtlDuration(Days(90)), "90d");
  EXPECT_EQ(FormatTtlDuration(absl::Hours(36)), "1d12h");
  EXPECT_EQ(FormatTtlDuration(absl::Minutes(10)), "10m");
  EXPECT_EQ(FormatTtlDuration(absl::Milliseconds(1500)), "1s500ms");
  EXPECT_EQ(FormatTtlDuration(Days(1) + absl::Seconds(1)), "1d1s");
  EXPECT_EQ(FormatTtlDuration(absl::ZeroDuration()), "0s");
  EXPECT_EQ(FormatTtlDuration(absl::Microseconds(1500)), "1ms500us");
  EXPECT_EQ(FormatTtlDuration(absl::Nanoseconds(7)), "7ns");
  EXPECT_EQ(FormatTtlDuration(-absl::Minutes(5)), "-5m");
  EXPECT_EQ(FormatTtlDuration(absl::InfiniteDuration()), "inf");
  EXPECT_EQ(FormatTtlDuration(-absl::InfiniteDuration()), "-inf");
  EXPECT_EQ(FormatTtlDuration(kMaxTtlDuration), "106751d23h47m16s854ms775us807ns");
}

TEST(FormatTtlDurationTest, RoundTripsThroughParse) {
  for (absl::Duration d :
       {absl::ZeroDuration(), absl::Milliseconds(1), absl::Milliseconds(999), absl::Seconds(59),
        absl::Minutes(61), absl::Hours(25), Days(90),
        Days(1) + absl::Hours(2) + absl::Minutes(3) + absl::Seconds(4) + absl::Milliseconds(5)}) {
    absl::StatusOr<absl::Duration> back = ParseTtlDuration(FormatTtlDuration(d), "--x");
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, d) << FormatTtlDuration(d);
  }
}

TEST(FormatTtlDaysTest, ForPeople) {
  EXPECT_EQ(FormatTtlDays(Days(90)), "90 days");
  EXPECT_EQ(FormatTtlDays(Days(1)), "1 day");
  EXPECT_EQ(FormatTtlDays(absl::Hours(36)), "1.5 days");
  EXPECT_EQ(FormatTtlDays(absl::ZeroDuration()), "0 days");
  EXPECT_EQ(FormatTtlDays(absl::Minutes(10)), "0.007 days");
  EXPECT_EQ(FormatTtlDays(absl::Milliseconds(500)), "<0.001 days");
}

TEST(TtlWindowTest, Names) {
  EXPECT_EQ(TtlWindowName(TtlWindow::kRedelivery), "upstream redelivery window");
  EXPECT_EQ(TtlWindowName(TtlWindow::kReconCycle), "reconciliation cycle");
  EXPECT_EQ(TtlWindowName(TtlWindow::kConfirmWindow), "downstream confirmation window");
  EXPECT_EQ(TtlWindowId(TtlWindow::kRedelivery), "redelivery");
  EXPECT_EQ(TtlWindowId(TtlWindow::kReconCycle), "recon_cycle");
  EXPECT_EQ(TtlWindowId(TtlWindow::kConfirmWindow), "confirm_window");
}

}  // namespace
}  // namespace idem
