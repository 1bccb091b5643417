// Purge (include/idem/retention.h): one algorithm over every store, from the record
// primitives the backends supply (Store::ListRecords to find candidates,
// StoreTransaction::Load to lock and re-read each, RecordTransaction::Retire to
// replace it by its tombstone or delete it). A candidate is only ever a hint: the
// decision is made again on the record as it is under its lock, inside the batch's
// transaction, so a claim racing with the purge either sees the record (and
// replays it) or its tombstone (and is told kExpired), never nothing.
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/absl_compat.h"
#include "core/step_journal.h"
#include "idem/retention.h"
#include "idem/status.h"
#include "idem/store.h"
#include "store/backend.h"

namespace idem {
namespace {

bool Finished(RecordState s) { return s != RecordState::kProcessing; }

class Purger {
 public:
  Purger(Store& store, const PurgeOptions& options)
      : store_(store), options_(options), clock_(*options.clock), started_(clock_.Now()) {}

  absl::StatusOr<PurgeStats> Run() {
    IDEM_RETURN_IF_ERROR(Pass(/*tombstones=*/false));
    IDEM_RETURN_IF_ERROR(Pass(/*tombstones=*/true));
    if (options_.journal && options_.policy != nullptr &&
        Backend(store_).sql_dialect() != nullptr) {
      IDEM_RETURN_IF_ERROR(Journal());
    }
    return stats_;
  }

 private:
  bool Stopped() const { return options_.stop && options_.stop(); }

  // Whether `r` (as read under its lock, or as listed) may go now.
  bool Due(const Record& r, absl::Time now) const {
    if (r.expires_at > now) return false;
    if (r.purged()) return true;           // a tombstone whose own time is up
    if (!Finished(r.state)) return false;  // a lease, live or abandoned: never
    if (options_.policy != nullptr) {
      // A TTL raised since the record was written keeps it too.
      if (const BizRetention* p = options_.policy->Find(r.biz_type);
          p != nullptr && r.created_at + p->ttl() > now) {
        return false;
      }
    }
    return true;
  }

  // How long the tombstone of `r` is kept.
  absl::Duration TombstoneTtl(const Record& r) const {
    if (options_.tombstone_ttl.has_value()) return *options_.tombstone_ttl;
    if (options_.policy != nullptr) {
      if (const BizRetention* p = options_.policy->Find(r.biz_type); p != nullptr) {
        return p->tombstone.value_or(p->ttl());
      }
    }
    // As long again as the record itself was kept.
    const absl::Duration span = r.expires_at - r.created_at;
    return span > absl::ZeroDuration() ? span : absl::Hours(24);
  }

  // One pass over the live records past their time (or, `tombstones`, over the
  // tombstones past theirs), a page of candidates per batch.
  absl::Status Pass(bool tombstones) {
    RecordQuery query;
    query.purged = tombstones;
    if (!tombstones) {
      query.states = {RecordState::kSucceeded, RecordState::kFailed, RecordState::kReleased};
    }
    query.limit = options_.batch;
    for (;;) {
      if (Stopped()) return absl::OkStatus();
      const absl::Time now = clock_.Now();
      query.expires_by = now;
      IDEM_ASSIGN_OR_RETURN(std::vector<Record> page, store_.ListRecords(query));
      if (page.empty()) return absl::OkStatus();
      query.after = std::make_pair(page.back().tenant, page.back().key);
      std::vector<const Record*> due;
      for (const Record& r : page) {
        if (!tombstones) ++stats_.scanned;
        if (Due(r, now)) {
          due.push_back(&r);
        } else {
          ++stats_.kept;
        }
      }
      int64_t changed = 0;
      if (options_.dry_run) {
        for (const Record* r : due) Count(*r, tombstones);
        changed = static_cast<int64_t>(due.size());
      } else if (!due.empty()) {
        IDEM_ASSIGN_OR_RETURN(changed, Batch(due, tombstones, now));
      }
      ++stats_.batches;
      if (options_.progress) options_.progress(stats_);
      done_ += changed;
      Pace();
      if (static_cast<int>(page.size()) < options_.batch) return absl::OkStatus();
    }
  }

  void Count(const Record& r, bool tombstones) {
    (void)r;
    if (tombstones) {
      ++stats_.tombstones_dropped;
    } else if (options_.tombstones) {
      ++stats_.tombstoned;
    } else {
      ++stats_.deleted;
    }
  }

