#include "store/rocksdb/batch_writer.h"

#include <string>
#include <utility>

#include "store/rocksdb/rocksdb_db.h"

namespace idem::rocksdbstore {

absl::Status WriteOutcome(const rocksdb::Status& status, std::string_view what) {
  if (status.IsNotSupported()) {
    return absl::InternalError(std::string(what) + ": " + status.ToString());
  }
  return FromRocks(status, what);
}

BatchWriter::BatchWriter(rocksdb::DB* db, bool sync) : db_(db) {
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
  absl::MutexLock lock(&mu_);
  queue_.push_back(commit);
  // The writer waits only on an empty queue: one signal for the first commit of a group.
  if (queue_.size() == 1) queued_.Signal();
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
  WriteAsync(&waiting);
  return WriteOutcome(waiting.Wait(), what);
}

void BatchWriter::Run() {
  std::vector<Commit*> group;
  std::vector<rocksdb::Status> added;
  // Kept across groups: its buffer stays allocated at the size of the largest group.
  rocksdb::WriteBatch merged;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      while (queue_.empty() && !stop_) queued_.Wait(&mu_);
      if (queue_.empty()) return;  // stopping, nothing left
      group.swap(queue_);
    }
    merged.Clear();
    added.resize(group.size());
    bool refused = false;
    for (size_t i = 0; i < group.size(); ++i) {
      added[i] = group[i]->AddTo(merged);
      refused = refused || !added[i].ok();
    }
    if (refused) {
      // A commit whose writes could not be added fails alone: the batch is made
      // again without it (rare: a commit's writes are the store's own Puts).
      merged.Clear();
      for (size_t i = 0; i < group.size(); ++i) {
        if (added[i].ok()) added[i] = group[i]->AddTo(merged);
      }
    }
    const rocksdb::Status s =
        merged.Count() == 0 ? rocksdb::Status::OK() : db_->Write(options_, &merged);
    {
      absl::MutexLock lock(&mu_);
      ++groups_;
      batches_ += group.size();
    }
    for (size_t i = 0; i < group.size(); ++i) {
      group[i]->Written(added[i].ok() ? s : added[i]);  // may destroy the commit
    }
    group.clear();
  }
}

uint64_t BatchWriter::groups() const {
  absl::MutexLock lock(&mu_);
  return groups_;
}

uint64_t BatchWriter::batches() const {
  absl::MutexLock lock(&mu_);
  return batches_;
}

}  // namespace idem::rocksdbstore
