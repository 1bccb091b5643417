// Unit tests of the small core pieces: keys, fingerprints, failpoints, outcomes.
#include <csignal>
#include <cstdlib>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/utf8.h"
#include "core/failpoint.h"
#include "idem/fingerprint.h"
#include "idem/guard.h"
#include "idem/key.h"
#include "testing/status_matchers.h"

namespace idem {
namespace {

using ::idem::testing::StatusIs;
using ::testing::HasSubstr;

TEST(KeyTest, LimitsAndMessages) {
  EXPECT_OK(ValidateKey("R-20240618-000713"));
  EXPECT_OK(ValidateKey(std::string(255, 'x')));
  absl::Status empty = ValidateKey("");
  EXPECT_THAT(empty, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(empty.message()), HasSubstr("key is empty"));
  absl::Status longer = ValidateKey(std::string(256, 'x'));
  EXPECT_THAT(longer, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(longer.message()), HasSubstr("256 bytes, over the limit of 255"));
  EXPECT_OK(ValidateKey(std::string(300, 'x'), KeyLimits{.max_key_bytes = 300}));
  EXPECT_THAT(ValidateBizType(""), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ValidateTenant(std::string(256, 't')), StatusIs(absl::StatusCode::kInvalidArgument));
}

// A fingerprint is a digest; 1 MB ones were accepted and stored.
TEST(FingerprintTest, LengthIsBounded) {
  EXPECT_OK(ValidateFingerprint(""));
  EXPECT_OK(ValidateFingerprint(std::string(kMaxFingerprintBytes, 'f')));
  absl::Status over = ValidateFingerprint(std::string(kMaxFingerprintBytes + 1, 'f'));
  EXPECT_THAT(over, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(over.message(), "fingerprint is 1025 bytes, over the limit of 1024");
}

// The check for a value that becomes a header, a log field, a SQL parameter or a
// path: bytes allowed but for control characters and edge whitespace, length
// bounded; the message names the byte, never repeats the value.
TEST(KeyTest, FieldValueRefusesWhatCannotBeAHeaderOrALogLine) {
  EXPECT_OK(ValidateHeaderKey("R-20240618-000713"));
  EXPECT_OK(ValidateHeaderKey("订单 7/a:b\"c'd"));
  EXPECT_OK(ValidateHeaderKey(std::string(255, 'x')));
  struct Case {
    std::string value, want;
  } cases[] = {
      {"", "key is empty"},
      {std::string(256, 'x'), "key is 256 bytes, over the limit of 255"},
      {"INJ1\r\nAuthorization: x", "key holds the control character \\r at byte 4"},
      {"a\nb", "control character \\n at byte 1"},
      {std::string("a\0b", 3), "control character \\x00 at byte 1"},
      {"a\x1b[31m", "control character \\x1B at byte 1"},
      {"a\x7f", "control character \\x7F at byte 1"},
      {" a", "starts or ends with a space"},
      {"a ", "starts or ends with a space"},
      {"a\tb", "control character \\t at byte 1"},
  };
  for (const Case& c : cases) {
    absl::Status s = ValidateHeaderKey(c.value);
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument)) << c.want;
    EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr(c.want));
    if (c.value.size() > 2) {
      EXPECT_THAT(std::string(s.message()), ::testing::Not(::testing::HasSubstr(c.value)));
    }
  }
  EXPECT_OK(ValidateFieldValue("path", std::string(300, 'p'), 300));
}

TEST(KeyTest, EscapeControlKeepsOneLineOfText) {
  EXPECT_EQ(EscapeControl("plain 订单"), "plain 订单");
  EXPECT_FALSE(NeedsEscape("plain 订单"));
  EXPECT_EQ(EscapeControl("a\nb\r\tc\\d"), "a\\nb\\r\\tc\\\\d");
  EXPECT_EQ(EscapeControl(std::string("\0\x1b[31m\x7f", 7)), "\\x00\\x1B[31m\\x7F");
  EXPECT_EQ(EscapeControl("\xc2\x9b" "1m"), "\\xC2\\x9B1m");  // C1 CSI
  EXPECT_EQ(EscapeControl("\xff\xc3"), "\\xFF\\xC3");          // not UTF-8
  EXPECT_EQ(EscapeControl("abcdef", 3), "abc…");
  for (std::string_view v : {"a\nb", "\\", "\xff", "\xc2\x85"}) EXPECT_TRUE(NeedsEscape(v)) << v;
}

