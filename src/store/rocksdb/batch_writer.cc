#include "store/rocksdb/batch_writer.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "store/rocksdb/rocksdb_db.h"
#include "store/turn.h"
#include "store/write_stage.h"

namespace idem::rocksdbstore {

absl::Status WriteOutcome(const rocksdb::Status& status, std::string_view what) {
  if (status.IsNotSupported()) {
    return absl::InternalError(std::string(what) + ": " + status.ToString());
  }
  return FromRocks(status, what);
}

// A turn's group: deferred to the turn's end, where the loop's thread hands it to
// the writer thread (TurnWrite::kStage) or writes it itself (kInline).
class BatchWriter::TurnGroup final : public store::Turn::Work {
 public:
  explicit TurnGroup(BatchWriter& writer) : writer_(writer) {}
  void AtTurnEnd() override {
    if (!writer_.WritesInline()) {
      writer_.HandOver(this);
      return;
    }
    writer_.WriteGroup(group, nullptr);
    writer_.EndInlineWrite(this);
  }
  Group group;

 private:
  BatchWriter& writer_;
};

BatchWriter::BatchWriter(rocksdb::DB* db, bool sync, TurnWrite turn_write,
                         const store::FileIdentity* identity)
    : db_(db), turn_write_(turn_write), identity_(identity) {
  options_.sync = sync;
  thread_ = std::thread([this] { Run(); });
}

BatchWriter::~BatchWriter() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    queued_.Signal();
  }
  thread_.join();
}

void BatchWriter::WriteAsync(Commit* commit) {
  store::AtWriteStage("rocksdb.after_decide");
  if (store::Turn* turn = store::Turn::Current()) {
    // The turn's group is found while it gathers; once its write starts it is no
    // longer in the turn, and a commit made meanwhile (a callback's) starts another.
    auto* group = static_cast<TurnGroup*>(turn->Find(this));
    if (group == nullptr) {
      group = TakeTurnGroup();
      turn->Defer(this, group);
    }
    group->group.commits.push_back(commit);
    return;
  }
  Enqueue(commit);
}

bool BatchWriter::WritesInline() {
  switch (turn_write_) {
    case TurnWrite::kStage:
      return false;
    case TurnWrite::kInline:
      return true;
    case TurnWrite::kAuto:
      break;
  }
  if (recent_write_ns_.load(std::memory_order_relaxed) >=
      std::chrono::nanoseconds(kInlineWritesBelow).count()) {
    return false;
  }
  // One write at a time: a turn writes inline only while nobody else writes, and
  // holds the writer off until it is done (EndInlineWrite).
  absl::MutexLock lock(&mu_);
  if (!queue_.empty() || writing_) return false;
  writing_ = true;
  return true;
}

void BatchWriter::EndInlineWrite(TurnGroup* group) {
  absl::MutexLock lock(&mu_);
  free_turn_groups_.push_back(group);
  if (turn_write_ == TurnWrite::kAuto) {
    writing_ = false;
    if (!queue_.empty()) queued_.Signal();  // handed over while this turn wrote
  }
}

BatchWriter::TurnGroup* BatchWriter::TakeTurnGroup() {
  absl::MutexLock lock(&mu_);
  if (free_turn_groups_.empty()) {
    return turn_groups_.emplace_back(std::make_unique<TurnGroup>(*this)).get();
  }
  TurnGroup* group = free_turn_groups_.back();
  free_turn_groups_.pop_back();
  return group;
}

void BatchWriter::HandOver(TurnGroup* turn) {
  std::vector<Commit*>& commits = turn->group.commits;
  absl::MutexLock lock(&mu_);
  const bool was_empty = queue_.empty();
  if (was_empty) {
    queued_at_ = Clock::now();
    queue_.swap(commits);  // the writer is idle or writing: no copy
  } else {
    queue_.insert(queue_.end(), commits.begin(), commits.end());
    commits.clear();
  }
  free_turn_groups_.push_back(turn);
  if (was_empty) queued_.Signal();
}

void BatchWriter::Enqueue(Commit* commit) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(commit);
  // The writer waits only on an empty queue: one signal for the first commit of a group.
  if (queue_.size() == 1) {
    queued_at_ = Clock::now();
    queued_.Signal();
  }
}

absl::Status BatchWriter::Write(const Commit& writes, std::string_view what) {
  // The blocking caller's commit: its writes, and a flag it waits on.
  class Waiting final : public Commit {
   public:
    explicit Waiting(const Commit& writes) : writes_(writes) {}
    rocksdb::Status AddTo(rocksdb::WriteBatch& group) const override {
      return writes_.AddTo(group);
    }
    void Written(const rocksdb::Status& status) override {
      absl::MutexLock lock(&mu_);
      status_ = status;
      done_ = true;
    }
    rocksdb::Status Wait() {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(&done_));
      return status_;
    }

   private:
    const Commit& writes_;
    absl::Mutex mu_;
    bool done_ ABSL_GUARDED_BY(mu_) = false;
    rocksdb::Status status_ ABSL_GUARDED_BY(mu_);
  };
  Waiting waiting(writes);
  store::AtWriteStage("rocksdb.after_decide");
  Enqueue(&waiting);
  return WriteOutcome(waiting.Wait(), what);
}