  // One transaction: each candidate locked and re-read, and retired only if it is
  // still what was listed and still due.
  absl::StatusOr<int64_t> Batch(const std::vector<const Record*>& due, bool tombstones,
                                absl::Time now) {
    IDEM_ASSIGN_OR_RETURN(std::unique_ptr<RecordTransaction> tx, BeginRecords(store_));
    int64_t changed = 0;
    PurgeStats counted;
    for (const Record* listed : due) {
      IDEM_ASSIGN_OR_RETURN(std::optional<Record> current, tx->Load(listed->tenant, listed->key));
      if (!current.has_value() || current->token != listed->token ||
          current->state != listed->state || current->purged() != tombstones ||
          !Due(*current, now)) {
        ++counted.kept;  // claimed, finished or purged by someone else meanwhile
        continue;
      }
      std::optional<absl::Time> until;
      if (!tombstones && options_.tombstones) until = now + TombstoneTtl(*current);
      IDEM_ASSIGN_OR_RETURN(bool moved, tx->Retire(*current, now, until));
      if (!moved) {
        ++counted.kept;
        continue;
      }
      ++changed;
      if (tombstones) {
        ++counted.tombstones_dropped;
      } else if (until.has_value()) {
        ++counted.tombstoned;
      } else {
        ++counted.deleted;
      }
    }
    IDEM_RETURN_IF_ERROR(tx->Commit());
    // Counted once committed: a batch that failed changed nothing.
    stats_.kept += counted.kept;
    stats_.tombstones_dropped += counted.tombstones_dropped;
    stats_.tombstoned += counted.tombstoned;
    stats_.deleted += counted.deleted;
    return changed;
  }

  // The step journal: per op_type with a policy, finished operations whose last
  // change is older than its TTL.
  absl::Status Journal() {
    const steps::Journal journal(*Backend(store_).sql_dialect());
    for (const auto& [op_type, retention] : options_.policy->entries()) {
      std::string after;  // "" sorts before every biz_key (they are 1-255 bytes)
      for (;;) {
        if (Stopped()) return absl::OkStatus();
        const absl::Time now = clock_.Now();
        IDEM_ASSIGN_OR_RETURN(std::unique_ptr<RecordTransaction> tx, BeginRecords(store_));
        absl::StatusOr<std::vector<steps::OperationRow>> rows =
            journal.SelectFinished(*tx, op_type, now - retention.ttl(), now, after, options_.batch);
        if (!rows.ok()) {
          tx->Rollback();  // before Check's transaction: SQLite has one writer
          // A store without the journal's tables has nothing to purge there.
          if (IsStoreFault(rows.status()) &&
              journal.Check(store_).code() == absl::StatusCode::kFailedPrecondition) {
            return absl::OkStatus();
          }
          return rows.status();
        }
        if (rows->empty()) break;
        after = rows->back().state.biz_key;
        int64_t changed = 0;
        if (options_.dry_run) {
          changed = static_cast<int64_t>(rows->size());
          tx->Rollback();
        } else {
          for (const steps::OperationRow& row : *rows) {
            IDEM_ASSIGN_OR_RETURN(bool gone, journal.DeleteOperation(*tx, row));
            if (gone) ++changed;
          }
          IDEM_RETURN_IF_ERROR(tx->Commit());
        }
        stats_.operations_deleted += changed;
        ++stats_.batches;
        if (options_.progress) options_.progress(stats_);
        done_ += changed;
        Pace();
        if (static_cast<int>(rows->size()) < options_.batch) break;
      }
    }
    return absl::OkStatus();
  }

  // The pause after a batch: options.pause, or longer while the run is ahead of
  // options.max_rate.
  void Pace() {
    absl::Duration wait = options_.pause;
    if (options_.max_rate > 0) {
      const absl::Duration due_at = absl::Seconds(static_cast<double>(done_) / options_.max_rate);
      wait = std::max(wait, due_at - (clock_.Now() - started_));
    }
    if (wait > absl::ZeroDuration()) clock_.SleepFor(wait);
  }

  Store& store_;
  const PurgeOptions& options_;
  const Clock& clock_;
  const absl::Time started_;
  PurgeStats stats_;
  int64_t done_ = 0;  // records and operations changed so far (max_rate)
};

}  // namespace

absl::StatusOr<PurgeStats> Purge(Store& store, const PurgeOptions& options) {
  if (options.batch < 1 || options.batch > 10000) {
    return absl::InvalidArgumentError("purge: the batch size must be 1 … 10000");
  }
  if (options.max_rate < 0) {
    return absl::InvalidArgumentError("purge: the rate limit must not be negative");
  }
  if (options.tombstone_ttl.has_value() && *options.tombstone_ttl <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("purge: the tombstone period must be more than 0s");
  }
  PurgeOptions o = options;
  if (o.clock == nullptr) o.clock = Clock::Real();
  return Purger(store, o).Run();
}

}  // namespace idem
