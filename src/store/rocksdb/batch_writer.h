// BatchWriter: how rocksdb:// groups commits by default (the URL parameter writer=queue; measured
// against RocksDB's own write grouping, writer=group). One thread drains a queue of the committing
// transactions into one WriteBatch and writes it with one WAL write and, with `sync`, one fsync;
// each commit hears of it once that write is durable, with the write's status. The alternative
// (writer=group) is RocksDB's own write grouping: the committing threads elect a leader that
// writes the group's batches together. docs/benchmarks.md compares the two.
//
// Nothing is visible before it is durable: the merged batch goes through one
// DB::Write with WriteOptions::sync, and RocksDB applies a write to its memtable
// (where reads find it) only after the WAL holding it is synced.
//
//   class Claim final : public BatchWriter::Commit { ... };  // AddTo, Written
//   writer.WriteAsync(&claim);        // Written(status) on the writer thread
//   absl::Status s = writer.Write(claim, "commit");  // or wait for it here
//
// WriteAsync queues without blocking or allocating: the writer thread calls the
// commit back once the group is written, so a server's network thread hands it a
// claim and goes on serving (no thread hop to a worker pool). On a thread with a
// current event-loop turn (store/turn.h: the lean engine's loops) the commit joins
// that turn's group instead, which the turn's end hands to the writer thread as one
// unit (TurnWrite::kStage: one lock and at most one wake-up per turn, not per
// commit); the writer writes it, with whatever else is queued, in one
// DB::Write and calls its commits back in the order they came, so while the sync
// runs the loop goes on reading and deciding its next turn. TurnWrite::kInline
// (rocksdb://…?turn_write=inline) writes the group on the loop's thread itself at
// the turn's end and calls the commits back there (Redis's appendfsync always: the
// loop waits for the fsync): no hand-off between threads, and bigger writes, since
// the next turn gathers what came in during the sync. TurnWrite::kAuto
// (rocksdb://'s default, turn_write=auto) writes inline while the store's recent
// durable writes are quick (kInlineWritesBelow) and no other group is queued or being
// written (one write at a time: the writer thread waits for an inline write, and a
// turn that finds a write in progress hands its group over), so a slow disk does not
// stop the loop reading.
//
// Thread safety: Write and WriteAsync are safe for concurrent use; the DB must
// outlive the writer.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "rocksdb/db.h"
#include "rocksdb/write_batch.h"
#include "store/file_identity.h"

namespace idem::rocksdbstore {

class BatchWriter {
 public:
  // One commit handed to the writer: its writes, and what happens once they are
  // durable. Owned by the caller; it must stay alive until Written is called.
  class Commit {
   public:
    // Adds the commit's writes (Put and Delete) to the group's batch. Called on the
    // thread that writes the group (the writer thread; an inline turn's own); a
    // commit whose writes cannot be added fails alone.
    virtual rocksdb::Status AddTo(rocksdb::WriteBatch& group) const = 0;
    // Called once on that thread with the status of the write that held the
    // commit (its own, when AddTo failed), once that write is durable or failed.
    // Must be quick (the next group waits for it); it may destroy the commit.
    virtual void Written(const rocksdb::Status& status) = 0;

   protected:
    ~Commit() = default;
  };

  // Where a turn's group is written (rocksdb:// URL parameter turn_write).
  enum class TurnWrite {
    kStage,   // on the writer thread, handed over at the turn's end
    kInline,  // on the turn's thread, at its end
    kAuto,    // kInline while writes are quick and nothing else is written, else kStage
  };
  // kAuto writes a turn's group inline while the recent durable writes (a moving
  // average) took less than this.
  static constexpr std::chrono::microseconds kInlineWritesBelow{2000};

  // `identity` (not owned; may be null) is checked once before every durable write:
  // a write into a directory that was deleted or replaced fails as a whole, each of
  // its commits with that fault.
  BatchWriter(rocksdb::DB* db, bool sync, TurnWrite turn_write = TurnWrite::kStage,
              const store::FileIdentity* identity = nullptr);
  ~BatchWriter();  // writes what is queued, then stops the thread
  BatchWriter(const BatchWriter&) = delete;
  BatchWriter& operator=(const BatchWriter&) = delete;

  // Without blocking: on a thread with a current store::Turn, adds `commit` to that
  // turn's group, which the turn's end hands to the writer thread (Written comes on
  // it) or, with TurnWrite::kInline, writes on this thread (Written comes there);
  // elsewhere queues it for the writer thread's next group (Written comes on it).
  void WriteAsync(Commit* commit);

  // Writes `writes` in the writer thread's next group and blocks until that group
  // is written (and synced); never through a turn, whose end would wait for this.
  // Errors as FromRocks(…, what); kInternal for writes AddTo refused.
  absl::Status Write(const Commit& writes, std::string_view what);