void BatchWriter::Run() {
  Group group;
  bool wrote = false;
  while (true) {
    Clock::time_point queued_at;
    {
      absl::MutexLock lock(&mu_);
      if (wrote) writing_ = false;
      // Not while a turn writes inline (TurnWrite::kAuto): one DB::Write at a time.
      while ((queue_.empty() && !stop_) || writing_) queued_.Wait(&mu_);
      if (queue_.empty()) return;  // stopping, nothing left
      group.commits.swap(queue_);
      queued_at = queued_at_;
      writing_ = true;
    }
    WriteGroup(group, &queued_at);
    wrote = true;
  }
}

void BatchWriter::WriteGroup(Group& group, const Clock::time_point* queued_at) {
  const Clock::time_point started = Clock::now();
  std::vector<Commit*>& commits = group.commits;
  std::vector<rocksdb::Status>& added = group.added;
  rocksdb::WriteBatch& merged = group.merged;
  merged.Clear();
  added.resize(commits.size());
  bool refused = false;
  for (size_t i = 0; i < commits.size(); ++i) {
    added[i] = commits[i]->AddTo(merged);
    refused = refused || !added[i].ok();
  }
  if (refused) {
    // A commit whose writes could not be added fails alone: the batch is made
    // again without it (rare: a commit's writes are the store's own Puts).
    merged.Clear();
    for (size_t i = 0; i < commits.size(); ++i) {
      if (added[i].ok()) added[i] = commits[i]->AddTo(merged);
    }
  }
  const uint64_t records = merged.Count();
  store::AtWriteStage("rocksdb.before_write");
  rocksdb::Status s;
  if (records > 0) {
    // Nothing is acknowledged into a directory that was deleted or replaced:
    // checked once per durable write, right before it.
    if (absl::Status moved = identity_ != nullptr ? identity_->Check() : absl::OkStatus();
        !moved.ok()) {
      s = rocksdb::Status::IOError(std::string(moved.message()));
    } else {
      s = db_->Write(options_, &merged);
    }
  }
  store::AtWriteStage("rocksdb.after_write");
  const auto nanoseconds = [](Clock::duration d) -> uint64_t {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
  };
  const uint64_t took = nanoseconds(Clock::now() - started);
  if (records > 0) {
    // Racing updates from two threads lose one of them: an average is all it is.
    const int64_t recent = recent_write_ns_.load(std::memory_order_relaxed);
    recent_write_ns_.store(recent + (static_cast<int64_t>(took) - recent) / 8,
                           std::memory_order_relaxed);
  }
  {
    absl::MutexLock lock(&mu_);
    if (queued_at != nullptr) queue_time_.Add(nanoseconds(started - *queued_at));
    ++groups_;
    batches_ += commits.size();
    if (records > 0) {
      write_time_.Add(took);
      records_.Add(records);
    }
  }
  for (size_t i = 0; i < commits.size(); ++i) {
    commits[i]->Written(added[i].ok() ? s : added[i]);  // may destroy the commit
  }
  commits.clear();
}

uint64_t BatchWriter::groups() const {
  absl::MutexLock lock(&mu_);
  return groups_;
}

uint64_t BatchWriter::batches() const {
  absl::MutexLock lock(&mu_);
  return batches_;
}


std::string BatchWriter::RenderMetrics() const {
  std::string out =
      "# HELP idem_store_write_batch_records Records (puts and deletes) per durable write of "
      "the store: one WAL write and, with sync=full, one fsync.\n"
      "# TYPE idem_store_write_batch_records histogram\n";
  absl::MutexLock lock(&mu_);
  records_.Render("idem_store_write_batch_records", 1, &out);
  absl::StrAppend(&out,
                  "# HELP idem_store_write_queue_seconds Time from a durable write's first "
                  "commit handed to the store's writer thread to the write's start.\n"
                  "# TYPE idem_store_write_queue_seconds histogram\n");
  queue_time_.Render("idem_store_write_queue_seconds", 1'000'000'000, &out);
  absl::StrAppend(&out,
                  "# HELP idem_store_write_seconds Time of a durable write of the store: its "
                  "WAL write, fsync and memtable insert.\n"
                  "# TYPE idem_store_write_seconds histogram\n");
  write_time_.Render("idem_store_write_seconds", 1'000'000'000, &out);
  return out;
}

template <const auto& kBounds>
void BatchWriter::Histogram<kBounds>::Add(uint64_t value) {
  size_t bucket = 0;
  while (bucket < kBounds.size() && value > kBounds[bucket]) ++bucket;
  ++buckets[bucket];
  sum += value;
}

template <const auto& kBounds>
void BatchWriter::Histogram<kBounds>::Render(const char* name, uint64_t per_shown,
                                             std::string* out) const {
  const auto shown = [per_shown](uint64_t v) {
    return per_shown == 1 ? absl::StrCat(v)
                          : absl::StrCat(static_cast<double>(v) / static_cast<double>(per_shown));
  };
  uint64_t cumulative = 0;
  for (size_t i = 0; i < buckets.size(); ++i) {
    cumulative += buckets[i];
    const std::string le = i < kBounds.size() ? shown(kBounds[i]) : "+Inf";
    absl::StrAppend(out, name, "_bucket{le=\"", le, "\"} ", cumulative, "\n");
  }
  absl::StrAppend(out, name, "_sum ", shown(sum), "\n", name, "_count ", cumulative, "\n");
}

}  // namespace idem::rocksdbstore