TEST(FingerprintTest, IsHexSha256) {
  EXPECT_EQ(Fingerprint(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Fingerprint("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_NE(Fingerprint(std::string("a\0b", 3)), Fingerprint("a"));
}

TEST(OutcomeTest, NamesMatchTheHttpApi) {
  EXPECT_EQ(OutcomeName(Outcome::kAcquired), "acquired");
  EXPECT_EQ(OutcomeName(Outcome::kReplayed), "replayed");
  EXPECT_EQ(OutcomeName(Outcome::kInProgress), "in_progress");
  EXPECT_EQ(OutcomeName(Outcome::kKeyReused), "key_reused");
  EXPECT_EQ(OutcomeName(Outcome::kFingerprintMismatch), "fingerprint_mismatch");
  EXPECT_EQ(OutcomeName(Outcome::kCachedFailure), "cached_failure");
  EXPECT_EQ(RecordStateName(RecordState::kProcessing), "PROCESSING");
}

TEST(RetryableTest, ClassifiesStatusCodes) {
  EXPECT_TRUE(IsRetryable(absl::UnavailableError("")));
  EXPECT_TRUE(IsRetryable(absl::AbortedError("")));
  EXPECT_TRUE(IsRetryable(absl::DeadlineExceededError("")));
  EXPECT_FALSE(IsRetryable(absl::InvalidArgumentError("")));
  EXPECT_FALSE(IsRetryable(absl::AlreadyExistsError("")));
  EXPECT_FALSE(IsRetryable(absl::FailedPreconditionError("")));
}

void HitTwice() {
  IDEM_FAILPOINT("test.point");
  IDEM_FAILPOINT("test.point");
}

TEST(FailpointTest, DisarmedDoesNothing) {
  DisarmAllFailpoints();
  HitTwice();
  SUCCEED();
}

TEST(FailpointDeathTest, KillFiresOnTheNthHit) {
  EXPECT_EXIT(
      {
        ArmFailpoint("test.point", "kill@3");
        HitTwice();  // hits 1 and 2 pass
        std::fprintf(stderr, "survived two hits\n");
        HitTwice();  // hit 3 kills
        std::exit(0);
      },
      ::testing::KilledBySignal(SIGKILL), "survived two hits");
}

// This build has the tests, so IDEM_FAILPOINTS arms failpoints (the crash tests and
// docs/steps.md use it); the packaged binary ignores it (tests/dist/package_test.sh).
TEST(FailpointDeathTest, EnvironmentArmsThemInABuildWithTests) {
  // The variable is read once per process: the child must be a fresh one (the
  // threadsafe style re-runs the binary for this test alone).
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("IDEM_FAILPOINTS", "test.point=abort@2", 1);
        HitTwice();
        std::exit(0);
      },
      ::testing::KilledBySignal(SIGABRT), "");
}

TEST(FailpointDeathTest, ArmedThenDisarmedDoesNotFire) {
  EXPECT_EXIT(
      {
        ArmFailpoint("test.point", "abort");
        ArmFailpoint("test.point", "");
        HitTwice();
        std::exit(7);
      },
      ::testing::ExitedWithCode(7), "");
}

// `on` is a seeded bug for the chaos test: IDEM_FAILPOINT_ON reads it, and an
// IDEM_FAILPOINT of the same name passes it by.
TEST(FailpointTest, OnMakesFailpointOnTrueAndNeverFires) {
  EXPECT_FALSE(IDEM_FAILPOINT_ON("test.point"));
  ArmFailpoint("test.point", "on");
  EXPECT_TRUE(IDEM_FAILPOINT_ON("test.point"));
  EXPECT_FALSE(IDEM_FAILPOINT_ON("test.other"));
  HitTwice();  // neither kills nor aborts
  ArmFailpoint("test.point", "kill");
  EXPECT_FALSE(IDEM_FAILPOINT_ON("test.point"));  // only `on` turns the branch
  ArmFailpoint("test.point", "");
  EXPECT_FALSE(IDEM_FAILPOINT_ON("test.point"));
  DisarmAllFailpoints();
}

// IsUtf8 skips ASCII eight bytes at a time: a bad or multi-byte sequence at any
// offset, inside or after a word, is still checked byte by byte.
TEST(Utf8Test, EveryOffsetOfABadOrMultiByteSequenceIsChecked) {
  for (size_t at = 0; at < 20; ++at) {
    std::string s(20, 'a');
    s[at] = '\xff';  // never valid UTF-8
    EXPECT_FALSE(IsUtf8(s)) << at;
    s[at] = '\xc3';  // a lead byte without its continuation...
    EXPECT_FALSE(IsUtf8(s)) << at;
    if (at + 1 < s.size()) {
      s[at + 1] = '\xa9';  // ...and with it: "é"
      EXPECT_TRUE(IsUtf8(s)) << at;
    }
  }
  EXPECT_TRUE(IsUtf8(""));
  EXPECT_TRUE(IsUtf8("R-0000000123 exactly 24B"));
  EXPECT_FALSE(IsUtf8("12345678\xe2\x82"));  // a 3-byte sequence cut at the end
  EXPECT_TRUE(IsUtf8("12345678\xe2\x82\xac"));  // "€"
  EXPECT_FALSE(IsUtf8("12345678\xed\xa0\x80"));  // a surrogate
}

}  // namespace
}  // namespace idem
