// Retry: classify first, then back off exponentially with
// full jitter, with the same key every time.
//
//   idem::RetryPolicy policy;                      // 100 ms × 2ⁿ, capped at 5 s, 5 attempts
//   idem::Retrier retrier(policy);                 // real clock and random source
//   absl::StatusOr<std::string> r = retrier.Run<std::string>(
//       [&]() { return channel.Reverse(request_id); });
//   // retrier.retry_count(): how many retries the last Run made (for metrics)
//
// Retryable: timeouts, 5xx, "not enough replicas", deadlocks, serialization
// failures — as statuses kUnavailable, kDeadlineExceeded, kAborted,
// kResourceExhausted. Not retryable: 4xx, validation, unique-key conflicts, and
// every other code.
//
// Thread safety: RetryPolicy and the classifiers are plain values / pure
// functions. A Retrier may be shared by threads (its clock and random source
// must be thread-safe, as the defaults are); retry_count() reports the last Run of
// the calling thread's most recent call only when not shared.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "idem/clock.h"

namespace idem {

// A source of uniform random numbers, injected so backoff is deterministic in tests.
class Random {
 public:
  virtual ~Random() = default;
  // Returns a uniformly distributed double in [0, 1). Thread-safe.
  virtual double Uniform() = 0;

  // The process-wide source, seeded from std::random_device. Never null; not owned.
  static Random* Default();
};

// A deterministic source (mt19937_64) for tests and reproducible runs.
std::unique_ptr<Random> NewSeededRandom(uint64_t seed);

enum class RetryClass { kRetryable, kFinal };

// Classifies a status by its code (see the header comment). OK is kFinal (nothing
// to retry).
RetryClass ClassifyStatus(const absl::Status& status);

// Classifies an HTTP status: 5xx, 408 (timeout) and 429 (rate limited) are
// retryable; every other 4xx is final; 1xx–3xx are not failures (kFinal).
RetryClass ClassifyHttpStatus(int http_status);

// Returns kUnavailable / kDeadlineExceeded / kAborted / kInvalidArgument /
// kAlreadyExists for an error *name* as drivers and brokers spell them
// ("timeout", "NOT_ENOUGH_REPLICAS", "deadlock", "serialization failure",
// "duplicate key", "validation"), matched case-insensitively; kUnknown otherwise.
// Lets adapters map a foreign error onto the classification above.
absl::StatusCode StatusCodeForErrorName(std::string_view name);

struct RetryPolicy {
  absl::Duration initial_delay = absl::Milliseconds(100);
  double multiplier = 2.0;
  absl::Duration max_delay = absl::Seconds(5);
  int max_attempts = 5;  // attempts in all, the first included (3 to 5 is usual)

  // Returns kInvalidArgument unless initial_delay > 0, multiplier >= 1,
  // max_delay >= initial_delay and 1 <= max_attempts <= 100.
  absl::Status Validate() const;

  // The ceiling of the delay before retry number `retry` (0 = the first retry):
  // min(max_delay, initial_delay × multiplierʳᵉᵗʳʸ).
  absl::Duration Ceiling(int retry) const;

  // Full jitter: a delay uniformly drawn from [0, Ceiling(retry)).
  absl::Duration Backoff(int retry, Random& random) const;

  // True when a call that failed with `status` after `attempts_made` attempts
  // (>= 1) should be tried again: retryable and attempts left.
  bool ShouldRetry(const absl::Status& status, int attempts_made) const;
};

// Runs a call under a RetryPolicy, sleeping through the injected Clock.
class Retrier {
 public:
  // `clock` and `random` are not owned and must outlive the Retrier.
  explicit Retrier(RetryPolicy policy, const Clock* clock = Clock::Real(),
                   Random* random = Random::Default());

  // Calls `fn` until it succeeds, fails with a final error, or attempts run out.
  // Returns its last result. Blocks for the backoff delays.
  absl::Status Run(const std::function<absl::Status()>& fn);

  template <typename T>
  absl::StatusOr<T> Run(const std::function<absl::StatusOr<T>()>& fn) {
    absl::StatusOr<T> last = absl::UnknownError("not run");
    absl::Status s = Run([&]() -> absl::Status {
      last = fn();
      return last.status();
    });
    (void)s;  // `last` carries the same status
    return last;
  }

  // Retries made by the most recent Run (0 when the first attempt settled it).
  int retry_count() const { return retry_count_; }

 private:
  RetryPolicy policy_;
  const Clock* clock_;
  Random* random_;
  int retry_count_ = 0;
};

}  // namespace idem