  // For tests and the benchmark: how many writes (groups) and commits so far.
  uint64_t groups() const;
  uint64_t batches() const;

  // The upper bounds (le) of idem_store_write_batch_records' buckets: records
  // (Puts and Deletes) per durable write; a last bucket, +Inf, takes the rest.
  static constexpr std::array<uint64_t, 10> kRecordBounds = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512};
  // The upper bounds (le) of the two write-time histograms, in nanoseconds (shown in
  // seconds, 50 µs to 1 s); +Inf last.
  static constexpr std::array<uint64_t, 14> kNanosecondBounds = {
      50'000,     100'000,    250'000,     500'000,     1'000'000,   2'500'000,   5'000'000,
      10'000'000, 25'000'000, 50'000'000, 100'000'000, 250'000'000, 500'000'000, 1'000'000'000};
  // The histograms in the Prometheus text format: idem_store_write_batch_records,
  // idem_store_write_queue_seconds (from a write's first commit handed to the
  // writer thread to the write's start: the wait behind the write before it) and
  // idem_store_write_seconds (the durable write itself: WAL write, fsync, memtable).
  std::string RenderMetrics() const;

 private:
  // One group's commits and what writing them needs, kept across groups: the
  // batch's buffer stays allocated at the size of the largest group.
  struct Group {
    std::vector<Commit*> commits;
    std::vector<rocksdb::Status> added;
    rocksdb::WriteBatch merged;
  };
  class TurnGroup;

  using Clock = std::chrono::steady_clock;
  // A histogram over `kBounds` (+Inf last): per bucket (not cumulative), and the sum.
  template <const auto& kBounds>
  struct Histogram {
    void Add(uint64_t value);
    // In the Prometheus text format, the bounds and the sum divided by `per_shown`
    // (1: as counted; 1e9: nanoseconds shown in seconds).
    void Render(const char* name, uint64_t per_shown, std::string* out) const;
    std::array<uint64_t, kBounds.size() + 1> buckets = {};
    uint64_t sum = 0;
  };

  void Run();
  // Where a turn's group is written now: on the turn's thread (true) or the writer's.
  bool WritesInline();
  // Writes the group's commits with one DB::Write and calls each back, in order;
  // `queued_at` is when its first commit was handed to the writer thread (null for
  // a group written where it was gathered).
  void WriteGroup(Group& group, const Clock::time_point* queued_at);
  void Enqueue(Commit* commit);
  // A turn's end (kStage): queues the turn's commits for the writer and returns the
  // group to the free list, under one lock, waking the writer if it was idle.
  void HandOver(TurnGroup* turn);
  // A turn's group from the free list (or a new one).
  TurnGroup* TakeTurnGroup();
  // After a turn's group was written inline: the group back to the free list, and
  // (kAuto) the writer thread free to write what was handed over meanwhile.
  void EndInlineWrite(TurnGroup* group);

  rocksdb::DB* const db_;
  const TurnWrite turn_write_;
  const store::FileIdentity* const identity_;
  rocksdb::WriteOptions options_;
  mutable absl::Mutex mu_;
  absl::CondVar queued_;
  std::vector<Commit*> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t groups_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t batches_ ABSL_GUARDED_BY(mu_) = 0;
  Histogram<kRecordBounds> records_ ABSL_GUARDED_BY(mu_);  // idem_store_write_batch_records
  // When queue_ last went from empty to not.
  Clock::time_point queued_at_ ABSL_GUARDED_BY(mu_);
  // A group is being written, by the writer thread or (kAuto) a turn inline: with
  // kAuto no two DB::Writes of groups overlap, so RocksDB never makes a write group
  // of two loops' batches (its leader reading a follower's batch on another thread).
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  // A moving average of the durable writes' times (1/8 of each new one), in ns.
  std::atomic<int64_t> recent_write_ns_{0};
  Histogram<kNanosecondBounds> queue_time_ ABSL_GUARDED_BY(mu_);
  Histogram<kNanosecondBounds> write_time_ ABSL_GUARDED_BY(mu_);
  // The turns' groups: one per loop thread with a turn being gathered (or, inline,
  // written).
  std::vector<std::unique_ptr<TurnGroup>> turn_groups_ ABSL_GUARDED_BY(mu_);
  std::vector<TurnGroup*> free_turn_groups_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;  // last: starts after everything it reads
};

// A queued commit's status as the committer reports it: FromRocks(status, what),
// and kInternal for writes the writer refused (AddTo's NotSupported).
absl::Status WriteOutcome(const rocksdb::Status& status, std::string_view what);

}  // namespace idem::rocksdbstore
