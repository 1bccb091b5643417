// The bookkeeping of a transaction on a pooled connection, for every SQL store
// (a sqlite:// store's writer is a pool of one): the lease it holds from Begin()
// to its end, the error that ends it early, and the one way it commits and rolls
// back. Where the BEGIN is deferred to the transaction's first round trip
// (PostgreSQL, MySQL), a transaction that sent nothing has nothing to commit or
// roll back. Not part of the public API.
//
// Thread safety: a transaction is used by one thread at a time.
#pragma once

#include <optional>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "idem/store.h"
#include "store/absl_compat.h"
#include "store/backend.h"
#include "store/sql/pool.h"
#include "store/sql/records.h"

namespace idem::sql {

// The answer of a COMMIT whose connection was lost on the way (`s`): the server
// may or may not have committed. Retrying through the Guard is safe either way:
// the retry finds the record there (and replays it) or not (and runs).
inline absl::Status CommitOutcomeUnknown(const absl::Status& s) {
  return absl::UnavailableError(absl::StrCat(s.message(), " (commit outcome unknown)"));
}

template <typename Conn>
class PooledTransaction : public RecordTransaction {
 public:
  using ConnPool = Pool<Conn>;

  // Nothing sent: nothing to commit. A transaction that cannot commit (an error
  // ended it, CommitNow refuses) is rolled back and answers why. On a lost
  // connection the outcome is unknown (CommitOutcomeUnknown).
  absl::Status Commit() final {
    absl::Status s = CheckOpen();
    if (s.ok() && !Begun()) {
      End();
      return s;
    }
    if (s.ok()) {
      StartCall();
      s = CommitNow();
      if (!s.ok() && lease_->broken()) s = CommitOutcomeUnknown(s);
    }
    if (!s.ok()) {
      Rollback();
      return s;
    }
    End();
    return s;
  }

  void Rollback() final {
    if (done_) return;
    if (lease_ && Begun() && !lease_->broken()) {
      StartCall();
      RollbackNow();
    }
    End();
  }

  // Through the backend's Exec: the same statements on every SQL database.
  absl::StatusOr<bool> Retire(const Record& expected, absl::Time now,
                              std::optional<absl::Time> tombstone_until) override {
    if (tombstone_until.has_value()) {
      const auto params = TombstoneParams(expected, now, *tombstone_until);
      IDEM_ASSIGN_OR_RETURN(int64_t changed, this->Exec(kTombstoneRecord, params));
      return changed == 1;
    }
    const auto params = DeleteParams(expected);
    IDEM_ASSIGN_OR_RETURN(int64_t changed, this->Exec(kDeleteRecord, params));
    return changed == 1;
  }

 protected:
  PooledTransaction(ConnPool& pool, typename ConnPool::Lease lease)
      : pool_(pool), lease_(std::move(lease)) {}

  // True once the transaction's BEGIN has gone out to the server.
  virtual bool Begun() const = 0;
  // Sends COMMIT; an error means it did not commit (unless the connection broke).
  virtual absl::Status CommitNow() = 0;
  // Sends ROLLBACK on a connection that is not broken. A session whose
  // transaction state is unknown afterwards must not go back to the pool.
  virtual void RollbackNow() = 0;

  // Each call on the transaction is a store call of its own, with its own
  // deadline (Pool::CallDeadline) for every wait of the server it makes.
  void StartCall() {
    if (lease_) lease_.set_deadline(pool_.CallDeadline());
  }

  // OK while the transaction is open. `failed_`, once set, is every later call's
  // answer, also after the end: the server may already have rolled it back.
  absl::Status CheckOpen() const {
    if (!failed_.ok()) return failed_;
    if (done_) return absl::FailedPreconditionError("the transaction has already ended");
    return absl::OkStatus();
  }

  // Ends the transaction: the connection goes back to the pool, which closes it
  // unless it is Reusable().
  void End() {
    done_ = true;
    lease_.Release();
  }

  ConnPool& pool_;
  typename ConnPool::Lease lease_;
  bool done_ = false;
  absl::Status failed_;
};

}  // namespace idem::sql
