// Retry policy: classification table, full-jitter bounds, the cap, and
// the Retrier's attempts and retry_count on a fake clock.
#include "idem/retry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "testing/fake_clock.h"
#include "testing/status_matchers.h"

namespace idem {
namespace {

using ::idem::testing::FakeClock;
using ::idem::testing::StatusIs;

// A Random that always answers the same value.
class FixedRandom final : public Random {
 public:
  explicit FixedRandom(double v) : v_(v) {}
  double Uniform() override { return v_; }

 private:
  double v_;
};

TEST(RetryClassifyTest, StatusCodes) {
  EXPECT_EQ(ClassifyStatus(absl::UnavailableError("5xx")), RetryClass::kRetryable);
  EXPECT_EQ(ClassifyStatus(absl::DeadlineExceededError("timeout")), RetryClass::kRetryable);
  EXPECT_EQ(ClassifyStatus(absl::AbortedError("deadlock")), RetryClass::kRetryable);
  EXPECT_EQ(ClassifyStatus(absl::ResourceExhaustedError("busy")), RetryClass::kRetryable);
  EXPECT_EQ(ClassifyStatus(absl::InvalidArgumentError("validation")), RetryClass::kFinal);
  EXPECT_EQ(ClassifyStatus(absl::AlreadyExistsError("unique")), RetryClass::kFinal);
  EXPECT_EQ(ClassifyStatus(absl::FailedPreconditionError("")), RetryClass::kFinal);
  EXPECT_EQ(ClassifyStatus(absl::NotFoundError("")), RetryClass::kFinal);
  EXPECT_EQ(ClassifyStatus(absl::OkStatus()), RetryClass::kFinal);
}

TEST(RetryClassifyTest, HttpStatuses) {
  for (int s : {500, 502, 503, 504, 599, 408, 429}) {
    EXPECT_EQ(ClassifyHttpStatus(s), RetryClass::kRetryable) << s;
  }
  for (int s : {400, 401, 403, 404, 409, 422, 200, 201, 302}) {
    EXPECT_EQ(ClassifyHttpStatus(s), RetryClass::kFinal) << s;
  }
}

TEST(RetryClassifyTest, ErrorNames) {
  EXPECT_EQ(StatusCodeForErrorName("NOT_ENOUGH_REPLICAS"), absl::StatusCode::kUnavailable);
  EXPECT_EQ(StatusCodeForErrorName("Not enough replicas"), absl::StatusCode::kUnavailable);
  EXPECT_EQ(StatusCodeForErrorName("Deadlock found when trying to get lock"),
            absl::StatusCode::kAborted);
  EXPECT_EQ(StatusCodeForErrorName("could not serialize access"), absl::StatusCode::kAborted);
  EXPECT_EQ(StatusCodeForErrorName("Lock wait timeout exceeded"),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(StatusCodeForErrorName("Duplicate entry 'x' for key 'PRIMARY'"),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(StatusCodeForErrorName("validation failed"), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(StatusCodeForErrorName("something else"), absl::StatusCode::kUnknown);
  // The mapped codes classify as include/idem/retry.h says.
  EXPECT_EQ(ClassifyStatus(absl::Status(StatusCodeForErrorName("NOT_ENOUGH_REPLICAS"), "")),
            RetryClass::kRetryable);
  EXPECT_EQ(ClassifyStatus(absl::Status(StatusCodeForErrorName("duplicate key"), "")),
            RetryClass::kFinal);
}

TEST(RetryPolicyTest, DefaultsAreTheSpecs) {
  RetryPolicy p;
  EXPECT_OK(p.Validate());
  EXPECT_EQ(p.Ceiling(0), absl::Milliseconds(100));
  EXPECT_EQ(p.Ceiling(1), absl::Milliseconds(200));
  EXPECT_EQ(p.Ceiling(2), absl::Milliseconds(400));
  EXPECT_EQ(p.Ceiling(5), absl::Seconds(3.2));
  EXPECT_EQ(p.Ceiling(6), absl::Seconds(5));    // capped
  EXPECT_EQ(p.Ceiling(99), absl::Seconds(5));   // no overflow
  EXPECT_EQ(p.max_attempts, 5);
}

TEST(RetryPolicyTest, FullJitterStaysWithinBoundsForManySeeds) {
  RetryPolicy p;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    std::unique_ptr<Random> random = NewSeededRandom(seed);
    for (int retry = 0; retry < 10; ++retry) {
      absl::Duration d = p.Backoff(retry, *random);
      EXPECT_GE(d, absl::ZeroDuration());
      EXPECT_LT(d, p.Ceiling(retry));
      EXPECT_LE(d, absl::Seconds(5));
    }
  }
  // Jitter spreads: over many draws the mean is near half the ceiling.
  std::unique_ptr<Random> random = NewSeededRandom(7);
  absl::Duration sum;
  for (int i = 0; i < 10000; ++i) sum += p.Backoff(3, *random);
  EXPECT_NEAR(absl::ToDoubleMilliseconds(sum / 10000), 400.0, 20.0);
}

TEST(RetryPolicyTest, SeededSourcesAreReproducible) {
  std::unique_ptr<Random> a = NewSeededRandom(42), b = NewSeededRandom(42);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a->Uniform(), b->Uniform());
}

TEST(RetryPolicyTest, InvalidPoliciesAreRefused) {
  EXPECT_THAT((RetryPolicy{.initial_delay = absl::ZeroDuration()}.Validate()),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT((RetryPolicy{.multiplier = 0.5}.Validate()),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT((RetryPolicy{.max_delay = absl::Milliseconds(10)}.Validate()),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT((RetryPolicy{.max_attempts = 0}.Validate()),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(RetrierTest, RetriesRetryableErrorsUntilSuccess) {
  FakeClock clock;
  FixedRandom half(0.5);
  Retrier retrier(RetryPolicy{}, &clock, &half);
  int calls = 0;
  absl::Status s = retrier.Run([&]() -> absl::Status {
    ++calls;
    return calls < 3 ? absl::UnavailableError("503") : absl::OkStatus();
  });
  EXPECT_OK(s);
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(retrier.retry_count(), 2);
  EXPECT_EQ(clock.slept(), absl::Milliseconds(50 + 100));  // half of 100 ms, half of 200 ms
}

TEST(RetrierTest, StopsAtTheFirstFinalError) {
  FakeClock clock;
  Retrier retrier(RetryPolicy{}, &clock, Random::Default());
  int calls = 0;
  absl::Status s = retrier.Run([&]() -> absl::Status {
    ++calls;
    return absl::InvalidArgumentError("400");
  });
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(retrier.retry_count(), 0);
  EXPECT_EQ(clock.slept(), absl::ZeroDuration());
}

TEST(RetrierTest, GivesUpAfterMaxAttemptsWithTheLastError) {
  FakeClock clock;
  FixedRandom almost_one(0.999);
  Retrier retrier(RetryPolicy{.max_attempts = 3}, &clock, &almost_one);
  int calls = 0;
  absl::StatusOr<int> r = retrier.Run<int>([&]() -> absl::StatusOr<int> {
    ++calls;
    return absl::DeadlineExceededError(absl::StrCat("timeout ", calls));
  });
  EXPECT_THAT(r, StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_EQ(std::string(r.status().message()), "timeout 3");
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(retrier.retry_count(), 2);
  EXPECT_LT(clock.slept(), absl::Milliseconds(300));
  EXPECT_GT(clock.slept(), absl::Milliseconds(299));
}

TEST(RetrierTest, ReturnsTheValueOnSuccess) {
  FakeClock clock;
  Retrier retrier(RetryPolicy{}, &clock, Random::Default());
  absl::StatusOr<std::string> r =
      retrier.Run<std::string>([]() -> absl::StatusOr<std::string> { return std::string("ok"); });
  ASSERT_OK(r);
  EXPECT_EQ(*r, "ok");
  EXPECT_EQ(retrier.retry_count(), 0);
}

}  // namespace
}  // namespace idem
