#include "idem/messaging/runner.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/absl_compat.h"
#include "core/guard_batch.h"
#include "core/failpoint.h"
#include "idem/fingerprint.h"
#include "idem/status.h"
#include "messaging/dead_letter.h"
#include "spdlog/spdlog.h"

namespace idem::messaging {
absl::StatusOr<std::unique_ptr<Runner>> Runner::Create(Transport& transport, Store& store,
                                                       MessageHandler handler,
                                                       RunnerOptions options) {
  if (!store.SupportsSql()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the consumer runner needs a SQL store (sqlite://, postgres://, mysql://): each "
        "message's effect commits in the same transaction as its dedupe record; ",
        AV(store.url()), " runs no SQL"));
  }
  if (options.max_batch == 0) return absl::InvalidArgumentError("max_batch must be at least 1");
  IDEM_RETURN_IF_ERROR(options.retry.Validate());
  IDEM_RETURN_IF_ERROR(ValidateTenant(options.tenant, KeyLimits{}));
  IDEM_RETURN_IF_ERROR(ValidateBizType(options.biz_type, KeyLimits{}));
  if (handler == nullptr) return absl::InvalidArgumentError("no message handler");
  if (options.clock == nullptr) options.clock = Clock::Real();
  if (options.random == nullptr) options.random = Random::Default();
  return std::unique_ptr<Runner>(
      new Runner(transport, store, std::move(handler), std::move(options)));
}

Runner::Runner(Transport& transport, Store& store, MessageHandler handler, RunnerOptions options)
    : transport_(transport),
      store_(store),
      guard_(store, GuardOptions{.clock = options.clock}),
      handler_(std::move(handler)),
      options_(std::move(options)) {
  transport_.SetRebalanceListener([this](const Rebalance& r) { OnRebalance(r); });
}

// Called inside Poll(). The runner only polls between batches, after the previous
// batch's effects and commit are done, so nothing is in flight here: the revoked
// partitions' finished work is already committed and the transport drops what it
// fetched for them and had not handed out.
void Runner::OnRebalance(const Rebalance& r) {
  rebalances_.Count(r.kind);
  spdlog::info("{} rebalance: {} {}", transport_.name(), RebalanceKindName(r.kind),
               absl::StrJoin(r.partitions, ","));
}

RunnerStats Runner::stats() const {
  auto v = [](const std::atomic<int64_t>& a) { return a.load(std::memory_order_relaxed); };
  return RunnerStats{.polled = v(polled_),
                     .executed = v(executed_),
                     .replayed = v(replayed_),
                     .dead_lettered = v(dead_lettered_),
                     .batches = v(batches_),
                     .store_retries = v(store_retries_),
                     .commits = v(commits_),
                     .commit_failures = v(commit_failures_),
                     .assigned = v(rebalances_.assigned),
                     .revoked = v(rebalances_.revoked),
                     .lost = v(rebalances_.lost)};
}

absl::Status Runner::Retry(const char* what, bool bounded, const std::function<absl::Status()>& fn) {
  for (int attempt = 1;; ++attempt) {
    absl::Status s = fn();
    if (s.ok() || s.code() != absl::StatusCode::kUnavailable) return s;
    if (bounded && attempt >= options_.retry.max_attempts) return s;
    if (stopping()) {
      return absl::CancelledError(absl::StrCat("stopped while retrying ", what, ": ", s.message()));
    }
    spdlog::warn("{} failed (attempt {}), retrying: {}", what, attempt, SV(s.message()));
    options_.clock->SleepFor(
        options_.retry.Backoff(std::min(attempt - 1, 30), *options_.random));
  }
}

absl::StatusOr<size_t> Runner::RunOnce() {
  absl::StatusOr<std::vector<Message>> polled =
      transport_.Poll(options_.max_batch, options_.poll_timeout);
  if (!polled.ok()) return polled.status();
  const std::vector<Message>& batch = *polled;
  if (batch.empty()) return 0;
  polled_.fetch_add(static_cast<int64_t>(batch.size()), std::memory_order_relaxed);
  const absl::Span<const Message> all(batch);
  if (options_.batched) {
    IDEM_RETURN_IF_ERROR(ProcessChunk(all));
  } else {
    for (size_t i = 0; i < all.size(); ++i) IDEM_RETURN_IF_ERROR(ProcessChunk(all.subspan(i, 1)));
  }
  return batch.size();
}

