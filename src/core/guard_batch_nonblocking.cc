// DecideBatchNonBlocking (guard_nonblocking.h): a server's batch of claims,
// completes and fails decided in one non-blocking transaction, with one commit.
// Each item goes through the single call's own parts (Validate, Acquire, FinishIn,
// Acquired), so its answer is the one its single call would give; the transaction's
// reads see its own writes, so an item sees the items of its key before it.
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "core/absl_compat.h"
#include "core/guard_internal.h"
#include "core/guard_nonblocking.h"

namespace idem {

bool Guard::Impl::DecideBatchNonBlocking(absl::Span<const BatchCall> calls, bool all,
                                         size_t value_budget,
                                         std::vector<BatchDecision>* decisions,
                                         std::function<void()> done) {
  absl::StatusOr<std::unique_ptr<RecordTransaction>> begun = store_.BeginNonBlocking();
  if (!begun.ok() || *begun == nullptr) return false;  // the single calls word the error
  // Shared: it rides in the commit's callback, which the store's writer owns.
  std::shared_ptr<RecordTransaction> tx = *std::move(begun);
  decisions->assign(calls.size(), BatchDecision{});
  using Key = std::pair<std::string_view, std::string_view>;
  const auto key_of = [](const BatchCall& call) {
    return Key(call.request.tenant, call.request.key);
  };
  // The keys another transaction holds: each of their items is left to its single call.
  absl::flat_hash_set<Key> busy;
  // Which items this transaction decides (their keys are held).
  std::vector<char> in_tx(calls.size(), 0);
  for (size_t i = 0; i < calls.size(); ++i) {
    const BatchCall& call = calls[i];
    BatchDecision& d = (*decisions)[i];
    absl::Status checked = Validate(call.request);
    if (checked.ok()) {
      if (busy.contains(key_of(call))) continue;
      absl::StatusOr<RecordTransaction::KeyLock> lock =
          AsStoreFault(tx->TryLock(call.request.tenant, call.request.key));
      if (lock.ok() && *lock == RecordTransaction::KeyLock::kWouldBlock) {
        if (all) {
          tx->Rollback();
          return false;
        }
        busy.insert(key_of(call));
        continue;
      }
      if (lock.ok()) {
        in_tx[i] = 1;
        continue;
      }
      checked = lock.status();
    }
    // The single call's error: the request's (kInvalidArgument), or the store's.
    d.state = BatchDecision::State::kDecided;
    if (call.op == BatchCall::Op::kClaim) {
      d.claim = checked;
    } else {
      d.finish = checked;
    }
  }

  {
    // Their records read together, not one read each.
    std::vector<Key> held;
    held.reserve(calls.size());
    for (size_t i = 0; i < calls.size(); ++i) {
      if (in_tx[i]) held.push_back(key_of(calls[i]));
    }
    tx->Prefetch(held);
  }
  const absl::Time now = options_.clock->Now();
  size_t spent = 0;
  std::vector<std::pair<size_t, Acquisition>> acquired;
  for (size_t i = 0; i < calls.size(); ++i) {
    if (!in_tx[i]) continue;
    const BatchCall& call = calls[i];
    BatchDecision& d = (*decisions)[i];
    if (busy.contains(key_of(call))) continue;
    if (spent >= value_budget) {
      d.state = BatchDecision::State::kOverBudget;
      continue;
    }
    if (call.op != BatchCall::Op::kClaim) {
      const RecordState final_state =
          call.op == BatchCall::Op::kComplete
              ? RecordState::kSucceeded
              : (call.retryable ? RecordState::kReleased : RecordState::kFailed);
      d.state = BatchDecision::State::kDecided;
      d.finish = FinishIn(*tx, call.request, call.token, final_state, call.bytes).status();
      continue;
    }
    const absl::Duration lease = call.lease > absl::ZeroDuration() ? call.lease : options_.lease;
    absl::StatusOr<Acquisition> a = Acquire(*tx, call.request, lease, now);
    if (!a.ok() && a.status().code() == absl::StatusCode::kAborted) {
      // A race on the record, which the single call repeats: nothing was written.
      if (all) {
        tx->Rollback();
        return false;
      }
      busy.insert(key_of(call));
      continue;
    }
    d.state = BatchDecision::State::kDecided;
    if (!a.ok()) {
      d.claim = a.status();
    } else if (a->final.has_value()) {
      spent += a->final->value.size();
      d.claim = *std::move(a->final);
    } else {
      acquired.emplace_back(i, *std::move(a));
    }
  }

  // Owns the transaction until its commit is durable, then sets the decisions
  // the commit settles and deletes itself (and the transaction) after `done`.
  class BatchCommitted final : public RecordTransaction::CommitDone {
   public:
    BatchCommitted(std::shared_ptr<RecordTransaction> tx, std::vector<BatchDecision>* decisions,
                   std::vector<char> in_tx, std::vector<std::pair<size_t, Acquisition>> acquired,
                   std::function<void()> done)
        : tx_(std::move(tx)),
          decisions_(decisions),
          in_tx_(std::move(in_tx)),
          acquired_(std::move(acquired)),
          done_(std::move(done)) {}
    void Start() { tx_->CommitAsync(*this); }
    void Committed(absl::Status s) override {
      if (s.ok()) {
        for (const auto& [i, a] : acquired_) (*decisions_)[i].claim = Acquired(a);
      } else {
        // Nothing of the transaction is written: no item decided in it stands.
        s = AsStoreFault(s);
        for (size_t i = 0; i < decisions_->size(); ++i) {
          BatchDecision& d = (*decisions_)[i];
          if (!in_tx_[i] || d.state != BatchDecision::State::kDecided) continue;
          d.claim = s;
          d.finish = s;
        }
      }
      std::function<void()> done = std::move(done_);
      delete this;
      done();
    }

   private:
    std::shared_ptr<RecordTransaction> tx_;
    std::vector<BatchDecision>* const decisions_;
    const std::vector<char> in_tx_;
    const std::vector<std::pair<size_t, Acquisition>> acquired_;
    std::function<void()> done_;
  };
  (new BatchCommitted(std::move(tx), decisions, std::move(in_tx), std::move(acquired),
                      std::move(done)))
      ->Start();
  return true;
}

bool DecideBatchNonBlocking(Guard& guard, absl::Span<const BatchCall> calls, bool all,
                            size_t value_budget, std::vector<BatchDecision>* decisions,
                            std::function<void()> done) {
  return GuardAccess::Of(guard).DecideBatchNonBlocking(calls, all, value_budget, decisions,
                                                       std::move(done));
}

}  // namespace idem
