#include "store/rocksdb/batch_writer.h"

#include <memory>
#include <utility>

#include "store/rocksdb/rocksdb_db.h"

namespace idem::rocksdbstore {
namespace {

// Copies a record transaction's batch into the group's (`into` null: only checks
// that it holds nothing but Put and Delete of the default column family).
class Copy final : public rocksdb::WriteBatch::Handler {
 public:
  explicit Copy(rocksdb::WriteBatch* into) : into_(into) {}
  rocksdb::Status PutCF(uint32_t cf, const rocksdb::Slice& key,
                        const rocksdb::Slice& value) override {
    if (cf != 0) return Unsupported("a column family other than the default");
    return into_ == nullptr ? rocksdb::Status::OK() : into_->Put(key, value);
  }
  rocksdb::Status DeleteCF(uint32_t cf, const rocksdb::Slice& key) override {
    if (cf != 0) return Unsupported("a column family other than the default");
    return into_ == nullptr ? rocksdb::Status::OK() : into_->Delete(key);
  }
  rocksdb::Status SingleDeleteCF(uint32_t, const rocksdb::Slice&) override {
    return Unsupported("SingleDelete");
  }
  rocksdb::Status MergeCF(uint32_t, const rocksdb::Slice&, const rocksdb::Slice&) override {
    return Unsupported("Merge");
  }
  rocksdb::Status DeleteRangeCF(uint32_t, const rocksdb::Slice&, const rocksdb::Slice&) override {
    return Unsupported("DeleteRange");
  }
  // A transaction's batch starts with a Noop (the place of a prepare marker, which
  // this database never writes): nothing to copy. RocksDB asserts that it is OK.
  rocksdb::Status MarkNoop(bool) override { return rocksdb::Status::OK(); }

 private:
  static rocksdb::Status Unsupported(const char* what) {
    return rocksdb::Status::NotSupported("writer=queue writes Put and Delete only, not", what);
  }
  rocksdb::WriteBatch* const into_;
};

// A queued batch's status as the committer gets it.
absl::Status Outcome(const rocksdb::Status& status, std::string_view what) {
  if (status.IsNotSupported()) {
    return absl::InternalError(std::string(what) + ": " + status.ToString());
  }
  return FromRocks(status, what);
}

}  // namespace

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

void BatchWriter::Enqueue(Pending* pending) {
  queue_.push_back(pending);
  // The writer waits only on an empty queue: one signal for the first batch of a group.
  if (queue_.size() == 1) queued_.Signal();
}

absl::Status BatchWriter::Write(const rocksdb::WriteBatch& batch, std::string_view what) {
  Pending pending{.batch = &batch};
  {
    absl::MutexLock lock(&mu_);
    Enqueue(&pending);
    while (!pending.done) written_.Wait(&mu_);
  }
  return Outcome(pending.status, what);
}

void BatchWriter::WriteAsync(const rocksdb::WriteBatch& batch, std::string what,
                             std::function<void(absl::Status)> done) {
  auto* pending = new Pending{.batch = &batch, .then = std::move(done), .what = std::move(what)};
  absl::MutexLock lock(&mu_);
  Enqueue(pending);
}

void BatchWriter::Run() {
  std::vector<Pending*> group;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      while (queue_.empty() && !stop_) queued_.Wait(&mu_);
      if (queue_.empty()) return;  // stopping, nothing left
      group.swap(queue_);
    }
    // A batch that cannot be copied fails alone; the rest are written together.
    rocksdb::WriteBatch merged;
    std::vector<Pending*> written;
    written.reserve(group.size());
    for (Pending* p : group) {
      Copy check(nullptr), copy(&merged);
      p->status = p->batch->Iterate(&check);
      if (p->status.ok()) p->status = p->batch->Iterate(&copy);
      if (p->status.ok()) written.push_back(p);
    }
    const rocksdb::Status s =
        written.empty() ? rocksdb::Status::OK() : db_->Write(options_, &merged);
    std::vector<Pending*> called;  // WriteAsync's, answered below, outside the lock
    {
      absl::MutexLock lock(&mu_);
      bool waiting = false;
      for (Pending* p : written) p->status = s;
      for (Pending* p : group) {
        if (p->then) {
          called.push_back(p);
        } else {
          p->done = true;
          waiting = true;
        }
      }
      ++groups_;
      batches_ += group.size();
      group.clear();
      if (waiting) written_.SignalAll();
    }
    for (Pending* p : called) {
      std::unique_ptr<Pending> owned(p);
      owned->then(Outcome(owned->status, owned->what));
    }
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