absl::Status Runner::Run() {
  int idle_failures = 0;
  while (!stopping()) {
    absl::StatusOr<size_t> n = RunOnce();
    if (n.ok()) {
      idle_failures = 0;
      continue;
    }
    if (n.status().code() == absl::StatusCode::kCancelled) break;
    if (n.status().code() != absl::StatusCode::kUnavailable) return n.status();
    spdlog::warn("{}: {}; polling again", transport_.name(), SV(n.status().message()));
    options_.clock->SleepFor(
        options_.retry.Backoff(std::min(idle_failures++, 30), *options_.random));
  }
  return absl::OkStatus();
}

// What the outcome `r` of message `i` means for its batch: OK to go on (counted,
// or queued for the dead-letter destination), or the error that rolls the batch
// back (retryable: the batch runs again).
absl::Status Runner::Account(size_t i, const Message& m, const std::string& key,
                             const absl::StatusOr<Result>& r, std::vector<DeadLetterItem>* dead,
                             RunnerStats* counted) {
  if (!r.ok()) {
    if (IsRetryable(r.status())) {
      return r.status().code() == absl::StatusCode::kUnavailable
                 ? r.status()
                 : absl::UnavailableError(absl::StrCat(Where(m), ": ", r.status().message()));
    }
    dead->push_back({i, absl::StrCat("failed for good: ", r.status().ToString())});
    return absl::OkStatus();
  }
  switch (r->outcome) {
    case Outcome::kExecuted:
      ++counted->executed;
      break;
    case Outcome::kReplayed:
      ++counted->replayed;
      break;
    case Outcome::kExpired:
      // A redelivery later than the key's retention: its record was purged and a
      // tombstone says it ran. It is not run again; nothing to replay.
      ++counted->replayed;
      break;
    case Outcome::kInProgress:
      // Another consumer's open transaction holds the key (a rebalance moved the
      // partition while it was mid-batch): wait for it to commit or roll back.
      return absl::UnavailableError(
          absl::StrCat(Where(m), ": key '", key, "' is held by another consumer's batch"));
    case Outcome::kCachedFailure:
      dead->push_back({i, absl::StrCat("cached failure: ", r->value)});
      break;
    case Outcome::kKeyReused:
      dead->push_back(
          {i, absl::StrCat("key_reused: key '", key, "' belongs to another biz_type")});
      break;
    case Outcome::kFingerprintMismatch:
      dead->push_back({i, absl::StrCat("fingerprint_mismatch: key '", key,
                                       "' was first seen with another payload")});
      break;
    case Outcome::kAcquired:
      return absl::InternalError("the guard answered kAcquired in transactional mode");
  }
  return absl::OkStatus();
}

absl::Status Runner::TryChunk(absl::Span<const Message> messages,
                              const std::vector<absl::StatusOr<std::string>>& keys, bool confine,
                              std::vector<DeadLetterItem>* dead, RunnerStats* counted) {
  std::vector<size_t> keyed;  // the messages with a key; the others are dead-lettered later
  std::vector<Request> requests;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (!keys[i].ok()) continue;
    Request request{.tenant = options_.tenant, .biz_type = options_.biz_type, .key = *keys[i]};
    if (options_.fingerprint_payload) request.fingerprint = Fingerprint(messages[i].payload);
    keyed.push_back(i);
    requests.push_back(std::move(request));
  }
  IDEM_ASSIGN_OR_RETURN(std::unique_ptr<StoreTransaction> tx, store_.Begin());
  auto account = [&](size_t j, const absl::StatusOr<Result>& r) {
    const size_t i = keyed[j];
    absl::Status s = Account(i, messages[i], *keys[i], r, dead, counted);
    if (!s.ok()) tx->Rollback();
    return s;
  };
  if (!confine) {
    // The whole batch's claims, first statements and results in a few round trips,
    // no savepoints; any failure rolls it all back and it is redone below with one
    // savepoint each.
    std::vector<Statement> firsts;
    if (options_.first_statement != nullptr) {
      firsts.reserve(keyed.size());
      for (size_t i : keyed) {
        absl::StatusOr<Statement> st = options_.first_statement(messages[i]);
        if (!st.ok()) {
          tx->Rollback();
          return absl::AbortedError("fast path left: a message has no first statement");
        }
        firsts.push_back(*std::move(st));
      }
    }
    absl::StatusOr<std::vector<Result>> results = RunBatchIn(
        guard_, *tx, requests, firsts, [&](size_t j, Transaction& t, int64_t) {
          return handler_(messages[keyed[j]], t);
        });
    if (!results.ok()) {
      tx->Rollback();
      return absl::AbortedError(absl::StrCat(
          "fast path left: a message needs its own savepoint: ", results.status().message()));
    }
    for (size_t j = 0; j < results->size(); ++j) IDEM_RETURN_IF_ERROR(account(j, (*results)[j]));
    return tx->Commit();
  }
  for (size_t j = 0; j < requests.size(); ++j) {
    const Message& m = messages[keyed[j]];
    IDEM_RETURN_IF_ERROR(account(
        j, RunIn(guard_, *tx, requests[j], [&](Transaction& t) -> absl::StatusOr<std::string> {
          if (options_.first_statement != nullptr) {
            IDEM_ASSIGN_OR_RETURN(Statement st, options_.first_statement(m));
            IDEM_RETURN_IF_ERROR(t.Exec(st.sql, st.params).status());
          }
          return handler_(m, t);
        })));
  }
  return tx->Commit();
}

