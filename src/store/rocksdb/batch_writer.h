// BatchWriter: how rocksdb:// groups commits by default (the URL parameter writer=queue; measured
// against RocksDB's own write grouping, writer=group). One thread drains a queue of the committing
// transactions' write batches into one WriteBatch and writes it with one WAL write and, with
// `sync`, one fsync; each committer blocks until the write that holds its batch is durable, then
// gets that write's status. The default (writer=group) is RocksDB's own write grouping: the
// committing threads elect a leader that writes the group's batches together. docs/benchmarks.md
// compares the two: through `idem serve` the queue took 1.6-1.9x the new-key claims per second.
//
// Nothing is visible before it is durable: the merged batch goes through one
// DB::Write with WriteOptions::sync, as a transaction's commit would.
//
//   BatchWriter writer(txn_db->GetBaseDB(), /*sync=*/true);  // not the TransactionDB
//   absl::Status s = writer.Write(*txn->GetWriteBatch()->GetWriteBatch(), "commit");
//
// WriteAsync queues the same way without blocking: the writer thread calls the
// committer back once the group is written, so a server's network thread hands
// it a claim and goes on serving (no thread hop to a worker pool).
//
// Thread safety: Write is safe for concurrent use; the DB must outlive the writer.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "rocksdb/db.h"
#include "rocksdb/write_batch.h"

namespace idem::rocksdbstore {

class BatchWriter {
 public:
  BatchWriter(rocksdb::DB* db, bool sync);
  ~BatchWriter();  // writes what is queued, then stops the thread
  BatchWriter(const BatchWriter&) = delete;
  BatchWriter& operator=(const BatchWriter&) = delete;

  // Writes `batch` (Put and Delete of the default column family only, what a
  // record transaction holds) in the next group. Blocks until that group is
  // written (and synced). Errors as FromRocks(…, what); kInternal for a batch
  // holding anything else.
  absl::Status Write(const rocksdb::WriteBatch& batch, std::string_view what);

  // As Write without blocking: `done` gets Write's status on the writer thread once
  // the group holding `batch` is written (and synced), and must be quick: the next
  // group waits for it. `batch` must stay alive until then.
  void WriteAsync(const rocksdb::WriteBatch& batch, std::string what,
                  std::function<void(absl::Status)> done);

  // For tests and the benchmark: how many writes (groups) and batches so far.
  uint64_t groups() const;
  uint64_t batches() const;

 private:
  struct Pending {
    const rocksdb::WriteBatch* batch;
    rocksdb::Status status;
    bool done = false;
    // WriteAsync's: the writer calls it, then deletes this Pending. Write's
    // Pending lives on its caller's stack, which waits for `done`.
    std::function<void(absl::Status)> then;
    std::string what;
  };

  void Enqueue(Pending* pending) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Run();

  rocksdb::DB* const db_;
  rocksdb::WriteOptions options_;
  mutable absl::Mutex mu_;
  absl::CondVar queued_;
  absl::CondVar written_;
  std::vector<Pending*> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t groups_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t batches_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;  // last: starts after everything it reads
};

}  // namespace idem::rocksdbstore
