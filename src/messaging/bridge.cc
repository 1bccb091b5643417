#include "messaging/bridge.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/absl_compat.h"
#include "core/failpoint.h"
#include "idem/fingerprint.h"
#include "idem/status.h"
#include "messaging/dead_letter.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"

namespace idem::messaging {
namespace {

// What is stored for a delivery: the target's status and body (bytes that are not
// UTF-8 replaced, since the record is JSON).
std::string AnswerRecord(const HttpAnswer& a) {
  nlohmann::json j{{"status", a.status}, {"body", a.body}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

constexpr size_t kReasonBody = 512;  // of a 4xx answer's body, in the dead-letter reason

}  // namespace

absl::StatusOr<std::unique_ptr<Bridge>> Bridge::Create(Transport& transport, Store& store,
                                                       Deliverer deliver, BridgeOptions options) {
  IDEM_RETURN_IF_ERROR(options.retry.Validate());
  IDEM_RETURN_IF_ERROR(ValidateTenant(options.tenant, KeyLimits{}));
  IDEM_RETURN_IF_ERROR(ValidateBizType(options.biz_type, KeyLimits{}));
  if (options.max_batch == 0) return absl::InvalidArgumentError("max_batch must be at least 1");
  if (options.lease <= absl::ZeroDuration()) return absl::InvalidArgumentError("lease must be > 0");
  if (deliver == nullptr) return absl::InvalidArgumentError("no deliverer");
  if (options.clock == nullptr) options.clock = Clock::Real();
  if (options.random == nullptr) options.random = Random::Default();
  return std::unique_ptr<Bridge>(
      new Bridge(transport, store, std::move(deliver), std::move(options)));
}

Bridge::Bridge(Transport& transport, Store& store, Deliverer deliver, BridgeOptions options)
    : transport_(transport),
      guard_(store, GuardOptions{.clock = options.clock, .lease = options.lease}),
      deliver_(std::move(deliver)),
      options_(std::move(options)) {
  // Messages are delivered and committed before the next Poll(), so a revocation
  // (inside Poll) finds nothing in flight.
  transport_.SetRebalanceListener([this](const Rebalance& r) {
    rebalances_.Count(r.kind);
    spdlog::info("bridge: rebalance {} {}", RebalanceKindName(r.kind),
                 absl::StrJoin(r.partitions, ","));
  });
}

BridgeStats Bridge::stats() const {
  auto v = [](const std::atomic<int64_t>& a) { return a.load(std::memory_order_relaxed); };
  return BridgeStats{.polled = v(polled_),
                     .delivered = v(delivered_),
                     .skipped = v(skipped_),
                     .dead_lettered = v(dead_lettered_),
                     .attempts = v(attempts_),
                     .rounds_failed = v(rounds_failed_),
                     .takeovers = v(takeovers_),
                     .commits = v(commits_),
                     .commit_failures = v(commit_failures_),
                     .rebalances = v(rebalances_.assigned) + v(rebalances_.revoked) +
                                   v(rebalances_.lost),
                     .assigned = v(rebalances_.assigned),
                     .revoked = v(rebalances_.revoked),
                     .lost = v(rebalances_.lost)};
}

void Bridge::Pause(absl::Duration d) {
  const absl::Time until = options_.clock->Now() + d;
  while (!stopping()) {
    const absl::Duration left = until - options_.clock->Now();
    if (left <= absl::ZeroDuration()) return;
    options_.clock->SleepFor(std::min(left, absl::Milliseconds(100)));
  }
}

absl::Status Bridge::SendDeadLetter(const Message& m, std::string_view reason) {
  spdlog::warn("bridge: {}: dead-lettered: {}", Where(m), reason);
  for (int attempt = 0;; ++attempt) {
    absl::Status s = transport_.DeadLetter(m, reason);
    if (s.ok()) {
      dead_lettered_.fetch_add(1, std::memory_order_relaxed);
      return s;
    }
    if (!IsRetryable(s)) return s;
    if (stopping()) return absl::CancelledError("stopped while dead-lettering");
    Pause(options_.retry.Backoff(std::min(attempt, 30), *options_.random));
  }
}

absl::Status Bridge::DeliverOne(const Message& m) {
  absl::StatusOr<std::string> key = options_.key.Derive(m);
  if (!key.ok()) return SendDeadLetter(m, absl::StrCat("no key: ", key.status().message()));
  const Request request{.tenant = options_.tenant,
                        .biz_type = options_.biz_type,
                        .key = *key,
                        .fingerprint = Fingerprint(m.payload)};
  Retrier retrier(options_.retry, options_.clock, options_.random);
  for (int round = 0;; ++round) {
    if (stopping()) return absl::CancelledError("stopped before delivering");
    absl::StatusOr<Result> claim = guard_.Claim(request);
    if (!claim.ok()) {
      if (!IsRetryable(claim.status())) {
        return SendDeadLetter(m, absl::StrCat("refused by the store: ", claim.status().ToString()));
      }
      spdlog::warn("bridge: {}: store: {}; retrying", Where(m), SV(claim.status().message()));
      Pause(options_.retry.Backoff(std::min(round, 30), *options_.random));
      continue;
    }
    switch (claim->outcome) {
      case Outcome::kReplayed:
      case Outcome::kExpired:  // delivered before its record was purged: not again
        skipped_.fetch_add(1, std::memory_order_relaxed);
        return absl::OkStatus();
      case Outcome::kCachedFailure:
        return SendDeadLetter(m, absl::StrCat("cached failure: ", claim->value));
      case Outcome::kKeyReused:
        return SendDeadLetter(m, absl::StrCat("key_reused: key '", *key,
                                              "' belongs to another biz_type"));
      case Outcome::kFingerprintMismatch:
        return SendDeadLetter(m, absl::StrCat("fingerprint_mismatch: key '", *key,
                                              "' was first delivered with another payload"));
      case Outcome::kInProgress: {
        // Another bridge (or a killed one whose lease has not run out) holds it.
        const absl::Duration wait = claim->lease_until - options_.clock->Now();
        Pause(std::clamp(wait, absl::Milliseconds(50), absl::Seconds(1)));
        continue;
      }
      case Outcome::kExecuted:
      case Outcome::kAcquired:
        break;
    }
    if (claim->takeover) takeovers_.fetch_add(1, std::memory_order_relaxed);
    const int64_t token = claim->token;
    IDEM_FAILPOINT("bridge.after_claim");
    HttpAnswer answer;
    const absl::Status sent = SendRound(m, *key, retrier, &answer);
    IDEM_FAILPOINT("bridge.after_delivery");
    if (std::optional<absl::Status> settled = SettleRound(m, request, token, sent, answer)) {
      return *settled;
    }
    Pause(options_.retry.max_delay);
  }
}

absl::Status Bridge::SendRound(const Message& m, const std::string& key, Retrier& retrier,
                               HttpAnswer* answer) {
  return retrier.Run([&]() -> absl::Status {
    attempts_.fetch_add(1, std::memory_order_relaxed);
    absl::StatusOr<HttpAnswer> a = deliver_(m, key);
    if (!a.ok()) return a.status();
    *answer = *a;
    if (answer->status >= 200 && answer->status < 300) return absl::OkStatus();
    if (ClassifyHttpStatus(answer->status) == RetryClass::kRetryable) {
      return absl::UnavailableError(absl::StrCat("the target answered ", answer->status));
    }
    return absl::FailedPreconditionError(absl::StrCat("the target answered ", answer->status));
  });
}

// Ending the claim is retried on store errors: a record left PROCESSING would
// make the next claim wait out the lease and send again (same key, harmless).
absl::Status Bridge::RetryRecording(const std::function<absl::Status()>& record) {
  for (int attempt = 0;; ++attempt) {
    absl::Status s = record();
    if (s.ok() || !IsRetryable(s) || s.code() == absl::StatusCode::kAborted) return s;
    if (stopping()) return absl::CancelledError("stopped while recording a delivery");
    Pause(options_.retry.Backoff(std::min(attempt, 30), *options_.random));
  }
}

std::optional<absl::Status> Bridge::SettleRound(const Message& m, const Request& request,
                                                int64_t token, const absl::Status& sent,
                                                const HttpAnswer& answer) {
  if (sent.ok()) {
    absl::Status done =
        RetryRecording([&] { return guard_.Complete(request, token, AnswerRecord(answer)); });
    if (!done.ok() && done.code() != absl::StatusCode::kAborted) return done;
    // kAborted: the lease ran out during the delivery and another bridge took the
    // key over; it sends the same key again, which the target dedupes.
    delivered_.fetch_add(1, std::memory_order_relaxed);
    return absl::OkStatus();
  }
  if (sent.code() == absl::StatusCode::kFailedPrecondition) {
    const std::string record = AnswerRecord(answer);
    IDEM_RETURN_IF_ERROR(
        RetryRecording([&] { return guard_.Fail(request, token, false, record); }));
    return SendDeadLetter(m, absl::StrCat("the target answered ", answer.status, ": ",
                                          answer.body.substr(0, kReasonBody)));
  }
  if (ClassifyStatus(sent) == RetryClass::kFinal) {
    // Refused before it was sent (the client will not send a header it cannot
    // carry): every retry would be refused again, so it is dead-lettered.
    const nlohmann::json error{{"error", std::string(sent.message())}};
    IDEM_RETURN_IF_ERROR(RetryRecording([&] {
      return guard_.Fail(request, token, false,
                         error.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    }));
    return SendDeadLetter(m, absl::StrCat("not sent: ", sent.message()));
  }
  // Every attempt of the round failed retryably: release the key and go again,
  // without committing past the message.
  rounds_failed_.fetch_add(1, std::memory_order_relaxed);
  spdlog::warn("bridge: {}: not delivered after {} attempts ({}); trying again", Where(m),
               options_.retry.max_attempts, SV(sent.message()));
  absl::Status released = RetryRecording([&] {
    const nlohmann::json error{{"error", std::string(sent.message())}};
    return guard_.Fail(request, token, true,
                       error.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  });
  if (!released.ok() && released.code() != absl::StatusCode::kAborted) return released;
  return std::nullopt;
}

absl::StatusOr<size_t> Bridge::RunOnce() {
  IDEM_ASSIGN_OR_RETURN(std::vector<Message> batch,
                        transport_.Poll(options_.max_batch, options_.poll_timeout));
  if (batch.empty()) return 0;
  polled_.fetch_add(static_cast<int64_t>(batch.size()), std::memory_order_relaxed);
  size_t done = 0;
  absl::Status failed;
  for (; done < batch.size(); ++done) {
    failed = DeliverOne(batch[done]);
    if (!failed.ok()) break;
  }
  // The delivered prefix (in order, so contiguous in each partition) is committed
  // even when the rest is abandoned.
  if (done > 0) {
    const std::vector<Message> prefix(batch.begin(), batch.begin() + static_cast<long>(done));
    absl::Status c;
    for (int attempt = 0; attempt < options_.retry.max_attempts; ++attempt) {
      c = transport_.Commit(prefix);
      if (c.code() != absl::StatusCode::kUnavailable) break;
      options_.clock->SleepFor(options_.retry.Backoff(attempt, *options_.random));
    }
    if (c.ok()) {
      commits_.fetch_add(1, std::memory_order_relaxed);
    } else {
      commit_failures_.fetch_add(1, std::memory_order_relaxed);
      spdlog::warn("bridge: commit failed, a redelivery will be skipped as delivered: {}",
                   SV(c.message()));
    }
  }
  if (!failed.ok()) return failed;
  return batch.size();
}

absl::Status Bridge::Run() {
  int failures = 0;
  while (!stopping()) {
    absl::StatusOr<size_t> n = RunOnce();
    if (n.ok()) {
      failures = 0;
      continue;
    }
    if (n.status().code() == absl::StatusCode::kCancelled) break;
    if (n.status().code() != absl::StatusCode::kUnavailable) return n.status();
    spdlog::warn("bridge: {}; polling again", SV(n.status().message()));
    Pause(options_.retry.Backoff(std::min(failures++, 30), *options_.random));
  }
  return absl::OkStatus();
}

}  // namespace idem::messaging