absl::Status Runner::ProcessChunk(absl::Span<const Message> messages) {
  std::vector<absl::StatusOr<std::string>> keys;
  keys.reserve(messages.size());
  for (const Message& m : messages) keys.push_back(options_.key.Derive(m));

  std::vector<DeadLetterItem> dead;
  RunnerStats counted;
  // First without savepoints (two round trips fewer per message); a batch with a
  // failing, contended or refused message is redone with one savepoint each.
  bool confine = false;
  IDEM_RETURN_IF_ERROR(Retry("the batch's store transaction", /*bounded=*/false, [&] {
    dead.clear();
    counted = RunnerStats{};
    absl::Status s = TryChunk(messages, keys, confine, &dead, &counted);
    if (!confine && !s.ok()) {
      confine = true;
      s = TryChunk(messages, keys, confine, &dead, &counted);
    }
    if (!s.ok() && IsRetryable(s)) {
      store_retries_.fetch_add(1, std::memory_order_relaxed);
      if (s.code() != absl::StatusCode::kUnavailable) return absl::UnavailableError(s.message());
    }
    return s;
  }));
  batches_.fetch_add(1, std::memory_order_relaxed);
  executed_.fetch_add(counted.executed, std::memory_order_relaxed);
  replayed_.fetch_add(counted.replayed, std::memory_order_relaxed);
  // The effects are durable; a crash from here on redelivers the batch, which is
  // then replayed (and its dead letters sent again: at least once there too).
  IDEM_FAILPOINT("kafka.runner.after_effects_commit");

  for (size_t i = 0; i < keys.size(); ++i) {
    if (!keys[i].ok()) dead.push_back({i, absl::StrCat("no key: ", keys[i].status().message())});
  }
  for (const DeadLetterItem& d : dead) {
    const Message& m = messages[d.index];
    spdlog::warn("{}: dead-lettered: {}", Where(m), d.reason);
    // Never committed past unless it was dead-lettered: retried until it is, or
    // abandoned on Stop() (redelivered, and dead-lettered then).
    IDEM_RETURN_IF_ERROR(Retry("dead-lettering", /*bounded=*/false,
                               [&] { return transport_.DeadLetter(m, d.reason); }));
    dead_lettered_.fetch_add(1, std::memory_order_relaxed);
  }

  const std::vector<Message> done(messages.begin(), messages.end());
  absl::Status committed =
      Retry("the transport commit", /*bounded=*/true, [&] { return transport_.Commit(done); });
  if (committed.ok()) {
    commits_.fetch_add(1, std::memory_order_relaxed);
  } else if (committed.code() == absl::StatusCode::kCancelled) {
    return committed;
  } else {
    // Not fatal: the effects are done, so a redelivery is replayed, and the next
    // commit (which carries later offsets of the same partitions) covers these.
    commit_failures_.fetch_add(1, std::memory_order_relaxed);
    spdlog::warn("{}: commit of {} message(s) failed, a redelivery will be replayed: {}",
                 transport_.name(), done.size(), SV(committed.message()));
  }
  IDEM_FAILPOINT("kafka.runner.after_offsets_commit");
  return absl::OkStatus();
}

}  // namespace idem::messaging
