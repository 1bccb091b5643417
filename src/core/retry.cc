#include "idem/retry.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/absl_compat.h"

namespace idem {
namespace {

class Mt19937Random final : public Random {
 public:
  explicit Mt19937Random(uint64_t seed) : engine_(seed) {}
  double Uniform() override {
    absl::MutexLock lock(&mu_);
    return std::uniform_real_distribution<double>(0.0, 1.0)(engine_);
  }

 private:
  absl::Mutex mu_;
  std::mt19937_64 engine_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

Random* Random::Default() {
  static Random* random = new Mt19937Random(std::random_device{}());
  return random;
}

std::unique_ptr<Random> NewSeededRandom(uint64_t seed) {
  return std::make_unique<Mt19937Random>(seed);
}

RetryClass ClassifyStatus(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kResourceExhausted:
      return RetryClass::kRetryable;
    default:
      return RetryClass::kFinal;
  }
}

RetryClass ClassifyHttpStatus(int http_status) {
  if (http_status >= 500 && http_status <= 599) return RetryClass::kRetryable;
  if (http_status == 408 || http_status == 429) return RetryClass::kRetryable;
  return RetryClass::kFinal;
}

absl::StatusCode StatusCodeForErrorName(std::string_view name) {
  const std::string n = absl::AsciiStrToLower(AV(name));
  auto has = [&n](const char* needle) { return absl::StrContains(n, needle); };
  // Order matters: "lock wait timeout" is a timeout, "deadlock" is not.
  if (has("deadlock") || has("serializ") || has("could not serialize")) {
    return absl::StatusCode::kAborted;
  }
  if (has("timeout") || has("timed out") || has("timed_out")) {
    return absl::StatusCode::kDeadlineExceeded;
  }
  if (has("not enough replicas") || has("not_enough_replicas") || has("unavailable") ||
      has("connection refused") || has("connection reset") || has("leader not available") ||
      has("leader_not_available") || has("too many connections")) {
    return absl::StatusCode::kUnavailable;
  }
  if (has("duplicate") || has("unique")) return absl::StatusCode::kAlreadyExists;
  if (has("validation") || has("invalid")) return absl::StatusCode::kInvalidArgument;
  return absl::StatusCode::kUnknown;
}

absl::Status RetryPolicy::Validate() const {
  if (initial_delay <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("retry policy: initial_delay must be > 0");
  }
  if (!(multiplier >= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("retry policy: multiplier must be >= 1, got ", multiplier));
  }
  if (max_delay < initial_delay) {
    return absl::InvalidArgumentError("retry policy: max_delay must be >= initial_delay");
  }
  if (max_attempts < 1 || max_attempts > 100) {
    return absl::InvalidArgumentError(
        absl::StrCat("retry policy: max_attempts must be 1..100, got ", max_attempts));
  }
  return absl::OkStatus();
}

absl::Duration RetryPolicy::Ceiling(int retry) const {
  if (retry < 0) retry = 0;
  // Computed in doubles and clamped first: 2^retry overflows a Duration long
  // before retry reaches max_attempts' limit.
  const double factor = std::pow(multiplier, static_cast<double>(retry));
  const double ceiling_s = absl::ToDoubleSeconds(initial_delay) * factor;
  const double cap_s = absl::ToDoubleSeconds(max_delay);
  return absl::Seconds(std::min(ceiling_s, cap_s));
}

absl::Duration RetryPolicy::Backoff(int retry, Random& random) const {
  return Ceiling(retry) * random.Uniform();
}

bool RetryPolicy::ShouldRetry(const absl::Status& status, int attempts_made) const {
  return !status.ok() && ClassifyStatus(status) == RetryClass::kRetryable &&
         attempts_made < max_attempts;
}

Retrier::Retrier(RetryPolicy policy, const Clock* clock, Random* random)
    : policy_(policy),
      clock_(clock != nullptr ? clock : Clock::Real()),
      random_(random != nullptr ? random : Random::Default()) {}

absl::Status Retrier::Run(const std::function<absl::Status()>& fn) {
  retry_count_ = 0;
  for (int attempt = 1;; ++attempt) {
    absl::Status s = fn();
    if (!policy_.ShouldRetry(s, attempt)) return s;
    clock_->SleepFor(policy_.Backoff(retry_count_, *random_));
    ++retry_count_;
  }
}

}  // namespace idem
